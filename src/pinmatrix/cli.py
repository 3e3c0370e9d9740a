"""The ``pinmatrix`` command line: the pipeline below, one thin command module per step
(``pinmatrix.commands.<name>`` with ``register(subparsers)``), imported only for the command that runs. Errors of
the package's own type are caught here, once, and printed as one line."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Collection, Mapping, Sequence

from pinmatrix import __version__, interrupt
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.paths import STATE_DIR
from pinmatrix.sanitize import terminal_text  # errors may quote smoke output or imported rows

# The pipeline, in order: each step with its commands and their one-line help (the same words each command
# module gives its own parser: tests/unit/test_cli_lazy.py holds them equal). --help shows it as is.
PIPELINE: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("matrix: read, check and expand matrix.toml", (
        ("validate", "check matrix.toml and report every problem with its line"),
        ("cells", "list the matrix's cells with ids, pins, arch flags, patches and known issues"))),
    ("upgrade: the next upgrade, read from the packages themselves", (
        ("outdated", "list the newer releases of every pinned package axis per stack, with their upload dates"),
        ("propose", "propose coherent candidate cells that move coupled pins together, each locked or pruned "
                    "with the reason"),
        ("upstream", "report each patch's and known issue's upstream PR or issue: merged or not, in a release's "
                     "files or not"),
        ("canary", "build and smoke the proposed candidates, then report per candidate what changes against the "
                   "stack's known-good cell"))),
    ("lock: pin every cell with hashes", (
        ("lock", "lock each cell with uv into locks/<cell-id>.txt (pins + sha256 hashes)"),)),
    ("image: assemble one OCI image per cell", (
        ("build", "assemble one OCI image per cell (tag = cell id), skipping cells already built"),)),
    ("bundle: carry a cell's wheels or image, in parts, to a host without network", (
        ("bundle", "pack a cell's wheels or an image into parts of bounded size for a host without network"),
        ("unbundle", "verify a bundle's signature and every part and file, then unpack it"))),
    ("smoke: run kernels on GPU hosts, read binaries, find boundaries", (
        ("smoke", "run smoke kernels per cell on this host and record the results"),
        ("arch-scan", "read the SASS/PTX targets of every CUDA binary in each cell's wheels and judge them "
                      "against the cell's GPU (no GPU needed)"),
        ("bisect", "find the smallest failing parameter value, or the first release/variant where a smoke "
                   "changes"))),
    ("results: the store and the report", (
        ("results", "query recorded smoke results (table or --json)"),
        ("report", "write the HTML report, a Markdown summary, JUnit XML and JSON from the results store"))),
    ("release: promote by digest, verify, pull; check a host", (
        ("promote", "promote cells whose results meet the stack's policy: copy by digest, attest, tag known-good"),
        ("verify", "check an image's signed evidence: signature, subject digest, repository, cell labels"),
        ("pull", "pull the newest known-good image whose requirements this host meets, by digest"),
        ("doctor", "check this GPU host: GPUs, driver, the known issues that hit it, a sandbox's prerequisites, "
                   "the promoted images that fit"),
        ("keygen", "make an ed25519 key pair for signing promotion evidence (PREFIX.key, PREFIX.pub)"))),
    ("ci: jobs per cell, the local registry, the engine's environment; shell completion", (
        ("ci", "emit CI jobs (GitHub Actions matrix, Kubernetes Jobs, Slurm arrays) and collect their results"),
        ("registry", f"start, stop or show the embedded registry (Debian's docker-registry, data in {STATE_DIR}/)"),
        ("engine-env", 'print the podman environment pinmatrix uses, for eval "$(pinmatrix engine-env)"'),
        ("completion", "print a shell completion script (bash, zsh, tcsh) for every command and option"))),
)
COMMAND_HELP: dict[str, str] = {name: text for _, commands in PIPELINE for name, text in commands}
COMMAND_MODULES: tuple[str, ...] = tuple(COMMAND_HELP)
ENV_PREFIX = "PINMATRIX_"


def command_module(name: str) -> str:
    """The module that defines command ``name`` (``arch-scan`` -> ``pinmatrix.commands.arch_scan``)."""
    return f"pinmatrix.commands.{name.replace('-', '_')}"


def _pipeline_text() -> str:
    return "pipeline:\n" + "\n".join(
        f"  {step}\n      " + ", ".join(name for name, _ in commands) for step, commands in PIPELINE) + (
        "\n\nevery option can come from the environment: PINMATRIX_<COMMAND>_<OPTION>, e.g.\n"
        "  PINMATRIX_PULL_STACK=demo pinmatrix pull   (= pinmatrix pull --stack demo; the command line wins)")


def build_parser(full: Collection[str] | None = None, environ: Mapping[str, str] | None = None
                 ) -> argparse.ArgumentParser:
    """The parser. ``full`` names the commands whose modules are imported and whose options are defined (all
    of them by default); the others are listed by name and help only, so that ``pinmatrix --help`` and one
    command do not import every step's libraries."""
    parser = argparse.ArgumentParser(
        prog="pinmatrix",
        description=(
            "Keep GPU software stacks reproducible: expand matrix.toml into cells, lock each cell with uv, "
            "build one OCI image per cell, run smoke kernels on GPU hosts, report, and promote what passes."
        ),
        epilog=_pipeline_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pinmatrix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        if full is None or name in full:
            importlib.import_module(command_module(name)).register(sub)
        else:
            sub.add_parser(name, help=COMMAND_HELP[name])
    from pinmatrix.envdefaults import apply_environment  # noqa: PLC0415 - lazy CLI

    try:  # PINMATRIX_<COMMAND>_<OPTION>: the command line still wins
        apply_environment(parser, os.environ if environ is None else environ)
    except ValueError as err:
        parser.error(str(err))
    return parser


def commands_for(argv: Sequence[str], environ: Mapping[str, str]) -> set[str]:
    """The commands a run needs defined in full: the one named on the command line, and every command a
    PINMATRIX_<COMMAND>_ variable of the environment is for (so that a bad value is refused whatever runs)."""
    wanted = {next((a for a in argv if not a.startswith("-")), "")} & set(COMMAND_HELP)
    for key in environ:
        if key.startswith(ENV_PREFIX):
            wanted |= {n for n in COMMAND_HELP if key.startswith(f"{ENV_PREFIX}{n.upper().replace('-', '_')}_")}
    return wanted


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``pinmatrix cells --json | head -1``): stop quietly, as a shell tool killed by
    SIGPIPE would. Point stdout at /dev/null so the interpreter's final flush cannot complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``argv`` None: this process's own, where Ctrl-C ends the process at once with 130)."""
    if argv is None:
        interrupt.install()
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(commands_for(arguments, os.environ))
    args = parser.parse_args(arguments)
    from pinmatrix.matrix.expand import MAX_COMBINATIONS_OVERRIDE  # noqa: PLC0415 - lazy CLI

    # --max-combinations holds for this command only (main() may run many commands in one process)
    token = MAX_COMBINATIONS_OVERRIDE.set(
        max(1, args.max_combinations) if getattr(args, "max_combinations", None) is not None else None)
    try:
        return _run(args, whole_process=argv is None)
    finally:
        MAX_COMBINATIONS_OVERRIDE.reset(token)


def _interrupted(err: KeyboardInterrupt, whole_process: bool) -> int:
    """Ctrl-C: said at once (with what it stopped, when the command says), children stopped by their group,
    scratch folders removed; the process itself ends here, not after the steps of its worker threads."""
    print("pinmatrix: interrupted" + (f": {err}" if str(err) else ""), file=sys.stderr, flush=True)
    for line in interrupt.stop(every_child=whole_process):
        print(f"pinmatrix: {line}", file=sys.stderr)
    if whole_process:
        interrupt.exit_now()
    return interrupt.EXIT_CODE


def _run(args: argparse.Namespace, *, whole_process: bool = False) -> int:
    from pinmatrix.registry.local import for_command  # noqa: PLC0415 - lazy CLI

    try:
        with for_command(args):  # the embedded registry, for commands that talk to a loopback one
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here at the latest, not at interpreter exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except MatrixError as err:
        for line in err.lines():
            print(terminal_text(line), file=sys.stderr)
        return err.exit_code
    except PinmatrixError as err:
        print(terminal_text(f"pinmatrix: error: {err}"), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:
        return _interrupted(err, whole_process)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
