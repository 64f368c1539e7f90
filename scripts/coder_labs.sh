#!/usr/bin/env bash
# Issue 22's labs with a real coder model (Qwen2.5-Coder-0.5B-Instruct by default, `agentrl assets fetch NAME`):
# SFT warm start on scripted experts that pick the edit at random from the task's menu (the tool-call format
# and the procedure, not the fix), then GRPO at lr 1e-6 with the fast sampler in fp32; held-out pass@1
# before/after with the paired task-level bootstrap interval (in each run's results.json and report.html).
#
#   bash scripts/coder_labs.sh OUT_ROOT RUN...
#
# RUN: tools (coding-tools, SFT then GRPO), tools-cold (coding-tools GRPO from the raw model, as the write-up
# did), edit-menu (SFT then GRPO), transfer (coding-tools trained on 10 families, held out on 5 of them and
# on 5 families never trained on), wordle (SFT on consistent random guesses, then GRPO), mbpp (python-session
# SFT on bug-fix experts, then GRPO on MBPP, scored on its 257 test problems). The runs named go in parallel on one GPU; each writes
# OUT_ROOT/<run>-s<SEED>/{sft,rl}/ and OUT_ROOT/<run>-s<SEED>.log.
# Knobs (environment): MODEL, SEEDS (space-separated, default "0"), DEVICE (default cuda), PY, STEPS (default 40),
# TRAIN_S (seconds of GRPO steps per run: `train --max-train-s`, the evaluation after still runs; default 300),
# DEADLINE (epoch seconds by which every command must have ended; a killed `train` still writes its results).
set -uo pipefail
ROOT=${1:?usage: coder_labs.sh OUT_ROOT RUN...}
shift
PY=${PY:-python3}
M=${MODEL:-qwen2.5-coder-0.5b-instruct}
DEVICE=${DEVICE:-cuda}
SEEDS=${SEEDS:-0}
STEPS=${STEPS:-40}
TRAIN_S=${TRAIN_S:-300}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 86400 ))}
WRITEUP=minmax,range,compare,zero,init                      # the write-up's five; held out: 2 of each
SEEN=$WRITEUP,slice,operator,sign,early_return,negation       # transfer: trained on these ten
UNSEEN=accumulate,sort,division,case,logic                    # ... and held out on these five as well
mkdir -p "$ROOT"

left() { echo $(( DEADLINE - $(date +%s) > 1 ? DEADLINE - $(date +%s) : 1 )); }

sft() {  # sft SEED ENV OUT [extra args]: 192 expert episodes, 2 epochs, lr 2e-5
  local seed=$1 env=$2 out=$3
  shift 3
  timeout "$(left)" "$PY" -m agentrl sft --model "$M" --env "$env" --n-tasks 192 --epochs 2 --lr 2e-5 --batch 16 \
    --micro 8 --max-tokens 16384 --seed "$seed" --device "$DEVICE" --out "$out" "$@"
}

grpo() {  # grpo SEED MODEL ENV OUT [extra args]: 8 prompts x 8 episodes a step, lr 1e-6, fp32, fast sampler
  local seed=$1 model=$2 env=$3 out=$4
  shift 4
  timeout "$(left)" "$PY" -m agentrl train --model "$model" --env "$env" --seed "$seed" --device "$DEVICE" \
    --dtype fp32 --sampler fast --steps "$STEPS" --lr 1e-6 --eval-n 8 --gen-batch 64 --micro 8 \
    --max-train-s "$TRAIN_S" --out "$out" "$@"
}

run_tools() { sft "$1" coding-tools "$2/sft" --random-op --families "$WRITEUP" && grpo "$1" "$2/sft" coding-tools "$2/rl" --families "$WRITEUP" --max-new-tokens 256; }
run_tools_cold() { grpo "$1" "$M" coding-tools "$2/rl" --families "$WRITEUP" --max-new-tokens 256; }
run_edit_menu() { sft "$1" edit-menu "$2/sft" --random-op --families "$WRITEUP" && grpo "$1" "$2/sft" edit-menu "$2/rl" --families "$WRITEUP" --max-new-tokens 128; }
run_transfer() {
  sft "$1" coding-tools "$2/sft" --random-op --families "$SEEN" &&
    grpo "$1" "$2/sft" coding-tools "$2/rl" --families "$SEEN" --eval-families "$WRITEUP,$UNSEEN" --max-new-tokens 256
}
run_wordle() {  # experts: random guesses consistent with the feedback; held out: 48 words of the held-out split
  sft "$1" wordle "$2/sft" --tasks wordle &&
    grpo "$1" "$2/sft" wordle "$2/rl" --tasks wordle --eval-size 48 --eval-n 4 --max-new-tokens 64
}
run_mbpp() {  # the raw model answers MBPP in prose and never calls run_python: warm start on the python-session
  # expert (bug-fix tasks: write the function, run a test), then GRPO on MBPP's 170 train problems, all 257 test ones
  sft "$1" python-session "$2/sft" &&
    grpo "$1" "$2/sft" python-session "$2/rl" --tasks mbpp --train-size 0 --eval-size 257 --eval-n 1 --max-turns 3 \
      --max-new-tokens 256
}

for seed in $SEEDS; do
  for run in "$@"; do
    d=$ROOT/$run-s$seed
    mkdir -p "$d"
    case $run in
      tools) run_tools "$seed" "$d" ;;
      tools-cold) run_tools_cold "$seed" "$d" ;;
      edit-menu) run_edit_menu "$seed" "$d" ;;
      transfer) run_transfer "$seed" "$d" ;;
      wordle) run_wordle "$seed" "$d" ;;
      mbpp) run_mbpp "$seed" "$d" ;;
      *) echo "unknown run $run (tools | tools-cold | edit-menu | transfer | wordle | mbpp)" >&2; exit 2 ;;
    esac > "$d.log" 2>&1 &
  done
done
wait
for f in "$ROOT"/*.log; do echo "== $f"; tail -n 4 "$f"; done
