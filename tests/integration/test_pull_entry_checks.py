"""`pull`'s checks of a known-good entry before it pulls (pinmatrix.release.pull.verify_entry), one by one, on a real
signed promotion (test_verified_pull.promote_signed, Debian's docker-registry): the recorded cell and stack
must be the ones the signed attestation names, the entry's tag must be a tag of the promoted repository, and
a tag that is gone is a note, not a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
from evidence import promote_signed
from promotion import record

from pinmatrix.project.known_good import read_known_good
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


def test_a_newer_promotion_is_a_note_and_its_sbom_names_its_lock_and_moment(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                                             capsys) -> None:  # noqa: ANN001
    """A second cell of the stack promoted after the first: the first entry still verifies, and the moved tag
    is reported as a newer promotion (not a refusal). A malformed lock stops that promotion with a line naming
    the cell's lock, and the SBOM it attaches carries the promotion's moment."""
    import json

    import tomlkit
    from evidence import CPU, _envelope_of, _lock_text
    from oci_layout import cell_labels, push_cell_image

    from pinmatrix.cli import main
    from pinmatrix.matrix.selection import load
    from pinmatrix.release.attest import SBOM_PREDICATE
    from pinmatrix.results.store import ResultsStore

    p = promote_signed(oci_registry, tmp_path, capsys, "entry-newer")
    (first,) = read_known_good(p.known_good)
    second = next(c for c in load(p.matrix)[1].cells if c.stack == "demo" and c.id != p.cell_id)
    import hashlib

    def push_and_pass(lock_text: str, layout: str) -> str:
        labels = {**cell_labels(second), "io.pinmatrix.lock.sha256": hashlib.sha256(lock_text.encode()).hexdigest()}
        pushed = push_cell_image(tmp_path / layout, f"{p.prefix}/demo:{second.id}", labels, f"{layout} image")
        for smoke in second.smokes:
            store.record(record(second, smoke, "pass", pushed, host=CPU))
        return pushed

    store = ResultsStore(tmp_path / "results.sqlite")
    promote = ["promote", str(p.matrix), "--cell", second.id, "--results", str(store.path), "--known-good",
               str(p.known_good), "--signing-key", str(tmp_path / "keys" / "signer.key")]

    # an image built from a lock that pins nothing: its SBOM cannot be made, and nothing is promoted
    bad_lock = "six>=1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    lock_file = tmp_path / "locks" / f"{second.id}.txt"
    lock_file.write_text(bad_lock)
    push_and_pass(bad_lock, "bad")
    assert main(promote) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("pinmatrix: error:")]  # notes may come first
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"pinmatrix: error: lock of cell {second.id}: ") and "six>=1.0" in errors[0], err
    assert len(read_known_good(p.known_good)) == 1

    lock = _lock_text(second)
    digest = push_and_pass(lock, "good")
    lock_file.write_text(lock)
    assert main([*promote, "--json"]) == 0
    (outcome,) = json.loads(capsys.readouterr().out)
    newest = read_known_good(p.known_good)[-1]
    assert (newest["cell_id"], newest["digest"]) == (second.id, digest)
    assert outcome["outcome"] == "promoted" and outcome["stack"] == "demo"
    assert f"{p.target.name}@{outcome['sbom']}" == newest["sbom"] and outcome["signed_by"] == newest["signed_by"]
    assert outcome["sbom"].startswith("sha256:") and outcome["signed_by"]
    keys = trusted_keys([p.pub])
    _, verified, notes = verify_entry(first, p.registry, keys, "kg.toml")
    assert verified.cell_id == p.cell_id
    assert notes == [f"tag {p.target.name}:known-good names a newer promotion, {digest} (cell {second.id}): "
                     "kg.toml is behind the registry"]

    promoted = type(p)(**{**p.__dict__, "digest": digest})
    _, envelope = _envelope_of(promoted, SBOM_PREDICATE)
    bom = json.loads(__import__("base64").b64decode(envelope["payload"]))["predicate"]
    stamp = str(tomlkit.parse(p.known_good.read_text())["promoted"][-1]["promoted_at"])
    assert bom["metadata"]["timestamp"].startswith(stamp.removesuffix("Z"))
