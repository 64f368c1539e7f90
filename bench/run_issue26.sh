#!/usr/bin/env bash
# Issue 26's GPU figures, at most 9 minutes per call on an H200 (all parts: two calls with PARTS, bench/README.md): the parts end by DEADLINE_S - 15 s from the
# start (default 540 s; each part has its own limit, cut to fit), then the summary (limit 30 s, ~10 s). Qwen3-0.6B
# (the shared config) unless the part says otherwise; every model has random weights, bf16 unless said:
#   rollout   bench_rollout.py: FastSampler's defaults (on CUDA: triton decode attention, each layer's regions compiled
#             around the eager KV write and attention for decode and prefill alike, q/k/v and gate/up fused; then the
#             matmul attention) vs plain generate, batches 64 / 256 / 128 (generate at 128 only): decode-only fraction
#             of the bandwidth bound, end to end vs generate (item 1), the warm-up call's seconds (compile, capture),
#             the bf16 log-prob check rows (item 4, reported)
#   profile   bench_rollout.py --profile-steps 16: why the decode step at batch 64 (ctx 1024, the first of
#             DECODE_ATTENTION) runs below the bandwidth bound: a 32-step timed row (graphs on), then 16 decode steps
#             under torch.profiler with CUDA graphs off: device ms per decode step by kernel-name bucket (gemm/matmul,
#             attention, elementwise/other) and by code region, wall ms per decode step with graphs off and on, the
#             bound's ms per step, the profiler's top-30 table (profile_profile.txt; figures in profile.json's
#             "profile")
#   rollout_eager   bench_rollout.py --compile-decode off --fuse-projections off: rollout's first-attention rows at 64 /
#             256 / 128 (plain generate at 128) with the layers' own modules run eagerly (the default before
#             2026-12-04: 0.304 / 0.572 of the bound, 8.92x end to end); rollout_unfused: compiled, projections not
#             fused (64 / 256)
#   rollout_flex   the same rows with decode_attention flex (FlexAttention's split-KV decoding kernel, compiled on its
#             own over the read-only cache, between the same compiled regions; 0.159 / 0.115 with the write inside)
#   attention   bench_decode_attention.py: one decode step's attention alone (28 layers' caches, one CUDA graph) per
#             form and Triton tile at 64 / 256, as a fraction of reading the live KV once; attention_ragged: row
#             lengths uniform in [128, 1024] (reported; picks the Triton tile)
#   profile_prefill   bench/profile_prefill.py: where a batch-128 call's prefill (128 x 1024 tokens) spends its time,
#             by kernel, against the GEMMs' and attention's FLOP bounds (the end-to-end figure pays it once per call)
#   logprob   bench_rollout.py --dtype fp32 --check-only: sampler vs plain-forward log-probs in fp32 (item 4)
#   ragged    bench_ragged.py: ragged budgets in [64, 250] with continuous batching (4 x the batch's requests, finished
#             rows' slots taken by the next) and with compaction only, vs a full batch (item 2)
#   update    bench_update.py: 4-row microbatches (the old default) vs full logits, bf16, checkpointing off and on,
#             then 32k-token microbatches with checkpointing (the candidate default that keeps memory low) and
#             RLConfig's default update as it runs on the device (compiled layers on CUDA) (item 5)
#   step      bench_step.py: 2 coding-tools train steps (8 x 8, fast sampler, KV kept in place, micro 4), time and peak
#             (item 3), with the static cache's memory given back during the update (release_kv, CUDA VMM) and kept
#   step_tok  the same step with RLConfig's default update (16,384-token microbatches, checkpointing), with the
#             sampler's default (release_kv vmm on CUDA) and with the cache kept (item 3)
#   kv_release   bench_kv_release.py: milliseconds to make, release and restore a 12.25 GiB cache through CUDA VMM
#             (per tensor and as one buffer) against torch.zeros (reported)
#   rollout_coder05 / rollout_coder15   Qwen2.5-Coder-0.5B / 1.5B (bench/configs/): decode fraction of the bound at
#             64 / 256 (item 6)
#   update_coder05 / update_coder15     their default bf16 update's tokens/s (item 6)
#   step_coder05 / step_coder15         their coding-tools step (8 x 8, bf16): seconds and peak (item 6)
#   summary   issue26_summary.py: every figure, threshold, ratio and met/short from the parts' JSON
#
#   bash bench/run_issue26.sh OUT_DIR
#
# OUT_DIR gets log.txt, <part>.txt / <part>.json per part (rows written as they are measured, so a part stopped at its
# limit keeps the rows it finished; a script's further files SCRIPT_X.txt / .json come as <part>_X.txt / .json, e.g.
# profile_profile.txt) and summary.txt / summary.json (written even when parts fail).
# Environment: PYTHON (default python3), CONFIG (Qwen3-0.6B config.json or its folder; default: shared/assets beside
# the checkout), WHEELS (a folder of wheels to install first into a temporary site folder), DEADLINE_S (default 540),
# PARTS (e.g. "rollout step_coder15": only those parts; the others' files in OUT_DIR are kept and the summary reads
# them all), EXTRA_LIMIT_S (seconds added to every part's limit; the deadline still applies), SMOKE=1 (the same parts
# on the CPU with --tiny and small sizes, no deadline: checks the script, measures nothing; ~10 minutes on 2 shared
# cores), DECODE_ATTENTION (the rollout parts' FastSampler decode_attention values, default "sdpa matmul" for Qwen3
# and the first of them for the real models).
set -uo pipefail
START=$(date +%s)
DEADLINE=$((START + ${DEADLINE_S:-540}))  # parts end by DEADLINE - 15 s; the summary follows
ROOT=${1:?usage: bash bench/run_issue26.sh OUT_DIR}
mkdir -p "$ROOT" && ROOT=$(cd "$ROOT" && pwd) || exit 2
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
LOG="$ROOT/log.txt"
ATT=(${DECODE_ATTENTION:-default matmul})  # "default": FastSampler's on the device (triton on CUDA where it runs)
if [ -n "${PARTS:-}" ]; then echo "=== PARTS=$PARTS $(date -u) ===" >> "$LOG"; else : > "$LOG"; fi
QWEN3=()
if [ -n "${CONFIG:-}" ]; then QWEN3=(--config "$CONFIG"); fi
C05=(--config qwen2.5-coder-0.5b-instruct)
C15=(--config qwen2.5-coder-1.5b-instruct)
if [ -n "${WHEELS:-}" ]; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl \
    >> "$LOG" 2>&1 || { echo "installing $WHEELS/*.whl failed (see $LOG)"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:$SITE"
fi
# fail in seconds, not after minutes, when the image lacks something the benchmarks import
if ! "$PY" -c 'import sys; sys.path.insert(0, "bench")
import torch, transformers, bench_rollout, bench_ragged, bench_update, bench_reuse, bench_step, bench_kv_release, bench_decode_attention, issue26_summary
print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>&1 | tee -a "$LOG"; then
  echo "the benchmarks cannot be imported (above); carry the missing wheels and pass WHEELS=DIR"; exit 2
fi
rc=0
part() {  # part NAME LIMIT_S SCRIPT ARGS...: bench/SCRIPT.py, its table as $ROOT/NAME.{txt,json} (SCRIPT_X.*: NAME_X.*)
  local name=$1 limit=$(($2 + ${EXTRA_LIMIT_S:-0})) script=$3 tmp status f
  shift 3
  if [ -n "${PARTS:-}" ] && [[ " $PARTS " != *" $name "* ]]; then return; fi
  if [ -z "${SMOKE:-}" ]; then  # keep 15 s for the summary after the last part
    local left=$((DEADLINE - 15 - $(date +%s)))
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -lt 10 ]; then echo "=== $name: skipped (deadline) ===" | tee -a "$LOG"; rc=124; return; fi
  fi
  tmp=$(mktemp -d)
  echo "=== $name: $script.py $* (limit ${limit}s, start $(date -u +%H:%M:%S)) ===" | tee -a "$LOG"
  OUT="$tmp" timeout -k 5 "$limit" "$PY" "bench/$script.py" "${DEVICE_ARGS[@]}" "$@" >> "$LOG" 2>&1
  status=$?
  for f in "$tmp/$script".txt "$tmp/$script".json "$tmp/$script"_*.txt "$tmp/$script"_*.json; do
    if [ -f "$f" ]; then f=$(basename "$f"); mv "$tmp/$f" "$ROOT/$name${f#"$script"}"; fi
  done
  rm -rf "$tmp"
  echo "=== $name: exit $status (end $(date -u +%H:%M:%S)) ===" | tee -a "$LOG"
  if [ "$status" -ne 0 ]; then rc=$status; tail -n 15 "$LOG"; fi
}
if [ -n "${SMOKE:-}" ]; then
  DEVICE_ARGS=(--device cpu --tiny)
  export TRITON_INTERPRET=1  # the Triton kernels' only way to run on the CPU (chosen before triton's first import)
  ROLL=(--batches 3 5 --ctx 40 --steps 6 --repeats 1)
  part rollout 300 bench_rollout "${QWEN3[@]}" "${ROLL[@]}" --hf-batches 5 --decode-attention "${ATT[@]}"
  part profile 300 bench_rollout "${QWEN3[@]}" --batches 3 --ctx 40 --steps 6 --repeats 1 --skip-hf --no-check \
    --profile-steps 4 --decode-attention "${ATT[0]}"
  part rollout_eager 300 bench_rollout "${QWEN3[@]}" "${ROLL[@]}" --skip-hf --no-check --compile-decode off \
    --fuse-projections off --decode-attention "${ATT[0]}"
  part rollout_flex 300 bench_rollout "${QWEN3[@]}" "${ROLL[@]}" --skip-hf --no-check --decode-attention flex
  # the Triton kernel in the interpreter (~30 s); its log-prob check takes minutes there, and the CPU tests check
  # the same agreement (tests/rollout/test_fast_sampler_attention.py), so its check is left to the GPU run (the
  # logprob part)
  if "$PY" -c "import triton" 2>/dev/null; then
    part rollout_triton 300 bench_rollout "${QWEN3[@]}" "${ROLL[@]}" --hf-batches 5 --no-check --decode-attention triton
    part attention 300 bench_decode_attention --batches 3 --ctx 40 --steps 8 --layers 2 --iters 2 \
      --forms matmul sdpa triton --tiles 64:3:4 32:2:4
  fi
  part logprob 120 bench_rollout "${QWEN3[@]}" --dtype fp32 --check-only --decode-attention "${ATT[@]}"
  part ragged 300 bench_ragged "${QWEN3[@]}" --batch 6 --ctx 40 --min-new 3 --max-new 12 --repeats 1 --regions
  part update 600 bench_update "${QWEN3[@]}" --dtypes bf16 --gc off on --methods packed naive --rows 8 --group 4 \
    --length 64 --prompt 16 --segment 8 --extra-rows bf16:on:200
  part step 600 bench_step "${QWEN3[@]}" --envs coding-tools --dtypes bf16 --steps 1 --micro 2 --prompts 2 --group 3 \
    --release-kv off allocator
  for m in coder05 coder15; do
    if [ $m = coder05 ]; then C=("${C05[@]}"); else C=("${C15[@]}"); fi
    part rollout_$m 300 bench_rollout "${C[@]}" "${ROLL[@]}" --skip-hf --no-check --decode-attention "${ATT[0]}"
    part update_$m 300 bench_update "${C[@]}" --dtypes bf16 --gc off --methods packed --rows 8 --group 4 --length 64 \
      --prompt 16 --segment 8
    part step_$m 600 bench_step "${C[@]}" --envs coding-tools --dtypes bf16 --steps 1 --micro 2 --prompts 2 --group 3
  done
else
  DEVICE_ARGS=(--device cuda)
  # limits: estimates from the issue-15 H200 runs (results/bench/issue15_h200_2026-12-01*): rollout ~35 s per
  # attention at 128 steps, update ~40 s per (dtype, gc) pair of methods, 2 coding-tools steps + setup ~45 s
  part rollout 150 bench_rollout "${QWEN3[@]}" --batches 64 256 128 --hf-batches 128 --steps 128 --repeats 1 \
    --decode-attention "${ATT[@]}"
  # profile: start and model (~10 s: the logprob part took 18 s), one 32-step row (graphs on) of the first attention,
  # then 3 eager calls of 17 tokens and the profiler's post-processing (16 steps x 28 layers of ops and kernels): an
  # estimate, not yet run on the H200; the file's figures before the profiled call are written first, so a stop at
  # the limit keeps them. With it the parts' limits add up to 580 s, past the deadline: a full run may see its
  # last part cut; PARTS=profile runs it alone
  part profile 60 bench_rollout "${QWEN3[@]}" --batches 64 --skip-hf --no-check --steps 32 --repeats 1 \
    --profile-steps 16 --decode-attention "${ATT[0]}"
  # profile_prefill: the prefill of rollout's batch-128 call (one 1-token call) by kernel, against its FLOP bounds
  part profile_prefill 60 profile_prefill "${QWEN3[@]}" --batch 128 --ctx 1024
  # rollout_eager: the layers' own modules, eager (FastSampler's default before 2026-12-04), the same rows as rollout's
  # first attention at 64 / 256 / 128 with plain generate at 128; rollout_unfused: compiled regions over the modules
  part rollout_eager 120 bench_rollout "${QWEN3[@]}" --batches 64 256 128 --hf-batches 128 --no-check --steps 128 \
    --repeats 1 --compile-decode off --fuse-projections off --decode-attention "${ATT[0]}"
  part rollout_unfused 90 bench_rollout "${QWEN3[@]}" --batches 64 256 --skip-hf --no-check --steps 128 \
    --repeats 1 --fuse-projections off --decode-attention "${ATT[0]}"
  # rollout_flex: FlexAttention's decoding kernel (split-KV, GQA, row lengths as a score mod), compiled on its own
  part rollout_flex 120 bench_rollout "${QWEN3[@]}" --batches 64 256 --skip-hf --no-check --steps 128 --repeats 1 \
    --decode-attention flex
  part logprob 60 bench_rollout "${QWEN3[@]}" --dtype fp32 --check-only --decode-attention "${ATT[@]}"
  # the attention alone, every form and four Triton tiles (flex compiles: ~30 s); then ragged rows
  part attention 90 bench_decode_attention --batches 64 256 --forms matmul sdpa flex triton \
    --tiles 64:3:4 64:2:4 128:2:8 32:4:4
  part attention_ragged 60 bench_decode_attention --batches 64 256 --ragged --forms sdpa triton \
    --tiles 64:3:4 64:2:4 128:2:8 32:4:4
  # 3 timed calls per row, their median: one call's figure spread 0.856-0.933 across sessions (2026-12-04)
  part ragged 150 bench_ragged "${QWEN3[@]}" --batch 128 --min-new 64 --max-new 250 --repeats 3 --regions
  # extra rows: the token-budget candidates for item 5's default (16k without and with checkpointing, 32k with; the
  # fourth session measured only 32k with checkpointing: 41.0k tokens/s, 2.75x full logits, but 1.48x its memory);
  # `default`: RLConfig's default update as it runs here (compiled layers since 2026-12-04, activation offloading
  # since the fifteenth session: bf16:on:16384:compile:offload; its warm-up pays the ~25 s compile); then item 5's
  # candidates, compiled (each ~5-10 s with inductor's cache warm): the default without offloading (the fourteenth
  # session's default), 24k-token microbatches with offloading (larger microbatches in the memory offloading frees),
  # and the attention in 2 head groups (0.299x, but 5-10% slower); 3 timed updates per row, their median (one update
  # of ~0.8 s had varied by 15% between sessions)
  part update 240 bench_update "${QWEN3[@]}" --dtypes bf16 --gc off on --methods packed naive --repeats 3 \
    --extra-rows default bf16:off:16384 bf16:on:16384 bf16:on:32768 bf16:on:16384:compile \
    bf16:on:24576:compile:offload bf16:on:16384:compile:hg2
  # step: the static KV cache given back during the update (release_kv vmm, the FastSampler's default on CUDA: to the
  # device at the same addresses; allocator: to PyTorch's cache) and kept (off); step_tok: RLConfig's default update
  # (16k-token microbatches) with the sampler's default and with the cache kept
  part step 190 bench_step "${QWEN3[@]}" --envs coding-tools --dtypes bf16 --steps 2 --micro 4 \
    --release-kv off vmm allocator
  part step_tok 150 bench_step "${QWEN3[@]}" --envs coding-tools --dtypes bf16 --steps 2 --micro-tokens 16384 \
    --release-kv default off
  # kv_release: the driver's cost of giving the 12.25 GiB cache back and taking it again (release_kv vmm)
  part kv_release 40 bench_kv_release
  part rollout_coder05 60 bench_rollout "${C05[@]}" --batches 64 256 --skip-hf --steps 128 --repeats 1 --no-check \
    --decode-attention "${ATT[0]}"
  part rollout_coder15 60 bench_rollout "${C15[@]}" --batches 64 256 --skip-hf --steps 128 --repeats 1 --no-check \
    --decode-attention "${ATT[0]}"
  part update_coder05 35 bench_update "${C05[@]}" --dtypes bf16 --gc off --methods packed
  part update_coder15 40 bench_update "${C15[@]}" --dtypes bf16 --gc off --methods packed
  part step_coder05 75 bench_step "${C05[@]}" --envs coding-tools --dtypes bf16 --steps 2 --micro 4
  part step_coder15 90 bench_step "${C15[@]}" --envs coding-tools --dtypes bf16 --steps 2 --micro 4
fi
echo "=== tables ==="
for f in "$ROOT"/*.txt; do
  case $(basename "$f") in log.txt|summary.txt) ;; *) cat "$f";; esac
done
echo "=== summary ===" | tee -a "$LOG"
timeout -k 5 30 "$PY" bench/issue26_summary.py "$ROOT" 2>&1 | tee -a "$LOG"
exit $rc
