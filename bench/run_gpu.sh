#!/usr/bin/env bash
# Run the three GPU benchmarks (rollout, update, step) at default sizes on one CUDA device.
# Each table is printed to stdout and, when $OUT is set, written to $OUT/<bench>.{txt,json,log}.
# Optional: CONFIG=path/to/qwen3-0.6b-config (default: shared/assets beside the checkout), PYTHON=python3,
# LIMIT_S=420 (per-script wall-clock limit; a script past it is stopped and the next one runs).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
LIMIT_S="${LIMIT_S:-420}"
CONFIG_ARGS=()
if [ -n "${CONFIG:-}" ]; then CONFIG_ARGS=(--config "$CONFIG"); fi
LOG_DIR="${OUT:-}"
if [ -n "$LOG_DIR" ]; then mkdir -p "$LOG_DIR"; else LOG_DIR="$(mktemp -d)"; fi
export OUT="$LOG_DIR"  # the benchmarks write their tables under $OUT
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__,
"cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
rc=0
for bench in bench_rollout bench_update bench_step; do
  echo "=== $bench ($(date -u +%H:%M:%S)) ==="
  timeout "$LIMIT_S" "$PY" "bench/$bench.py" --device cuda "${CONFIG_ARGS[@]}" 2>&1 | tee "$LOG_DIR/$bench.log"
  status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then echo "=== $bench exited with $status ==="; rc=$status; fi
done
echo "=== summary ==="
for bench in bench_rollout bench_update bench_step; do
  [ -f "$LOG_DIR/$bench.txt" ] && cat "$LOG_DIR/$bench.txt"
done
exit $rc
