#!/usr/bin/env bash
# Issue 15 figures in one GPU call: packed update, KV reuse (groups, turns), the full coding-tools step.
# OUT=$OUT bash bench/run_issue15.sh   (each part has its own time limit; outputs under $OUT/<part>/)
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
ROOT="${OUT:-$(mktemp -d)}"
part() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date -u +%H:%M:%S)) ==="
  mkdir -p "$ROOT/$name"
  OUT="$ROOT/$name" timeout "$limit" "$@" > "$ROOT/$name/log.txt" 2>&1
  echo "exit $?"; grep -v "^\s*File\|^\s\s\s\s" "$ROOT/$name/log.txt" | tail -n 14
}
part update_bf16 150 "$PY" bench/bench_update.py --device cuda --micro 8 --dtypes bf16 --gc off on
part reuse 90 "$PY" bench/bench_reuse.py --device cuda
part step_bf16 120 "$PY" bench/bench_step.py --device cuda --envs coding-tools --steps 3 --micro 4
[ -n "${FP32:-}" ] && part update_fp32 110 "$PY" bench/bench_update.py --device cuda --micro 8 --dtypes fp32 --gc off on --methods packed naive
