"""bisect/settings: both searches run with one ProbeSettings; what it refuses, and what it hands the prober and the
smoke runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.bisect.settings import ProbeSettings
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.catalogue import load_catalogue

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_probes": 0}, "--max-probes must be at least 1"),
    ({"max_probes": -3}, "--max-probes must be at least 1"),
    ({"max_skips": -1}, "--max-skips must be at least 0"),
])
def test_settings_refuse_bounds_that_cannot_run(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(PinmatrixError) as err:
        ProbeSettings(**kwargs)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_the_edges_of_the_bounds_are_allowed() -> None:
    assert ProbeSettings(max_probes=1, max_skips=0).max_probes == 1
    assert ProbeSettings(max_probes=None).max_probes is None


def test_the_prober_and_the_runner_get_the_settings(tmp_path: Path) -> None:
    settings = ProbeSettings(results=tmp_path / "r.sqlite", logs_dir=tmp_path / "logs", smoke_dir=REPO / "smoke",
                             timeout_s=12.5, python="/the/python", max_probes=7, max_seconds=30.0)
    options = settings.run_options(tmp_path, overlay_dir=tmp_path / "ov", wheels_dir=tmp_path / "w")
    assert (options.smoke_dir, options.timeout_s, options.python, options.logs_dir, options.repo_root,
            options.overlay_dir, options.wheels_dir) == (REPO / "smoke", 12.5, "/the/python", tmp_path / "logs",
                                                         tmp_path, tmp_path / "ov", tmp_path / "w")
    assert settings.run_options(tmp_path).overlay_dir is None
    smoke = load_catalogue(REPO / "smoke")[0]
    lines: list[str] = []
    prober = settings.prober(smoke, lines.append, any_digest=True)
    assert (prober.smoke, prober.logs_dir, prober.max_probes, prober.max_seconds, prober.any_digest) == (
        smoke, tmp_path / "logs", 7, 30.0, True)
    assert prober.store.path == tmp_path / "r.sqlite" and prober.run_id.startswith("bisect-")
    assert prober.echo == lines.append and not settings.prober(smoke, print).any_digest
