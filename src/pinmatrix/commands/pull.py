"""``pinmatrix pull``: pull the newest known-good image this host can run, by digest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pinmatrix.commands._common import examples, existing_file
from pinmatrix.errors import EngineError, PinmatrixError
from pinmatrix.paths import KNOWN_GOOD_FILE, PUBLIC_KEY, known_good_file, public_key
from pinmatrix.release.promote import read_known_good
from pinmatrix.release.pull import judge, pick, verify_entry
from pinmatrix.results.store import HostFingerprint


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pull", help="pull the newest known-good image whose requirements this host meets, by digest",
        description="Probe this host (NVIDIA driver and GPU compute capability through nvidia-smi), pick the newest "
                    "cell in known-good.toml whose requirements it meets (driver >= the cell's minimum, GPU arch "
                    "covered; CPU-only cells fit anywhere), pull it by digest and print the reference. Cells passed "
                    "over are listed on stderr with the reason. The image is verified first, as `pinmatrix verify` "
                    "does (a test-result attestation signed by a trusted key for that digest, repository and cell); "
                    "one that does not verify is refused with the reason (exit status 2).",
        **examples("pinmatrix pull --stack demo                  # verified, pulled; prints REGISTRY/REPO@sha256:...",
                   "pinmatrix pull --stack demo --print --json   # what it would pull, and why, without pulling",
                   "pinmatrix pull --key ci/pinmatrix.pub         # trust this key instead of the project's own"),
    )
    p.add_argument("--stack", "-s", metavar="S", help="only cells of stack S")
    p.add_argument("--known-good", type=Path, default=known_good_file(), metavar="PATH",
                   help=f"the promotion record (default: {KNOWN_GOOD_FILE} in the project root, next to matrix.toml)")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the reference without pulling")
    p.add_argument("--engine", choices=["auto", "docker", "podman"], default="auto",
                   help="the engine that pulls (default: auto: the first that is running, docker then podman)")
    p.add_argument("--host-json", type=Path, metavar="FILE",
                   help="judge for the host described in FILE (a HostFingerprint as JSON; - reads stdin) instead of "
                   "this one")
    p.add_argument("--quiet", "-q", action="store_true", help="do not list the cells passed over")
    p.add_argument("--key", action="append", type=existing_file, default=[], metavar="FILE.pub",
                   help="a trusted public key (PEM; repeatable; default: the files in PINMATRIX_TRUSTED_KEYS, "
                   f"separated by ':', else the project's {PUBLIC_KEY} that `pinmatrix keygen` made)")
    p.add_argument("--json", action="store_true",
                   help="print {reference, digest, stack, cell, pulled, engine, host, passed_over} as JSON on stdout")
    p.set_defaults(func=run)


def _engine(name: str):  # noqa: ANN202 - OCIEngine, imported lazily
    from pinmatrix.engine import detect_engines, get_engine

    if name != "auto":
        engine = get_engine(name)
        engine.ensure_running()
        return engine
    status = detect_engines()
    for candidate, state in status.items():
        if state == "ok":
            return get_engine(candidate)
    raise EngineError("no container engine is usable: " + "; ".join(f"{k}: {v}" for k, v in status.items()))


def run(args: argparse.Namespace) -> int:
    if not args.known_good.exists():
        raise PinmatrixError(f"{args.known_good}: no such file (run `pinmatrix promote` first)")
    entries = read_known_good(args.known_good)
    if args.stack and not any(e["stack"] == args.stack for e in entries):
        stacks = sorted({e["stack"] for e in entries})
        raise PinmatrixError(f"{args.known_good}: no known-good cell for stack {args.stack!r} "
                             f"(stacks with one: {', '.join(stacks) or 'none'})")
    if args.host_json:
        try:
            from pinmatrix.commands._common import read_input

            host = HostFingerprint.from_dict(json.loads(read_input(args.host_json, "host fingerprint file")))
        except (OSError, ValueError, KeyError) as err:
            raise PinmatrixError(f"{args.host_json}: not a host fingerprint: {err}") from None
    else:
        host = HostFingerprint.detect()
    verdicts = judge(entries, host, stack=args.stack)
    chosen = pick(verdicts)
    if not args.quiet:
        print(f"host: {host.label()}", file=sys.stderr)
        for v in verdicts:
            if v is chosen:
                break
            print(f"passed over {v.label}: {'; '.join(v.reasons)}", file=sys.stderr)
    if chosen is None:
        raise PinmatrixError(f"no known-good cell{' of stack ' + args.stack if args.stack else ''} runs on this host "
                             f"({host.label()}): {len(verdicts)} passed over")
    from pinmatrix.registry.auth import engine_auth_env
    from pinmatrix.registry.client import Registry
    from pinmatrix.release.signing import trusted_keys

    registry = Registry(str(chosen.entry["reference"]).split("/", 1)[0])
    ref, verified, notes = verify_entry(chosen.entry, registry, trusted_keys(args.key, public_key()),
                                        str(args.known_good))
    if not args.quiet:
        print(f"verified {ref}: cell {verified.cell_id}, result {verified.result}, signed by "
              f"{', '.join(k[:12] for k in verified.keyids)}", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    engine = None
    if not args.print_only:
        engine = _engine(args.engine)
        with engine_auth_env(engine.name, registry.credentials(ref.repository)) as auth_env:
            engine.env.update(auth_env)
            engine.pull(str(ref), tls_verify=not ref.registry.startswith(("127.", "localhost")))
        if not args.quiet:
            print(f"pulled {ref} with {engine.name} ({'; '.join(chosen.reasons)})", file=sys.stderr)
    if args.json:
        passed_over = [{"label": v.label, "reasons": list(v.reasons)} for v in verdicts[:verdicts.index(chosen)]]
        print(json.dumps({"reference": str(ref), "digest": chosen.entry["digest"], "stack": chosen.entry["stack"],
                          "cell": chosen.entry["cell_id"], "pulled": engine is not None,
                          "engine": engine.name if engine else None, "host": host.to_dict(),
                          "passed_over": passed_over, "verification": verified.model_dump()}, indent=2))
        return 0
    print(ref)
    return 0
