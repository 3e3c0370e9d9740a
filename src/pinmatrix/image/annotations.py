"""The annotations of a cell image's manifest: where it comes from and what it holds, for the tools that read
them (registries' pages, ``cosign``, ``crane manifest``):

- ``org.opencontainers.image.source``: the project's repository, ``[matrix] source`` or else the git remote
  ``origin`` (``project.checkout``); absent when neither says;
- ``org.opencontainers.image.revision``: the commit of the project's git checkout; absent outside one;
- ``org.opencontainers.image.created``: RFC 3339, from ``SOURCE_DATE_EPOCH`` when the environment sets it, else
  the cell's reproducible date (its base's ``source_date_epoch``, the date of its layers and config);
- ``io.pinmatrix.cell.id``, ``io.pinmatrix.cell.stack`` and ``io.pinmatrix.pin.<axis>`` per pin: the cell, with
  the keys of its config's labels.

They are in the manifest only (not the config, not a layer): a different revision or ``SOURCE_DATE_EPOCH`` gives
another manifest digest with the same config and layers, and the same ones give the same digest."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.oci.config import iso_time
from pinmatrix.project.checkout import SourceURLError, read_checkout, source_url

SOURCE = "org.opencontainers.image.source"
REVISION = "org.opencontainers.image.revision"
CREATED = "org.opencontainers.image.created"
CELL_PREFIX = "io.pinmatrix.cell."
PIN_PREFIX = "io.pinmatrix.pin."
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: RFC 3339 has four-digit years


@dataclass(frozen=True)
class ImageOrigin:
    """What every image of one build says about where it comes from; ``epoch`` is ``SOURCE_DATE_EPOCH``."""

    source: str | None = None
    revision: str | None = None
    epoch: int | None = None


def source_date_epoch(environ: Mapping[str, str]) -> int | None:
    """``SOURCE_DATE_EPOCH`` (seconds since 1970, UTC) when set and not empty; one line when it is not a number
    of seconds that RFC 3339 can write."""
    value = environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or int(value) > MAX_EPOCH:
        raise PinmatrixError(f"SOURCE_DATE_EPOCH: {value[:40]!r} is not a number of seconds since 1970 "
                             f"(0 to {MAX_EPOCH})")
    return int(value)


def image_origin(root: Path, configured_source: str | None = None,
                 environ: Mapping[str, str] | None = None) -> ImageOrigin:
    """The origin of the images built from the project at ``root``: ``configured_source`` (``[matrix] source``)
    or the checkout's remote, the checkout's revision, and ``SOURCE_DATE_EPOCH`` from ``environ``."""
    checkout = read_checkout(root)
    source = checkout.source
    if configured_source is not None:
        try:
            source = source_url(configured_source)
        except SourceURLError as err:
            raise PinmatrixError(f"matrix.source: {configured_source[:80]!r}: {err}") from None
    return ImageOrigin(source, checkout.revision, source_date_epoch(os.environ if environ is None else environ))


def image_annotations(cell: Cell, origin: ImageOrigin, epoch: int) -> dict[str, str]:
    """The manifest annotations of ``cell``'s image; ``epoch`` is the cell's reproducible date."""
    out: dict[str, str] = {}
    if origin.source:
        out[SOURCE] = origin.source
    if origin.revision:
        out[REVISION] = origin.revision
    out[CREATED] = iso_time(origin.epoch if origin.epoch is not None else epoch)
    out[CELL_PREFIX + "id"] = cell.id
    out[CELL_PREFIX + "stack"] = cell.stack
    for axis, value in sorted(cell.pins.items()):
        out[PIN_PREFIX + axis] = str(value)
    return dict(sorted(out.items()))
