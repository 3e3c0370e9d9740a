"""``pinmatrix keygen``: make the ed25519 key pair that signs promotion evidence."""

from __future__ import annotations

import argparse
from pathlib import Path

from pinmatrix.commands._common import examples
from pinmatrix.paths import HOST_KEY_PREFIX, KEY_PREFIX, SIGNING_KEY, project_root
from pinmatrix.release.signing import generate_keypair


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "keygen", help="make an ed25519 key pair for signing promotion evidence (PREFIX.key, PREFIX.pub)",
        description="Write PREFIX.key (PKCS#8 PEM private key, mode 0600; encrypted with PINMATRIX_KEY_PASSWORD "
                    "when that is set) and PREFIX.pub (the public key to give to whoever verifies). Sign with "
                    "`pinmatrix promote --signing-key PREFIX.key` (or PINMATRIX_SIGNING_KEY); verify with "
                    "`pinmatrix verify --key PREFIX.pub` / `pinmatrix pull --key PREFIX.pub` (or "
                    "PINMATRIX_TRUSTED_KEYS). Keep the private key out of the repository. The default pair, in the "
                    f"project's {KEY_PREFIX.parent}/, is the one promote signs with and pull and verify trust when "
                    "no key is named.",
        **examples(f"pinmatrix keygen                      # {SIGNING_KEY} and .pub",
                   "pinmatrix keygen --out ci/pinmatrix   # ci/pinmatrix.key and ci/pinmatrix.pub",
                   "PINMATRIX_KEY_PASSWORD=... pinmatrix keygen --out release   # the private key encrypted",
                   f"pinmatrix keygen --host                # a GPU host's pair, {HOST_KEY_PREFIX}.key and .pub"),
    )
    p.add_argument("--out", type=Path, default=None, metavar="PREFIX",
                   help=f"path prefix of the two files (default: {KEY_PREFIX} in the project root -> "
                   f"{KEY_PREFIX.name}.key, {KEY_PREFIX.name}.pub)")
    p.add_argument("--host", action="store_true",
                   help=f"a GPU host's pair (default {HOST_KEY_PREFIX}.key and .pub): it signs the host's results "
                   "(`pinmatrix results --export-signed FILE --host-key KEY`); its .pub goes in a stack's "
                   "[promotion] trusted_hosts")
    p.add_argument("--force", action="store_true", help="replace existing files")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    prefix = args.out or project_root() / (HOST_KEY_PREFIX if args.host else KEY_PREFIX)
    private, public, keyid = generate_keypair(prefix, force=args.force)
    kind = "host key" if args.host else "key"
    print(f"wrote {private} (private {kind}, keep it secret) and {public} (public); key id {keyid}")
    return 0
