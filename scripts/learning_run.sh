#!/usr/bin/env bash
# Issue 7's learning run: a small Qwen3-architecture model (random init, real tokenizer) is warm-started
# by SFT on expert episodes whose edit is picked at random (format and procedure, not the fix), then
# trained with GRPO; held-out pass@1 before/after comes with a paired task-level bootstrap interval.
#
#   bash scripts/learning_run.sh edit-menu   runs/learn-edit-menu
#   bash scripts/learning_run.sh coding-tools runs/learn-coding-tools
#
# Knobs (environment): SEED, SFT_TASKS, SFT_EPOCHS, SFT_LR, RL_STEPS, RL_LR, EVAL_EVERY, DEVICE, SAMPLER, PY.
set -euo pipefail
ENV_NAME=${1:-edit-menu}
OUT_DIR=${2:-runs/learn-$ENV_NAME}
PY=${PY:-python3}
FAMILIES=minmax,range,compare,zero,init      # the write-up's five; the held-out set is 2 of each
DEVICE=${DEVICE:-auto}
mkdir -p "$OUT_DIR"
"$PY" -m agentrl sft --env "$ENV_NAME" --model small-qwen3 --families "$FAMILIES" --random-op \
    --n-tasks "${SFT_TASKS:-600}" --epochs "${SFT_EPOCHS:-6}" --batch 16 --lr "${SFT_LR:-1e-3}" \
    --seed "${SEED:-0}" --device "$DEVICE" --out "$OUT_DIR/sft"
"$PY" -m agentrl train --model "$OUT_DIR/sft" --env "$ENV_NAME" --families "$FAMILIES" \
    --steps "${RL_STEPS:-30}" --lr "${RL_LR:-3e-5}" --eval-n 8 --eval-every "${EVAL_EVERY:-10}" \
    --max-new-tokens "${MAX_NEW_TOKENS:-64}" --gen-batch 64 --micro 16 --sampler "${SAMPLER:-hf}" \
    --seed "${SEED:-0}" --device "$DEVICE" --out "$OUT_DIR/rl"
