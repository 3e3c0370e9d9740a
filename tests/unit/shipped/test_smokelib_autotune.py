"""_smokelib's autotune keeper: for a Triton kernel whose configurations have a pre_hook (which Triton 3.6 will not
cache), the chosen configuration's index is kept under $PINMATRIX_AUTOTUNE_DIR and reused by the next process,
as the live configuration object (pre_hook and all). Checked against a stand-in for Triton with the interface
the keeper uses (``Autotuner.check_disk_cache(self, tuning_key, configs, bench_fn)`` and the ingredients of
Triton's own cache key); the real Triton 3.6 on the H200 machine: results/h200/batch-autotune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "src" / "pinmatrix" / "shipped"

FAKE_TRITON = {
    "triton/__init__.py": "",
    "triton/_C/__init__.py": "",
    "triton/_C/libtriton.py": "import os\ndef get_cache_invalidating_env_vars():\n"
                              "    return {k: v for k, v in os.environ.items() if k == 'TRITON_FAKE_FLAG'}\n",
    "triton/compiler/__init__.py": "",
    "triton/compiler/compiler.py": "class _B:\n    def hash(self):\n        return 'backend-sm90'\n"
                                   "def make_backend(target):\n    return _B()\n",
    "triton/runtime/__init__.py": "",
    "triton/runtime/cache.py": "def triton_key():\n    return 'triton-3.6.0'\n",
    "triton/runtime/driver.py": "class _A:\n    def get_current_target(self):\n        return 'cuda-90'\n"
                                "class _D:\n    active = _A()\ndriver = _D()\n",
    "triton/runtime/jit.py": "import os\nclass JITFunction:\n    __name__ = 'kernel'\n"
                             "    cache_key = os.environ.get('FAKE_KERNEL_SOURCE', 'src-1')\n",
    "triton/runtime/autotuner.py": '''
from .jit import JITFunction

class Config:
    def __init__(self, block, pre_hook=None):
        self.block, self.pre_hook = block, pre_hook
    def __str__(self):
        return f"BLOCK: {self.block}"

class Autotuner:
    disk_checks = 0
    def __init__(self, configs):
        self.configs, self.cache, self.fn = configs, {}, JITFunction()
    def check_disk_cache(self, tuning_key, configs, bench_fn):  # Triton's own: caches nothing with pre_hooks
        Autotuner.disk_checks += 1
        bench_fn()
        return False
    def run(self, key):  # the part of Triton's run that matters here
        if key not in self.cache:
            def bench():
                self.benchmarks = getattr(self, "benchmarks", 0) + 1
                self.cache[key] = self.configs[2]
            self.check_disk_cache(key, self.configs, bench)
        return self.cache[key]
''',
}

PROBE = '''
import json, os, sys
sys.path[:0] = [os.environ["FAKE_TRITON"], os.environ["SHIPPED"]]
import _smokelib
_smokelib.keep_autotune_choices(os.environ.get("PINMATRIX_AUTOTUNE_DIR"))
from triton.runtime import autotuner  # imported after the keeper was installed, as a smoke would
hook = (lambda args: None) if os.environ.get("NO_PRE_HOOK") != "1" else None
configs = [autotuner.Config(b, pre_hook=hook) for b in (16, 32, 64, 128)]
tuner = autotuner.Autotuner(configs)
chosen = tuner.run((4096, "bf16"))
print(json.dumps({"index": next(i for i, c in enumerate(configs) if c is chosen),
                  "benchmarks": getattr(tuner, "benchmarks", 0), "original_checks": autotuner.Autotuner.disk_checks,
                  "kept": _smokelib.AUTOTUNE_KEPT}))
'''


@pytest.fixture()
def fake_triton(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for name, text in FAKE_TRITON.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def probe(fake_triton: Path, cache: Path | None, **env: str) -> dict[str, object]:
    full = {**os.environ, "FAKE_TRITON": str(fake_triton), "SHIPPED": str(SHIPPED), **env}
    full.pop("PINMATRIX_AUTOTUNE_DIR", None)
    if cache is not None:
        full["PINMATRIX_AUTOTUNE_DIR"] = str(cache)
    done = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_second_process_reuses_the_choice_without_benchmarking(fake_triton: Path, tmp_path: Path) -> None:
    cache = tmp_path / "autotune"
    first = probe(fake_triton, cache)
    assert first["index"] == 2 and first["benchmarks"] == 1 and first["kept"] == {"reused": 0, "tuned": 1}
    files = list(cache.glob("kernel-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == {"index": 2, "config": "BLOCK: 64"}
    second = probe(fake_triton, cache)
    assert second["index"] == 2 and second["benchmarks"] == 0 and second["kept"] == {"reused": 1, "tuned": 0}


def test_nothing_is_kept_without_the_folder(fake_triton: Path) -> None:
    assert probe(fake_triton, None)["original_checks"] == 1


def test_kernels_without_pre_hooks_are_left_to_triton(fake_triton: Path, tmp_path: Path) -> None:
    got = probe(fake_triton, tmp_path / "autotune", NO_PRE_HOOK="1")
    assert got["original_checks"] == 1 and got["kept"] == {"reused": 0, "tuned": 0}
    assert not (tmp_path / "autotune").exists()


@pytest.mark.parametrize("changed", [{"FAKE_KERNEL_SOURCE": "src-2"}, {"TRITON_FAKE_FLAG": "1"}])
def test_another_kernel_source_or_cache_variable_tunes_again(fake_triton: Path, tmp_path: Path,
                                                           changed: dict[str, str]) -> None:
    cache = tmp_path / "autotune"
    probe(fake_triton, cache)
    assert probe(fake_triton, cache, **changed)["benchmarks"] == 1
    assert len(list(cache.glob("kernel-*.json"))) == 2


@pytest.mark.parametrize("content", [
    b"not json", b"[]", b'{"index": 9, "config": "BLOCK: 64"}', b'{"index": 1, "config": "BLOCK: 64"}',
    b'{"index": true, "config": "BLOCK: 32"}', b'{"index": -1, "config": "BLOCK: 128"}',
    b'{"index": 2, "config": "BLOCK: 64", "pad": "' + b"x" * 5000 + b'"}',
])
def test_a_bad_choice_file_is_a_miss_never_an_error(fake_triton: Path, tmp_path: Path, content: bytes) -> None:
    cache = tmp_path / "autotune"
    probe(fake_triton, cache)
    (kept,) = cache.glob("kernel-*.json")
    kept.write_bytes(content)
    got = probe(fake_triton, cache)
    assert got["index"] == 2 and got["benchmarks"] == 1
    assert json.loads(kept.read_text()) == {"index": 2, "config": "BLOCK: 64"}  # written again


def test_an_autotuner_imported_before_the_keeper_is_patched_too(fake_triton: Path, tmp_path: Path) -> None:
    code = PROBE.replace("import _smokelib\n", "import _smokelib\nimport triton.runtime.autotuner\n")
    env = {**os.environ, "FAKE_TRITON": str(fake_triton), "SHIPPED": str(SHIPPED),
           "PINMATRIX_AUTOTUNE_DIR": str(tmp_path / "a")}
    for expected in (1, 0):
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["benchmarks"] == expected
