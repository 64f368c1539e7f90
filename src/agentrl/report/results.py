"""The run's results file: atomic JSON writes, the RunResults builder, its JSON schema and validator.

Not the plots, the trainer or any statistics: evaluations, paired differences and the noise analysis
arrive computed (agentrl.eval) and are only serialised here. The file is rewritten whole, atomically (temporary file in the same
directory, fsync, os.replace, fsync of the directory), after every step, so a crash leaves the previous
complete file and loses at most the step in progress. Non-finite floats are stored as null (strict JSON).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrl.eval.report import EvalReport, PairedDifference

from agentrl.preflight import json_path_of, loads_json, lone_surrogate_path, refuse_special_file
from agentrl.report.schema import RESULTS_SCHEMA, SCHEMA_VERSION, STATUSES  # noqa: F401 - re-exported


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def to_json_ready(obj: Any) -> Any:
    """Recursively convert to strict-JSON values: non-finite floats -> None, tuples -> lists, numpy/torch
    scalars -> Python numbers, Path -> str. Raises TypeError naming the type of anything else."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json_ready(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if callable(getattr(obj, "item", None)) and tuple(getattr(obj, "shape", (-1,))) == ():
        return to_json_ready(obj.item())  # numpy scalar / 0-d array / 0-d tensor
    raise TypeError(f"results: cannot store a value of type {type(obj).__name__} in JSON")


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or directory by path (durability of atomic renames)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask (read by setting and restoring it; os has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_modes(folder: str | os.PathLike) -> None:
    """Give every file directly in `folder` the mode `open(path, "w")` would (0666 less the umask): writers that go
    through a private temp file (transformers' save_pretrained leaves model.safetensors 0600) otherwise leave
    one file of a saved model unreadable to others beside 0644 siblings."""
    mode = 0o666 & ~_umask()
    for f in Path(folder).iterdir():
        if f.is_file() and not f.is_symlink():
            f.chmod(mode)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically (same-directory temp file, fsync, os.replace, dir fsync).

    The file gets the mode an ordinary `open(path, "w")` would give (0666 less the umask, so 0644 under
    the usual umask 022), not mkstemp's private 0600. Raises ValueError, writing nothing, if `path` is a
    device, FIFO or socket (preflight.refuse_special_file: the rename would replace it).
    """
    path = Path(path)
    refuse_special_file(path, "output file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Serialise `obj` (via to_json_ready; strict JSON, no NaN) and write it atomically to `path`."""
    return atomic_write_text(path, json.dumps(to_json_ready(obj), indent=1, allow_nan=False) + "\n")


def versions() -> dict[str, str | None]:
    """Versions of python, torch, transformers, agentrl, numpy, and the accelerator (None if absent)."""
    import importlib.metadata as md

    from agentrl import __version__

    out: dict[str, str | None] = {"python": platform.python_version(), "agentrl": __version__,
                                  "platform": platform.platform()}
    for pkg in ("torch", "transformers", "numpy", "scipy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    try:
        import torch

        out["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        out["cuda_device"] = None
    return out


class RunResults:
    """Builds the results file of one run and rewrites it atomically after every change.

    Example:
        res = RunResults("runs/x/results.json", cfg.to_flat(), seed=cfg.run.seed)
        res.add_evaluation("before", step=0, report=before)    # an agentrl.eval.report.EvalReport
        for step ...: res.add_step(step, metrics)
        res.add_evaluation("after", step=n, report=after)
        res.add_paired_difference(paired_difference(before, after, boot)); res.finish()
    """

    def __init__(self, path: str | os.PathLike, config: dict[str, Any], *, seed: int,
                 write: bool = True) -> None:
        self.path = Path(path)
        now = _now()
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "status": "running", "created": now, "updated": now,
            "seed": int(seed), "wall_clock_s": None, "error": None, "config": to_json_ready(config),
            "versions": versions(), "steps": [], "evaluations": [], "paired": [], "tool_stats": {},
            "transcripts": [], "tool_schemas": [], "sandbox": {}, "noise": {},
        }
        self._t0 = time.perf_counter()
        self.data["wall_clock_parts_s"] = [0.0]
        if write:
            self.write()

    # Config keys a resumed run may change: the schedule and where/how it runs, not what it trains. The update's
    # speed and memory knobs give the same update up to float rounding (compile_layers: a boolean before 2026-12-04,
    # "auto" by default since; activation_offloading: new on 2026-12-04, so absent from older runs' files), and
    # run_folder.memory_hint tells an out-of-memory run to change them (micro_tokens, gradient_checkpointing) and
    # resume.
    RESUMABLE_CHANGES = frozenset({"steps", "resume", "eval_every", "checkpoint_every", "keep_checkpoints", "out",
                                   "device", "n_boot", "gen_batch", "sampler", "report_to",
                                   "rollout_workers", "worker_launcher", "ray_graders", "compile_layers",
                                   "activation_offloading", "gradient_checkpointing", "micro", "micro_tokens",
                                   "logprob_chunk_rows", "pack_rows"})

    @classmethod
    def resume(cls, path: str | os.PathLike, *, completed_steps: int,
               config: dict[str, Any] | None = None) -> RunResults:
        """Reopen an existing results file (e.g. after --resume) so it matches the checkpoint the run
        continues from: steps >= completed_steps, evaluations after it, the final ("after") evaluation,
        the paired differences and the noise analysis are dropped (the run recomputes them).

        Args:
            config: the resumed run's config; it replaces the stored one, and may differ from it only in
                RESUMABLE_CHANGES (more steps, another device, ...).

        Raises:
            ValueError: the file is invalid, `config` changes what the run trains (names the keys), or steps were
                completed but the file holds no "before" evaluation.
        """
        data = validate_results(path)
        if config is not None:
            changed = sorted(k for k in set(config) | set(data["config"])
                             if k not in cls.RESUMABLE_CHANGES and config.get(k) != data["config"].get(k))
            if changed:
                raise ValueError(f"--resume of {path}: the config differs from the stored run in {changed} "
                                 "(only the schedule may change); use another --out for a new run")
            data["config"] = to_json_ready(config)
        obj = cls.__new__(cls)
        obj.path = Path(path)
        data["steps"] = [s for s in data["steps"] if s["step"] < completed_steps]
        data["evaluations"] = [e for e in data["evaluations"]
                               if e["step"] <= completed_steps and e["label"] != "after"]
        if completed_steps > 0 and not any(e["label"] == "before" for e in data["evaluations"]):
            raise ValueError(f"--resume of {path}: it holds no 'before' evaluation, so the resumed run would evaluate "
                             f"its step-{completed_steps} model as 'before'; use another --out for a new run")
        data["transcripts"] = [t for t in data["transcripts"] if t["kind"] != "heldout_after"]
        data.update(status="running", error=None, paired=[], noise={})
        # each earlier part of the run (up to its last write; a kill -9 loses only what came after)
        data["wall_clock_parts_s"] = list(data.get("wall_clock_parts_s") or [data.get("wall_clock_s") or 0.0]) + [0.0]
        obj.data = data
        obj._t0 = time.perf_counter()
        return obj

    def write(self) -> Path:
        """Rewrite the file atomically; the current part's wall clock is brought up to date first."""
        self.data["updated"] = _now()
        parts = self.data["wall_clock_parts_s"]
        parts[-1] = time.perf_counter() - self._t0
        if self.data["status"] != "running" and self.data["wall_clock_s"] is not None:
            self.data["wall_clock_s"] = sum(parts)
        return atomic_write_json(self.path, self.data)

    def add_warning(self, warning: dict[str, Any]) -> None:
        """Append one run-health warning (agentrl.rl.health.step_warnings: step, kind, metric, value,
        baseline, message) to the `warnings` list and rewrite the file."""
        self.data.setdefault("warnings", []).append(to_json_ready(warning))
        self.write()

    def add_step(self, step: int, metrics: dict[str, float | int | None]) -> None:
        """Append one step's scalar metrics (step must increase) and rewrite the file."""
        if self.data["steps"] and step <= self.data["steps"][-1]["step"]:
            raise ValueError(f"RunResults.add_step: step {step} is not after step {self.data['steps'][-1]['step']}")
        bad = {k: type(v).__name__ for k, v in metrics.items() if not (v is None or isinstance(v, (int, float)))}
        if bad:
            raise ValueError(f"RunResults.add_step: metrics must be numbers or None, got {bad}")
        self.data["steps"].append({"step": int(step), **to_json_ready({k: float(v) if v is not None else None
                                                                        for k, v in metrics.items()})})
        self.write()

    def add_evaluation(self, label: str, *, step: int, report: EvalReport) -> dict[str, Any]:
        """Record a held-out evaluation (an agentrl.eval.report.EvalReport, stored as its `to_dict()`)."""
        ev = {"label": label, "step": int(step), **to_json_ready(report.to_dict())}
        self.data["evaluations"].append(ev)
        self.write()
        return ev

    def evaluation(self, label: str) -> dict[str, Any]:
        """The last evaluation with `label`; KeyError naming the labels present otherwise."""
        for ev in reversed(self.data["evaluations"]):
            if ev["label"] == label:
                return ev
        raise KeyError(f"no evaluation labelled {label!r}; have {[e['label'] for e in self.data['evaluations']]}")

    def add_paired_difference(self, paired: PairedDifference, before: str = "before",
                              after: str = "after") -> dict[str, Any]:
        """Record the after - before difference (an agentrl.eval.report.PairedDifference) of two evaluations."""
        for label in (before, after):
            self.evaluation(label)  # KeyError naming the labels present
        rec = {"before": before, "after": after, **to_json_ready(paired.to_dict())}
        self.data["paired"].append(rec)
        self.write()
        return rec

    def add_transcript(self, kind: str, task_id: str, text: str, *, step: int | None = None,
                       reward: float | None = None, end_reason: str | None = None,
                       turns: list[dict] | None = None, write: bool = True) -> None:
        """Store one full transcript (kind e.g. "heldout_before", "heldout_after", "train_step0"), with
        why it ended and its structured turns (agentrl.rollout.transcript.turn_records) when given."""
        rec = {"kind": kind, "task_id": str(task_id), "text": text, "step": step,
               "reward": None if reward is None else float(reward), "end_reason": end_reason}
        if turns is not None:
            rec["turns"] = to_json_ready(turns)
        self.data["transcripts"].append(rec)
        if write:
            self.write()

    def set(self, key: str, value: Any) -> None:
        """Set a top-level section: tool_stats, tool_schemas, sandbox, noise (or an extra key)."""
        if key in ("schema_version", "steps", "evaluations", "paired", "transcripts", "created"):
            raise ValueError(f"RunResults.set: {key!r} is managed by its own method")
        self.data[key] = to_json_ready(value)
        self.write()

    def finish(self, status: str = "completed", *, wall_clock_s: float | None = None,
               error: str | None = None) -> Path:
        """Set the final status and write. `wall_clock_s`: this part's seconds; the file's `wall_clock_s`
        is the sum over every part of the run (`wall_clock_parts_s`: one entry per start or --resume)."""
        if status not in STATUSES:
            raise ValueError(f"RunResults.finish: status must be one of {STATUSES}, got {status!r}")
        if wall_clock_s is not None:
            self._t0 = time.perf_counter() - float(wall_clock_s)
        self.data.update(status=status, wall_clock_s=None if wall_clock_s is None else 0.0, error=error)
        return self.write()


def validate_results(path: str | os.PathLike) -> dict[str, Any]:
    """Load a results file and check it against RESULTS_SCHEMA plus the invariants JSON Schema cannot
    express (successes <= trials, lo <= hi, increasing steps). Returns the parsed data. (A percentile
    interval need not contain the point estimate, e.g. with few resamples, so that is not required.)

    Raises:
        FileNotFoundError: no such file; ValueError: not JSON, a string that is not UTF-8 text, an integer
            beyond the range of a float, or invalid (names the file and the JSON path).
    """
    import jsonschema

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; expected a results file (e.g. {path / 'results.json'})")
    if path.exists() and not path.is_file():  # /dev/zero, a FIFO: there, but no file to read
        raise ValueError(f"{path} is not a regular file; expected a results JSON file")
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    try:
        data = loads_json(path.read_text(encoding="utf-8-sig"), str(path))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}); expected a results JSON file") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    bad = lone_surrogate_path(data)  # `report --html` failed writing the page: "'utf-8' codec can't encode ..."
    if bad is not None:
        raise ValueError(f"{path}: invalid results at {bad[:200] or '(top level)'}: a lone surrogate (an unpaired "
                         "\\ud800-\\udfff escape), which is not UTF-8 text")
    # `report` raised OverflowError (plots, summary) on `"wall_clock_s": 1e400` written as an int
    huge = json_path_of(data, _huge_number, sep="/", brackets=False)
    if huge is not None:
        raise ValueError(f"{path}: invalid results at {huge[:200] or '(top level)'}: an integer too large for a "
                         "floating-point number")
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(RESULTS_SCHEMA).iter_errors(data))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ValueError(f"{path}: invalid results at {where}: {err.message[:300]}")
    _check_invariants(path, data)
    return data


def _huge_number(item: Any) -> bool:
    """An integer beyond the range of a float (JSON allows any number of digits; every reader of a results file
    computes in floats)."""
    if not isinstance(item, int) or isinstance(item, bool):
        return False
    try:
        float(item)
    except OverflowError:
        return True
    return False


def _check_invariants(path: Path, data: dict[str, Any]) -> None:
    steps = [s["step"] for s in data["steps"]]
    bad = next((i for i, (a, b) in enumerate(zip(steps, steps[1:], strict=False)) if b <= a), None)
    if bad is not None:
        raise ValueError(f"{path}: steps must strictly increase, got step {steps[bad + 1]} after {steps[bad]} "
                         f"(steps/{bad + 1})")
    intervals = [(f"evaluations/{i}/pass_at_1", e["pass_at_1"]) for i, e in enumerate(data["evaluations"])]
    intervals += [(f"paired/{i}/diff", p["diff"]) for i, p in enumerate(data["paired"])]
    for where, iv in intervals:
        _check_interval(path, where, iv)
    for i, e in enumerate(data["evaluations"]):
        for t in e["tasks"]:
            if t["successes"] > t["trials"]:
                raise ValueError(f"{path}: evaluations/{i} task {t['task_id']!r}: successes > trials")


def _check_interval(path: Path, where: str, iv: dict[str, Any]) -> None:
    """lo <= hi when both are set; lo and hi null together, exactly when `undefined` gives the reason."""
    lo, hi, why = iv["lo"], iv["hi"], iv.get("undefined")
    if (lo is None) != (hi is None) or (lo is None) != bool(why):
        raise ValueError(f"{path}: {where}: lo and hi must both be null with an `undefined` reason, or both "
                         f"numbers without one; got lo={lo}, hi={hi}, undefined={why!r}")
    if lo is not None and lo > hi:
        raise ValueError(f"{path}: {where}: expected lo <= hi, got lo={lo}, hi={hi}")
