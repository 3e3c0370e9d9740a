"""Matrix text is data: a corpus of hostile names and values (newlines, $(...), backticks, quotes, backslashes,
../, control, bidi and invisible characters) in stack names, env labels, env names and values, package names,
patch sources and CA file names. Each is either refused by validate with a located one-line reason, or
assembled into an image where it stays inert data (byte for byte in the config) and nothing it names runs."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO
from pinmatrix.errors import MatrixError
from pinmatrix.image.build import build_all
from pinmatrix.image.settings import BuildSettings
from pinmatrix.matrix.selection import load
from pinmatrix.oci.layout import OCILayout

SIX_HASHES = ("4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274",
              "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81")
CANARY = "CANARY"  # replaced by a path in the test's tmp dir: if anything ran, the file exists


@dataclass(frozen=True)
class Case:
    id: str
    where: str  # stack | label | env_name | env_value | package | patch_source | ca_name | description
    value: str
    refused_at: str | None  # the key path validate must name, or None when the value must stay inert


def toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=True)  # a TOML basic string: escapes, never raw control bytes


CASES = [
    Case("stack-newline-instruction", "stack", "demo\nRUN touch CANARY", "stacks"),
    Case("stack-command-substitution", "stack", "demo$(touch CANARY)", "stacks"),
    Case("stack-backticks", "stack", "demo`touch CANARY`", "stacks"),
    Case("stack-dotdot", "stack", "../../etc", "stacks"),
    Case("stack-semicolon", "stack", "demo;touch CANARY", "stacks"),
    Case("stack-bidi", "stack", "de\u202emo", "stacks"),
    Case("stack-zero-width", "stack", "demo\u200b", "stacks"),
    Case("label-newline", "label", "fp8\nLABEL x=y", "stacks.hostile.axes.env"),
    Case("label-substitution", "label", "$(touch CANARY)", "stacks.hostile.axes.env"),
    Case("label-quote", "label", "a'b\"c", "stacks.hostile.axes.env"),
    Case("env-name-space", "env_name", "A B", "stacks.hostile.axes.env"),
    Case("env-name-equals", "env_name", "A=B", "stacks.hostile.axes.env"),
    Case("env-name-substitution", "env_name", "$(touch CANARY)", "stacks.hostile.axes.env"),
    Case("env-value-substitution", "env_value", "$(touch CANARY)", None),
    Case("env-value-backticks", "env_value", "`touch CANARY`", None),
    Case("env-value-quotes-backslashes", "env_value", "a\\\"b'c\\\\d ; touch CANARY", None),
    Case("env-value-dollar-brace", "env_value", "${PATH:+$(touch CANARY)}", None),
    Case("env-value-newline", "env_value", "one\nRUN touch CANARY", "stacks.hostile.axes.env"),
    Case("env-value-escape", "env_value", "\x1b[31mred", "stacks.hostile.axes.env"),
    Case("package-semicolon", "package", "six; touch CANARY", "stacks.hostile.packages"),
    Case("package-dotdot", "package", "../six", "stacks.hostile.packages"),
    Case("package-newline", "package", "six\nRUN touch CANARY", "stacks.hostile.packages"),
    Case("patch-source-dotdot", "patch_source", "../../../etc/passwd", "patches.p.source"),
    Case("patch-source-absolute", "patch_source", "/etc/passwd", "patches.p.source"),
    Case("patch-source-substitution", "patch_source", "patches/$(touch CANARY).patch", "patches.p.source"),
    Case("ca-name-substitution", "ca_name", "evil$(touch CANARY).crt", None),
    Case("ca-name-quotes", "ca_name", "e'v\"il;`x`.crt", None),
    Case("description-newline", "description", "line\nRUN touch CANARY", None),
]


def matrix_text(case: Case, canary: Path, ca_dir: Path) -> str:
    value = case.value.replace(CANARY, str(canary))
    stack = value if case.where == "stack" else "hostile"
    label = value if case.where == "label" else "variant"
    env_name = value if case.where == "env_name" else "HOSTILE_TEST_VALUE"
    env_value = value if case.where == "env_value" else "plain"
    package = value if case.where == "package" else "six"
    description = value if case.where == "description" else "hostile-input test stack"
    lines = [
        "[matrix]", 'python = "3.13"', 'registry = "127.0.0.1:5000/hostile"',
        f"ca_certificates = [{toml_str(str(ca_dir))}]",
        f"ca_certificates_in_images = {'true' if case.where == 'ca_name' else 'false'}",
        "[matrix.base]", 'suite = "trixie"', "source_date_epoch = 1735689600",
        'packages = ["python3", "ca-certificates"]',
    ]
    if case.where == "patch_source":
        lines += ["[patches.p]", 'package = "six"', 'applies_to = ">=1"', 'upstream = "https://example.invalid/pr/1"',
                  f"source = {toml_str(value)}", f'sha256 = "{"0" * 64}"']
    lines += [f"[stacks.{toml_str(stack)}]", f"description = {toml_str(description)}", "gpu_required = false",
              'smokes = ["host-probe"]',
              f"[stacks.{toml_str(stack)}.axes]",
              f"env = [{{ label = {toml_str(label)}, vars = {{ {toml_str(env_name)} = {toml_str(env_value)} }} }}]",
              f"[stacks.{toml_str(stack)}.packages]",
              f"{toml_str(package)} = [" + ('{ version = "1.17.0", patches = ["p"] }' if case.where == "patch_source"
                                            else '"1.17.0"') + "]"]
    return "\n".join(lines) + "\n"


def lock_for(cell_id: str) -> str:
    return (f"# pinmatrix lock for cell {cell_id}: test\n# python 3.13 on x86_64-manylinux_2_28; test\n"
            f"six==1.17.0 \\\n    --hash=sha256:{SIX_HASHES[0]} \\\n    --hash=sha256:{SIX_HASHES[1]}\n")


def test_the_corpus_is_large_enough_and_covers_every_place() -> None:
    assert len(CASES) >= 20
    assert {c.where for c in CASES} >= {"stack", "label", "env_name", "env_value", "package", "patch_source", "ca_name"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_value_is_refused_with_a_location_or_stays_inert(case: Case, tmp_path: Path, build_cache: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO / "smoke", root / "smoke", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "patches").mkdir()
    canary = tmp_path / "canary"
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    cert = next(iter(sorted(Path("/etc/ssl/certs").glob("*.pem"))), None)
    ca_name = case.value.replace(CANARY, "canary") if case.where == "ca_name" else "extra.crt"
    (ca_dir / ca_name).write_bytes(cert.read_bytes() if cert else b"")
    (root / "matrix.toml").write_text(matrix_text(case, canary, ca_dir), encoding="utf-8")
    try:
        matrix, expansion = load(root / "matrix.toml")
    except MatrixError as err:
        lines = err.lines()
        assert case.refused_at is not None, f"unexpectedly refused: {lines}"
        assert len(lines) >= 1 and all(len(line.splitlines()) == 1 for line in lines)
        assert any(re.match(r"^.*matrix\.toml:\d+: ", line) and case.refused_at in line for line in lines), lines
        assert not canary.exists()
        return
    assert case.refused_at is None, f"{case.id}: validate accepted {case.value!r}"
    (cell,) = expansion.cells
    (root / "locks").mkdir()
    (root / "locks" / f"{cell.id}.txt").write_text(lock_for(cell.id))
    settings = BuildSettings(root=root, cache_dir=build_cache, logs_dir=tmp_path / "logs", registry="hostile",
                             ca_certificates=(ca_dir,), ca_in_images=case.where == "ca_name")
    (result,) = build_all([cell], None, settings, None, jobs=1)
    assert result.status == "built", result.reason
    assert not canary.exists(), "a hostile value was executed"
    layout = OCILayout(settings.layout)
    stored = layout.image(result.ref)
    assert stored is not None
    config = layout.config(stored)["config"]
    value = case.value.replace(CANARY, str(canary))
    if case.where == "env_value":
        assert f"HOSTILE_TEST_VALUE={value}" in config["Env"]
    elif case.where == "description":
        assert value not in json.dumps(config)  # descriptions are not copied into images
    elif case.where == "ca_name":
        import tarfile

        with tarfile.open(layout.blob_path(stored.manifest["layers"][-1]["digest"]), "r|gz") as tar:
            names = [m.name for m in tar]
        assert f"usr/local/share/ca-certificates/pinmatrix/{ca_name}" in names
