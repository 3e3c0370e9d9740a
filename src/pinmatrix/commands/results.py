"""``pinmatrix results``: query the results store, export it as JSON, import exported JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pinmatrix.atomic import atomic_write_text
from pinmatrix.ci.dispatch import bind_import, read_dispatch
from pinmatrix.commands._common import add_selection_arguments, examples, existing_file, read_input
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.keyword import compile_keyword
from pinmatrix.paths import HOST_KEY, project_root
from pinmatrix.release.hostsign import import_signed, open_all, signed_exports
from pinmatrix.release.signing import load_public_key, load_signer
from pinmatrix.report.tables import TableData, add_format_argument, output_format, print_table
from pinmatrix.results.signedfile import read_signed_file, signed_dir, split_envelopes
from pinmatrix.results.store import DEFAULT_PATH, ResultsStore, SmokeRecord
from pinmatrix.results.storefile import ResultsError
from pinmatrix.statuses import STATUSES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "results",
        help="query recorded smoke results (table or --json)",
        description="Query the results store: one row per cell x host x smoke x run. Filters combine with "
        "AND. --latest keeps the newest record of each cell x host x smoke.",
        **examples("pinmatrix results                          # the latest results",
                   "pinmatrix results --stack demo --status fail --json",
                   "pinmatrix results --import results-*.json   # what CI jobs uploaded",
                   "pinmatrix results --cell 0e749e61e75a --export-signed signed.json   # on the GPU host, its key",
                   "pinmatrix results --import-signed signed.json --key h200.pub        # verified, then imported"),
    )
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    add_selection_arguments(p, one_off=False, cell="id", keyword="stack or id (the store keeps no names)")
    p.add_argument("--host", metavar="ID", help="only this host fingerprint id")
    p.add_argument("--smoke", metavar="NAME", help="only this smoke")
    p.add_argument("--status", choices=STATUSES, help="only this status")
    p.add_argument("--run", metavar="RUN_ID", help="only this run")
    p.add_argument("--latest", action="store_true", help="newest record per cell x host x smoke")
    p.add_argument("--json", action="store_true", help="print the matching records as JSON")
    add_format_argument(p)
    p.add_argument("--import", dest="import_files", type=Path, nargs="+", metavar="FILE",
                   help="import JSON files written by --json or `pinmatrix smoke --json` (- reads stdin)")
    p.add_argument("--dispatch", type=Path, metavar="FILE",
                   help="with --import: keep only records whose cell, image digest and smoke a job of this dispatch "
                        "record (`ci github|k8s|slurm`) was given; the rest dropped, said in one line")
    p.add_argument("--export-signed", type=Path, metavar="FILE",
                   help="write the selected records measured in an image as host-signed in-toto test-result "
                   "attestations (one DSSE envelope per cell x image digest x host; a JSON array) to FILE")
    p.add_argument("--host-key", type=existing_file, metavar="KEY",
                   help=f"with --export-signed: the host's private key (default: {HOST_KEY} from "
                   "`pinmatrix keygen --host`)")
    p.add_argument("--import-signed", type=Path, nargs="+", metavar="FILE",
                   help="verify every envelope of FILE (written by --export-signed) with a --key, then import its "
                   "records and keep the envelopes beside the store, where `promote` reads them for trusted_hosts")
    p.add_argument("--key", action="append", type=existing_file, default=[], metavar="HOST.pub",
                   help="with --import-signed: a host's public key (repeatable)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.import_signed:
        return _import_signed(args)
    store = ResultsStore(args.results)
    if args.import_files:
        return _import(store, args)
    records = _of_cells(store.query(stack=args.stack, host_id=args.host, smoke=args.smoke, status=args.status,
                                    latest_only=args.latest, run_id=args.run), args)
    if not records and (args.stack or args.cell or args.keyword) and not _of_cells(store.query(stack=args.stack), args):
        asked = " and ".join(filter(None, [f"stack {args.stack}" if args.stack else "",
                                           f"--cell {' '.join(args.cell)}" if args.cell else "",
                                           f"-k {args.keyword!r}" if args.keyword else ""]))
        raise PinmatrixError(f"no recorded cell matches {asked} in {args.results}")
    if args.export_signed:
        return _export_signed(records, args)
    fmt = output_format(args)
    if fmt == "json":
        json.dump([r.to_dict() for r in records], sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    if not records:
        print("no results")
        return 0
    table = TableData(f"{len(records)} record(s)", ("status", "smoke", "cell", "host", "class", "secs", "reason"),
                      right=frozenset({"secs"}))
    for r in records:
        reason = r.reason if len(r.reason) <= 100 else r.reason[:97] + "..."
        table.add(r.status, r.smoke, r.cell_id, r.host.id, r.failure_class or "-", f"{r.duration_s:.1f}", reason,
                  style="red" if r.status in ("fail", "degraded") else None)
    print_table(table, fmt)
    return 0


def _import(store: ResultsStore, args: argparse.Namespace) -> int:
    total = 0
    for path in args.import_files:
        try:
            rows = json.loads(read_input(path, "results file"))
        except json.JSONDecodeError as err:
            raise PinmatrixError(f"{path}: cannot read results JSON: {err}") from None
        try:
            total += store.import_json(_dispatched(rows, args.dispatch, path) if args.dispatch else rows)
        except ResultsError as err:
            raise PinmatrixError(f"{path}: {err}") from None
    print(f"imported {total} record(s) into {args.results}")
    return 0


def _export_signed(records: list[SmokeRecord], args: argparse.Namespace) -> int:
    key = args.host_key or project_root() / HOST_KEY
    envelopes = signed_exports(records, load_signer(key))
    if not envelopes:
        raise PinmatrixError(f"{args.results}: no selected record was measured in an image: nothing to sign")
    atomic_write_text(args.export_signed, json.dumps(envelopes, indent=1) + "\n")
    print(f"wrote {len(envelopes)} signed attestation(s) of {sum(1 for r in records if r.image_digest)} record(s) "
          f"to {args.export_signed}, signed by {key}")
    return 0


def _import_signed(args: argparse.Namespace) -> int:
    """Every envelope of every file verified before the store is opened: one refused, nothing is written."""
    keys = [load_public_key(k) for k in args.key]
    opened = []
    for path in args.import_signed:
        try:
            envelopes = split_envelopes(read_signed_file(path), str(path))
        except ResultsError as err:
            raise PinmatrixError(str(err)) from None
        opened.append((path, open_all(envelopes, keys, str(path))))
    store = ResultsStore(args.results)
    total = 0
    for path, attestations in opened:
        total += import_signed(store, attestations)
        for att in attestations:
            print(f"{path}: cell {att.cell_id} image {att.digest} on host {att.host.id} ({att.host.label()}): "
                  f"{len(att.records)} record(s), signed by host key {att.keyid[:12]} ({att.key_source})")
    print(f"imported {total} signed record(s) into {args.results}; envelopes kept in {signed_dir(store.path)}")
    return 0


def _dispatched(rows: object, dispatch_file: Path, path: Path) -> list[dict[str, object]]:
    """The rows of ``path`` a job of the dispatch record was given; what was dropped or not run said on stderr."""
    if not isinstance(rows, list):
        raise PinmatrixError(f"{path}: not a JSON list of records")
    try:
        records = [SmokeRecord.from_dict(r) for r in rows]
    except (ResultsError, TypeError, AttributeError) as err:
        raise PinmatrixError(f"{path}: {err}") from None
    kept, lines = bind_import(read_dispatch(dispatch_file), records)
    for line in lines:
        print(f"{path}: {line}", file=sys.stderr)
    return [r.to_dict() for r in kept]


def _of_cells(records: list[SmokeRecord], args: argparse.Namespace) -> list[SmokeRecord]:
    """The records of the cells --cell names and -k matches (over the record's stack and cell id)."""
    match = compile_keyword(args.keyword) if args.keyword else None
    return [r for r in records if (not args.cell or r.cell_id in args.cell)
            and (match is None or match(f"{r.stack} {r.cell_id}"))]
