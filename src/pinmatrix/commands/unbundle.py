"""``pinmatrix unbundle BUNDLE --key PUB --out DEST``: verify a bundle's signature, then unpack it with pinmatrix's
own copy of the unpack script (never the one the bundle carries). The work lives in ``pinmatrix.bundle.sign``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pinmatrix.bundle.model import SCRIPT_NAME
from pinmatrix.bundle.sign import verify_bundle
from pinmatrix.commands._common import examples
from pinmatrix.paths import PUBLIC_KEY
from pinmatrix.project.smoke_bundle import shipped_file
from pinmatrix.release.signing import trusted_keys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "unbundle", help="verify a bundle's signature and every part and file, then unpack it",
        description="Verify the bundle's signature (manifest.dsse.json) with the trusted --key, check that it names "
                    "this manifest, cell, lock and image, then unpack with pinmatrix's own unbundle.py (the bundle's "
                    "copy is not run): every part and file is checked against the signed manifest before anything "
                    "reaches DEST. Anything wrong is one line, exit 2, DEST as it was.",
        **examples(f"pinmatrix unbundle .ship/cell --key {PUBLIC_KEY} --out wheels/",
                   "pinmatrix unbundle .ship/int64 --key team.pub --out oci/ --have oci/"))
    p.add_argument("bundle", type=Path, metavar="BUNDLE", help="the bundle folder (manifest.json, parts)")
    p.add_argument("--key", type=Path, action="append", default=[], metavar="PUB",
                   help="a trusted public key (repeatable; default: PINMATRIX_TRUSTED_KEYS)")
    p.add_argument("--out", type=Path, required=True, metavar="DEST", help="where the wheels or the image go")
    p.add_argument("--have", type=Path, metavar="LAYOUT", help="image bundles: a layout holding the blobs left out")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    verified = verify_bundle(args.bundle, trusted_keys(args.key))
    print(f"signature ok: {verified.manifest.kind} bundle of cell {verified.manifest.cell_id or '(none)'} signed by "
          f"key {verified.signer.keyid[:12]} ({verified.signer.source}), manifest sha256 {verified.manifest_sha256}",
          file=sys.stderr)
    argv = [sys.executable, "-I", str(shipped_file(SCRIPT_NAME)), str(args.bundle), "--out", str(args.out),
            "--manifest-sha256", verified.manifest_sha256, *(["--have", str(args.have)] if args.have else []),
            *(["--quiet"] if args.quiet else [])]
    return 0 if subprocess.run(argv, check=False).returncode == 0 else 2  # the unpack step said why, in one line
