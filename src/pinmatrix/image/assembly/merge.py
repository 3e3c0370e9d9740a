"""Which wheel layers of a cell's image share one layer, and that layer's content.

Two rules, both decided from sizes:
- ``--merge-below SIZE`` (``DEFAULT_MERGE_BELOW``, 16 MiB, for ``build``; 0 turns it off): every wheel smaller than
  SIZE (its size as the index declared it) goes into one layer, decided in the plan, so ``build --print`` shows
  it. The big wheels (torch, cudnn, cublas, triton, nccl, ...) keep a layer each, shared by every cell that holds
  them; the long tail is one layer, shared by the cells with the same small wheels (the plain and int64 h200
  cells); a cell that differs in one small wheel has a merged layer of its own. Fewer layers pull faster: the
  h200 cell's 62 layers become 23, pulled in 0.89x the time (docs/images.md).
- past ``max_layers`` (like nixpkgs' buildLayeredImage): the smallest other wheel layers (by their blobs' sizes)
  join it until the image has ``max_layers`` layers.

The merged layer holds each path once: a directory the first time, any other entry from the last part that has
it, as the parts' own order would have left it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pinmatrix.oci.layer import LayerWriter, member_path, open_layer

MERGE_FORMAT = 2  # the merged layer of small wheels: 2 holds each path once
DEFAULT_MERGE_BELOW = 16 << 20  # build's --merge-below: wheels under 16 MiB share one layer


def by_size(wheel_sizes: Mapping[str, int | None], merge_below: int) -> list[str]:
    """The wheel layers whose wheel is smaller than ``merge_below`` bytes, in name order; none when fewer than two
    are (one layer merged alone is the same layer); none for a bound of 0 or less. A wheel of unknown size is not
    merged."""
    small = sorted(name for name, size in wheel_sizes.items() if size is not None and size < merge_below)
    return small if len(small) >= 2 else []


def parts_to_merge(layer_count: int, blob_sizes: Mapping[str, int], chosen: Sequence[str],
                   max_layers: int) -> list[str]:
    """The wheel layers (of ``blob_sizes``: name -> its blob's size) that one merged layer replaces, in name order:
    ``chosen`` (by size, in the plan) and, while the image's ``layer_count`` layers would be more than
    ``max_layers``, the smallest other wheel layers. Empty when nothing is merged."""
    picked = [name for name in chosen if name in blob_sizes] if len(chosen) >= 2 else []
    after = layer_count - len(picked) + (1 if picked else 0)
    if after > max_layers:
        extra = after - max_layers + (0 if picked else 1)
        rest = sorted((n for n in blob_sizes if n not in picked), key=lambda n: (-blob_sizes[n], n))
        picked += rest[max(len(rest) - extra, 0):]
    return sorted(picked) if len(picked) >= 2 else []


def insert_position(names: Sequence[str]) -> int:
    """Where the merged layer goes among the image's other layers (``names``): right after the last wheel layer
    (after the venv when every wheel is merged), before the toolchain's link files, the AOT kernels, the patches,
    the smoke bundle and the CA layer. An engine reuses a stored layer only when every layer below it is the same,
    so a sibling cell that only adds a patch shares every layer up to its patch (and pulls or loads no more)."""
    after = [i for i, name in enumerate(names) if name == "venv" or name.startswith("wheel:")]
    return after[-1] + 1 if after else len(names)


def merged_name(part_names: Sequence[str]) -> str:
    """``wheels:a==1,b==2`` for the parts ``wheel:a==1``, ``wheel:b==2``."""
    return "wheels:" + ",".join(name.removeprefix("wheel:") for name in part_names)


def merged_layer(parts: Sequence[tuple[Path, str]]) -> Callable[[LayerWriter], None]:
    """Writes the parts' blobs (path, media type), in order, as one layer holding each path once."""

    def build(writer: LayerWriter) -> None:
        last: dict[str, int] = {}
        for i, (path, media_type) in enumerate(parts):
            with open_layer(path, media_type) as tar:
                for member in tar:
                    if not member.isdir():
                        last[member_path(member.name)] = i
        for i, (path, media_type) in enumerate(parts):
            with open_layer(path, media_type) as tar:
                for member in tar:
                    if not member.isdir() and last.get(member_path(member.name)) != i:
                        continue
                    writer.add_member(member, tar.extractfile(member) if member.isreg() else None)

    return build
