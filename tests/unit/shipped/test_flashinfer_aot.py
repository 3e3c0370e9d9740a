"""shipped/flashinfer_aot.py, the generator run in a cell's root at build time, against a stand-in FlashInfer with
the interface it uses (JitSpec.build / write_ninja / name / jit_library_path, the module generators, the
compilation context). The real FlashInfer 0.6.8.post1: the h200 and gb10 cells' builds (docs/images.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GENERATOR = ROOT / "src" / "pinmatrix" / "shipped" / "flashinfer_aot.py"

SPEC = '''
import os, subprocess, sys, time
from pathlib import Path
JIT = Path(os.environ["FAKE_JIT_DIR"])

class JitSpec:
    def __init__(self, name, waits_for=None):
        self.name, self.waits_for = name, waits_for
        self.extra_cuda_cflags = ["-O3"]
        self.ninja_path = JIT / name / "build.ninja"
        self.jit_library_path = JIT / name / f"{name}.so"

    def write_ninja(self):
        self.ninja_path.parent.mkdir(parents=True, exist_ok=True)
        self.ninja_path.write_text("rule cc\\n")

    def build(self, verbose, need_lock):
        self.jit_library_path.parent.mkdir(parents=True, exist_ok=True)
        # the niceness a process this build starts (ninja, nvcc) has
        child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
        (JIT / f"{self.name}.nice").write_text(child.stdout.strip())
        (JIT / f"{self.name}.started").write_text("")
        if self.waits_for:  # finishes only once the other module's build has started
            deadline = time.monotonic() + float(os.environ.get("FAKE_WAIT_S", "10"))
            while not (JIT / f"{self.waits_for}.started").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} built alone: {self.waits_for} never started beside it")
                time.sleep(0.01)
        self.jit_library_path.write_bytes(self.name.encode())
'''

FAKE = {
    "torch/__init__.py": "float16 = 'float16'\nclass version:\n    cuda = '13.0'\n",
    "flashinfer/__init__.py": "__version__ = '0.6.8.post1'\n",
    "flashinfer/compilation_context.py": "class CompilationContext:\n    TARGET_CUDA_ARCHS = {(9, '0a')}\n"
                                         "    def get_nvcc_flags_list(self):\n"
                                         "        return ['-gencode=arch=compute_90a,code=sm_90a']\n",
    "flashinfer/jit/__init__.py": "",
    "flashinfer/jit/spec.py": SPEC,
    "flashinfer/jit/env.py": "import os\nFLASHINFER_JIT_DIR = os.environ['FAKE_JIT_DIR']\n",
    "flashinfer/jit/gemm.py": "from .spec import JitSpec\ndef gen_gemm_module():\n    return JitSpec('gemm')\n",
    "flashinfer/jit/attention.py": "from .spec import JitSpec\n"
                                   "def gen_single_decode_module(*args):\n"
                                   "    return JitSpec('single_decode_f16', waits_for='gemm')\n",
}


def _run(tmp_path: Path, *args: str, wait_s: str = "10") -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake"
    for rel, text in FAKE.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(fake), "FAKE_JIT_DIR": str(tmp_path / "jit"), "FAKE_WAIT_S": wait_s}
    return subprocess.run([sys.executable, str(GENERATOR), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_module_with_the_longest_unit_builds_at_the_normal_priority_and_the_others_below_it(tmp_path: Path) -> None:
    done = _run(tmp_path, str(tmp_path / "out"), "decode-f16-hd128", "gemm")
    assert done.returncode == 0, done.stderr[-800:]
    own = os.nice(0)
    assert int((tmp_path / "jit" / "gemm.nice").read_text()) == own  # gemm's group_gemm.cu: a core of its own
    assert int((tmp_path / "jit" / "single_decode_f16.nice").read_text()) == min(19, own + 10)
    # asked the other way round, the same module goes first
    again = _run(tmp_path / "again", str(tmp_path / "again" / "out"), "gemm", "decode-f16-hd128")
    assert again.returncode == 0, again.stderr[-800:]
    assert int((tmp_path / "again" / "jit" / "gemm.nice").read_text()) == own


def test_the_modules_build_side_by_side_and_the_manifest_keeps_the_order_asked(tmp_path: Path) -> None:
    # decode's build ends only once gemm's has begun: one after another, decode would wait in vain
    done = _run(tmp_path, str(tmp_path / "out"), "decode-f16-hd128", "gemm")
    assert done.returncode == 0, done.stderr[-800:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [(b["module"], b["name"]) for b in manifest["built"]] == [("decode-f16-hd128", "single_decode_f16"),
                                                                    ("gemm", "gemm")]
    assert (tmp_path / "out/gemm/gemm.so").read_bytes() == b"gemm"
    assert (tmp_path / "out/single_decode_f16/single_decode_f16.so").read_bytes() == b"single_decode_f16"
    assert manifest["built"][1]["gencode"] == ["-gencode=arch=compute_90a,code=sm_90a"]


def test_a_module_that_fails_to_build_fails_the_generator(tmp_path: Path) -> None:
    # decode alone: gemm never starts, so decode's build raises, and the generator exits non-zero with no manifest
    done = _run(tmp_path, str(tmp_path / "out"), "decode-f16-hd128", wait_s="0.2")
    assert done.returncode != 0
    assert "built alone" in done.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_ninja_only_writes_each_modules_ninja_file_and_builds_nothing(tmp_path: Path) -> None:
    done = _run(tmp_path, "--ninja-only", str(tmp_path / "out"), "gemm")
    assert done.returncode == 0, done.stderr[-800:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["built"] == [{"module": "gemm", "name": "gemm", "gencode": ["-gencode=arch=compute_90a,code=sm_90a"],
                                  "ninja": str(tmp_path / "jit/gemm/build.ninja"),
                                  "so": str(tmp_path / "jit/gemm/gemm.so")}]
    assert not (tmp_path / "jit/gemm/gemm.so").exists()


def test_an_unknown_module_is_refused_by_name(tmp_path: Path) -> None:
    done = _run(tmp_path, str(tmp_path / "out"), "gemm", "nope")
    assert done.returncode != 0
    assert "unknown module(s) nope" in done.stderr
