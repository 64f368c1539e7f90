#!/usr/bin/env bash
# Issue 15's GPU figures in one call, about 5.5 minutes on an H200 (every part has its own limit; the limits
# add up to 7.2 minutes):
#   update  bench_update.py: packed / padded / full-logits GRPO update, bf16 and fp32, checkpointing off and on
#   reuse   bench_reuse.py:  FastSampler KV reuse, G=8 groups (shared prefill) and 6-turn episodes (kept KV)
#   step    bench_step.py:   3 full coding-tools train steps (8 prompts x 8, fast sampler, micro 4), bf16
#
#   bash bench/run_issue15.sh OUT_DIR
#
# OUT_DIR gets 7 files: log.txt (everything the benchmarks printed, tracebacks included) and
# <part>.txt / <part>.json for update, reuse and step (each table row is written as soon as it is measured,
# so a part stopped at its limit keeps the rows it finished). The tables are also printed at the end.
# Environment: PYTHON (default python3), CONFIG (Qwen3-0.6B config.json or its folder; default: shared/assets
# beside the checkout), WHEELS (a folder of wheels to install first into a temporary site folder, e.g. the
# jsonschema wheels the GPU image lacks: jsonschema, jsonschema-specifications, referencing, rpds-py),
# SMOKE=1 (the same three parts on the CPU with --tiny and small sizes: checks the script, measures nothing).
set -uo pipefail
ROOT=${1:?usage: bash bench/run_issue15.sh OUT_DIR}
mkdir -p "$ROOT" && ROOT=$(cd "$ROOT" && pwd) || exit 2
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
LOG="$ROOT/log.txt"
: > "$LOG"
CONFIG_ARGS=()
if [ -n "${CONFIG:-}" ]; then CONFIG_ARGS=(--config "$CONFIG"); fi
if [ -n "${WHEELS:-}" ]; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    >> "$LOG" 2>&1 || { echo "installing $WHEELS/*.whl failed (see $LOG)"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:$SITE"
fi
# fail in seconds, not after minutes, when the image lacks something the benchmarks import
if ! "$PY" -c 'import sys; sys.path.insert(0, "bench")
import torch, transformers, bench_update, bench_reuse, bench_step
print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>&1 | tee -a "$LOG"; then
  echo "the benchmarks cannot be imported (above); carry the missing wheels and pass WHEELS=DIR"; exit 2
fi
rc=0
part() {  # part NAME LIMIT_S SCRIPT ARGS...: bench/SCRIPT.py on cuda, its table as $ROOT/NAME.{txt,json}
  local name=$1 limit=$2 script=$3 tmp status
  shift 3
  tmp=$(mktemp -d)
  echo "=== $name: $script.py $* (limit ${limit}s, start $(date -u +%H:%M:%S)) ===" | tee -a "$LOG"
  OUT="$tmp" timeout -k 10 "$limit" "$PY" "bench/$script.py" "${DEVICE_ARGS[@]}" "${CONFIG_ARGS[@]}" "$@" >> "$LOG" 2>&1
  status=$?
  for ext in txt json; do
    if [ -f "$tmp/$script.$ext" ]; then mv "$tmp/$script.$ext" "$ROOT/$name.$ext"; fi
  done
  rm -rf "$tmp"
  echo "=== $name: exit $status (end $(date -u +%H:%M:%S)) ===" | tee -a "$LOG"
  if [ "$status" -ne 0 ]; then rc=$status; tail -n 15 "$LOG"; fi
}
if [ -n "${SMOKE:-}" ]; then
  DEVICE_ARGS=(--device cpu --tiny)
  part update 600 bench_update --micro 4 --dtypes bf16 fp32 --gc off on --rows 8 --group 4 --length 64 --prompt 16 \
    --segment 8
  part reuse 300 bench_reuse --prompts 2 --group 3 --ctx 48 --steps 4 --episodes 3 --turns 3 --turn-tokens 4 --obs-max 40
  part step 600 bench_step --envs coding-tools --steps 1 --micro 2 --prompts 2 --group 3
else
  DEVICE_ARGS=(--device cuda)
  # limits from the H200 run of 2026-12-01 (results/bench/issue15_h200_2026-12-01): update's first 3 rows took
  # 130 s (4 rows: ~175 s), reuse's first 3 rows 60 s (4: ~75 s), step 87 s
  part update 210 bench_update --micro 8 --dtypes bf16 fp32 --gc off on
  part reuse 100 bench_reuse
  part step 120 bench_step --envs coding-tools --steps 3 --micro 4
fi
echo "=== tables ==="
for name in update reuse step; do
  if [ -f "$ROOT/$name.txt" ]; then cat "$ROOT/$name.txt"; else echo "$name: no table (see log.txt)"; fi
done
exit $rc
