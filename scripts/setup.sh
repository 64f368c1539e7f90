#!/usr/bin/env bash
# Installs agentrl into ./.venv on a fresh machine: system packages (bubblewrap for the
# sandbox, wamerican for Wordle, chromium for the HTML report's render test) where we can, the
# CPU torch wheel first, then the project with its test, TRL, tracker and Ray extras.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$SECONDS
stage() { echo "setup [$(( SECONDS - T0 ))s]: $*"; }  # one line per stage, so a quiet minute is explained
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  if ! command -v bwrap >/dev/null || [[ ! -f /usr/share/dict/words ]] || ! command -v chromium >/dev/null; then
    stage "system packages: bubblewrap (sandbox), wamerican (Wordle words), chromium (report test) with apt-get"
    apt-get update -qq >/dev/null 2>&1 || true
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap wamerican) >/dev/null 2>&1 \
      || echo "setup: could not apt-get install bubblewrap/wamerican; the sandbox falls back to rlimits only" >&2
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
      || echo "setup: could not apt-get install chromium; the HTML report's browser test will skip" >&2
  fi
fi
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || { stage "virtual environment ./.venv ($("$PY" --version 2>&1))"; "$PY" -m venv .venv; }
# torch first: the pinned CPU wheel lies on this machine's disk; an unpinned torch would pull a CUDA build.
.venv/bin/python -c "import torch" 2>/dev/null || { stage "torch 2.13.0 (CPU wheel)"; .venv/bin/pip install -q "torch==2.13.0"; }
stage "agentrl (editable) with its extras test, trl, trackers, ray: pip, a few minutes on a fresh machine"
.venv/bin/pip install -q -e ".[test,trl,trackers,ray]"   # trl: TRL + OpenEnv; trackers: --report-to; ray: agentrl.scale
# opencode, the black-box agent of `agentrl train --agent opencode` (pinned; npm ships its platform binary
# as the optional dependency opencode-<os>-<arch>). Optional: without npm everything else still works.
OPENCODE_VERSION=1.18.33
if command -v npm >/dev/null; then
  if [[ "$(.venv/opencode/node_modules/.bin/opencode --version 2>/dev/null)" != "$OPENCODE_VERSION" ]]; then
    stage "opencode-ai@$OPENCODE_VERSION (npm; the black-box agent of train --agent opencode)"
    npm install --prefix .venv/opencode --no-audit --no-fund --loglevel=error "opencode-ai@$OPENCODE_VERSION" >/dev/null 2>&1 \
      || echo "setup: npm install opencode-ai@$OPENCODE_VERSION failed; agentrl train --agent opencode will say so" >&2
  fi
else
  echo "setup: npm not found; opencode (agentrl train --agent opencode) is not installed" >&2
fi
stage "installed: .venv/bin/agentrl"
