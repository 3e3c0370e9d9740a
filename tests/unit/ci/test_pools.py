"""The node pool file (ci/pools.py): read through the one document loader, so each problem is one located line
naming the pool by its index and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.ci.pools import MAX_POOLS_BYTES, load_pools
from pinmatrix.errors import PinmatrixError

POOL = '[[pool]]\nname = "{name}"\ngpu_product = "NVIDIA-H200"\ndriver = "580.159.04"\ncapability = "9.0"\n'


def refusal(path: Path, text: str) -> str:
    path.write_text(text)
    with pytest.raises(PinmatrixError) as err:
        load_pools(path)
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    return str(err.value)


def test_a_pools_file_reads_its_pools_in_order(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(POOL.format(name="a") + POOL.format(name="b") + '[pool.slurm]\npartition = "gpu"\n')
    a, b = load_pools(path)
    assert (a.name, b.name, b.slurm.partition, a.slurm.partition) == ("a", "b", "gpu", None)


def test_each_problem_is_one_located_line(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    two = POOL.format(name="a") + POOL.format(name="b")
    assert refusal(path, two.replace('gpu_product = "NVIDIA-H200"', 'gpu_product = "NVIDIA H200"', 1)) == (
        f"{path}:3: pool[0].gpu_product: 'NVIDIA H200' is not a valid label value (GFD writes products like "
        "NVIDIA-H200)")
    second = POOL.format(name="a") + POOL.format(name="b").replace('driver = "580.159.04"', 'drivers = "580"')
    assert refusal(path, second).startswith(
        f"{path}:9: pool[1].drivers: unknown key (did you mean 'driver'?)")
    assert refusal(path, POOL.format(name="a") + "[pool.slurm]\nfeatures = []\n").startswith(
        f"{path}:7: pool[0].slurm.features: Tuple should have at least 1 item")
    assert refusal(path, "") == f"{path}:1: pool: required key is missing"
    assert refusal(path, "pool = []\n") == f"{path}:1: pool: List should have at least 1 item after validation, not 0"
    assert refusal(path, two + "[slurm]\nx = 1\n") == f"{path}:11: slurm: unknown key (expected one of: pool)"
    assert refusal(path, two.replace('"b"', '"a"')) == f"{path}:1: pool name 'a' appears twice"
    assert refusal(path, "[[pool]\n") == f"{path}:1: syntax error: Expected ']]' at the end of an array declaration"


def test_a_pools_file_is_a_bounded_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_bytes(POOL.format(name="a").encode() + b"# \xff\n")
    with pytest.raises(PinmatrixError, match=rf"^{path}:6: not UTF-8: byte 0xff at offset "):
        load_pools(path)
    path.write_bytes(b"#" * MAX_POOLS_BYTES + b"\n")
    with pytest.raises(PinmatrixError, match=rf"^{path}: {MAX_POOLS_BYTES + 1} bytes is more than a node pool file "
                                             rf"may have \({MAX_POOLS_BYTES} bytes\)$"):
        load_pools(path)
    with pytest.raises(PinmatrixError, match=r"absent.toml: no such file \(the node pool file\)$"):
        load_pools(tmp_path / "absent.toml")
