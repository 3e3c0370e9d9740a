"""How the bounds of smoke/vllm_moe.py were chosen: each path emulated on the CPU (transformers, bf16, with the
activation quantisation of vLLM's kernels done by hooks: e4m3 per token before the attention projections, e4m3
per tensor before each expert's w1/w3/w2, NVFP4 blocks before the experts) against the smoke's own reference, on
the smoke's own model, clean and with the perturb-expert fault. Needs torch (a CPU build is enough) and
transformers 4.57.6; run from the repository root:  python results/h200/vllm/calibrate.py [bf16 fp8 block-fp8 nvfp4]

Measured 2026-12-01 (torch 2.13.0+cpu): worst token / worst logprob deviation in reference-row sd,
  bf16  clean 0.0 / 0.014   perturbed 1.10 / 2.15
  fp8   clean 0.047 / 0.105 perturbed 0.52 / 2.25
  block-fp8 clean 0.008 / 0.030 perturbed 0.49 / 2.14
  nvfp4 clean 0.0 / 0.123   perturbed 0.44 / 1.79
"""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [os.path.join(ROOT, "smoke"), os.path.join(ROOT, "src", "pinmatrix", "incell")]
import torch  # noqa: E402
import vllm_moe as vm  # noqa: E402
from vllm_engine import compare_generation  # noqa: E402

torch.set_num_threads(1)


def _qdq_e4m3(x, amax):
    s = amax.float().clamp(min=1e-12) / 448.0
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)


def per_token(_module, args):
    """vLLM's FP8 linear on sm_90 (CUTLASS): dynamic e4m3 per token."""
    return (_qdq_e4m3(args[0], args[0].abs().amax(dim=-1, keepdim=True)),)


def per_tensor(_module, args):
    """vLLM's online FP8 MoE: dynamic e4m3 per tensor (here per expert's token subset)."""
    return None if args[0].numel() == 0 else (_qdq_e4m3(args[0], args[0].abs().max()),)


def per_group_128(_module, args):
    """vLLM's block FP8 MoE: dynamic e4m3 per token and 128-element group."""
    x = args[0]
    if x.numel() == 0:
        return None
    g = x.reshape(*x.shape[:-1], x.shape[-1] // 128, 128)
    return (_qdq_e4m3(g, g.abs().amax(dim=-1, keepdim=True)).reshape(x.shape),)


def nvfp4_activation(_module, args):
    """NVFP4 activations: e2m1 values in 16-element blocks with e4m3 block scales."""
    x = args[0]
    if x.numel() == 0:
        return None
    return (vm.nvfp4_quantize(torch, x.reshape(-1, x.shape[-1]).float())[3].reshape(x.shape).to(x.dtype),)


def emulate(model, kind):
    """vLLM's path emulated: bf16 weights and activations, greedy, 8 tokens, top-5 logprobs (+ its token)."""
    hooks = []
    for layer in model.model.layers:
        a = layer.self_attn
        if kind == "fp8":
            hooks += [m.register_forward_pre_hook(per_token) for m in (a.q_proj, a.k_proj, a.v_proj, a.o_proj)]
        for e in layer.block_sparse_moe.experts:
            hook = {"fp8": per_tensor, "block-fp8": per_group_128, "nvfp4": nvfp4_activation}.get(kind)
            if hook:
                hooks += [m.register_forward_pre_hook(hook) for m in (e.w1, e.w3, e.w2)]
    model = model.to(torch.bfloat16)
    ids, toks, lps = list(vm.PROMPT), [], []
    with torch.no_grad():
        for _ in range(vm.NEW_TOKENS):
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            t = int(lp.argmax())
            lps.append({i: float(lp[i]) for i in [*torch.topk(lp, vm.TOP_LOGPROBS).indices.tolist(), t]})
            toks.append(t)
            ids.append(t)
    for h in hooks:
        h.remove()
    return toks, lps


def run(kind, perturb):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bf16")
        vm._write_model(src)
        ref = vm._load_reference(torch, src)
        eng_dir = src
        if perturb:
            eng_dir = os.path.join(tmp, "perturbed")
            vm._perturbed_copy(torch, vm._load_reference(torch, src), src, eng_dir)
        eng = vm._load_reference(torch, eng_dir)
        if kind == "fp8":
            vm._fp8_reference(torch, ref)
            vm._fp8_reference(torch, eng)
        if kind in ("nvfp4", "block-fp8"):
            if kind == "nvfp4":
                greedy = ref.generate(torch.tensor([vm.PROMPT]), max_new_tokens=vm.NEW_TOKENS, do_sample=False)[0]
                quantize = vm._nvfp4_quantizer(torch, vm._expert_input_amax(torch, ref, greedy.tolist()))
            else:
                quantize = vm._block_fp8_quantizer(torch)
            vm._dequantised_into(torch, ref, vm._quantized_experts(torch, src, quantize)[1])
            vm._dequantised_into(torch, eng, vm._quantized_experts(torch, eng_dir, quantize)[1])
        toks, lps = emulate(eng, kind)
        rows = vm.reference_rows(torch, ref, toks)
        c = compare_generation(toks, lps, rows, *vm.BOUNDS[kind])
        print(f"{kind:5} {'perturbed' if perturb else 'clean':9} exact {c.exact}/8 worst token {c.worst_token:.3g} "
              f"sd, worst logprob {c.worst_logprob:.3g} sd, bounds {vm.BOUNDS[kind]}, pass {c.ok}; tokens {toks}")


if __name__ == "__main__":
    for kind in sys.argv[1:] or ("bf16", "fp8", "block-fp8", "nvfp4"):
        for perturb in (False, True):
            run(kind, perturb)
