#!/usr/bin/env bash
# Issue 15's GPU figures in one call of at most 9 minutes on an H200: the parts end by DEADLINE_S - 15 s from the
# start (default 510 s; each part has its own limit, cut to fit), then the summary (limit 30 s, ~10 s):
#   rollout  bench_rollout.py: FastSampler vs plain generate, batches 64 / 128 / 256 (generate at 128 only),
#            decode-only fraction of the bandwidth bound (target 1)
#   ragged   bench_ragged.py:  rows stopping at ragged lengths (compaction) vs a batch kept full (target 4)
#   update   bench_update.py:  packed vs full-logits GRPO update, bf16 and fp32, checkpointing off and on, then
#            packed rows with token-budget microbatches (RLConfig.micro_tokens), the last one with the decoder
#            layers compiled (compile_decoder_layers; cut at the part's limit if the compile is slow) (target 5)
#   reuse    bench_reuse.py:   G=8 groups (shared prefill) and 6-turn episodes (kept KV) (targets 2, 3)
#   step     bench_step.py:    2 full coding-tools train steps (8 prompts x 8, fast sampler, micro 4) in bf16, then
#            2 in fp32, with the generate / update memory peaks (targets 6, 7)
#   summary  issue15_summary.py: every target's figure, threshold, ratio and met/short from the parts' JSON
#
#   bash bench/run_issue15.sh OUT_DIR
#
# OUT_DIR gets 13 files: log.txt (everything the benchmarks printed, tracebacks included), <part>.txt /
# <part>.json for the five parts (each table row is written as soon as it is measured, so a part stopped at its
# limit keeps the rows it finished), summary.txt / summary.json (written even when parts fail). The tables
# and the summary are also printed at the end.
# Environment: PYTHON (default python3), CONFIG (Qwen3-0.6B config.json or its folder; default: shared/assets
# beside the checkout), WHEELS (a folder of wheels to install first into a temporary site folder, e.g. the
# jsonschema wheels the GPU image lacks: jsonschema, jsonschema-specifications, referencing, rpds-py),
# DEADLINE_S (default 510, see above), PARTS (e.g. "update step": only those parts, the others' files in OUT_DIR
# are left as they are and the summary reads them all), EXTRA_LIMIT_S (seconds added to every part's own limit,
# e.g. with PARTS; the deadline still applies), SMOKE=1 (the same parts on the CPU with --tiny and small sizes, no
# deadline: checks the script, measures nothing; ~6 minutes on 2 shared cores), DECODE_ATTENTION (FastSampler
# decode_attention values for the rollout part, one row each per batch, e.g. "matmul sdpa"; default "matmul";
# each value adds about the part's time again, so raise EXTRA_LIMIT_S or run with PARTS=rollout).
set -uo pipefail
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-510}))  # parts end by DEADLINE - 15 s; the summary follows
ROOT=${1:?usage: bash bench/run_issue15.sh OUT_DIR}
mkdir -p "$ROOT" && ROOT=$(cd "$ROOT" && pwd) || exit 2
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
LOG="$ROOT/log.txt"
if [ -n "${PARTS:-}" ]; then echo "=== PARTS=$PARTS $(date -u) ===" >> "$LOG"; else : > "$LOG"; fi
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
import torch, transformers, bench_rollout, bench_ragged, bench_update, bench_reuse, bench_step, issue15_summary
print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>&1 | tee -a "$LOG"; then
  echo "the benchmarks cannot be imported (above); carry the missing wheels and pass WHEELS=DIR"; exit 2
fi
rc=0
part() {  # part NAME LIMIT_S SCRIPT ARGS...: bench/SCRIPT.py on cuda, its table as $ROOT/NAME.{txt,json}
  local name=$1 limit=$(($2 + ${EXTRA_LIMIT_S:-0})) script=$3 tmp status
  shift 3
  if [ -n "${PARTS:-}" ] && [[ " $PARTS " != *" $name "* ]]; then return; fi
  if [ -z "${SMOKE:-}" ]; then  # keep 15 s for the summary after the last part
    local left=$((DEADLINE - 15 - $(date +%s)))
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -lt 10 ]; then echo "=== $name: skipped (deadline) ===" | tee -a "$LOG"; rc=124; return; fi
  fi
  tmp=$(mktemp -d)
  echo "=== $name: $script.py $* (limit ${limit}s, start $(date -u +%H:%M:%S)) ===" | tee -a "$LOG"
  OUT="$tmp" timeout -k 5 "$limit" "$PY" "bench/$script.py" "${DEVICE_ARGS[@]}" "${CONFIG_ARGS[@]}" "$@" >> "$LOG" 2>&1
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
  part rollout 300 bench_rollout --batches 3 5 --hf-batches 5 --ctx 40 --steps 6 --repeats 1 \
    --decode-attention ${DECODE_ATTENTION:-matmul}
  part ragged 300 bench_ragged --batch 6 --ctx 40 --max-new 12 --repeats 1
  part update 600 bench_update --micro 4 --dtypes bf16 fp32 --gc off on --methods packed naive --rows 8 --group 4 \
    --length 64 --prompt 16 --segment 8 --extra-rows bf16:off:200 fp32:off:0:compile
  part reuse 300 bench_reuse --prompts 2 --group 3 --ctx 48 --steps 4 --episodes 3 --turns 3 --turn-tokens 4 --obs-max 40
  part step 900 bench_step --envs coding-tools --dtypes bf16 fp32 --steps 1 --micro 2 --prompts 2 --group 3
else
  DEVICE_ARGS=(--device cuda)
  # limits from the H200 runs of 2026-12-01 (results/bench/issue15_h200_2026-12-01): update 4 rows x 3 methods
  # ~175 s (here 2 methods + 3 extra rows), reuse ~75 s, 3 coding-tools steps ~90 s incl. capture;
  # rollout at 128 steps (plain generate at batch 128 only) and ragged are estimates (no H200 run yet)
  part rollout 70 bench_rollout --batches 64 256 128 --hf-batches 128 --steps 128 --repeats 1 \
    --decode-attention ${DECODE_ATTENTION:-matmul}
  part ragged 60 bench_ragged --batch 128 --max-new 256 --repeats 1
  part update 145 bench_update --micro 8 --dtypes bf16 fp32 --gc off on --methods packed naive \
    --extra-rows bf16:off:16384 bf16:off:32768 bf16:off:32768:compile
  part reuse 85 bench_reuse
  part step 130 bench_step --envs coding-tools --dtypes bf16 fp32 --steps 2 --micro 4
fi
echo "=== tables ==="
for name in rollout ragged update reuse step; do
  if [ -f "$ROOT/$name.txt" ]; then cat "$ROOT/$name.txt"; else echo "$name: no table (see log.txt)"; fi
done
echo "=== summary ===" | tee -a "$LOG"
timeout -k 5 30 "$PY" bench/issue15_summary.py "$ROOT" 2>&1 | tee -a "$LOG"
exit $rc
