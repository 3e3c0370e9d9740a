"""The whole path's verdict (benchmarks/userpath.py): each side's whole path counts, the peer's base import
included as pinmatrix's base is; the target is the warm path's, the cold ratio reported beside it."""

from __future__ import annotations

from typing import Any

from benchmarks.userpath import _judge


def _figures(**changes: float) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "build_push_s": 290.0, "pull_s": 86.0, "warm_build_push_s": 17.0, "warm_pull_s": 92.0,
        "peer_base_import_s": 27.0, "peer_build_s": 246.0, "peer_push_s": 1.0, "peer_pull_s": 86.0,
        "peer_warm_base_import_s": 24.0, "peer_warm_build_s": 96.0, "peer_warm_push_s": 1.0,
        "peer_warm_pull_s": 95.0}
    return {**figures, **changes}


def test_the_peers_base_import_counts_in_its_path() -> None:
    figures = _figures()
    _judge(figures)
    assert figures["ratio_build_push_pull_to_peer"] == round(376 / 360, 2)
    assert figures["ratio_warm_build_push_pull_to_peer"] == round(109 / 216, 2)


def test_the_target_is_the_warm_paths() -> None:
    met = _figures()  # warm 0.50x, cold 1.04x: met, the cold ratio only reported
    _judge(met)
    assert met["target_met"] is True
    missed = _figures(warm_pull_s=150.0)  # warm (17 + 150) / 216 = 0.77x
    _judge(missed)
    assert missed["target_met"] is False
    edge = _figures(warm_build_push_s=0.7 * 216 - 92.0)
    _judge(edge)
    assert edge["ratio_warm_build_push_pull_to_peer"] == 0.7 and edge["target_met"] is True
