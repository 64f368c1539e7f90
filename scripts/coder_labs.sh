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
# SFT on bug-fix experts, then GRPO on MBPP, scored on its 257 test problems), trl-mbpp (the white-box lab through TRL:
# GRPOTrainer with agentrl's environment_factory adapter against `agentrl serve --env python-session --tasks mbpp`, the
# fixed 64-problem eval curve with its trend, then the base and trained models scored in one pass on all 257 test
# problems), opencode (SFT through opencode itself, then asynchronous GRPO with the untouched opencode harness
# per episode). The runs named go in parallel on one GPU; each writes
# OUT_ROOT/<run>-s<SEED>/{sft,rl}/ and OUT_ROOT/<run>-s<SEED>.log.
# Knobs (environment): MODEL, SEEDS (space-separated, default "0"), DEVICE (default cuda), PY, STEPS (default 40),
# TRAIN_S (seconds of GRPO steps per run: `train --max-train-s`, the evaluation after still runs; default 300),
# DEADLINE (epoch seconds by which every command must have ended; a killed `train` still writes its results),
# PARALLEL (runs at a time, default 3; the next named run starts when one ends),
# TRL_S (seconds of TRL training steps, default TRAIN_S), OC_SFT_TASKS (opencode expert episodes, default 64),
# OC_PROMPTS (opencode tasks a GRPO step, 8 episodes each, default 4: more steadies the reward curve, each step longer),
# TRL_FLAGS (extra flags of examples/trl_openenv_whitebox.py, default --bf16; --use-cpu on a CPU), TRL_TRAIN / TRL_EVAL
# (TRL's training problems and fixed eval set, default 170 / 64), MBPP_EVAL_SIZE (the one-pass scoring, default 257),
# TRL_WARM (auto | 0 | 1, below), SCORE_RAW (1: score the raw model too in the 257 pass), WORDLE_FLAGS (default --max-turns 10 --shaped-reward).
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
  timeout "$(left)" "$PY" -m agentrl sft --model "$M" --env "$env" --n-tasks 192 --epochs 2 --lr 2e-5 --batch 16 --gradient-checkpointing \
    --micro 8 --max-tokens 16384 --seed "$seed" --device "$DEVICE" --out "$out" "$@"
}

grpo() {  # grpo SEED MODEL ENV OUT [extra args]: 8 prompts x 8 episodes a step, lr 1e-6, fp32, fast sampler
  # The training budget is TRAIN_S, cut to leave GRPO_RESERVE_S (default 200) before DEADLINE for the model's
  # load, both evaluations and the last step's overrun: an opencode run whose SFT took longer than planned was
  # killed at the deadline after its final evaluation, before its report (results/coder/opencode-1.5b-graded)
  local seed=$1 model=$2 env=$3 out=$4 budget
  shift 4
  budget=$(( $(left) - ${GRPO_RESERVE_S:-200} ))
  (( budget < TRAIN_S )) && echo "grpo: training budget cut from TRAIN_S=$TRAIN_S to ${budget}s (deadline)" >&2
  (( budget > TRAIN_S )) && budget=$TRAIN_S
  (( budget < 30 )) && budget=30
  timeout "$(left)" "$PY" -m agentrl train --model "$model" --env "$env" --seed "$seed" --device "$DEVICE" \
    --dtype fp32 --sampler fast --steps "$STEPS" --lr 1e-6 --eval-n 8 --gen-batch 64 --micro 8 \
    --max-train-s "$budget" --out "$out" "$@"
}

run_tools() { sft "$1" coding-tools "$2/sft" --random-op --families "$WRITEUP" && grpo "$1" "$2/sft" coding-tools "$2/rl" --families "$WRITEUP" --max-new-tokens 256; }
run_tools_cold() { grpo "$1" "$M" coding-tools "$2/rl" --families "$WRITEUP" --max-new-tokens 256; }
run_edit_menu() { sft "$1" edit-menu "$2/sft" --random-op --families "$WRITEUP" && grpo "$1" "$2/sft" edit-menu "$2/rl" --families "$WRITEUP" --max-new-tokens 128; }
run_transfer() {
  sft "$1" coding-tools "$2/sft" --random-op --families "$SEEN" &&
    grpo "$1" "$2/sft" coding-tools "$2/rl" --families "$SEEN" --eval-families "$WRITEUP,$UNSEEN" --max-new-tokens 256
}
run_wordle() {  # experts: random guesses consistent with the feedback; held out: 48 words of the held-out split.
  # The 1.5B after SFT solved none (binary reward: every group all 0, no update in 40 steps; 1.7 of its 6 turns went
  # to non-words): so 10 turns for 6 guesses and the shaped reward (WORDLE_FLAGS to change; pass@1 counts solved)
  sft "$1" wordle "$2/sft" --tasks wordle --dtype bf16 --max-tokens 4096 &&
    grpo "$1" "$2/sft" wordle "$2/rl" --tasks wordle --eval-size 48 --eval-n 4 --max-new-tokens 64 \
      ${WORDLE_FLAGS---max-turns 10 --shaped-reward}
}
run_mbpp() {  # the raw model answers MBPP in prose and never calls run_python: warm start on the python-session
  # expert (bug-fix tasks: write the function, run a test), then GRPO on MBPP's 170 train problems, all 257 test ones
  sft "$1" python-session "$2/sft" &&
    grpo "$1" "$2/sft" python-session "$2/rl" --tasks mbpp --train-size 0 --eval-size 257 --eval-n 1 --max-turns 3 \
      --max-new-tokens 256
}

serve() {  # serve PORT LOG [args]: an `agentrl serve` in the background, waits for /health; prints its pid
  local port=$1 log=$2
  shift 2
  "$PY" -m agentrl serve --host 127.0.0.1 --port "$port" "$@" > "$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do
    "$PY" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null \
      && { echo "$pid"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  echo "agentrl serve on port $port did not come up (see $log)" >&2
  return 1
}

tool_rate() {  # tool_rate RUN_DIR STAT: the first evaluation's mean of a tool statistic per episode
  "$PY" -c "import json,sys; e=json.load(open(sys.argv[1]+'/results.json'))['evaluations'][0]; \
print(e['tool_stats'].get(sys.argv[2], 0.0))" "$1" "$2" 2>/dev/null || echo 0
}

run_trl_mbpp() {  # TRL drives the loop; the environment owns the reward; bf16 for the one-pass scoring
  # TRL_WARM: auto (default: probe the raw model on 32 MBPP problems; if it runs fewer than 0.3 run_python cells per
  # episode, warm-start on the python-session expert first), 0 (never), 1 (always)
  local seed=$1 d=$2 base start ptrain peval pa pb warm=${TRL_WARM:-auto} cells
  base=${MODEL_PATH:-$("$PY" -c "from agentrl.models.pretrained import models_cache_dir as c; print(c() / '$M')")}
  start=$base
  if [ "$warm" = auto ]; then
    timeout "$(left)" "$PY" -m agentrl eval --model "$base" --env python-session --tasks mbpp --eval-size 32 --eval-n 1 \
      --max-turns 2 --max-new-tokens 384 --sampler fast --dtype bf16 --device "$DEVICE" --seed "$seed" --out "$d/probe"
    cells=$(tool_rate "$d/probe" cells)
    warm=$("$PY" -c "print(int(float('$cells') < 0.3))")
    echo "trl-mbpp: the raw model runs $cells run_python cells per episode -> warm start: $warm"
  fi
  if [ "$warm" = 1 ]; then
    sft "$seed" python-session "$d/sft" --model "$base" --dtype bf16 --max-tokens 4096 || return
    start=$d/sft
  fi
  ptrain=$(( 8100 + seed * 2 )); peval=$(( 8101 + seed * 2 ))
  pa=$(serve "$ptrain" "$d/serve-train.log" --env python-session --tasks mbpp --max-concurrent-envs 160) || return
  pb=$(serve "$peval" "$d/serve-eval.log" --env python-session --tasks mbpp --eval-size "${MBPP_EVAL_SIZE:-257}" \
    --max-concurrent-envs 160) \
    || { kill "$pa"; return 1; }
  timeout "$(left)" "$PY" examples/trl_openenv_whitebox.py --model "$start" --env-url "http://127.0.0.1:$ptrain" \
    --seed "$seed" --dataset-size "${TRL_TRAIN:-170}" --eval-size "${TRL_EVAL:-64}" --eval-first --eval-steps "${TRL_EVAL_STEPS:-3}" --max-train-s "${TRL_S:-$TRAIN_S}" --per-device-eval-batch-size 64 \
    --per-device-train-batch-size 4 --gradient-accumulation-steps 4 \
    --max-completion-length "${TRL_COMPLETION:-1024}" --learning-rate "${TRL_LR:-1e-6}" ${TRL_FLAGS---bf16} --output-dir "$d/trl"
  local models=()  # SCORE_RAW=0: leave the raw model out of the one-pass scoring when a warm start is scored
  { [ "${SCORE_RAW:-1}" = 1 ] || [ "$start" = "$base" ]; } && models+=("$base")
  [ "$start" != "$base" ] && models+=("$start")
  timeout "$(left)" "$PY" -m agentrl eval --env-url "http://127.0.0.1:$peval" --models "${models[@]}" "$d/trl" --eval-n 1 \
    --concurrency 160 --gen-batch 160 --dtype bf16 --device "$DEVICE" --max-new-tokens 512 --seed "$seed" \
    --out "$d/eval257"
  kill "$pa" "$pb" 2>/dev/null
  wait "$pa" "$pb" 2>/dev/null
  return 0
}

run_opencode() {  # the black box: expert rows through opencode itself, then async GRPO, opencode per episode.
  # --tf32: in full fp32 an opencode model call took 8.8 s, nearly all of it the prefill of its ~4.7k-token
  # context for 32 episodes at once on CUDA's fp32 (non-tensor-core) path; 9 steps in 670 s, no reward rise
  # (results/coder/opencode-1.5b). TF32 tensor cores keep fp32 weights and AdamW state.
  # Checkpointing and 8192-token microbatches: without them the 1.5B's fp32 update of two 8k-token rows took the
  # process to 108 GB beside the fast sampler and ran out of memory in step 1 (results/coder/opencode-1.5b-oom)
  local seed=$1 d=$2
  timeout "$(left)" "$PY" -m agentrl sft --model "$M" --env coding-tools --agent opencode --random-op --gradient-checkpointing \
    --families "$WRITEUP" --n-tasks "${OC_SFT_TASKS:-64}" --epochs 2 --lr 2e-5 --batch 16 --micro 4 --max-tokens 8192 \
    --dtype bf16 --seed "$seed" --device "$DEVICE" --out "$d/sft" &&
    grpo "$seed" "$d/sft" coding-tools "$d/rl" --agent opencode --async-rollouts --max-staleness 1 \
      --families "$WRITEUP" --eval-n 4 --prompts-per-step "${OC_PROMPTS:-4}" --group-size 8 --gen-batch 32 --micro 2 \
      --gradient-checkpointing --micro-tokens 8192 --tf32 \
      --max-new-tokens 256 --max-context-tokens 8192 --agent-max-calls 6 --agent-timeout-s 240
}

# runs at a time on the one GPU: three 1.5B runs did not fit an H200; two fp32 1.5B GRPO runs fit only when neither
# is opencode (opencode's async run peaked at 65 GB beside Wordle's 75 GB and ran out of memory in its first update:
# results/coder/opencode-1.5b-oom-shared), so give opencode the GPU alone (PARALLEL=1 or run it by itself)
PARALLEL=${PARALLEL:-3}
for seed in $SEEDS; do
  for run in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n; done
    d=$ROOT/$run-s$seed
    mkdir -p "$d"
    case $run in
      tools) run_tools "$seed" "$d" ;;
      tools-cold) run_tools_cold "$seed" "$d" ;;
      edit-menu) run_edit_menu "$seed" "$d" ;;
      transfer) run_transfer "$seed" "$d" ;;
      wordle) run_wordle "$seed" "$d" ;;
      mbpp) run_mbpp "$seed" "$d" ;;
      trl-mbpp) run_trl_mbpp "$seed" "$d" ;;
      opencode) run_opencode "$seed" "$d" ;;
      *) echo "unknown run $run (tools | tools-cold | edit-menu | transfer | wordle | mbpp | trl-mbpp | opencode)" >&2
         exit 2 ;;
    esac > "$d.log" 2>&1 &
  done
done
wait
for f in "$ROOT"/*.log; do echo "== $f"; tail -n 4 "$f"; done
