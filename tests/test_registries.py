"""The registries resolve their entries by import path, in a fresh interpreter, without the CLI: the Python
API (`train(RLConfig.from_preset("demo"))`) sees the same tables as `agentrl train`, and nothing registers
itself as a side effect of being imported (DESIGN.md "Layout"; STYLE.md 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

RESOLVE_ALL = r"""
import json, sys
from agentrl.registry import resolve
from agentrl.rl.agent_backends import _AGENTS, agent_factory
from agentrl.rl.estimators import ADV_ESTIMATORS
from agentrl.rl.warm_start import _WARM_STARTS, warm_start_fn
from agentrl.rollout.samplers import SAMPLERS

loaded = sorted(m for m in sys.modules if m.startswith(("agentrl.cli", "agentrl.sft", "agentrl.harness")))
resolved = {}
for name in _WARM_STARTS:
    fn, check = warm_start_fn(name), resolve(_WARM_STARTS[name].check)
    resolved["warm_start:" + name] = [callable(fn), callable(check), fn.__module__]
for name in _AGENTS:
    fn, check = agent_factory(name), resolve(_AGENTS[name].check)
    resolved["agent:" + name] = [callable(fn), callable(check), fn.__module__]
for name, spec in SAMPLERS.items():
    resolved["sampler:" + name] = [callable(spec.build)]
for name, est in ADV_ESTIMATORS.items():
    resolved["adv:" + name] = [est.name == name]
print(json.dumps({"loaded_before": loaded, "resolved": resolved,
                  "cli_after": sorted(m for m in sys.modules if m.startswith("agentrl.cli"))}))
"""


def _fresh(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def test_every_registry_entry_resolves_in_a_fresh_interpreter_without_the_cli():
    r = _fresh(RESOLVE_ALL)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["loaded_before"] == []  # the registries name their front-end entries, they do not import them
    res = out["resolved"]
    assert res["warm_start:sft"] == [True, True, "agentrl.sft.warm_start"]
    assert res["agent:opencode"] == [True, True, "agentrl.harness.backend"]
    assert {k: v for k, v in res.items() if k.startswith("sampler:")} == {"sampler:hf": [True], "sampler:fast": [True]}
    assert {k: v for k, v in res.items() if k.startswith("adv:")} == {
        f"adv:{n}": [True] for n in ("grpo", "dr_grpo", "rloo", "none")}
    assert out["cli_after"] == []  # resolving every entry never pulls in the command line


def test_train_from_python_runs_the_sft_warm_start_without_importing_sft_first(tmp_path):
    """`from agentrl.rl.trainer import train; train(RLConfig.from_preset("demo"))`: no `import agentrl.sft`
    and no CLI first (a tiny budget of the demo preset: its SFT warm start, one step, a small evaluation)."""
    code = f"""
import json, sys
from agentrl.rl.config import RLConfig
from agentrl.rl.trainer import train
cfg = RLConfig.from_preset("demo", warm_start_tasks=2, warm_start_epochs=1, warm_start_batch=2, steps=1,
                           prompts_per_step=1, group_size=2, eval_size=1, eval_n=1, max_new_tokens=8, max_turns=2,
                           n_boot=100, device="cpu", out={str(tmp_path / "run")!r})
path = train(cfg)
data = json.loads(open(path).read())
print(json.dumps({{"method": data["warm_start"]["method"], "status": data["status"],
                  "cli": sorted(m for m in sys.modules if m.startswith("agentrl.cli"))}}))
"""
    r = _fresh(code, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"method": "sft", "status": "completed", "cli": []}
