"""The promotion policy's driver keys: ``drivers`` (ranges the evidence must cover) checked as driver versions or
ranges when matrix.toml is read, ``uncovered_driver`` only "warn" or "refuse"."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pinmatrix.errors import PinmatrixError
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.project.policy import PromotionPolicy, policy_for

ROOT = Path(__file__).resolve().parents[3]


def test_driver_ranges_and_the_pull_rule() -> None:
    policy = PromotionPolicy(drivers=[" 580.142", ">=590,<595"], uncovered_driver="refuse")
    assert policy.drivers == ["580.142", ">=590,<595"]
    assert PromotionPolicy().drivers == [] and PromotionPolicy().uncovered_driver == "warn"
    for bad in (["580; reboot"], ["latest"], [">=590,<"], ["x" * 200]):
        with pytest.raises(ValidationError, match="driver"):
            PromotionPolicy(drivers=bad)
    with pytest.raises(ValidationError):
        PromotionPolicy(uncovered_driver="ignore")  # type: ignore[arg-type]


def test_a_bad_range_in_matrix_toml_names_its_line(tmp_path: Path) -> None:
    text = (ROOT / "matrix.toml").read_text().replace(
        'accept = ["pass"]\n', 'accept = ["pass"]\ndrivers = ["580.142", "$(id)"]\n', 1)
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    with pytest.raises(PinmatrixError, match=r"^matrix\.toml:\d+: .*drivers.*'\$\(id\)' is not a driver version"):
        policy_for(load_matrix(path), "demo")
