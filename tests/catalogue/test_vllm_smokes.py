"""The vLLM smokes' CPU-testable parts (smoke/vllm_engine.py, smoke/vllm_moe.py, smoke/vllm_generate.py): the
parser of vLLM 0.20.0's own log lines for the backends it chose, the refusal reader, the reference comparison and
its faults, the spawn set-up (a spawned child imports the smoke file as __mp_main__ and writes into the captured
output), the NVFP4 skip on sm_90, and the shipped h200-vllm stack. The GPU runs are results/h200/vllm/."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.matrix.selection import validate_matrix
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.runner import HostCell, RunOptions

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "smoke"
SHIPPED = ROOT / "src" / "pinmatrix" / "shipped"
sys.path[:0] = [str(SHIPPED), str(SMOKE)]
try:
    import _smokelib
    import vllm_engine as ve
    import vllm_moe as vm
finally:
    sys.path.remove(str(SHIPPED))
    sys.path.remove(str(SMOKE))

# Lines as vLLM 0.20.0 writes them from its engine core process (format: vllm/logger.py _FORMAT, the process
# prefix of vllm/utils/system_utils.py _add_prefix), each message from the source line named beside it.
P = "(EngineCore pid=4242) INFO 12-01 14:03:07"
LOG = f"""\
INFO 12-01 14:02:51 [utils.py:253] non-default args: {{'model': '/tmp/m', 'skip_tokenizer_init': True}}
WARNING 12-01 14:02:52 [system_utils.py:157] We must use the `spawn` multiprocessing start method.
{P} [cuda.py:369] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].
{P} [model_executor/.../oracle/unquantized.py:261] Using FlashInfer CUTLASS Unquantized MoE backend out of potential backends: ['FlashInfer TRTLLM', 'FlashInfer CUTLASS', 'TRITON', 'BATCHED_TRITON'].
{P} [model_executor/.../oracle/unquantized.py:343] Using MoEPrepareAndFinalizeNoDPEPModular
{P} [model_executor/kernels/linear/__init__.py:389] Selected CutlassFP8ScaledMMLinearKernel for Fp8OnlineLinearMethod
{P} [model_executor/.../fused_moe/fused_moe.py:1092] Using default MoE config. Performance might be sub-optimal! Config file not found at ['/x/E=8,N=512,device_name=NVIDIA_H200.json']
{P} [model_executor/.../oracle/fp8.py:394] Using TRITON Fp8 MoE backend out of potential backends: ['AITER', 'FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'DEEPGEMM', 'TRITON', 'MARLIN', 'BATCHED_DEEPGEMM', 'BATCHED_TRITON', 'XPU'].
{P} [cuda.py:369] Using FLASHINFER attention backend out of potential backends: ['FLASHINFER'].
"""


def test_backends_parsed_from_vllm_log_lines() -> None:
    got = ve.chosen_backends(LOG)
    assert got["attention_backend"] == "FLASH_ATTN"  # the first choice is kept, a later one does not overwrite
    assert got["attention_candidates"] == "FLASH_ATTN FLASHINFER TRITON_ATTN FLEX_ATTENTION"
    assert got["moe_backend.unquantized"] == "FlashInfer CUTLASS"
    assert got["moe_backend.unquantized.candidates"].split(" | ")[:2] == ["FlashInfer TRTLLM", "FlashInfer CUTLASS"]
    assert got["moe_backend.fp8"] == "TRITON"
    assert got["moe_prepare_finalize"] == "MoEPrepareAndFinalizeNoDPEPModular"
    assert got["linear_kernel.Fp8OnlineLinearMethod"] == "CutlassFP8ScaledMMLinearKernel"
    assert got["moe_kernel_config"] == "default"


def test_other_backend_line_forms() -> None:
    lines = "\n".join([
        # cuda.py:308, a backend asked for by name: logger.info("Using %s backend.", selected_backend)
        "\x1b[36m(EngineCore pid=1)\x1b[0m INFO 12-01 10:00:00 [cuda.py:308] Using AttentionBackendEnum.TRITON_ATTN backend.",
        # oracle/nvfp4.py:181 quotes the value
        "INFO 12-01 10:00:00 [oracle/nvfp4.py:209] Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential "
        "backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTLASS', 'MARLIN'].",
        # oracle/mxfp8.py:88: no candidates
        "INFO 12-01 10:00:00 [oracle/mxfp8.py:88] Using 'TRITON' MxFp8 MoE backend.",
        # fused_moe.py:1079, a tuned config file
        "INFO 12-01 10:00:00 [fused_moe.py:1079] Using configuration from /c/E=8,N=512.json for MoE layer.",
        "[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2",
    ])
    got = ve.chosen_backends(lines)
    assert got["attention_backend"] == "TRITON_ATTN" and "attention_candidates" not in got
    assert got["moe_backend.nvfp4"] == "FLASHINFER_CUTLASS"
    assert got["moe_backend.nvfp4.candidates"] == "FLASHINFER_TRTLLM | FLASHINFER_CUTLASS | MARLIN"
    assert got["moe_backend.mxfp8"] == "TRITON" and "moe_backend.mxfp8.candidates" not in got
    assert got["moe_kernel_config"] == "/c/E=8,N=512.json"
    assert got["autotuner_skipped_tactics"] == "10"
    assert ve.chosen_backends("INFO nothing chosen here\nUsing the force\n") == {}


def test_engine_refusal_names_vllms_reason() -> None:
    log = LOG + (
        "(EngineCore pid=4242) ERROR 12-01 14:03:09 [core.py:1108] EngineCore failed to start.\n"
        "(EngineCore pid=4242) NotImplementedError: Found VLLM_USE_FLASHINFER_MOE_FP8=1, but no FlashInfer FP8 MoE "
        "backend supports the configuration.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert ve.engine_refusal(log) == ("NotImplementedError: Found VLLM_USE_FLASHINFER_MOE_FP8=1, but no FlashInfer "
                                      "FP8 MoE backend supports the configuration.")
    assert ve.engine_refusal(LOG) is None
    assert ve.engine_refusal("RuntimeError: Engine core initialization failed.") is None


def _rows(seed: int, n: int = 8, vocab: int = 64) -> list[list[float]]:
    import random

    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        logits = [rnd.gauss(0, 0.3) for _ in range(vocab)]
        lse = math.log(sum(math.exp(v) for v in logits))
        rows.append([v - lse for v in logits])
    return rows


def _greedy(rows: list[list[float]]) -> list[int]:
    return [max(range(len(r)), key=r.__getitem__) for r in rows]


def _top(row: list[float], k: int = 5, shift: float = 0.0) -> dict[int, float]:
    return {i: row[i] + shift for i in sorted(range(len(row)), key=lambda i: -row[i])[:k]}


def test_comparison_passes_the_reference_itself_and_a_near_tie() -> None:
    rows = _rows(1)
    tokens = _greedy(rows)
    check = ve.compare_generation(tokens, [_top(r) for r in rows], rows, 0.1, 0.1)
    assert check.ok and check.exact == 8 and check.worst_token == 0.0 and check.worst_logprob == 0.0
    # a near-tie broken the other way: the second-best token 0.05 sd below the best passes at 0.1 sd, not at 0.01
    tied = [list(r) for r in rows]
    sd = ve._sd(tied[2])
    second = sorted(range(64), key=lambda i: -tied[2][i])[1]
    tied[2][second] = tied[2][tokens[2]] - 0.05 * sd
    other = list(tokens)
    other[2] = second
    assert ve.compare_generation(other, [], tied, 0.1, 0.1).ok
    loose = ve.compare_generation(other, [], tied, 0.01, 0.1)
    assert not loose.ok and loose.exact == 7 and loose.worst_token_at == 2
    assert "token 2" in loose.problems[0] and "beyond 0.01 sd" in loose.problems[0]


def test_comparison_fails_logprobs_off_by_more_than_the_bound() -> None:
    rows = _rows(2)
    tokens = _greedy(rows)
    sd = ve._sd(rows[5])
    lps = [_top(r) for r in rows]
    lps[5] = _top(rows[5], shift=0.5 * sd)  # every top-5 logprob of step 5 off by 0.5 sd, the tokens unchanged
    check = ve.compare_generation(tokens, lps, rows, 0.3, 0.4)
    assert not check.ok and check.exact == 8
    assert check.worst_logprob_at == 5 and check.worst_logprob == pytest.approx(0.5)
    assert all(p.startswith("step 5:") for p in check.problems) and len(check.problems) == 5
    assert ve.compare_generation(tokens, lps, rows, 0.3, 0.6).ok


def test_comparison_refuses_malformed_answers() -> None:
    rows = _rows(3)
    tokens = _greedy(rows)
    assert "7 tokens but 8 reference rows" in ve.compare_generation(tokens[:7], [], rows, 1, 1).problems
    assert "8 tokens but logprobs for 2 steps" in ve.compare_generation(tokens, [{}, {}], rows, 1, 1).problems
    bad = ve.compare_generation([64, *tokens[1:]], [], rows, 1, 1)
    assert "outside the vocabulary of 64" in bad.problems[0] and bad.worst_token == math.inf
    nan = ve.compare_generation(tokens, [{tokens[0]: math.nan}] + [{}] * 7, rows, 1, 1)
    assert not nan.ok and nan.worst_logprob == math.inf
    flat = [[0.0] * 64] + rows[1:]
    assert "reference row 0 is degenerate" in ve.compare_generation(tokens, [], flat, 1, 1).problems[0]


def test_wrong_token_fault_fails_every_bound_the_smokes_use() -> None:
    rows = _rows(4, vocab=512)
    tokens = _greedy(rows)
    broken = ve.force_wrong_token(tokens, rows, 3)
    assert broken[:3] == tokens[:3] and broken[4:] == tokens[4:]
    assert broken[3] == min(range(512), key=rows[3].__getitem__)
    for token_tol, logprob_tol in vm.BOUNDS.values():
        check = ve.compare_generation(broken, [], rows, token_tol, logprob_tol)
        assert not check.ok and check.worst_token_at == 3 and check.worst_token > 3  # the row's max to its min
    with pytest.raises(ValueError, match="step 8 is outside 8 tokens"):
        ve.force_wrong_token(tokens, rows, 8)


def test_logprob_dicts_reads_vllm_logprob_objects() -> None:
    class Logprob:  # vllm.logprobs.Logprob: logprob, rank, decoded_token
        def __init__(self, logprob: float) -> None:
            self.logprob, self.rank, self.decoded_token = logprob, 1, None

    assert ve.logprob_dicts([{5: Logprob(-1.5), "7": Logprob(-2.0)}, None]) == [{5: -1.5, 7: -2.0}, {}]
    assert ve.logprob_dicts(None) == []


def test_prepare_engine_env_forces_spawn() -> None:
    env = {"VLLM_WORKER_MULTIPROC_METHOD": "fork", "VLLM_LOGGING_LEVEL": "DEBUG"}
    got = ve.prepare_engine_env(env)
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn" == got["VLLM_WORKER_MULTIPROC_METHOD"]
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG" and env["VLLM_LOGGING_COLOR"] == "0"
    assert ve.prepare_engine_env({})["VLLM_LOGGING_LEVEL"] == "INFO"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SMOKE), str(SHIPPED)])}


@pytest.mark.parametrize("module", ["vllm_generate.py", "vllm_moe.py"])
def test_smoke_file_imports_as_a_spawned_childs_main(module: str) -> None:
    """multiprocessing's spawn runs the parent's main file as __mp_main__ in the child (runpy.run_path): the smoke's
    top level must import without torch/vllm and run nothing."""
    code = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='__mp_main__'); "
            "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'numpy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(SMOKE / module)], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]" and "PINMATRIX-RESULT" not in proc.stdout


CHILD = textwrap.dedent("""\
    import json, multiprocessing, os, sys
    import vllm_engine

    def engine_core():  # stands in for vLLM's engine core: a spawned process writing its log lines
        print("(EngineCore pid=%d) INFO 12-01 14:03:07 [cuda.py:369] Using FLASH_ATTN attention backend out of "
              "potential backends: ['FLASH_ATTN']." % os.getpid(), flush=True)
        print("(EngineCore pid=%d) INFO 12-01 14:03:08 [oracle/fp8.py:394] Using TRITON Fp8 MoE backend out of "
              "potential backends: ['TRITON']." % os.getpid(), file=sys.stderr, flush=True)

    if __name__ == "__main__":
        vllm_engine.prepare_engine_env()
        tee = vllm_engine.OutputTee().start()
        print("parent line", flush=True)
        ctx = multiprocessing.get_context(os.environ["VLLM_WORKER_MULTIPROC_METHOD"])
        child = ctx.Process(target=engine_core)
        child.start()
        child.join()
        text = tee.text()
        tee.stop()
        with open(sys.argv[1], "w") as fh:
            json.dump({"method": ctx.get_start_method(), "exit": child.exitcode, "text": text,
                       "backends": vllm_engine.chosen_backends(text)}, fh)
        print("after stop", flush=True)
""")


def test_spawned_engine_core_output_is_captured_and_still_logged(tmp_path: Path) -> None:
    script = tmp_path / "smoke_like.py"
    script.write_text(CHILD)
    out = tmp_path / "out.json"
    env = {k: v for k, v in _env().items() if not k.startswith("VLLM_")}
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert got["method"] == "spawn" and got["exit"] == 0
    assert got["backends"] == {"attention_backend": "FLASH_ATTN", "attention_candidates": "FLASH_ATTN",
                               "moe_backend.fp8": "TRITON", "moe_backend.fp8.candidates": "TRITON"}
    # the runner's log (the process's own stdout) still gets every line, the child's stderr included
    for line in ("parent line", "Using FLASH_ATTN attention backend", "Using TRITON Fp8 MoE backend", "after stop"):
        assert line in proc.stdout
    assert "after stop" not in got["text"]


def test_a_hangs_stacks_reach_the_log_not_the_pipe(tmp_path: Path) -> None:
    """Under -X faulthandler (as the runner starts smokes), the runner's SIGABRT on a timeout must still print the
    Python stacks to the log while the tee holds fd 2."""
    script = tmp_path / "hang.py"
    script.write_text("import os, signal, vllm_engine\n"
                      "tee = vllm_engine.OutputTee().start()\n"
                      "def waiting_for_the_engine():\n"
                      "    os.kill(os.getpid(), signal.SIGABRT)\n"
                      "waiting_for_the_engine()\n")
    proc = subprocess.run([sys.executable, "-X", "faulthandler", str(script)], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == -6
    assert "Fatal Python error: Aborted" in proc.stderr and "waiting_for_the_engine" in proc.stderr


def test_nvfp4_skips_on_sm90_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    assert vm.nvfp4_unsupported("10.0") is None and vm.nvfp4_unsupported("12.1") is None
    reason = vm.nvfp4_unsupported("9.0")
    assert reason is not None and reason.startswith("NVFP4 MoE unsupported on sm_90: no FP4 tensor-core")

    class Driver:
        def __init__(self, cap: str) -> None:
            self.cap = cap

        def device(self, _ordinal: int) -> dict[str, Any]:
            return {"name": "GPU", "capability": self.cap, "memory_gib": 140.0}

    ctx = _smokelib.Context("vllm-moe-nvfp4", vm.SMOKES["vllm-moe-nvfp4"])
    monkeypatch.setattr(vm, "cuda_driver", lambda: Driver("9.0"))
    with pytest.raises(_smokelib.Skip, match="NVFP4 MoE unsupported on sm_90"):
        vm.moe_nvfp4(ctx)
    monkeypatch.setattr(vm, "cuda_driver", lambda: Driver("10.0"))
    with pytest.raises(_smokelib.Skip) as err:  # on sm_100 it goes on to the engine: here it stops at torch
        vm.moe_nvfp4(ctx)
    assert "NVFP4" not in str(err.value)


def test_block_fp8_checkpoint_config_keeps_attention_bf16() -> None:
    """vLLM's is_layer_skipped matches ignored_layers by full name and wants every shard of a fused q/k/v alike."""
    config = vm.block_fp8_config()
    assert config["quant_method"] == "fp8" and config["weight_block_size"] == [128, 128]
    assert config["activation_scheme"] == "dynamic"
    layers = vm.CONFIG["num_hidden_layers"]
    assert sorted(config["ignored_layers"]) == sorted(f"model.layers.{i}.self_attn.{p}_proj" for i in range(layers)
                                                      for p in "qkvo")
    for dim in ("hidden_size", "intermediate_size"):  # expert weights are made of whole 128x128 blocks
        assert vm.CONFIG[dim] % vm.FP8_BLOCK == 0


def test_nvfp4_checkpoint_config_is_the_config_json_form_vllm_reads() -> None:
    """vLLM 0.20.0 ModelOptQuantConfigBase.from_config: without a "quantization" table (the legacy
    hf_quant_config.json) it reads quant_algo, group_size and the exclusions from "ignore"."""
    config = vm.NVFP4_CONFIG
    assert config["quant_method"] == "modelopt" and config["quant_algo"] == "NVFP4" and "quantization" not in config
    assert config["group_size"] == vm.NVFP4_BLOCK == 16
    assert "exclude_modules" not in config
    assert {"lm_head", "model.layers.*.self_attn*", "model.layers.*.block_sparse_moe.gate"} <= set(config["ignore"])


def test_fault_names_are_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in vm.FAULTS:
        monkeypatch.setenv("PINMATRIX_FAULT", name)
        assert vm.fault(vm.FAULTS) == name
    monkeypatch.setenv("PINMATRIX_FAULT", "zero-tile")
    with pytest.raises(_smokelib.Skip, match="has no variant in this smoke"):
        vm.fault(vm.FAULTS)


def test_smokes_run_through_the_runner_and_skip_without_a_gpu(tmp_path: Path) -> None:
    names = ("vllm-generate", "vllm-moe-bf16", "vllm-moe-bf16-triton", "vllm-moe-fp8", "vllm-moe-block-fp8",
             "vllm-moe-nvfp4")
    store = ResultsStore(tmp_path / "r.sqlite")
    opts = RunOptions(smoke_dir=SMOKE, logs_dir=tmp_path / "logs", repo_root=ROOT)
    runs = run_cells([HostCell(id="aaaaaaaaaab1", smokes=names)], store, opts,
                     host=HostFingerprint.make(hostname="t"), echo=lambda _s: None)
    got = {r.smoke: (r.status, r.reason) for r in runs[0].records}
    assert got == {n: ("skip", "no GPU") for n in names}


def test_catalogue_and_the_shipped_h200_vllm_stack() -> None:
    catalogue = {s.name: s for s in load_catalogue(SMOKE)}
    assert all(s.module.name != "vllm_engine.py" for s in catalogue.values())
    matrix = load_matrix(ROOT / "matrix.toml")
    stack = matrix.stacks["h200-vllm"]
    assert stack.platform == "x86_64-manylinux_2_35"  # vllm 0.20.0's x86_64 wheel tag
    assert set(stack.smokes) == {"host-probe", "vllm-generate", "vllm-moe-bf16", "vllm-moe-fp8", "vllm-moe-block-fp8",
                                 "vllm-moe-nvfp4"}
    assert all(name in catalogue for name in stack.smokes)
    assert catalogue["vllm-moe-bf16-triton"].module.name == "vllm_moe.py"  # selected with its group vllm-moe-bf16
    assert vm.SMOKES["vllm-moe-bf16-triton"]["engine"] == {"moe_backend": "triton"}
    assert "engine" not in vm.SMOKES["vllm-moe-bf16"]  # vLLM's own choice
    required = (stack.promotion or {})["required_smokes"]
    assert "vllm-moe-nvfp4" not in required and set(required) == set(stack.smokes) - {"vllm-moe-nvfp4"}
    assert (stack.promotion or {})["accept"] == ["pass", "xfail"]  # the fp8-moe cell's refusal is a known issue
    _, expansion = validate_matrix(ROOT / "matrix.toml")
    cells = {c.name: c for c in expansion.cells if c.stack == "h200-vllm"}
    assert set(cells) == {"h200-vllm[env=default]", "h200-vllm[env=fp8-moe]"}
    assert cells["h200-vllm[env=fp8-moe]"].env == {"VLLM_USE_FLASHINFER_MOE_FP4": "0", "VLLM_USE_FLASHINFER_MOE_FP8": "1"}
    assert cells["h200-vllm[env=default]"].env == {}
    for cell in cells.values():
        assert "vllm==0.20.0" in cell.requirements and "torch==2.11.0" in cell.requirements
        lock = (ROOT / "locks" / f"{cell.id}.txt").read_text()
        assert "\ntransformers==" in lock and "\nvllm==0.20.0 " in lock
    issues = {c: [k.id for k in cell.known_issues] for c, cell in cells.items()}
    assert issues == {"h200-vllm[env=default]": [],
                      "h200-vllm[env=fp8-moe]": ["vllm-0.20.0-flashinfer-moe-fp8-online-fp8-sm90"]}
