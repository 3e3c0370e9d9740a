"""`pull`'s checks of a known-good entry before it pulls (pinmatrix.release.pull.verify_entry), one by one, on a real
signed promotion (test_verified_pull.promote_signed, Debian's docker-registry): the recorded cell and stack
must be the ones the signed attestation names, the entry's tag must be a tag of the promoted repository, and
a tag that is gone is a note, not a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_promote import oci_registry  # noqa: F401 - the fixture
from test_verified_pull import promote_signed

from pinmatrix.release.promote import read_known_good
from pinmatrix.release.pull import PullRefused, verify_entry
from pinmatrix.release.signing import trusted_keys

pytestmark = [pytest.mark.registry]


def test_each_entry_check(oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001, F811
    p = promote_signed(oci_registry, tmp_path, capsys, "entry-checks")
    (entry,) = read_known_good(p.known_good)
    keys = trusted_keys([p.pub])
    ref, verified, notes = verify_entry(entry, p.registry, keys)
    assert (ref.digest, verified.cell_id, notes) == (p.digest, p.cell_id, [])
    label = f"known-good.toml: cell {p.cell_id}"  # the default source names the file

    def refused(**changes: str) -> str:
        with pytest.raises(PullRefused) as err:
            verify_entry({**entry, **changes}, p.registry, keys)
        return str(err.value)

    other_cell = refused(cell_id="0123456789ab")
    assert other_cell.startswith(f"known-good.toml: cell 0123456789ab: will not pull {ref}: ")
    assert f"the recorded cell is 0123456789ab, but the signed attestation of {p.digest} is for" in other_cell
    other_stack = refused(stack="gb10-nvfp4")
    assert other_stack.startswith(f"{label}: will not pull {ref}: ")
    assert "the recorded stack is gb10-nvfp4" in other_stack
    assert refused(tag="not a reference!").startswith(f"{label}: bad tag 'not a reference!': ")
    for tag in (f"{p.target.registry}/elsewhere/demo:known-good", f"{p.target.name}:known-good@{p.digest}",
                f"{p.target.name}"):
        assert refused(tag=tag) == f"{label}: tag {tag} is not a tag of {p.target.name}"
    _, _, notes = verify_entry({**entry, "tag": f"{p.target.name}:gone"}, p.registry, keys, "kg.toml")
    assert notes == [f"tag {p.target.name}:gone no longer exists"]
