"""Console logging tee'd to a file (logging + rich) and progress bars. Not the results file."""

from __future__ import annotations

import logging
import os
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
    if console:
        from rich.logging import RichHandler

        ch: logging.Handler = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
        ch.setFormatter(logging.Formatter("%(message)s"))
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


def progress(transient: bool = False) -> Any:
    """A rich Progress (description, bar, m/n, elapsed, remaining) for rollouts, training and evaluation.

    Use as a context manager: `with progress() as p: t = p.add_task("rollouts", total=n); p.advance(t)`.
    """
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
