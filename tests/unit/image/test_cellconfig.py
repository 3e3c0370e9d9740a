"""image/cellconfig: a cell's image config is a function of the cell, not of how matrix.toml happened to order it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pinmatrix.image.cellconfig import CELL_CMD, cell_env
from pinmatrix.matrix.selection import load
from pinmatrix.oci.config import image_config

REPO = Path(__file__).resolve().parents[3]


def test_an_env_variant_in_another_order_gives_the_same_config() -> None:
    """The cell id hashes its env sorted, so two orders of one env-flag variant are one cell; its image config
    (Env, and so the image digest) must be one too, or a fresh layout gets another digest than a warm one."""
    cell = next(c for c in load(REPO / "matrix.toml")[1].cells if c.stack == "demo")
    one = dataclasses.replace(cell, env={"B_FLAG": "1", "A_FLAG": "0", "C_FLAG": "2"})
    other = dataclasses.replace(cell, env={"C_FLAG": "2", "A_FLAG": "0", "B_FLAG": "1"})
    assert list(cell_env(one).items()) == list(cell_env(other).items())
    configs = [image_config(platform=c.platform, env=cell_env(c), labels={}, diff_ids=(), history=(), epoch=0,
                            cmd=CELL_CMD)
               for c in (one, other)]
    assert configs[0] == configs[1]
    env = configs[0]["config"]["Env"]
    assert [e for e in env if e.endswith("_FLAG=0") or e.endswith("_FLAG=1") or e.endswith("_FLAG=2")] == [
        "A_FLAG=0", "B_FLAG=1", "C_FLAG=2"]
