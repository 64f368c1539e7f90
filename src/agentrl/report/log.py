"""Console logging tee'd to a file (logging + rich) and progress that works everywhere. Not the results file.

On a terminal: rich log lines and rich progress bars. Anywhere else (output to a file, a batch job, CI):
plain log lines and, instead of bars, one line per running phase at a steady cadence (done/total,
rate, ETA), written through the logger so they land in the console and the run's log alike.
Third-party progress bars (transformers' "Loading weights" / "Writing model shards", HF hub
downloads) are turned off: they would interleave with ours and fill log files with carriage returns.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

LOGGER_NAME = "agentrl"
_FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(log_path: str | os.PathLike | None = None, *, level: int = logging.INFO,
                  console: bool = True) -> logging.Logger:
    """Configure the "agentrl" logger: rich console handler and/or a plain-text file handler (appending,
    so a resumed run continues its log). Calling it again replaces the handlers it installed before.

    Returns: the "agentrl" logger (child loggers "agentrl.*" propagate to it).
    """
    logger = logging.getLogger(LOGGER_NAME)
    for h in [h for h in logger.handlers if getattr(h, "_agentrl", False)]:
        logger.removeHandler(h)
        h.close()
    logger.setLevel(level)
    logger.propagate = False
    quiet_third_party_progress()
    if console:
        ch: logging.Handler
        if is_terminal():
            from rich.logging import RichHandler

            ch = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
            ch.setFormatter(logging.Formatter("%(message)s"))
        else:  # no terminal: one unwrapped line per record (rich would wrap at 80 columns)
            ch = logging.StreamHandler(sys.stdout)
            ch.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S"))
        ch._agentrl = True  # type: ignore[attr-defined]
        logger.addHandler(ch)
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_path, mode="a", encoding="utf-8")
        fh.setFormatter(logging.Formatter(_FILE_FORMAT))
        fh._agentrl = True  # type: ignore[attr-defined]
        logger.addHandler(fh)
    return logger


def log_config(logger: logging.Logger, config: dict[str, Any], title: str = "config") -> None:
    """Log every config field, one `name = value` line each, sorted (the full config, printed)."""
    width = max((len(k) for k in config), default=0)
    logger.info("%s:\n%s", title, "\n".join(f"  {k:<{width}} = {config[k]!r}" for k in sorted(config)))


def is_terminal() -> bool:
    """True when stdout is an interactive terminal (rich's own test, so FORCE_COLOR/TTY_COMPATIBLE apply)."""
    from rich.console import Console

    return Console().is_terminal


def quiet_third_party_progress() -> None:
    """Turn off transformers' and huggingface_hub's tqdm bars (this process and its children)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for module, fn in (("transformers.utils.logging", "disable_progress_bar"),
                       ("huggingface_hub.utils", "disable_progress_bars")):
        try:
            getattr(__import__(module, fromlist=[fn]), fn)()
        except (ImportError, AttributeError):
            pass


def _duration(seconds: float) -> str:
    """Seconds as 42s, 3m05s or 1h02m."""
    if not seconds == seconds or seconds == float("inf"):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class LineProgress:
    """Progress for non-terminals: the same calls as rich's Progress (add_task, update, advance,
    remove_task, context manager), reported as log lines instead of bars.

    Each phase logs a line when it starts and one when it ends; the innermost running phase (e.g. a
    step's rollouts) also every `interval_s` seconds (a background thread keeps the cadence even when
    nothing finishes for a while), and an outer phase (the training steps) each time it advances:
    `eval before: 24/40 episodes (60%), 0.52/s, elapsed 46s, ETA 31s`.
    """

    def __init__(self, logger: logging.Logger | None = None, *, interval_s: float = 30.0) -> None:
        self.log = logger or logging.getLogger(f"{LOGGER_NAME}.progress")
        self.interval_s = float(interval_s)
        self._tasks: dict[int, dict[str, Any]] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LineProgress:
        self._stop.clear()
        self._thread = threading.Thread(target=self._tick, name="agentrl-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def add_task(self, description: str, total: float | None = None, completed: float = 0, *,
                 unit: str = "", **_: Any) -> int:
        with self._lock:
            tid = self._next_id
            self._next_id += 1
            now = time.monotonic()
            self._tasks[tid] = {"description": description, "total": total, "completed": float(completed),
                                "start_completed": float(completed), "t0": now, "last": now, "unit": unit}
        self._report(tid, "started")
        return tid

    def update(self, task_id: int, *, completed: float | None = None, advance: float | None = None,
               total: float | None = None, **_: Any) -> None:
        with self._lock:
            t = self._tasks.get(task_id)
            if t is None:
                return
            if total is not None:
                t["total"] = total
            if completed is not None:
                t["completed"] = float(completed)
            before = t["completed"]
            if advance is not None:
                t["completed"] += float(advance)
            # the innermost phase reports at the cadence; an outer one (training steps) at each change
            outer = task_id != max(self._tasks)
            due = (outer and t["completed"] != before) or time.monotonic() - t["last"] >= self.interval_s
        if due:
            self._report(task_id)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: int, event: str = "done") -> None:
        """End a phase with a last line marked `event` ("done"; "interrupted" or "failed" for a phase that
        stopped early)."""
        self._report(task_id, event)
        with self._lock:
            self._tasks.pop(task_id, None)

    def line(self, task_id: int) -> str:
        """The progress line of a task: `name: done/total unit (pct), rate/s, elapsed, ETA`."""
        t = self._tasks[task_id]
        elapsed = time.monotonic() - t["t0"]
        done, total = t["completed"], t["total"]
        rate = (done - t["start_completed"]) / elapsed if elapsed > 0 else 0.0
        unit = f" {t['unit']}" if t["unit"] else ""
        if total:
            left = (total - done) / rate if rate > 0 else float("inf")
            count = f"{done:g}" if float(done).is_integer() else f"{done:.1f}"  # per-turn progress is fractional
            return (f"{t['description']}: {count}/{total:g}{unit} ({100 * done / total:.0f}%), {rate:.2f}/s, "
                    f"elapsed {_duration(elapsed)}, ETA {_duration(left)}")
        return f"{t['description']}: {done:g}{unit}, {rate:.2f}/s, elapsed {_duration(elapsed)}"

    def _report(self, task_id: int, event: str = "") -> None:
        with self._lock:
            if task_id not in self._tasks:
                return
            self._tasks[task_id]["last"] = time.monotonic()
            text = self.line(task_id)
        self.log.info("%s%s", text, f" [{event}]" if event else "")

    def _tick(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s)):
            with self._lock:  # only the innermost live phase ticks: one line per interval, not one per phase
                inner = max(self._tasks, default=None)
                due = inner is not None and time.monotonic() - self._tasks[inner]["last"] >= self.interval_s
            if due:
                self._report(inner)


def end_phase(bars: Any, task_id: int, error: BaseException | None = None) -> None:
    """Remove the phase `task_id` from `bars` (a LineProgress or rich Progress), its last line saying how it
    ended: done, or interrupted (Ctrl-C, SIGTERM) / failed when `error` stopped it."""
    if not isinstance(bars, LineProgress):
        bars.remove_task(task_id)
        return
    event = "done" if error is None else "interrupted" if isinstance(error, KeyboardInterrupt | SystemExit) else "failed"
    bars.remove_task(task_id, event)


def progress(transient: bool = False, *, interval_s: float | None = None) -> Any:
    """Progress for rollouts, training and evaluation: a rich Progress (description, bar, m/n, elapsed,
    remaining) on a terminal, a LineProgress (a log line per phase every `interval_s` seconds, default
    $AGENTRL_PROGRESS_INTERVAL_S or 30) anywhere else.

    Use as a context manager: `with progress() as p: t = p.add_task("rollouts", total=n); p.advance(t)`.
    """
    if not is_terminal():
        every = interval_s if interval_s is not None else float(os.environ.get("AGENTRL_PROGRESS_INTERVAL_S", 30))
        return LineProgress(interval_s=every)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), transient=transient)
