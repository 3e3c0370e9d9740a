"""vLLM MoE smokes: a tiny random Mixtral (2 layers, 8 experts, top-2, hidden 256, vocab 512) written with
transformers to a temporary directory (no hub, no tokenizer) generates 8 greedy tokens in vLLM, in bf16, with
online FP8 quantization (``quantization="fp8"``: per-tensor weight scales, dynamic activation scales) and, where
the GPU has FP4 tensor cores, from an NVFP4 (ModelOpt) checkpoint of its experts; under the cell's env flags (the
runner exports them, e.g. VLLM_USE_FLASHINFER_MOE_FP8=1). vLLM's own log lines name the attention backend, the
MoE backend and the linear kernels it chose: they go into the result's metrics (``backend.*``).

Oracles (two lines each). The reference is transformers' eager float32 Mixtral teacher-forced on vLLM's 8 tokens:
each token must be its greedy choice or within T sd of its row's maximum, and every logprob vLLM reports (top-5
and its token) within L sd of the reference's (sd: the reference row's standard deviation); BOUNDS holds (T, L).
- vllm-moe-bf16: the reference has the checkpoint's very bf16 weights; T = L = 0.1 sd (bf16 activations moved
  logprobs 0.014 sd in a CPU emulation, one perturbed expert 2.1 sd).
- vllm-moe-bf16-triton: the same oracle, vLLM's Triton MoE kernels asked for (its own choice on sm_90 is FlashInfer
  CUTLASS, a JIT build of FlashInfer's whole fused-MoE module on first use).
- vllm-moe-fp8: the reference's weights are quantised to e4m3 and back as vLLM does it (amax/448 per fused q/k/v,
  o_proj, expert w1+w3, w2); only the dynamic e4m3 activations differ (emulated: 0.11 sd): T = 0.3, L = 0.4 sd.
- vllm-moe-block-fp8: the reference's experts are the written e4m3 values x their 128x128 block scales, exactly;
  vLLM's activations are e4m3 per 128-element group (emulated: see BOUNDS): T = 0.3, L = 0.4 sd.
- vllm-moe-nvfp4: the reference's experts are the written e2m1 codes x e4m3 block scales x global scale, exactly;
  FP4 activations (emulated: 0.12 sd) allow T = 0.5, L = 0.6 sd. Skipped below sm_100 (no FP4 tensor cores).
Faults (PINMATRIX_FAULT), each must fail: perturb-expert (the expert layer 0 ranks first for the last prompt token
gets w2 x -3 in the checkpoint vLLM loads; the reference keeps the original) and wrong-token (vLLM's token 3
replaced by its reference row's least likely token before the check).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

from _oracles import E2M1, fault
from _smokelib import Context, Fail, Skip, cap_tuple, cuda_driver, log, main
from vllm_engine import (
    OutputTee,
    chosen_backends,
    compare_generation,
    engine_refusal,
    force_wrong_token,
    logprob_dicts,
    prepare_engine_env,
)

SMOKES = {
    "vllm-moe-bf16": {
        "func": "moe_bf16",
        "description": "LLM() on a local 2-layer random Mixtral (8 experts, top-2), bf16, 8 greedy tokens with "
        "top-5 logprobs, against transformers' float32 model teacher-forced on them; backends from vLLM's log.",
        "needs": {"gpu": True, "packages": ["torch", "vllm", "transformers"], "min_capability": "8.0"},
        "timeout_s": 600,
    },
    "vllm-moe-bf16-triton": {
        "func": "moe_bf16",
        "description": "vllm-moe-bf16 with vLLM's Triton fused-MoE kernels asked for by name (moe_backend='triton'), "
        "where vLLM's own choice needs a long FlashInfer JIT build (FlashInfer CUTLASS on sm_90).",
        "needs": {"gpu": True, "packages": ["torch", "vllm", "transformers"], "min_capability": "8.0"},
        "engine": {"moe_backend": "triton"},
        "timeout_s": 480,
    },
    "vllm-moe-fp8": {
        "func": "moe_fp8",
        "description": "The same Mixtral with quantization='fp8' (online, per-tensor weight scales, dynamic "
        "activations), against the reference with the same e4m3-quantised weights; backends from vLLM's log.",
        "needs": {"gpu": True, "packages": ["torch", "vllm", "transformers"], "min_capability": "8.9"},
        "timeout_s": 480,
    },
    "vllm-moe-block-fp8": {
        "func": "moe_block_fp8",
        "description": "The same Mixtral from a 128x128-block FP8 checkpoint of its experts (written here; "
        "DeepSeek-style weight_scale_inv), against the reference with the dequantised experts; the block "
        "scheme is the one FlashInfer CUTLASS takes on sm_90 (VLLM_USE_FLASHINFER_MOE_FP8=1).",
        "needs": {"gpu": True, "packages": ["torch", "vllm", "transformers"], "min_capability": "8.9"},
        "timeout_s": 600,
    },
    "vllm-moe-nvfp4": {
        "func": "moe_nvfp4",
        "description": "The same Mixtral with NVFP4 experts (a ModelOpt checkpoint written here), against the "
        "reference with the dequantised experts; skipped below sm_100 (no FP4 tensor cores).",
        "needs": {"gpu": True, "native_fp4": True, "packages": ["torch", "vllm", "transformers"]},
        "timeout_s": 480,
    },
}

PROMPT = [1, 17, 42, 99]
NEW_TOKENS = 8
TOP_LOGPROBS = 5
WRONG_TOKEN_STEP = 3
PERTURB_FACTOR = -3.0
CONFIG = {
    "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 8,
    "num_experts_per_tok": 2, "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-5,
}
# (token bound, logprob bound) in reference-row standard deviations; see the module docstring.
# Chosen from a CPU emulation of each path against its reference (results/h200/vllm/calibrate.py): clean runs
# worst logprob 0.014 (bf16), 0.105 (fp8), 0.030 (block-fp8), 0.123 (nvfp4) sd; with the perturbed expert 2.15,
# 2.25, 2.14, 1.79 sd.
BOUNDS = {"bf16": (0.1, 0.1), "fp8": (0.3, 0.4), "block-fp8": (0.3, 0.4), "nvfp4": (0.5, 0.6)}
FAULTS = ("perturb-expert", "wrong-token")
FP8_MAX = 448.0
FP4_MAX = 6.0
NVFP4_BLOCK = 16
FP8_BLOCK = 128


# ------------------------------------------------------------------------------------------------ model
def _write_model(path: str) -> None:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(**CONFIG, torch_dtype="bfloat16")
    MixtralForCausalLM(config).to(torch.bfloat16).save_pretrained(path, safe_serialization=True)


def _load_reference(torch: Any, path: str) -> Any:
    from transformers import MixtralForCausalLM

    return MixtralForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager").eval()


def _experts(layer: Any) -> Any:
    return layer.block_sparse_moe.experts


def _first_expert(torch: Any, model: Any) -> int:
    """The expert layer 0 ranks first for the last prompt token (the one the first generated token comes from)."""
    with torch.no_grad():
        out = model(torch.tensor([PROMPT], device=model.device), output_router_logits=True)
    return int(out.router_logits[0].reshape(-1, CONFIG["num_local_experts"])[-1].argmax())


def _perturbed_copy(torch: Any, model: Any, src: str, dst: str) -> int:
    """``dst``: the checkpoint of ``src`` with one expert's w2 (layer 0) multiplied by PERTURB_FACTOR."""
    from transformers import MixtralForCausalLM

    expert = _first_expert(torch, model)
    broken = MixtralForCausalLM.from_pretrained(src, torch_dtype=torch.bfloat16)
    with torch.no_grad():
        _experts(broken.model.layers[0])[expert].w2.weight.mul_(PERTURB_FACTOR)
    broken.save_pretrained(dst, safe_serialization=True)
    return expert


# --------------------------------------------------------------------------------- FP8 reference weights
def fp8_qdq(torch: Any, tensors: list[Any]) -> list[Any]:
    """Tensors quantised to e4m3 with one shared scale amax/448 and dequantised (vLLM's ops.scaled_fp8_quant
    with scale=None, applied by Fp8OnlineLinearMethod to a fused q/k/v weight and by Fp8OnlineMoEMethod to each
    expert's w13 = [w1; w3] and w2)."""
    amax = max(float(t.abs().max()) for t in tensors)
    scale = torch.tensor(max(amax, 1e-12) / FP8_MAX, dtype=torch.float32)
    return [(t.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * scale for t in tensors]


def _fp8_reference(torch: Any, model: Any) -> int:
    """Replace every weight vLLM quantises by its e4m3 round trip; returns how many tensors changed."""
    changed = 0
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            groups = [[attn.q_proj, attn.k_proj, attn.v_proj], [attn.o_proj]]
            for e in _experts(layer):
                groups += [[e.w1, e.w3], [e.w2]]
            for mods in groups:
                for mod, new in zip(mods, fp8_qdq(torch, [m.weight for m in mods])):
                    mod.weight.copy_(new)
                    changed += 1
    return changed


# ------------------------------------------------------------------------------------ NVFP4 checkpoint
def nvfp4_quantize(torch: Any, w: Any) -> tuple[Any, Any, Any, Any]:
    """One weight (out, in) as ModelOpt NVFP4: packed e2m1 codes (out, in/2; first element in the low nibble),
    e4m3 block scales (out, in/16), the global scale (amax / (6 * 448)), and the exact dequantised float32."""
    w = w.float()
    out_f, in_f = w.shape
    scale_2 = max(float(w.abs().max()), 1e-12) / (FP4_MAX * FP8_MAX)
    blocks = w.reshape(out_f, in_f // NVFP4_BLOCK, NVFP4_BLOCK)
    block_scale = (blocks.abs().amax(dim=-1) / FP4_MAX / scale_2).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    denom = block_scale.float().unsqueeze(-1) * scale_2
    values = torch.where(denom > 0, blocks / denom.clamp(min=1e-30), torch.zeros_like(blocks))
    grid = torch.tensor(E2M1, dtype=torch.float32)
    codes = (values.unsqueeze(-1) - grid).abs().argmin(dim=-1)  # nearest e2m1 value (+0 before -0)
    deq = (grid[codes] * denom).reshape(out_f, in_f)
    flat = codes.reshape(out_f, in_f).to(torch.uint8)
    packed = flat[:, 0::2] | (flat[:, 1::2] << 4)
    return packed, block_scale, torch.tensor(scale_2, dtype=torch.float32), deq


def _quantized_experts(torch: Any, src: str, quantize: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``src``'s tensors with every expert weight replaced by ``quantize(stem, weight)`` -> (its checkpoint
    tensors, its exact dequantised float32), and those dequantised weights by name."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    deq: dict[str, Any] = {}
    for name, t in load_file(os.path.join(src, "model.safetensors")).items():
        if ".block_sparse_moe.experts." in name and name.endswith(".weight"):
            parts, deq[name] = quantize(name[: -len(".weight")], t)
            out.update(parts)
        else:
            out[name] = t
    return out, deq


def _save_checkpoint(src: str, dst: str, tensors: dict[str, Any], quantization_config: dict[str, Any]) -> None:
    """``dst``: ``tensors`` and ``src``'s config with ``quantization_config`` (how vLLM reads a quantised model)."""
    import shutil

    from safetensors.torch import save_file

    os.makedirs(dst, exist_ok=True)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    for f in os.listdir(src):
        if f.endswith(".json") and f != "config.json":
            shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, "config.json")) as fh:
        config = json.load(fh)
    config["quantization_config"] = quantization_config
    with open(os.path.join(dst, "config.json"), "w") as fh:
        json.dump(config, fh, indent=1)


def _dequantised_into(torch: Any, model: Any, deq: dict[str, Any]) -> None:
    with torch.no_grad():
        for name, value in deq.items():
            model.get_parameter(name).copy_(value)


def _nvfp4_quantizer(torch: Any, input_amax: dict[str, float]) -> Any:
    def quantize(stem: str, w: Any) -> tuple[dict[str, Any], Any]:
        packed, block_scale, scale_2, deq = nvfp4_quantize(torch, w)
        input_scale = torch.tensor(input_amax[stem] / (FP4_MAX * FP8_MAX), dtype=torch.float32)
        return {stem + ".weight": packed, stem + ".weight_scale": block_scale, stem + ".weight_scale_2": scale_2,
                stem + ".input_scale": input_scale}, deq
    return quantize


# config.json style of vLLM 0.20.0's ModelOptQuantConfigBase.from_config: quant_algo, group_size, and "ignore"
# (wildcards; "exclude_modules" is read only from a legacy hf_quant_config.json "quantization" table).
NVFP4_CONFIG = {
    "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": NVFP4_BLOCK,
    "ignore": ["lm_head", "model.embed_tokens", "model.layers.*.self_attn*", "model.layers.*.block_sparse_moe.gate"],
}


def fp8_block_quantize(torch: Any, w: Any) -> tuple[Any, Any, Any]:
    """One weight (out, in) in 128x128-block FP8 as vLLM's Fp8Config with weight_block_size reads it: e4m3
    values, one float32 ``weight_scale_inv`` (amax / 448, the multiplier) per block, and the exact dequantised."""
    out_f, in_f = w.shape
    if out_f % FP8_BLOCK or in_f % FP8_BLOCK:
        raise ValueError(f"a {out_f}x{in_f} weight is not made of {FP8_BLOCK}x{FP8_BLOCK} blocks")
    blocks = w.float().reshape(out_f // FP8_BLOCK, FP8_BLOCK, in_f // FP8_BLOCK, FP8_BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    deq = (q.float() * scale[:, None, :, None]).reshape(out_f, in_f)
    return q.reshape(out_f, in_f), scale, deq


def _block_fp8_quantizer(torch: Any) -> Any:
    def quantize(stem: str, w: Any) -> tuple[dict[str, Any], Any]:
        q, scale, deq = fp8_block_quantize(torch, w)
        return {stem + ".weight": q, stem + ".weight_scale_inv": scale}, deq
    return quantize


def block_fp8_config() -> dict[str, Any]:
    """Fp8Config of a 128x128-block FP8 checkpoint of the experts; attention stays bf16 (ignored_layers names
    every shard of each fused q/k/v, as vLLM's is_layer_skipped wants), gate and lm_head are never quantised."""
    ignored = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(CONFIG["num_hidden_layers"])
               for p in ("q", "k", "v", "o")]
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
            "ignored_layers": ignored}


def _expert_input_amax(torch: Any, model: Any, ids: list[int]) -> dict[str, float]:
    """Per layer, the largest |input| any expert's w1/w3 and w2 saw on ``ids`` (vLLM keeps one activation
    global scale per layer's w13 and w2; the same value is written for every expert)."""
    seen: dict[tuple[int, str], float] = {}
    hooks = []
    for li, layer in enumerate(model.model.layers):
        for e in _experts(layer):
            for part, mod in (("w13", e.w1), ("w13", e.w3), ("w2", e.w2)):
                def hook(_m: Any, args: Any, li: int = li, part: str = part) -> None:
                    if args[0].numel():
                        seen[(li, part)] = max(seen.get((li, part), 0.0), float(args[0].abs().max()))
                hooks.append(mod.register_forward_pre_hook(hook))
    with torch.no_grad():
        model(torch.tensor([ids], device=model.device))
    for h in hooks:
        h.remove()
    out = {}
    for li, layer in enumerate(model.model.layers):
        for ei in range(len(_experts(layer))):
            for w, part in (("w1", "w13"), ("w3", "w13"), ("w2", "w2")):
                out[f"model.layers.{li}.block_sparse_moe.experts.{ei}.{w}"] = max(seen.get((li, part), 1.0), 1e-6)
    return out


# --------------------------------------------------------------------------------------- engine + check
def _generate(ctx: Context, model_dir: str, quantization: str | None, tee: OutputTee) -> tuple[list[int], Any]:
    from vllm import LLM, SamplingParams

    asked = dict(ctx.spec.get("engine") or {})  # e.g. moe_backend="triton"; none: vLLM chooses
    ctx.metric("moe_backend_asked", str(asked.get("moe_backend", "auto")))
    t0 = time.monotonic()
    try:
        llm = LLM(model=model_dir, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                  max_model_len=128, max_num_seqs=4, gpu_memory_utilization=0.25, seed=0, quantization=quantization,
                  **asked)
    except Exception as err:
        text = tee.text()
        for key, value in sorted(chosen_backends(text).items()):
            ctx.metric(f"backend.{key}", value)
        refused = engine_refusal(text)
        if refused:
            raise Fail(f"vLLM refused the configuration: {refused}", "unsupported-config") from err
        raise
    ctx.metric("engine_start_s", time.monotonic() - t0)
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, detokenize=False,
                            logprobs=TOP_LOGPROBS)
    t0 = time.monotonic()
    out = llm.generate([{"prompt_token_ids": PROMPT}], params)[0].outputs[0]
    ctx.metric("generate_s", time.monotonic() - t0)
    for key, value in sorted(chosen_backends(tee.text()).items()):
        ctx.metric(f"backend.{key}", value)
    tokens = list(out.token_ids)
    ctx.metric("token_ids", " ".join(map(str, tokens)))
    if len(tokens) != NEW_TOKENS:
        raise Fail(f"vLLM generated {tokens!r}, expected {NEW_TOKENS} token ids", "wrong-result")
    return tokens, logprob_dicts(out.logprobs)


def reference_rows(torch: Any, model: Any, tokens: list[int]) -> list[list[float]]:
    """Row t: the reference's float64 log-softmax after the prompt and tokens[:t] (teacher-forced)."""
    ids = torch.tensor([PROMPT + tokens[:-1]], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(PROMPT) - 1:].double()
    return torch.log_softmax(logits, dim=-1).cpu().tolist()


def _check(ctx: Context, kind: str, tokens: list[int], logprobs: list[dict[int, float]],
           rows: list[list[float]], injected: str | None) -> None:
    if injected == "wrong-token":
        tokens = force_wrong_token(tokens, rows, WRONG_TOKEN_STEP)
        ctx.metric("fault_token", f"token {WRONG_TOKEN_STEP} forced to {tokens[WRONG_TOKEN_STEP]}")
    token_tol, logprob_tol = BOUNDS[kind]
    check = compare_generation(tokens, logprobs, rows, token_tol, logprob_tol)
    ctx.metric("tokens_exact", check.exact)
    ctx.metric("worst_token_sd", check.worst_token)
    ctx.metric("worst_logprob_sd", check.worst_logprob)
    ctx.metric("token_bound_sd", token_tol)
    ctx.metric("logprob_bound_sd", logprob_tol)
    if not check.ok:
        more = f" (+{len(check.problems) - 3} more)" if len(check.problems) > 3 else ""
        raise Fail(f"{kind} MoE generation differs from the reference: {'; '.join(check.problems[:3])}{more}",
                   "wrong-result")
    backends = ", ".join(f"{k.removeprefix('backend.')}={v}" for k, v in ctx.metrics.items()
                         if k.startswith("backend.") and not k.endswith("candidates"))
    ctx.summary = (f"{kind}: {check.exact}/{len(tokens)} tokens the reference's greedy choice, worst token "
                   f"{check.worst_token:.3g} sd, worst logprob {check.worst_logprob:.3g} sd (bounds {token_tol:g}/"
                   f"{logprob_tol:g}); {backends or 'no backend lines in the log'}")


def _run(ctx: Context, kind: str) -> None:
    torch = ctx.torch()
    injected = fault(FAULTS)
    for k, v in sorted(prepare_engine_env().items()):
        ctx.metric(f"env.{k}", v)
    for k, v in sorted(os.environ.items()):
        if k.startswith(("VLLM_USE_FLASHINFER", "VLLM_FLASHINFER")):
            ctx.metric(f"env.{k}", v)
    tee = OutputTee().start()
    try:
        _engine_and_check(ctx, kind, torch, injected, tee)
    finally:
        tee.stop()


def _engine_and_check(ctx: Context, kind: str, torch: Any, injected: str | None, tee: OutputTee) -> None:
    with tempfile.TemporaryDirectory(prefix="pinmatrix-vllm-moe-") as tmp:
        src = os.path.join(tmp, "bf16")
        _write_model(src)
        reference = _load_reference(torch, src).to("cuda")
        engine_dir, quantization = src, None
        if kind == "fp8":
            quantization = "fp8"
            ctx.metric("fp8_reference_tensors", _fp8_reference(torch, reference))
        if injected == "perturb-expert":
            engine_dir = os.path.join(tmp, "perturbed")
            expert = _perturbed_copy(torch, _load_reference(torch, src).to("cuda"), src, engine_dir)
            ctx.metric("fault_expert", f"layer 0 expert {expert} w2 x {PERTURB_FACTOR:g}")
        if kind in ("nvfp4", "block-fp8"):
            if kind == "nvfp4":
                greedy = reference.generate(torch.tensor([PROMPT], device="cuda"), max_new_tokens=NEW_TOKENS,
                                            do_sample=False)[0].tolist()
                quantize, config = _nvfp4_quantizer(torch, _expert_input_amax(torch, reference, greedy)), NVFP4_CONFIG
            else:
                quantize, config = _block_fp8_quantizer(torch), block_fp8_config()
            quant_dir = os.path.join(tmp, kind)
            tensors, deq = _quantized_experts(torch, engine_dir, quantize)  # the perturbed expert too, if any
            _save_checkpoint(engine_dir, quant_dir, tensors, config)
            ctx.metric("quantised_weights", len(deq))
            _dequantised_into(torch, reference, _quantized_experts(torch, src, quantize)[1])
            engine_dir = quant_dir
        log(f"[{ctx.name}] engine on {engine_dir} (quantization={quantization})")
        tokens, logprobs = _generate(ctx, engine_dir, quantization, tee)
        rows = reference_rows(torch, reference, tokens)
        _check(ctx, kind, tokens, logprobs, rows, injected)


def moe_bf16(ctx: Context) -> None:
    _run(ctx, "bf16")


def moe_fp8(ctx: Context) -> None:
    _run(ctx, "fp8")


def moe_block_fp8(ctx: Context) -> None:
    _run(ctx, "block-fp8")


def nvfp4_unsupported(capability: str) -> str | None:
    """Why NVFP4 MoE cannot run natively on a GPU of ``capability`` ("9.0"), or None where it can (sm_100+)."""
    if cap_tuple(capability) >= (10, 0):
        return None
    return (f"NVFP4 MoE unsupported on sm_{capability.replace('.', '')}: no FP4 tensor-core instructions below "
            "sm_100 (vLLM would fall back to a weight-only Marlin or an emulation path, not NVFP4 compute)")


def moe_nvfp4(ctx: Context) -> None:
    capability = cuda_driver().device(0)["capability"]
    reason = nvfp4_unsupported(capability)
    if reason:
        raise Skip(reason)
    _run(ctx, "nvfp4")


if __name__ == "__main__":
    main(SMOKES, globals())
