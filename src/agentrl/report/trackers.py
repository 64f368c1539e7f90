"""Experiment trackers (`--report-to none|tensorboard|trackio|wandb`) through their own libraries.

Not the results file (always written) or the console log. Every tracker is local: TensorBoard event
files in `<out>/tensorboard`, trackio's local store in `<out>/trackio`, wandb in offline mode under
`<out>/wandb` (`wandb sync` uploads it later, if the user wants). Their telemetry and error reporting
are switched off before the library is imported, and nothing reaches past 127.0.0.1.

Metric names follow TRL's so dashboards carry over: `train/reward`, `train/reward_std`,
`train/frac_reward_zero_std`, `train/loss`, `train/entropy`, `train/clip_ratio/region_mean`, ...,
`tools/call_frequency` (tool calls per episode), `tools/failure_frequency` (failed or malformed calls
per call), `eval/pass_at_1` (with `_lo`/`_hi`). The x axis is the global step: training steps completed,
as in TRL (step 0's metrics are logged at global step 1; the "before" evaluation at 0).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPORT_TO: tuple[str, ...] = ("none", "tensorboard", "trackio", "wandb")
EXTRA = "agentrl[trackers]"
log = logging.getLogger("agentrl.trackers")

# our step-metric name -> TRL's (under "train/"); unlisted names keep their own under "train/"
_TRL_NAMES = {"reward_mean": "reward", "adv/frac_zero_std": "frac_reward_zero_std", "kl_ref": "kl",
              "clip_frac": "clip_ratio/region_mean", "clip_frac_low": "clip_ratio/low_mean",
              "clip_frac_high": "clip_ratio/high_mean"}
_OWN_NAMESPACES = ("tools/", "rollout/", "time/")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def step_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """One training step's metrics under tracker names (TRL's where they exist); non-finite values
    (e.g. entropy of a skipped update) are left out, as trackers plot NaN badly.

    Adds tools/call_frequency = tools/tool_calls (mean calls per episode, TRL's total calls / completions)
    and tools/failure_frequency = (failed + malformed calls) / calls (0 when no call was made).
    """
    out: dict[str, float] = {}
    for key, v in metrics.items():
        if not _number(v):
            continue
        if key.startswith(_OWN_NAMESPACES):
            out[key] = float(v)
        else:
            out["train/" + _TRL_NAMES.get(key, key.removeprefix("adv/"))] = float(v)
    calls = metrics.get("tools/tool_calls")
    if _number(calls):
        out["tools/call_frequency"] = float(calls)
        bad = sum(float(metrics.get(k) or 0.0) for k in ("tools/failed_calls", "tools/malformed_calls"))
        out["tools/failure_frequency"] = bad / calls if calls > 0 else 0.0
    return out


def eval_metrics(ev: dict[str, Any], paired: dict[str, Any] | None = None) -> dict[str, float]:
    """A held-out evaluation (a results-file evaluation record) under eval/ names: pass@1 and its
    interval ends (left out when undefined), mean over tasks of the per-task mean reward, tool
    statistics; with `paired`, the paired difference and its interval."""
    p = ev.get("pass_at_1") or {}
    out = {f"eval/pass_at_1{s}": float(p[k]) for k, s in (("mean", ""), ("lo", "_lo"), ("hi", "_hi"))
           if _number(p.get(k))}
    rewards = [t.get("mean_reward") for t in ev.get("tasks") or []]
    rewards = [r for r in rewards if _number(r)]
    if rewards:
        out["eval/reward"] = sum(rewards) / len(rewards)
    out.update({f"eval/tools/{k}": float(v) for k, v in (ev.get("tool_stats") or {}).items() if _number(v)})
    if paired:
        d = paired.get("diff") or {}
        out.update({f"eval/paired_diff{s}": float(d[k]) for k, s in (("mean", ""), ("lo", "_lo"), ("hi", "_hi"))
                    if _number(d.get(k))})
    return out


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Send a library's prints to the debug log instead of stdout."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    if buf.getvalue().strip():
        log.debug("%s", buf.getvalue().strip())


class Tracker:
    """Base tracker (also `--report-to none`): `log(metrics, step)`, `finish()`; failures are logged
    once and never end the run (the results file has everything)."""

    kind = "none"

    def __init__(self) -> None:
        self._warned = False

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not metrics:
            return
        try:
            self._log(metrics, int(step))
        except Exception as e:  # noqa: BLE001 - a tracker must never lose a run
            if not self._warned:
                log.warning("--report-to %s: logging failed (%s: %s); the results file is unaffected",
                            self.kind, type(e).__name__, e)
                self._warned = True

    def _log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class TensorBoardTracker(Tracker):
    """Scalars into TensorBoard event files (torch.utils.tensorboard, which needs `tensorboard`)."""

    kind = "tensorboard"

    def __init__(self, logdir: Path, config: dict[str, Any]) -> None:
        super().__init__()
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = logdir
        self.writer = SummaryWriter(log_dir=str(logdir))
        self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in sorted(config.items())), 0)

    def _log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()


class TrackioTracker(Tracker):
    """trackio's local store (SQLite under TRACKIO_DIR = `<out>/trackio`); `trackio show` browses it."""

    kind = "trackio"

    def __init__(self, store: Path, project: str, name: str, config: dict[str, Any]) -> None:
        super().__init__()
        os.environ.setdefault("TRACKIO_DIR", str(store))  # read once, when trackio is first imported
        import trackio

        self.store = Path(trackio.utils.TRACKIO_DIR)
        if self.store != store:  # the user's TRACKIO_DIR, or trackio imported earlier in this process
            log.info("--report-to trackio: logging to the store %s (TRACKIO_DIR)", self.store)
        self.trackio, self.project = trackio, project
        with _quiet_stdout():  # its banner (with terminal colour codes) would land in log files
            self.run = trackio.init(project=project, name=name, config=config, embed=False, auto_log_gpu=False,
                                    auto_log_cpu=False)

    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        with _quiet_stdout():
            self.run.finish()


class WandbTracker(Tracker):
    """wandb in offline mode (files under `<out>/wandb`; nothing is uploaded)."""

    kind = "wandb"

    def __init__(self, root: Path, project: str, name: str, config: dict[str, Any]) -> None:
        super().__init__()
        import wandb

        root.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(mode="offline", silent=True, console="off", disable_git=True, disable_code=True,
                                  x_disable_stats=True, x_disable_machine_info=True)
        self.run = wandb.init(project=project, name=name, config=config, dir=str(root), settings=settings)
        self.dir = Path(self.run.dir).parent

    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


def no_phone_home() -> None:
    """Telemetry, update checks and error reporting of the tracker libraries off; wandb offline; trackio
    never sent to a Space or a server (their environment variables are dropped for this process)."""
    os.environ["WANDB_MODE"] = "offline"
    for key in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_DATASET_ID"):
        os.environ.pop(key, None)
    for key, value in {"HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "WANDB_SILENT": "true",
                       "WANDB_ERROR_REPORTING": "false", "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true",
                       "WANDB_CONSOLE": "off", "GRADIO_ANALYTICS_ENABLED": "False"}.items():
        os.environ.setdefault(key, value)


def tracker_location(kind: str, out: Path) -> str:
    """One line saying where tracker `kind` (tensorboard, trackio, wandb) of the run folder `out` writes its
    files and how to look at them."""
    out = Path(out)
    if kind == "tensorboard":
        return f"tensorboard: event files in {out / 'tensorboard'} (view: tensorboard --logdir {out / 'tensorboard'})"
    if kind == "trackio":
        return f"trackio: local store in {out / 'trackio'}"
    if kind == "wandb":
        return f"wandb: offline run in {out / 'wandb'} (upload later: wandb sync {out / 'wandb'}/offline-run-*)"
    raise ValueError(f"tracker_location: no files for --report-to {kind!r}")


def open_tracker(kind: str, out: Path, *, config: dict[str, Any], name: str | None = None) -> Tracker:
    """The tracker `kind` (one of REPORT_TO) writing under the run folder `out`.

    Raises:
        ValueError: unknown kind, or its library is not installed (names the extra to install).
    """
    if kind not in REPORT_TO:
        raise ValueError(f"--report-to {kind!r}: expected one of {', '.join(REPORT_TO)}")
    if kind == "none":
        return Tracker()
    no_phone_home()
    if importlib.util.find_spec(kind) is None:  # the package is named like the tracker
        raise ValueError(f"--report-to {kind} needs the {kind} package: pip install '{EXTRA}' "
                         f"(scripts/setup.sh installs it)")
    out = Path(out)
    name = name or out.name
    log.info("%s", tracker_location(kind, out))
    if kind == "tensorboard":
        return TensorBoardTracker(out / "tensorboard", config)
    if kind == "trackio":
        return TrackioTracker(out / "trackio", "agentrl", name, config)
    return WandbTracker(out, "agentrl", name, config)
