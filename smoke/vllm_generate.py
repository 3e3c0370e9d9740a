"""vLLM smoke: an engine starts on a tiny randomly initialised Llama written to a temporary directory (no
hub, no tokenizer download) and generates tokens, under the cell's env flags (the runner exports them). The
engine core is started by spawn, whether or not this process has initialised CUDA (vllm_engine.py says why);
vLLM's attention backend and linear kernels, from its own log, go into the metrics (``backend.*``).

Oracles (two lines each; no PyPI package ships a tiny causal LM to pin golden token ids to):
- vllm-generate: the same weights in transformers' eager float32 model, teacher-forced on vLLM's tokens; each
  greedy token's logit must be within 5% of its row's standard deviation of the reference's maximum.
Fault wrong-token (PINMATRIX_FAULT): token 3 replaced by its reference row's least likely token; it must fail.
"""

from __future__ import annotations

import os
import tempfile
import time

from _oracles import fault, greedy_mismatch
from _smokelib import Context, Fail, main
from vllm_engine import OutputTee, chosen_backends, force_wrong_token, prepare_engine_env

SMOKES = {
    "vllm-generate": {
        "func": "engine",
        "description": "LLM() on a local 2-layer random Llama (hidden 64, vocab 512), skip_tokenizer_init, "
        "greedy generation of 8 tokens from token ids, checked against transformers' float32 model.",
        "needs": {"gpu": True, "packages": ["torch", "vllm", "transformers"], "min_capability": "7.0"},
        "timeout_s": 600,
    },
}


PROMPT = [1, 17, 42, 99]


def _write_tiny_model(path: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
        torch_dtype="bfloat16",
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path, safe_serialization=True)


def engine(ctx: Context) -> None:
    ctx.torch()  # CUDA is initialised in this process from here on: vLLM's engine core must be spawned
    injected = fault(("wrong-token",))
    prepare_engine_env()
    tee = OutputTee().start()  # the engine core inherits fd 1/2: its log lines are kept for chosen_backends
    try:
        _engine_and_check(ctx, injected, tee)
    finally:
        tee.stop()


def _engine_and_check(ctx: Context, injected: str | None, tee: OutputTee) -> None:
    with tempfile.TemporaryDirectory(prefix="pinmatrix-vllm-") as model_dir:
        _write_tiny_model(model_dir)
        flags = {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}
        for k, v in sorted(flags.items()):
            ctx.metric(f"env.{k}", v)
        from vllm import LLM, SamplingParams

        t0 = time.monotonic()
        llm = LLM(model=model_dir, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                  max_model_len=128, gpu_memory_utilization=0.2, seed=0)
        ctx.metric("engine_start_s", time.monotonic() - t0)
        params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, detokenize=False)
        t0 = time.monotonic()
        outs = llm.generate([{"prompt_token_ids": PROMPT}], params)
        ctx.metric("generate_s", time.monotonic() - t0)
        for key, value in sorted(chosen_backends(tee.text()).items()):
            ctx.metric(f"backend.{key}", value)
        tokens = list(outs[0].outputs[0].token_ids)
        ctx.metric("tokens", len(tokens))
        ctx.metric("token_ids", " ".join(map(str, tokens)))
        if len(tokens) != 8:
            raise Fail(f"vLLM generated {tokens!r}, expected 8 token ids", "wrong-result")
        rows, tolerance = _reference_logits(model_dir, PROMPT, tokens)
        if injected == "wrong-token":
            tokens = force_wrong_token(tokens, rows, 3)
            ctx.metric("fault_token", f"token 3 forced to {tokens[3]}")
        wrong = greedy_mismatch(tokens, rows, tolerance)
        if wrong:
            raise Fail(f"vLLM's greedy tokens differ from the reference model's: {wrong}", "wrong-result")
    ctx.summary = (f"engine started in {ctx.metrics['engine_start_s']} s; 8 greedy tokens agree with the "
                   "transformers reference")


def _reference_logits(model_dir: str, prompt: list[int], tokens: list[int]) -> tuple[list[list[float]], float]:
    """Rows of reference logits (row t: after the prompt and tokens[:t]) and the tolerance: 5% of the rows'
    smallest standard deviation."""
    import statistics

    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to("cuda").eval()
    ids = torch.tensor([prompt + tokens[:-1]], device="cuda")
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:].double().cpu().tolist()
    return logits, 0.05 * min(statistics.pstdev(row) for row in logits)


if __name__ == "__main__":
    main(SMOKES, globals())
