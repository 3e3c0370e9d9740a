"""Compile, ahead of time and without launching a kernel, the FlashInfer JIT modules the gb10 NVFP4 smokes
use, for the FLASHINFER_CUDA_ARCH_LIST in the environment (the cell's: "12.0f" or "12.1a"):

- fp4_gemm_cutlass_sm120: flashinfer.mm_fp4(..., backend="cutlass") on SM12x (flashinfer-nvfp4-gemm,
  flashinfer-nvfp4-vs-fp8). Its gencode comes from FLASHINFER_CUDA_ARCH_LIST (supported major 12).
- the FP4 quantization module an SM121 device gets: flashinfer.nvfp4_quantize calls
  get_fp4_quantization_module(f"{major}{minor}") = get_fp4_quantization_module("121"), called here as is.

Writes build-<arch>.json into the folder named by argv[1]: versions, seconds and error per module, and every
.so in the JIT folder.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

out = Path(sys.argv[1])
arch_list = os.environ["FLASHINFER_CUDA_ARCH_LIST"]
record: dict = {"arch_list": arch_list, "modules": {}}
t0 = time.monotonic()
import torch  # noqa: E402
import flashinfer  # noqa: E402
from flashinfer.jit import env as jit_env  # noqa: E402
from flashinfer.jit.gemm import gen_gemm_sm120_module_cutlass_fp4  # noqa: E402
from flashinfer.quantization.fp4_quantization import get_fp4_quantization_module  # noqa: E402

record.update(flashinfer=flashinfer.__version__, torch=torch.__version__, torch_cuda=torch.version.cuda,
              import_s=round(time.monotonic() - t0, 1), jit_dir=str(jit_env.FLASHINFER_JIT_DIR))


def save() -> None:
    record["so"] = sorted(str(p) for p in Path(jit_env.FLASHINFER_JIT_DIR).rglob("*.so"))
    (out / f"build-{arch_list.replace(' ', '_')}.json").write_text(json.dumps(record, indent=1) + "\n")


def timed(name: str, fn) -> bool:  # noqa: ANN001
    start = time.monotonic()
    error = None
    try:
        fn()
    except BaseException as err:  # noqa: BLE001 - recorded (a timeout's SIGINT too), then saved
        error = f"{type(err).__name__}: {err}"[:2000]
        traceback.print_exc()
    record["modules"][name] = {"seconds": round(time.monotonic() - start, 1), "error": error}
    print(f"{arch_list}: {name}: {record['modules'][name]}", flush=True)
    save()
    return not (error or "").startswith("KeyboardInterrupt")


if timed("fp4_gemm_cutlass_sm120", lambda: gen_gemm_sm120_module_cutlass_fp4().build(verbose=False)):
    timed("fp4_quantization(backend='121')", lambda: get_fp4_quantization_module("121"))
