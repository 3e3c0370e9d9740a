cd /work/main
eval "$(.venv/bin/pinmatrix engine-env)"
REF=127.0.0.1:5000/pinmatrix/gb10-nvfp4:68642c0882af
echo "## $(date -u +%H:%M:%S) cell 68642c0882af: $REF (started beside run.sh's loop, same command)"
podman run --rm --network=none "$REF" python -c 'import os; print({k: v for k, v in os.environ.items() if k.endswith("_CUDA_ARCH_LIST")})'
/usr/bin/time -f "import under emulation: %e s" podman run --rm --network=none "$REF" \
    python -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('vllm', vllm.__version__); print('flashinfer', flashinfer.__version__)" \
    || echo "import failed: exit $?"
echo "## $(date -u +%H:%M:%S) done"
