#!/usr/bin/env bash
# The GPU machine's side of a labs session (docs/gpu.md): two device calls after the parts have been sent.
#
#   bash scripts/device_labs.sh launch PARTS_DIR BUNDLE LABS_S RUN...   # unpack, convert, bench, start the labs
#   bash scripts/device_labs.sh collect WAIT_S                          # wait, then pack each lab into $OUT
#   bash scripts/device_labs.sh bench DEADLINE_S PART...                # issue 26's parts on the launched machine
#
# launch: copies the repository to /tmp/repo (a later call re-lays the work tree under a detached run), joins
# and unpacks BUNDLE from PARTS_DIR (scripts/device_unpack.sh: wheels into /tmp/site, .xz files decompressed
# into /tmp/dev), converts $MODEL from the GGUF in /tmp/dev into /tmp/models in the background while $BENCH (a
# command, optional) uses the GPU, then starts `scripts/coder_labs.sh /tmp/labs RUN...` detached (setsid) with
# a deadline LABS_S seconds after the conversion, and prints the labs' first lines 45 s later.
# collect: waits until the labs end or WAIT_S seconds pass, prints each log's tail and writes one
# <lab>.tgz per lab (results, logs, reports; no weights or checkpoints) plus bench.tgz into $OUT (the device
# tool returns at most 8 files of 16 MiB).
# bench: after a launch, on the same warm machine, bench/run_issue26.sh with PARTS="PART..." (the Qwen3 config and
# tokenizer from the bundle's assets/, the converted models in /tmp/models) into /tmp/bench/i26, then bench.tgz
# into $OUT. Give it the machine alone: a lab beside it shares the GPU, so its figures would not be the GPU's.
# Environment: MODEL (default qwen2.5-coder-1.5b-instruct), CARRY (a carried folder with data/, words and
# assets/; default .carry), BENCH, and coder_labs.sh's knobs (PARALLEL, TRAIN_S and TRL_S are derived from
# LABS_S unless set).
set -uo pipefail
cmd=${1:-}
shift || true
MODEL=${MODEL:-qwen2.5-coder-1.5b-instruct}
CARRY=${CARRY:-.carry}
env_for_labs() {
  export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=/tmp/site:/tmp/repo/src PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 AGENTRL_DATA=/tmp/repo/$CARRY/data \
    AGENTRL_WORDS=/tmp/repo/$CARRY/words AGENTRL_ASSETS=/tmp/dev/assets AGENTRL_MODELS=/tmp/models AGENTRL_OPENCODE=/tmp/dev/opencode \
    TRL_EXPERIMENTAL_SILENCE=1 WANDB_MODE=disabled WANDB_SILENT=true GRADIO_ANALYTICS_ENABLED=False DO_NOT_TRACK=1
}
case "$cmd" in
  launch)
    parts=${1:?usage: device_labs.sh launch PARTS_DIR BUNDLE LABS_S RUN...}; bundle=${2:?bundle name}
    labs_s=${3:?LABS_S}; shift 3
    (( $# )) || { echo "device_labs.sh launch: name at least one coder_labs.sh run" >&2; exit 2; }
    T0=$(date +%s)
    rm -rf /tmp/repo && mkdir -p /tmp/repo && cp -r . /tmp/repo/ && rm -rf /tmp/repo/.xfer
    mkdir -p /tmp/x && cp "$parts"/* /tmp/x/ 2>/dev/null
    cd /tmp/repo && env_for_labs
    bash scripts/device_unpack.sh /tmp/x "$bundle" /tmp/dev /tmp/site || exit 3
    python3 -c "import agentrl, trl, openenv, fastapi, gguf, jsonschema" || echo "device_labs.sh: an import failed (above)"
    (python3 -m agentrl assets fetch "$MODEL" --from /tmp/dev > /tmp/conv.log 2>&1; echo "conv rc=$?" >> /tmp/conv.log) &
    conv=$!
    mkdir -p /tmp/bench
    [ -n "${BENCH:-}" ] && { bash -c "$BENCH" > /tmp/bench/bench.log 2>&1; echo "bench rc=$? at $(( $(date +%s) - T0 ))s"; }
    wait "$conv"; tail -n 2 /tmp/conv.log
    dl=$(( $(date +%s) + labs_s ))
    echo "$dl" > /tmp/labs_deadline
    setsid env MODEL="$MODEL" PY=python3 DEADLINE="$dl" TRAIN_S="${TRAIN_S:-$(( labs_s / 2 ))}" \
      TRL_S="${TRL_S:-$(( labs_s * 2 / 5 ))}" bash scripts/coder_labs.sh /tmp/labs "$@" > /tmp/labs.log 2>&1 < /dev/null &
    sleep 45
    for f in /tmp/labs/*.log; do echo "== $f"; tail -n 3 "$f"; done
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    echo "launched at $(( $(date +%s) - T0 ))s; deadline in ${labs_s}s"
    ;;
  collect)
    wait_s=${1:?usage: device_labs.sh collect WAIT_S}
    end=$(( $(date +%s) + wait_s ))
    while [ "$(date +%s)" -lt "$end" ] && pgrep -f coder_labs.sh > /dev/null; do sleep 10; done
    echo "labs running: $(pgrep -fc coder_labs.sh); deadline in $(( $(cat /tmp/labs_deadline 2>/dev/null || date +%s) - $(date +%s) ))s"
    for f in /tmp/labs/*.log /tmp/labs/*/*.log; do echo "== $f"; tail -n 4 "$f" | cut -c1-300; done 2>/dev/null
    cd /tmp || exit 1
    for d in labs/*/; do
      n=$(basename "$d")
      tar czf "$OUT/$n.tgz" --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' --exclude='*/checkpoints/*' \
        --exclude='*/model/*' --exclude='tokenizer.json' "$d" "labs/$n.log" 2>/dev/null
    done
    tar czf "$OUT/bench.tgz" bench conv.log labs.log 2>/dev/null
    ls -la "$OUT"
    ;;
  bench)
    deadline_s=${1:?usage: device_labs.sh bench DEADLINE_S PART...}; shift
    (( $# )) || { echo "device_labs.sh bench: name at least one part of bench/run_issue26.sh" >&2; exit 2; }
    pgrep -f coder_labs.sh > /dev/null && echo "device_labs.sh bench: labs are running beside it (shared GPU)"
    cd /tmp/repo 2>/dev/null || { echo "device_labs.sh bench: no /tmp/repo; run launch first" >&2; exit 3; }
    env_for_labs
    DEADLINE_S="$deadline_s" PARTS="$*" CONFIG=/tmp/dev/assets/qwen3-0.6b-config bash bench/run_issue26.sh /tmp/bench/i26 \
      > /tmp/bench/i26-parts.log 2>&1
    echo "run_issue26.sh rc=$?"; tail -n 45 /tmp/bench/i26-parts.log | cut -c1-250
    cd /tmp && tar czf "$OUT/bench.tgz" bench conv.log 2>/dev/null; ls -la "$OUT"
    ;;
  *) echo "usage: device_labs.sh launch PARTS_DIR BUNDLE LABS_S RUN... | collect WAIT_S | bench DEADLINE_S PART..." >&2
     exit 2 ;;
esac
