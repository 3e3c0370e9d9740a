"""The promotion policy's ``trusted_hosts``: host public keys, paths relative to the matrix; an empty list or a
path that is no key file is one line naming matrix.toml's line; unset, nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pinmatrix.errors import PinmatrixError
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.project.policy import PromotionPolicy, policy_for, trusted_host_keys

ROOT = Path(__file__).resolve().parents[3]


def _matrix(tmp_path: Path, line: str) -> Path:
    text = (ROOT / "matrix.toml").read_text().replace('accept = ["pass"]\n', f'accept = ["pass"]\n{line}\n', 1)
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def test_unset_by_default_and_an_empty_list_or_a_bad_path_refused() -> None:
    assert PromotionPolicy().trusted_hosts is None
    assert PromotionPolicy(trusted_hosts=["keys/h200.pub"]).trusted_hosts == ["keys/h200.pub"]
    for bad, match in (([], "list at least one host"), ([" "], "not a key file's path"),
                       (["x" * 5000], "not a key file's path"), (["k"] * 65, "at most 64")):
        with pytest.raises(ValidationError, match=match):
            PromotionPolicy(trusted_hosts=bad)


def test_the_key_files_are_read_relative_to_the_matrix(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "h200.pub").write_text("a key")
    matrix = load_matrix(_matrix(tmp_path, 'trusted_hosts = ["keys/h200.pub"]'))
    policy = policy_for(matrix, "demo")
    assert trusted_host_keys(matrix, "demo", policy) == [tmp_path / "keys" / "h200.pub"]


def test_a_missing_key_file_or_an_empty_list_names_its_line(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, 'trusted_hosts = ["keys/gone.pub"]'))
    policy = policy_for(matrix, "demo")
    with pytest.raises(PinmatrixError, match=r"^matrix\.toml:\d+: matrix\.promotion\.trusted_hosts: .*gone\.pub: "
                                             r"no such host key file$"):
        trusted_host_keys(matrix, "demo", policy)
    with pytest.raises(PinmatrixError, match=r"^matrix\.toml:\d+: .*trusted_hosts.*list at least one host"):
        policy_for(load_matrix(_matrix(tmp_path, "trusted_hosts = []")), "demo")
