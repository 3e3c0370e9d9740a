"""``pinmatrix bundle wheels|image``: a cell's wheels or an image's blobs in parts of bounded size, with a manifest
and the host's unpack script, for a host without network. The work lives in ``pinmatrix.bundle``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from securesystemslib.signer import CryptoSigner

from pinmatrix.bundle.image import ImageRequest, bundle_image, read_host_has
from pinmatrix.bundle.model import MANIFEST_NAME, SCRIPT_NAME
from pinmatrix.bundle.pack import parse_size
from pinmatrix.bundle.sign import bundle_digests
from pinmatrix.bundle.tool import ToolRequest, bundle_tool, platform_name, this_host
from pinmatrix.bundle.wheels import WheelsRequest, bundle_wheels, read_host_probe, read_pip_list
from pinmatrix.errors import PinmatrixError
from pinmatrix.index.wheel_index import WheelFetcher, ssl_context
from pinmatrix.matrix.selection import choose_cells, load
from pinmatrix.paths import CACHE_DIR, OCI_DIR, SIGNING_KEY, signing_key
from pinmatrix.project.lockfile import lock_path
from pinmatrix.release.signing import load_signer, signing_key_path

WHEELS_EXAMPLES = """\
Examples:
  pinmatrix bundle wheels --cell 3e1eebcc7b75 --python 3.12 --exclude torch --exclude 'nvidia-*' \\
      --host-packages host-pip-list.json --part-size 56MB --out .ship/cell
  # on the host (Python >= 3.11, nothing installed):
  python3 -I .ship/cell/unbundle.py .ship/cell --out wheels/ && pinmatrix smoke --cell 3e1eebcc7b75 --wheels wheels/
"""
IMAGE_EXAMPLES = f"""\
Examples:
  pinmatrix bundle image --layout {OCI_DIR} --digest sha256:... --part-size 60MiB --out .ship/plain
  ls oci/blobs/sha256 > have.txt    # on the host, after the first image
  pinmatrix bundle image --layout {OCI_DIR} --digest sha256:... --host-has have.txt --part-size 60MiB \\
      --out .ship/int64
  python3 -I .ship/int64/unbundle.py .ship/int64 --out oci/ --have oci/   # on the host
"""
TOOL_EXAMPLES = """\
Examples:
  pinmatrix bundle tool --python-version 3.12 --platform manylinux_2_28_x86_64 --part-size 45MB --out .ship/tool
  # on the air-gapped GPU host (nothing but python3 with pip), the two commands (docs/images.md):
  python3 -I .ship/tool/unbundle.py .ship/tool --manifest-sha256 HEX --out /opt/pinmatrix/wheels
  python3 -m pip install --no-index --find-links /opt/pinmatrix/wheels --target /opt/pinmatrix/site pinmatrix
  # then: PYTHONPATH=/opt/pinmatrix/site python3 -m pinmatrix smoke --runtime sandbox ...
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bundle", help="pack a cell's wheels or an image into parts of bounded size for a host without network",
        description="Make a folder to carry to a host without network that takes files of bounded size: the parts "
                    "(the files concatenated and cut at --part-size, so a big file may span parts), manifest.json "
                    "(every file's size and sha256, every part's), and unbundle.py, which checks and unpacks it "
                    "there with the standard library alone (python3 -I unbundle.py DIR --out DEST).",
        epilog="Examples:\n  pinmatrix bundle wheels --cell ID --python 3.12 --part-size 56MB --out .ship/cell\n"
               f"  pinmatrix bundle image --layout {OCI_DIR} --digest sha256:... --part-size 60MiB --out .ship/img\n"
               "  pinmatrix bundle tool --python-version 3.12 --platform manylinux_2_28_x86_64 --part-size 45MB "
               "--out .ship/tool\n"
               "  # on a host with only python3: unbundle, then install (docs/images.md, 'air-gapped GPU host'):\n"
               "  python3 -I .ship/tool/unbundle.py .ship/tool --manifest-sha256 HEX --out /opt/pinmatrix/wheels\n"
               "  python3 -m pip install --no-index --find-links /opt/pinmatrix/wheels --target /opt/pinmatrix/site "
               "pinmatrix\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = p.add_subparsers(dest="bundle_command", metavar="KIND", required=True)
    w = kinds.add_parser(
        "wheels", help="the wheels of a cell's lock (for the host's Python), less what the host has",
        description="The wheels of the cell's lock (locks/<id>.txt) for the cell's platform and the host's Python "
                    "(--python; default: the host probe's, else the cell's), fetched through the builder's "
                    "hash-checked wheel cache, less --exclude'd names and what the host has at the same version "
                    "(--host-packages or --host-probe). The lock travels with the bundle: the host checks every "
                    "wheel against the lock's sha256 before anything is written, and the result is a folder that "
                    "`pinmatrix smoke --wheels` and `bisect --wheels` take as it is. A locked package without a "
                    "wheel for that Python and platform (an sdist only) is refused, naming it.",
        epilog=WHEELS_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                   help="the matrix file (default: ./matrix.toml)")
    w.add_argument("--cell", required=True, metavar="ID", help="the cell's id or name")
    w.add_argument("--stack", "-s", metavar="S", help="look for the cell in stack S only")
    w.add_argument("--python", metavar="X.Y", help="the host's CPython (default: the host probe's, else the cell's)")
    w.add_argument("--platform", metavar="P",
                   help="the host's platform, ARCH-manylinux_2_N (default: the cell's; its wheels must be locked)")
    host = w.add_mutually_exclusive_group()
    host.add_argument("--host-packages", type=Path, metavar="FILE",
                      help="the host's `pip list --format json`: what it has at the locked version is left out")
    host.add_argument("--host-probe", type=Path, metavar="FILE",
                      help='a recorded host probe ({"python": "3.12.3", "dists": {name: version}}), as above')
    w.add_argument("--exclude", action="append", default=[], metavar="NAME",
                   help="leave out this distribution (fnmatch pattern on the name, e.g. 'nvidia-*'; repeatable)")
    w.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help=f"the builder's cache (default: {CACHE_DIR} next to the matrix)")
    _common(w)
    w.set_defaults(func=run_wheels)
    i = kinds.add_parser(
        "image", help="the blobs of one image (manifest or index digest) from an OCI layout",
        description="The blobs of the image with manifest (or index) --digest in the OCI layout (what `pinmatrix "
                    f"build --engine none` writes to {OCI_DIR}), each checked against its digest, less the "
                    "blobs --host-has lists (one digest a line, or `ls blobs/sha256` output). On the host, "
                    "unbundle.py checks every blob before it writes the layout, taking the blobs left out from "
                    "--have LAYOUT (or DEST itself), and names the image in DEST/index.json.",
        epilog=IMAGE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("--layout", type=Path, required=True, metavar="DIR", help="the OCI layout")
    i.add_argument("--digest", required=True, metavar="sha256:...", help="the image's manifest or index digest")
    i.add_argument("--host-has", type=Path, metavar="FILE", help="digests the host already has, one a line")
    _common(i)
    i.set_defaults(func=run_image)
    _register_tool(kinds)


def _register_tool(kinds: argparse._SubParsersAction) -> None:
    t = kinds.add_parser(
        "tool", help="pinmatrix itself and its runtime dependencies as wheels, for a host with only python3",
        description="pinmatrix's wheel built from this checkout (pip wheel --no-deps --no-build-isolation) and its "
                    "runtime dependencies (the closure of the wheels' Requires-Dist for that Python and platform, "
                    "no test or lint extra) at the versions requirements/dev.lock pins, each wheel fetched through "
                    "the hash-checked wheel cache and checked against the lock's sha256: a dependency the lock does "
                    "not pin, or a wheel whose hash is not the lock's, is refused. The bundle's lock.txt names "
                    "every wheel's sha256 (pinmatrix's own included), so unbundle.py checks them on the host.",
        epilog=TOOL_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--python-version", metavar="X.Y", help="the host's CPython (default: this interpreter's)")
    t.add_argument("--platform", metavar="P",
                   help="the host's platform: manylinux_2_28_x86_64 or x86_64-manylinux_2_28 (default: this "
                        "machine's)")
    t.add_argument("--source", type=Path, default=Path("."), metavar="DIR",
                   help="the pinmatrix checkout (pyproject.toml, requirements/dev.lock; default: .)")
    t.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help=f"the wheel cache (default: {CACHE_DIR} in the checkout)")
    _common(t)
    t.set_defaults(func=run_tool)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--part-size", required=True, metavar="SIZE",
                   help="the largest part: 56MB (10^6 bytes), 60MiB (2^20), or bytes")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the bundle folder (replaced if it holds a bundle; refused if it holds anything else)")
    p.add_argument("--json", action="store_true", help="print the parts and their sizes as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--signing-key", type=Path, default=None, metavar="FILE.key",
                   help="sign the bundle (manifest.dsse.json, the DSSE envelope of promotion evidence) with this key "
                        f"(default: PINMATRIX_SIGNING_KEY, else the project's {SIGNING_KEY} when `pinmatrix keygen` "
                        "made it); `pinmatrix unbundle --key` refuses an unsigned bundle")


def _signer(args: argparse.Namespace) -> CryptoSigner | None:
    path = signing_key_path(args.signing_key, signing_key())
    return load_signer(path) if path is not None else None


def _say(args: argparse.Namespace):  # noqa: ANN202 - a Say
    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)
    return say


def _print(args: argparse.Namespace, manifest, out: Path) -> int:  # noqa: ANN001 - a BundleManifest
    if args.json:
        print(json.dumps({"out": str(out), "kind": manifest.kind, "cell_id": manifest.cell_id,
                          "sha256": bundle_digests(out),
                          "files": len(manifest.shipped_names()), "total_size": manifest.total_size,
                          "part_size": manifest.part_size,
                          "parts": [{"name": p.name, "size": p.size, "sha256": p.sha256} for p in manifest.parts]},
                         indent=2))
        return 0
    for part in manifest.parts:
        print(f"{out / part.name}  {part.size}")
    digests = bundle_digests(out)
    print(f"{len(manifest.shipped_names())} file(s), {manifest.total_size} bytes in {len(manifest.parts)} part(s)")
    for name, sha in digests.items():
        print(f"sha256 {name}: {sha}")
    print(f"on the host: pinmatrix unbundle {out} --key PUB --out DEST   (checks the signature), or without "
          f"pinmatrix: sha256sum {out / SCRIPT_NAME} (compare with the line above), then python3 -I "
          f"{out / SCRIPT_NAME} {out} --manifest-sha256 {digests[MANIFEST_NAME]} --out DEST")
    return 0


def run_wheels(args: argparse.Namespace) -> int:

    part_size = parse_size(args.part_size)
    matrix, expansion = load(args.matrix)
    cell = choose_cells(matrix, expansion, stack=args.stack, cells=[args.cell])[0]
    root = Path(matrix.root)
    lock = lock_path(cell, root)
    try:
        lock_text = lock.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise PinmatrixError(f"{lock}: no lock for cell {cell.id} (run `pinmatrix lock -k {cell.id}`)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PinmatrixError(f"{lock}: cannot read the lock: {err}") from None
    host = (read_pip_list(args.host_packages) if args.host_packages
            else read_host_probe(args.host_probe) if args.host_probe else None)
    cache = args.cache_dir or root / CACHE_DIR
    fetcher = WheelFetcher(cache / "wheels", context=ssl_context([Path(p) for p in matrix.settings.ca_certificates]))
    request = WheelsRequest(cell=cell, lock_text=lock_text, lock_source=str(lock.relative_to(root)),
                            python=args.python, platform=args.platform, host=host, exclude=tuple(args.exclude), part_size=part_size,
                            out=args.out, cache_dir=cache, signer=_signer(args))
    manifest = bundle_wheels(request, fetcher, _say(args))
    return _print(args, manifest, args.out)


def run_image(args: argparse.Namespace) -> int:

    request = ImageRequest(layout=args.layout, digest=args.digest,
                           host_has=frozenset(read_host_has(args.host_has)) if args.host_has else frozenset(),
                           part_size=parse_size(args.part_size), out=args.out, signer=_signer(args))
    manifest = bundle_image(request, _say(args))
    return _print(args, manifest, args.out)


def run_tool(args: argparse.Namespace) -> int:
    python, platform = args.python_version, args.platform
    if python is None or platform is None:
        here_python, here_platform = this_host()
        python, platform = python or here_python, platform or here_platform
    fetcher = WheelFetcher((args.cache_dir or args.source / CACHE_DIR) / "wheels", context=ssl_context())
    request = ToolRequest(source=args.source, python=python, platform=platform_name(platform),
                          part_size=parse_size(args.part_size), out=args.out, signer=_signer(args))
    manifest = bundle_tool(request, fetcher, _say(args))
    return _print(args, manifest, args.out)
