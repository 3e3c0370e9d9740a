"""``pinmatrix pull``: pick the newest known-good cell this host can run and pull it by digest.

The host is probed through ``nvidia-smi`` (``HostFingerprint.detect``): driver version and compute
capability. A cell qualifies when it needs no GPU, or when the host's driver is at least the cell's
minimum (the CUDA toolkit's floor) and the cell's GPU arch flags cover the host's capability
(see ``pinmatrix.release.hostmatch``). Every cell passed over is listed with the reason.

Nothing is pulled unless it verifies (``verify_entry``): known-good.toml is a file anyone with the repository
can edit, so the image it names must carry a test-result attestation signed by a trusted key for that very
digest, repository and cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import Registry
from pinmatrix.release.hostmatch import PullCandidate as PullCandidate  # judged here before; pull's names for them
from pinmatrix.release.hostmatch import judge as judge
from pinmatrix.release.hostmatch import requirements_of as requirements_of
from pinmatrix.release.signing import TrustedKey
from pinmatrix.release.verify import Verification, verify_image


def reference_of(entry: dict[str, Any]) -> ImageRef:
    """The entry's name@digest, checked to carry the recorded digest (never a tag)."""
    ref = ImageRef.parse(str(entry["reference"]))
    if ref.digest != entry["digest"]:
        raise ValueError(f"known-good entry {entry['cell_id']}: reference {entry['reference']} does not carry the "
                         f"recorded digest {entry['digest']}")
    return ref


class PullRefused(PinmatrixError):
    """The chosen known-good image does not verify: nothing is pulled (exit status 2)."""


def verify_entry(entry: dict[str, Any], registry: Registry, keys: Sequence[TrustedKey],
                 source: str = "known-good.toml") -> tuple[ImageRef, Verification, list[str]]:
    """Verify the image a known-good entry names, as ``pull`` does before pulling: the reference must carry
    the recorded digest, the image must verify (``pinmatrix.release.verify``) as the recorded cell and stack, and the
    entry's known-good tag, if it no longer names this digest, must name another image that verifies (a tag
    moved outside ``pinmatrix promote`` is refused). Returns (reference, verification, notes); raises
    PullRefused with the first reason."""
    label = f"{source}: cell {entry.get('cell_id')}"
    try:
        ref = reference_of(entry)
    except (ValueError, PinmatrixError) as err:
        raise PullRefused(f"{source}: {err}") from None
    result = verify_image(registry, ref, keys, expect_digest=entry["digest"], expect_cell=str(entry["cell_id"]),
                          expect_stack=str(entry["stack"]), not_before=str(entry["promoted_at"]))
    if not result.ok:
        raise PullRefused(f"{label}: will not pull {ref}: {result.reason}")
    notes: list[str] = []
    tag_text = entry.get("tag")
    if tag_text:
        try:
            tag = ImageRef.parse(str(tag_text))
        except PinmatrixError as err:
            raise PullRefused(f"{label}: bad tag {tag_text!r}: {err}") from None
        if (tag.registry, tag.repository) != (ref.registry, ref.repository) or not tag.tag or tag.digest:
            raise PullRefused(f"{label}: tag {tag_text} is not a tag of {ref.name}")
        now = registry.resolve(tag)
        if now is None:
            notes.append(f"tag {tag} no longer exists")
        elif now != ref.digest:
            moved = verify_image(registry, tag, keys, expect_stack=str(entry["stack"]),
                                 not_before=str(entry["promoted_at"]))
            if not moved.ok:
                raise PullRefused(f"{label}: will not pull {ref}: tag {tag} was moved to {now}, which does not "
                                  f"verify ({moved.reason}): the registry was changed outside `pinmatrix promote`")
            notes.append(f"tag {tag} names a newer promotion, {now} (cell {moved.cell_id}): {source} is behind "
                         "the registry")
    return ref, result, notes
