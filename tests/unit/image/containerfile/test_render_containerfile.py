"""Rendering a cell's build context without an engine: the layer plan (most shared first, by the lock's
dependency graph), labels, env, CA certificates, inputs hash, and the one-line failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, make_cell, project_copy
from pinmatrix.cell import CellPatch
from pinmatrix.errors import PatchError
from pinmatrix.image.containerfile.layerplan import plan_layers
from pinmatrix.image.containerfile.render import (
    BuildError,
    BuildSettings,
    failure_reason,
    layer_of,
    nvidia_require_cuda,
    render_cell,
)
from pinmatrix.project.layer_plan import LayerPlanError, load_layer_specs
from pinmatrix.project.lockfile import parse_lock

H = "--hash=sha256:" + "a" * 64
TORCH_LOCK = f"""\
# pinmatrix lock for cell x
--index-url https://index.invalid/simple
filelock==3.16.1 \\
    {H}
    # via
    #   torch
    #   triton
numpy==2.1.0 \\
    {H}
    # via
    #   torch
    #   xformers
nvidia-cublas-cu12==12.8.4.1 \\
    {H}
    # via torch
rich==13.9.4 \\
    {H}
    # via -r requirements.in
torch==2.11.0 \\
    {H} \\
    --hash=sha256:{'b' * 64}
    # via
    #   -r requirements.in
    #   xformers
triton==3.6.0 \\
    {H}
    # via torch
xformers==0.0.35 \\
    {H}
    # via -r requirements.in
"""


def test_lock_is_parsed_with_hashes_and_via_graph() -> None:
    lock = parse_lock(TORCH_LOCK)
    assert lock.options == ("--index-url https://index.invalid/simple",)
    entries = lock.by_name()
    assert set(entries) == {"filelock", "numpy", "nvidia-cublas-cu12", "rich", "torch", "triton", "xformers"}
    assert entries["torch"].version == "2.11.0" and len(entries["torch"].hashes) == 2
    assert entries["filelock"].via == ("torch", "triton")
    assert entries["torch"].via == ("xformers",)
    assert entries["torch"].text.startswith("torch==2.11.0 --hash=sha256:")


def test_layers_most_shared_first_and_roots_claim_their_packages() -> None:
    layers = plan_layers(parse_lock(TORCH_LOCK), load_layer_specs(REPO / "images" / "layers.toml"))
    plan = {layer.name: [e.name for e in layer.entries] for layer in layers}
    assert list(plan) == ["torch", "triton", "xformers", "extras"]
    # torch's CUDA wheels and shared dependencies sit in the torch layer; triton keeps its own layer
    assert plan["torch"] == ["filelock", "numpy", "nvidia-cublas-cu12", "torch"]
    assert plan["triton"] == ["triton"]
    assert plan["xformers"] == ["xformers"]
    assert plan["extras"] == ["rich"]


def test_layer_plan_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "layers.toml"
    bad.write_text('[[layer]]\nname = "torch"\nroots = ["torch"]\n')
    with pytest.raises(LayerPlanError, match=r"layers.toml:1: one layer must have roots = \[\"\*\"\]"):
        load_layer_specs(bad)
    bad.write_text('[[layer]]\nname = "Bad Name"\nroots = ["*"]\n')
    with pytest.raises(LayerPlanError, match=r"layer\[0\].name"):
        load_layer_specs(bad)


def test_render_writes_labels_env_and_a_stable_inputs_hash(tmp_path: Path) -> None:
    root = project_copy(tmp_path)
    cert = tmp_path / "corp.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    upstream = CellPatch(id="pr2520", package="flashinfer-python", version="0.6.8", kind="installed-tree",
                         status="already-upstream", upstream="u", sha256=None, source=None, contained_in="0.6.7")
    cell = make_cell("t", ("torch==2.11.0", "xformers==0.0.35"), pins={"torch": "2.11.0"}, cuda="13.0",
                     min_driver="580.65.06", arch_flags=("9.0a",), env={"FOO": "bar $x"}, patches=(upstream,))
    settings = BuildSettings(root=root, cache_dir=tmp_path / "cache", ca_certificates=(cert,))
    one = render_cell(cell, TORCH_LOCK, "localhost/pinmatrix-base:k", settings, tmp_path / "ctx1")
    two = render_cell(cell, TORCH_LOCK, "localhost/pinmatrix-base:k", settings, tmp_path / "ctx2")
    assert one.inputs == two.inputs
    text = (one.context / "Containerfile").read_text()
    assert text.startswith("# pinmatrix image for cell") and "FROM localhost/pinmatrix-base:k" in text
    assert text.index("00-torch.txt") < text.index("01-triton.txt") < text.index("02-xformers.txt") < text.index("05-extras.txt")
    assert "corp.crt" in text and "update-ca-certificates" in text
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0 driver>=580.65.06"' in text
    assert 'FOO="bar \\$x"' in text  # no variable expansion by the builder
    assert one.labels["io.pinmatrix.pin.cuda"] == "13.0"
    assert one.labels["io.pinmatrix.patch.pr2520"] == "already-upstream (contained in 0.6.7)"
    assert one.labels["io.pinmatrix.arch.flags"] == "9.0a"
    assert one.labels["org.opencontainers.image.created"] == "2025-01-01T00:00:00Z"
    assert one.layers == ("base", "python", "torch", "triton", "xformers", "extras", "patches")
    assert f'io.pinmatrix.inputs="{one.inputs}"' in text
    # any change of an input changes the hash: a newer lock, another certificate
    assert render_cell(cell, TORCH_LOCK.replace("13.9.4", "13.9.5"), "localhost/pinmatrix-base:k", settings,
                       tmp_path / "ctx3").inputs != one.inputs
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n")
    assert render_cell(cell, TORCH_LOCK, "localhost/pinmatrix-base:k", settings, tmp_path / "ctx4").inputs != one.inputs


def test_render_refuses_bad_inputs_with_one_line(tmp_path: Path) -> None:
    root = project_copy(tmp_path)
    settings = BuildSettings(root=root, cache_dir=tmp_path / "cache")
    py312 = make_cell("t", ("six==1.17.0",), python="3.12")
    with pytest.raises(BuildError, match=r"needs Python 3.12 but the Debian bookworm base has 3.11"):
        render_cell(py312, TORCH_LOCK, "b", settings, tmp_path / "c")
    bad_sha = make_cell("t", ("xformers==0.0.35",), patches=(CellPatch(
        id="p", package="xformers", version="0.0.35", kind="installed-tree", status="apply", upstream="u",
        sha256="0" * 64, source="patches/xformers-tiled-matmul-int64.patch"),))
    with pytest.raises(PatchError, match="refused"):
        render_cell(bad_sha, TORCH_LOCK, "b", settings, tmp_path / "c")
    missing = BuildSettings(root=root, cache_dir=tmp_path / "cache", ca_certificates=(tmp_path / "nope.crt",))
    with pytest.raises(BuildError, match="ca_certificates: .*nope.crt does not exist"):
        render_cell(make_cell("t", ("six==1.17.0",)), TORCH_LOCK, "b", missing, tmp_path / "c")


def test_helpers() -> None:
    assert nvidia_require_cuda(make_cell("t", ("a==1",))) is None
    assert nvidia_require_cuda(make_cell("t", ("a==1",), cuda="12.8", min_driver="570.26")) == "cuda>=12.8 driver>=570.26"
    assert layer_of("RUN set -eu; printf x > /pinmatrix/layers/00-torch.txt; pip install") == "torch"
    assert layer_of("FROM localhost/pinmatrix-base:k") == "base"
    assert layer_of("COPY patches/ /pinmatrix/patches/") == "patches"
    log = ["noise", "pinmatrix: patch x does not apply to xformers 0.0.35: f.py: Hunk #2 FAILED at 140", "Error: building"]
    assert failure_reason(log, "fallback").startswith("pinmatrix: patch x does not apply")
    assert failure_reason(["nothing"], "fallback") == "fallback"
