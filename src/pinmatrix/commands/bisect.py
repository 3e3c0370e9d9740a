"""``pinmatrix bisect``: the smallest failing value of a smoke parameter (``param``), or the first cell along
an ordered axis of a stack where a smoke's verdict changes (``version``)."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

from pinmatrix.bisect.boundary import boundaries_for
from pinmatrix.bisect.param import make_space, run_param_bisect
from pinmatrix.bisect.runtimes import HostRuntime, ImageRuntime, VenvRuntime
from pinmatrix.bisect.settings import ProbeSettings
from pinmatrix.bisect.versions import (
    Point,
    distribution_of,
    index_args,
    is_package_axis,
    parse_values,
    resolve_range,
    run_version_bisect,
    stack_axis,
)
from pinmatrix.commands._common import examples
from pinmatrix.engine.select import choose_engine
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import choose_cells, load
from pinmatrix.paths import BISECT_DIR, CACHE_DIR, LOGS_DIR, OVERLAY_DIR
from pinmatrix.project.catalogue import find_smoke_dir, load_catalogue
from pinmatrix.project.matrix_toml import require_stack
from pinmatrix.results.store import DEFAULT_PATH, write_json_atomic
from pinmatrix.smoke.runner import HostCell


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("smoke", help="the smoke to probe (a name from `pinmatrix smoke --list`)")
    p.add_argument("matrix", nargs="?", type=Path, default=Path("matrix.toml"),
                   help="the matrix file (default: ./matrix.toml)")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                   help="hold a dimension (param) or an axis (version) at VALUE instead of its default (repeatable)")
    p.add_argument("--timeout", type=float, metavar="S", help="cap each probe's timeout at S seconds "
                   "(default: the smoke's own); a probe that hangs fails with class timeout")
    p.add_argument("--max-probes", type=int, metavar="N", help="run at most N new probes, then stop (a rerun "
                   "resumes: recorded probes are not run again)")
    p.add_argument("--max-seconds", type=float, metavar="S", help="start no new probe after S seconds, then stop "
                   "(a rerun resumes)")
    p.add_argument("--max-skips", type=int, default=5, metavar="N",
                   help="give up after N points that cannot be probed (default 5)")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the probes (host runtime)")
    p.add_argument("--results", type=Path, default=DEFAULT_PATH, metavar="PATH",
                   help=f"the results store (default: {DEFAULT_PATH})")
    p.add_argument("--logs", type=Path, default=LOGS_DIR, metavar="DIR", help="probe logs")
    p.add_argument("--smoke-dir", type=Path, metavar="DIR", help="the smoke catalogue (default: ./smoke)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="print the result as JSON on stdout (progress goes to stderr), or write it to FILE")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bisect",
        help="find the smallest failing parameter value, or the first release/variant where a smoke changes",
        description=(
            "Bisection with every probe in its own process (a device fault or a hang fails that probe only), "
            "recorded in the results store with its parameter values; a probe already recorded for the same "
            "cell, host and parameters is never run again, so an interrupted bisect resumes when rerun. Points "
            "that cannot be probed (do not resolve, do not build, the smoke skips) are skipped like `git "
            "bisect skip`. Exit status: 0 when the search answered, 1 when it could not (or a known issue's "
            "boundary moved), 2 on bad input."
        ),
        **examples("pinmatrix bisect param cpu-threshold --param n --timeout 5   # smallest failing value",
                   "pinmatrix bisect version six-assert-not-regex --stack demo --axis six --range '>=1.10,<=1.17' "
                   "--runtime podman"),
    )
    sub = p.add_subparsers(dest="mode", metavar="MODE", required=True)
    pp = sub.add_parser("param", help="search a numeric parameter a smoke declares",
                        description="Probe SMOKE at values of one of its declared parameters (the other "
                        "dimensions held fixed) for the smallest failing value; name the declared quantity that "
                        "crosses a limit there, and confirm known-issue boundaries.",
                        **examples("pinmatrix bisect param cpu-threshold --param n --timeout 5",
                                   "pinmatrix bisect param cpu-threshold --param n --json bisect.json"))
    _common(pp)
    pp.add_argument("--param", required=True, metavar="NAME", help="the parameter to search (e.g. M)")
    pp.add_argument("--range", dest="span", metavar="LO:HI", help="search LO..HI (default: the declared range)")
    pp.add_argument("--step", type=float, metavar="S", help="resolution (default 1 for an int parameter)")
    pp.add_argument("--stack", "-s", metavar="S", help="the cell's stack (with --cell)")
    pp.add_argument("--cell", metavar="ID", help="a matrix cell (id or name): its overlay, patches and known "
                    "issues apply; default: this environment as the cell 'host'")
    pp.add_argument("--wheels", type=Path, metavar="DIR", help="host runtime: extra wheels for the cell's overlay")
    pp.add_argument("--overlay", type=Path, default=OVERLAY_DIR, metavar="DIR",
                    help=f"where the cell's overlay is made (default: {OVERLAY_DIR})")
    pp.set_defaults(func=run_param)
    pv = sub.add_parser("version", help="search an ordered axis of a stack for the first cell whose verdict changes",
                        description="Probe SMOKE on cells of STACK that differ only in AXIS (releases of a "
                        "package, env variants, arch flag lists), each locked with uv and installed into its own "
                        "venv (--runtime venv) or built as an image (--runtime docker|podman) only when the search "
                        "reaches it; results already in the store for a cell are reused.",
                        **examples("pinmatrix bisect version six-assert-not-regex --stack demo --axis six "
                                   "--range '>=1.10,<=1.17' --runtime podman",
                                   "pinmatrix bisect version six-assert-not-regex --stack demo --axis six "
                                   "--values 1.16.0,1.17.0"))
    _common(pv)
    pv.add_argument("--stack", "-s", required=True, metavar="S", help="the stack")
    pv.add_argument("--axis", required=True, metavar="A", help="the ordered axis: a package, env, arch, ...")
    grp = pv.add_mutually_exclusive_group()
    grp.add_argument("--values", metavar="V1,V2,...", help="the ordered values (default: the stack's own)")
    grp.add_argument("--range", dest="spec", metavar="SPEC",
                     help="a package axis: every release in this specifier range that uv resolves, e.g. '>=1.10,<=1.17'")
    pv.add_argument("--runtime", choices=("venv", "docker", "podman"), default="venv",
                    help="venv: a uv venv per cell (default); docker/podman: an image per cell")
    pv.add_argument("--venv-python", metavar="PY", help="venv runtime: the interpreter uv makes each venv from "
                    "(a version or a path; default: the cell's Python, which must be installed here)")
    pv.add_argument("--work", type=Path, metavar="DIR",
                    help=f"bisect locks, venvs and build logs (default: {BISECT_DIR} next to the matrix)")
    pv.add_argument("--cache-dir", type=Path, metavar="DIR",
                    help=f"image builds: base rootfs and context cache (default: {CACHE_DIR} next to the matrix)")
    pv.set_defaults(func=run_version)


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise PinmatrixError(f"--fix {item!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise PinmatrixError(f"{what}: {text!r} is not a number") from None


def probe_settings(args: argparse.Namespace) -> ProbeSettings:
    """The one place the options both searches share become settings (refused here: --max-probes 0)."""
    return ProbeSettings(results=args.results, logs_dir=args.logs, smoke_dir=args.smoke_dir, timeout_s=args.timeout,
                         python=args.python, max_probes=args.max_probes, max_seconds=args.max_seconds,
                         max_skips=args.max_skips)


def _smoke(args: argparse.Namespace) -> Any:

    catalogue = {s.name: s for s in load_catalogue(args.smoke_dir)}
    if args.smoke not in catalogue:

        close = difflib.get_close_matches(args.smoke, list(catalogue), n=1)
        raise PinmatrixError(f"no smoke named {args.smoke!r} in the catalogue"
                             + (f" (did you mean {close[0]!r}?)" if close else ""))
    return catalogue[args.smoke]


def _output(args: argparse.Namespace, report: Any) -> int:
    data = report.to_dict()
    if args.json == "-":
        json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
        print()
    else:
        if args.json:
            write_json_atomic(Path(args.json), data)
        print(report.summary())
        print(f"report: {report.line()}")
    answered = report.outcome in ("change", "no-change")
    moved = any(b.status in ("moved", "not-found") for b in report.boundary)
    return 0 if answered and not moved else 1


def _echo(args: argparse.Namespace) -> Any:
    if args.json == "-":
        return lambda line: print(line, file=sys.stderr, flush=True)
    return lambda line: print(line, flush=True)


def _param_cell(args: argparse.Namespace) -> tuple[Any, Any]:

    if not args.cell:
        if args.stack:
            raise PinmatrixError("--stack needs --cell (one cell is probed)")
        return HostCell(), None


    matrix, expansion = load(args.matrix)
    hit = choose_cells(matrix, expansion, stack=args.stack, cells=[args.cell])
    if len(hit) != 1:
        raise PinmatrixError(f"{args.matrix}: more than one cell with id or name {args.cell!r}")
    return hit[0], matrix


def run_param(args: argparse.Namespace) -> int:

    smoke = _smoke(args)
    lo = hi = None
    if args.span:
        left, sep, right = args.span.partition(":")
        if not sep:
            raise PinmatrixError(f"--range {args.span!r}: expected LO:HI")
        lo, hi = _number(left, "--range"), _number(right, "--range")
    space = make_space(smoke, args.param, lo, hi, args.step)
    overrides = _param_overrides(args, smoke)
    if args.wheels is not None and not args.wheels.is_dir():
        raise PinmatrixError(f"--wheels {args.wheels}: not a directory")
    settings = probe_settings(args)
    cell, matrix = _param_cell(args)
    echo = _echo(args)
    options = settings.run_options(args.matrix.resolve().parent if matrix is not None else Path.cwd(),
                                   overlay_dir=args.overlay, wheels_dir=args.wheels)
    runtime = HostRuntime(options, overlay_root=args.overlay, wheels_dir=args.wheels, repo_root=options.repo_root,
                          echo=echo)
    prober = settings.prober(smoke, echo)
    host = prober.host
    boundaries = boundaries_for(matrix, cell, smoke.name, args.param)
    echo(f"bisect {smoke.name} over {args.param} in [{space.value(0)}, {space.value(space.n - 1)}] "
         f"({space.n} points) on " + (f"cell {cell.id} {cell.name}" if matrix is not None else "this environment")
         + f", {host.label()} (host {host.id})")
    report = run_param_bisect(cell=cell, smoke=smoke, space=space, overrides=overrides, prober=prober,
                              prepare=runtime.prepare, boundaries=boundaries, runtime="host",
                              host=host.to_dict(), max_skips=settings.max_skips)
    return _output(args, report)


def _param_overrides(args: argparse.Namespace, smoke: Any) -> dict[str, Any]:
    """--fix NAME=VALUE for the smoke's other dimensions: a number, or text where the default is text."""
    overrides: dict[str, Any] = {}
    decl = smoke.parameters
    for name, text in _pairs(args.fix).items():
        if name == args.param:
            raise PinmatrixError(f"--fix {name}: that is the parameter being searched")
        known = set(decl.fixed) | set(decl.params)
        if name not in known:
            raise PinmatrixError(f"--fix {name}: smoke {smoke.name!r} has no dimension {name!r} "
                                 f"(dimensions: {', '.join(sorted(known))})")
        current = decl.fixed.get(name, None)
        overrides[name] = text if isinstance(current, str) else _integral(_number(text, f"--fix {name}"))
    return overrides


def _integral(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def run_version(args: argparse.Namespace) -> int:

    smoke = _smoke(args)
    matrix, _ = load(args.matrix)
    stack = require_stack(matrix, args.stack)
    if stack_axis(stack, args.axis) is None:
        raise PinmatrixError(f"{args.matrix}: stack {args.stack!r} has no axis {args.axis!r}")
    fixed = _pairs(args.fix)
    for name in fixed:
        if stack_axis(stack, name) is None:
            raise PinmatrixError(f"--fix {name}: stack {args.stack!r} has no axis {name!r}")
    settings = probe_settings(args)
    echo = _echo(args)
    values, own_order = _version_values(args, matrix, stack, echo)
    points = [Point(v) for v in values]
    runtime = _version_runtime(args, settings, matrix, echo)
    prober = settings.prober(smoke, echo, any_digest=True)
    host = prober.host
    echo(f"bisect {smoke.name} along {args.stack}.{args.axis} over {len(points)} values "
         f"({points[0].display} .. {points[-1].display}), runtime {args.runtime}, {host.label()} (host {host.id})")
    report = run_version_bisect(matrix=matrix, stack_name=args.stack, axis=args.axis, points=points,
                                own_order=own_order, fixed=fixed, smoke=smoke, prober=prober,
                                prepare=runtime.prepare, runtime=args.runtime, host=host.to_dict(),
                                max_skips=settings.max_skips)
    return _output(args, report)


def _version_values(args: argparse.Namespace, matrix: Any, stack: Any, echo: Any) -> tuple[list[Any], bool]:
    """The values to bisect over (--range resolved with uv, --values, or the stack's own, in its order) and
    whether they are the stack's own."""

    if args.spec:
        if not is_package_axis(stack, args.axis):
            raise PinmatrixError(f"--range: {args.axis!r} is not a package axis; give --values")
        dist = distribution_of(stack, args.axis)
        python = stack.python or matrix.settings.python
        platform = stack.platform or matrix.settings.platform
        echo(f"resolving {dist}{args.spec} with uv (python {python}, {platform}, "
             f"exclude-newer {matrix.settings.exclude_newer or 'none'})")
        return parse_values(stack, args.axis, resolve_range(
            args.spec, dist, python=python, platform=platform, exclude_newer=matrix.settings.exclude_newer,
            index_args=index_args(matrix))), False
    if args.values:
        return parse_values(stack, args.axis, [v.strip() for v in args.values.split(",") if v.strip()]), False
    values = list(stack_axis(stack, args.axis) or ())
    if len(values) < 2:
        raise PinmatrixError(f"stack {args.stack!r} has one value of {args.axis!r}: give --values or --range")
    return values, True


def _version_runtime(args: argparse.Namespace, settings: ProbeSettings, matrix: Any, echo: Any) -> Any:
    """Where each probed version runs: a venv per value, or an image per value built with an engine."""
    root = matrix.root.resolve()
    work = (args.work or root / BISECT_DIR).resolve()
    options = settings.run_options(root)
    if args.runtime == "venv":
        return VenvRuntime(options, project_root=root, work_root=work,
                           exclude_newer=matrix.settings.exclude_newer, echo=echo, python=args.venv_python)
    engine = choose_engine(args.runtime)
    if engine is None:
        raise PinmatrixError(f"--runtime {args.runtime}: no such engine")
    return ImageRuntime(options, engine=engine, project_root=root, work_root=work,
                        exclude_newer=matrix.settings.exclude_newer,
                        cache_dir=(args.cache_dir or root / CACHE_DIR),
                        smoke_dir=find_smoke_dir(args.smoke_dir),
                        ca_certificates=tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists()),
                        ca_in_images=bool(getattr(matrix.settings, "ca_certificates_in_images", False)),
                        echo=echo)
