#!/usr/bin/env bash
# One-shot check of rollgym against vLLM's GPU build, on a machine with an NVIDIA GPU.
# Never needed by CI (the suite runs vLLM's CPU build: tests/e2e/test_real_vllm.py); this runs
# the same module against the GPU build and brings the run directories back under $OUT.
#
#   scripts/gpu_vllm_check.sh                 # the tiny random model the test writes itself
#   ROLLGYM_VLLM_MODEL=/models/Qwen2.5-0.5B-Instruct scripts/gpu_vllm_check.sh
#                                             # a small local model (its chat template must take
#                                             # tools; Hermes-style <tool_call> tokens)
#
# Environment: OUT (default ./runs/gpu-vllm-check), ROLLGYM_GPU_VLLM_VENV (default
# ~/.cache/rollgym-vllm/gpu-venv), ROLLGYM_VLLM_ARGS (more vLLM flags; default --dtype bfloat16,
# since the tiny model is saved in float32, which vLLM's GPU attention backends do not all take).
# Needs Python 3.11, pip access to PyPI (vLLM's GPU build and its CUDA torch are several GB)
# and bubblewrap for the terminal rows.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0  # the version tests/e2e/test_real_vllm.py and its shape record name
OUT="${OUT:-$PWD/runs/gpu-vllm-check}"
VENV="${ROLLGYM_GPU_VLLM_VENV:-$HOME/.cache/rollgym-vllm/gpu-venv}"
mkdir -p "$OUT"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || { echo "error: nvidia-smi failed: no usable NVIDIA GPU" >&2; exit 1; }

# rollgym and its test dependencies in this Python; vLLM in a venv of its own
python -m pip install --quiet -e '.[test]'
if [ ! -f "$VENV/rollgym-vllm-$VLLM_VERSION.ok" ]; then
  started=$(date +%s)
  python -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet "vllm==$VLLM_VERSION" transformers tokenizers
  "$VENV/bin/python" -c "import vllm, transformers.models.llama"
  touch "$VENV/rollgym-vllm-$VLLM_VERSION.ok"
  echo "vllm $VLLM_VERSION (GPU build) installed in $(( $(date +%s) - started )) s" | tee "$OUT/install.txt"
fi
"$VENV/bin/python" -m pip list 2>/dev/null | grep -i -E '^(vllm|torch|transformers) ' >"$OUT/versions.txt" || true

# the same module as the CPU suite; every job folder (config, rollouts, trajectories,
# traces.db, server logs) lands under $OUT/pytest, the figures in $OUT/pytest.log
set +e
ROLLGYM_VLLM_VENV="$VENV" ROLLGYM_VLLM_ARGS="${ROLLGYM_VLLM_ARGS:---dtype bfloat16}" python -m pytest -v -s -p no:cacheprovider \
  --basetemp="$OUT/pytest" tests/e2e/test_real_vllm.py 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
set -e
echo "pytest exit status $status; results under $OUT"
exit "$status"
