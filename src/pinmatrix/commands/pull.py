"""``pinmatrix pull``: pull the newest known-good image this host can run, by digest."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinmatrix.commands._common import add_selection_arguments, examples, existing_file, read_input
from pinmatrix.commands._registry import known_good_registry
from pinmatrix.engine.select import choose_engine
from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import DriverVersionError
from pinmatrix.imageref import RegistryError
from pinmatrix.oci.compression import check_pullable
from pinmatrix.oci.manifest import image_bytes
from pinmatrix.paths import KNOWN_GOOD_FILE, PUBLIC_KEY, known_good_file, public_key
from pinmatrix.project.known_good import read_known_good
from pinmatrix.registry.auth import engine_auth_env
from pinmatrix.registry.client import Registry
from pinmatrix.release.candidates import Candidate, Selection, candidates, choose
from pinmatrix.release.pull import verify_entry
from pinmatrix.release.signing import trusted_keys
from pinmatrix.results.store import HostFingerprint
from pinmatrix.transfer import opaque_copy

CLOCK: Callable[[], float] = time.monotonic  # what the pull's time and rate are measured with


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pull", help="pull the newest known-good image whose requirements this host meets, by digest",
        description="Probe this host (NVIDIA driver and GPU compute capability through nvidia-smi), pick the newest "
                    "cell in known-good.toml whose requirements it meets (driver >= the cell's minimum, GPU arch "
                    "covered; CPU-only cells fit anywhere) among those --cell, -k and --pin select, pull it by "
                    "digest and print the reference. Cells passed over are listed on stderr with the reason; "
                    "--list prints every candidate and pulls nothing. The image is verified first, as `pinmatrix "
                    "verify` does (a test-result attestation signed by a trusted key for that digest, repository and "
                    "cell); one that does not verify is refused with the reason (exit status 2). A host whose NVIDIA "
                    "driver is not among those the image's evidence was gathered on (the evidence's host records) "
                    "gets a warning line, or, where the image's promotion policy says uncovered_driver = \"refuse\", "
                    "the image is passed over like one whose driver floor the host misses.",
        **examples("pinmatrix pull --stack demo                  # verified, pulled; prints REGISTRY/REPO@sha256:...",
                   "pinmatrix pull --stack demo --list           # every candidate, newest first, and why not",
                   "pinmatrix pull --stack demo --pin 'six>=1.17' --print",
                   "pinmatrix pull --stack h200 -k int64 --pin xformers==0.0.35-int64",
                   "pinmatrix pull --cell 0123456789ab --json    # that cell's newest promotion, if this host runs it",
                   "pinmatrix pull --key ci/pinmatrix.pub         # trust this key instead of the project's own"),
    )
    add_selection_arguments(p, one_off=False, cell="id or a unique prefix of it")
    p.add_argument("--pin", action="append", default=[], metavar="AXIS<SPEC>",
                   help="only cells whose AXIS satisfies SPEC: a PEP 440 specifier ('torch>=2.9,<2.11') or "
                   "=VALUE for the pin as written ('xformers=0.0.35-int64'); repeatable, all must hold")
    p.add_argument("--list", dest="list_only", action="store_true",
                   help="print every candidate (newest promotion of each cell, newest first) with whether it fits "
                   "this host and the selection, and the one pull would take; verify and pull nothing")
    p.add_argument("--known-good", type=Path, default=known_good_file(), metavar="PATH",
                   help=f"the promotion record (default: {KNOWN_GOOD_FILE} in the project root, next to matrix.toml)")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the reference without pulling")
    p.add_argument("--engine", choices=["auto", "docker", "podman"], default="auto",
                   help="the engine that pulls (default: auto: the first usable of podman, docker, as in build)")
    p.add_argument("--host-json", type=Path, metavar="FILE",
                   help="judge for the host described in FILE (a HostFingerprint as JSON; - reads stdin) instead of "
                   "this one")
    p.add_argument("--quiet", "-q", action="store_true", help="do not list the cells passed over")
    p.add_argument("--key", action="append", type=existing_file, default=[], metavar="FILE.pub",
                   help="a trusted public key (PEM; repeatable; default: the files in PINMATRIX_TRUSTED_KEYS, "
                   f"separated by ':', else the project's {PUBLIC_KEY} that `pinmatrix keygen` made)")
    p.add_argument("--json", action="store_true",
                   help="print {reference, digest, stack, cell, pulled, engine, host, passed_over} as JSON on stdout "
                   "(with --list: {host, chosen, candidates})")
    p.set_defaults(func=run, registry_need=known_good_registry)


def _host(args: argparse.Namespace) -> HostFingerprint:
    if not args.host_json:
        return HostFingerprint.detect()
    try:

        return HostFingerprint.from_dict(json.loads(read_input(args.host_json, "host fingerprint file")))
    except (OSError, ValueError, KeyError, DriverVersionError) as err:
        raise PinmatrixError(f"{args.host_json}: not a host fingerprint: {err}") from None


def _list(found: list[Candidate], chosen: Candidate | None, host: HostFingerprint, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"host": host.to_dict(), "chosen": chosen.entry["cell_id"] if chosen else None,
                          "candidates": [c.to_dict(c is chosen) for c in found]}, indent=2))
        return 0
    print(f"host: {host.label()}")
    for c in found:
        mark = "->" if c is chosen else "  "
        verdict = "fits" if c.ok else "passed over: " + "; ".join(c.reasons)
        print(f"{mark} {c.entry['cell_id']}  {c.entry['promoted_at']}  {c.entry.get('cell_name', '')}  {verdict}")
    if chosen is None:
        print("no candidate fits: pull would refuse")
    return 0


def run(args: argparse.Namespace) -> int:

    entries = _entries(args)
    host = _host(args)
    found = candidates(entries, host, _selection(args))
    if _asked(args) and not any(not c.outside for c in found):
        raise PinmatrixError(f"no known-good cell matches {_asked(args)} in {args.known_good}")
    chosen = choose(found)
    if args.list_only:
        return _list(found, chosen, host, args.json)
    _say_passed_over(args, host, found, chosen)
    if chosen is None:
        asked = _asked(args)
        raise PinmatrixError(f"no known-good cell{' of ' + asked if asked else ''} runs on this host "
                             f"({host.label()}): {len(found)} passed over (see `pinmatrix pull --list`)")
    registry = Registry(str(chosen.entry["reference"]).split("/", 1)[0])
    ref, verified, notes = verify_entry(chosen.entry, registry, trusted_keys(args.key, public_key()),
                                        str(args.known_good))
    if not args.quiet:
        print(f"verified {ref}: cell {verified.cell_id}, result {verified.result}, signed by "
              f"{', '.join(k[:12] for k in verified.keyids)}", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    engine = None if args.print_only else _pull(args, registry, ref, chosen, verified.layer_media_types)
    if args.json:
        passed_over = [{"label": c.label, "reasons": c.reasons} for c in found[:found.index(chosen)]]
        print(json.dumps({"reference": str(ref), "digest": chosen.entry["digest"], "stack": chosen.entry["stack"],
                          "cell": chosen.entry["cell_id"], "pulled": engine is not None,
                          "engine": engine.name if engine else None, "host": host.to_dict(),
                          "passed_over": passed_over, "driver_warning": chosen.verdict.driver_warning,
                          "verification": verified.model_dump()}, indent=2))
    else:
        print(ref)
    return 0


def _asked(args: argparse.Namespace) -> str:
    """The selection as asked: ``stack demo and -k 'int64'``; empty for none."""
    return " and ".join(filter(None, [f"stack {args.stack}" if args.stack else "",
                                      f"--cell {' '.join(args.cell)}" if args.cell else "",
                                      f"-k {args.keyword!r}" if args.keyword else "",
                                      f"--pin {' '.join(args.pin)}" if args.pin else ""]))


def _selection(args: argparse.Namespace) -> Selection:
    return Selection.parse(stack=args.stack, cells=args.cell, keyword=args.keyword, pins=args.pin)


def _entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The known-good entries, checked against what the command line asks for."""
    selection = _selection(args)  # a malformed --pin or -k is named before the file is read
    if not args.known_good.exists():
        raise PinmatrixError(f"{args.known_good}: no such file (run `pinmatrix promote` first)")
    entries = read_known_good(args.known_good)
    if args.stack and not any(e["stack"] == args.stack for e in entries):
        stacks = sorted({e["stack"] for e in entries})
        raise PinmatrixError(f"{args.known_good}: no known-good cell for stack {args.stack!r} "
                             f"(stacks with one: {', '.join(stacks) or 'none'})")
    selection.check_against(entries, str(args.known_good))
    return entries


def _say_passed_over(args: argparse.Namespace, host: HostFingerprint, found: list[Candidate],
                     chosen: Candidate | None) -> None:
    if chosen is not None and chosen.verdict.driver_warning:  # said even with --quiet
        print(chosen.verdict.driver_warning, file=sys.stderr)
    if args.quiet:
        return
    print(f"host: {host.label()}", file=sys.stderr)
    for c in found:
        if c is chosen:
            break
        print(f"passed over {c.label}: {'; '.join(c.reasons)}", file=sys.stderr)


def _pull(args: argparse.Namespace, registry: Any, ref: Any, chosen: Candidate,  # noqa: ANN202 - OCIEngine
          layer_media_types: list[str]):
    """Pull the verified reference with the engine (its layers' media types from the manifest that verified);
    the engine."""

    engine = choose_engine(args.engine, hint="")
    if engine is None:
        raise PinmatrixError("pull needs an engine to pull into (--engine docker, podman or auto; --print only prints)")
    check_pullable(layer_media_types, str(ref), engine.name, engine.reads_zstd_layers())
    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    total = None if args.quiet else _image_bytes(registry, ref)
    with engine_auth_env(engine.name, registry.credentials(ref.repository)) as auth_env, \
            opaque_copy(f"pull {ref}", total, say, tool=engine.name, clock=CLOCK):
        engine.env.update(auth_env)
        engine.pull(str(ref), tls_verify=not ref.registry.startswith(("127.", "localhost")))
    if not args.quiet:
        print(f"pulled {ref} with {engine.name} ({'; '.join(chosen.verdict.reasons)})", file=sys.stderr)
    return engine


def _image_bytes(registry: Registry, ref: Any) -> int | None:
    """The bytes the image's manifest (by its verified digest) declares for its config and layers, for the pull's
    progress; None when the registry does not say now."""
    try:
        manifest = registry.get_manifest(ref.repository, ref.reference)
        return image_bytes(manifest.json) if manifest is not None else None
    except (RegistryError, ValueError):
        return None
