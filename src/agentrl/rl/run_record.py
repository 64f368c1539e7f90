"""The run record: a small json (`agentrl_run.json`) beside the weights of every checkpoint and of a run's
final model, naming the environment, task source, families and the settings a later evaluation needs, so
`agentrl eval --model <run or checkpoint>` evaluates the model where it was trained. Not the results file
(agentrl.report.results) and not the checkpoint's loop state (meta.json).

Standard library only (the eval command reads it while it builds its defaults, before torch is imported).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from agentrl.preflight import json_path_of, loads_json

RUN_RECORD_FILE = "agentrl_run.json"
RECORD_VERSION = 1

# RLConfig fields (flat names: the record stays flat, as the flags are) an evaluation of the model reuses unless the command line sets them: where it ran (env,
# tasks, families), the episode's limits, the held-out set's size and the sampling distribution its own
# evaluations used (so `agentrl eval --model <run>` scores what the run's "after" evaluation scored: the demo
# preset samples at 0.7, and an eval at the default 1.0 read as a different model), the episodes per task, and the
# generation batch and CPU threads it evaluated with (the demo's evaluation took 55 s at the defaults' 2 threads and
# batch 16 where the run's own took 7 s at 1 thread and batch 32 on the 2-core machine), and the sampler it evaluated
# with (the demo's fast sampler: an eval of runs/default with HF generate took twice as long for the same distribution)
EVAL_REUSED: tuple[str, ...] = ("env", "tasks", "families", "eval_families", "max_turns", "max_new_tokens",
                                "max_edits", "max_context_tokens", "max_observation_chars", "randomize_names",
                                "eval_size", "eval_n", "temperature", "top_k", "top_p", "thinking", "gen_batch",
                                "cpu_threads", "sampler")


def run_record(cfg: Any, step: int) -> dict[str, Any]:
    """The record of a model trained by `cfg` (an RLConfig) for `step` completed steps: the EVAL_REUSED
    fields, the model it started from (`trained_from`), LoRA rank, preset and seed, as a JSON-ready dict."""
    return {"format_version": RECORD_VERSION, "step": int(step), "trained_from": cfg.policy.model,
            "lora_r": cfg.update.lora_r, "preset": cfg.run.preset, "seed": cfg.run.seed,
            "settings": {name: cfg.to_flat()[name] for name in EVAL_REUSED}}


def write_run_record(folder: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write `record` (run_record's dict) as `<folder>/agentrl_run.json` (folder created); return its path."""
    path = Path(folder) / RUN_RECORD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def model_folder(model: str | os.PathLike) -> Path | None:
    """The folder holding the weights of `model` as load_policy resolves it: the folder itself, or for a run
    folder (`runs/x`) or a checkpoint (`runs/x/checkpoints/step_N`) its `model/`; None when `model` is
    not a local folder (a preset or hub name)."""
    p = Path(model).expanduser()
    if not p.is_dir():
        return None
    if not (p / "config.json").is_file() and (p / "model").is_dir():
        return p / "model"
    return p


def read_run_record(model: str | os.PathLike) -> tuple[dict[str, Any], Path] | None:
    """(the run record, its path) of `model` (a run folder, checkpoint or model folder), or None when it
    has none (a model not trained by agentrl, or by a version before the record).

    Raises:
        ValueError: the record exists but is not a JSON object with a `settings` object, or holds NaN or
            Infinity (names the file and the key).
    """
    folder = model_folder(model)
    if folder is None or not (folder / RUN_RECORD_FILE).is_file():
        return None
    path = folder / RUN_RECORD_FILE
    try:
        record = loads_json(path.read_text(encoding="utf-8-sig"), f"run record {path}")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"run record {path} is not readable JSON: {e}") from e
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise ValueError(f"run record {path}: expected an object with a 'settings' object")
    # json.loads takes NaN and Infinity, which write_run_record never writes: a NaN setting compared unequal to itself
    bad: list[float] = []
    where = json_path_of(record, lambda v: isinstance(v, float) and not math.isfinite(v) and not bad.append(v))
    if where is not None:
        name = "NaN" if math.isnan(bad[0]) else "Infinity" if bad[0] > 0 else "-Infinity"
        raise ValueError(f"run record {path}: {where} is {name}, not a finite number; fix it there or delete the file")
    return record, path
