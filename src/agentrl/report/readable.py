"""Words and units a person reads in the report and plots: the verdict of a paired interval, min:s, GB, and
metric names without snake_case. Pure functions; not the page (agentrl.report.html) or the figures (report.plots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Verdict:
    """What a paired after - before interval says, in words, and the CSS class that colours it.

    Attributes:
        text: "learned: interval above 0", "got worse: interval below 0", "no measurable change: interval
            includes 0", or "no verdict: ..." when the interval is undefined.
        css: "up" (the whole interval above 0), "down" (below 0), "flat" (it includes 0) or "na".
    """

    text: str
    css: str


def verdict(diff: dict[str, Any] | None) -> Verdict:
    """The verdict of a paired difference's interval (`{"mean", "lo", "hi", "undefined"?}`): by the interval,
    never by the sign of the mean (a +0.1 whose interval reaches below 0 is "no measurable change").
    An interval touching 0 (lo == 0 or hi == 0) includes 0."""
    d = diff if isinstance(diff, dict) else {}
    lo, hi = d.get("lo"), d.get("hi")
    if not (_finite(lo) and _finite(hi)):
        why = d.get("undefined") or ("nothing to compare" if not _finite(d.get("mean")) else "interval n/a")
        return Verdict(f"no verdict: {why}", "na")
    if lo > 0:
        return Verdict("learned: interval above 0", "up")
    if hi < 0:
        return Verdict("got worse: interval below 0", "down")
    return Verdict("no measurable change: interval includes 0", "flat")


def duration(seconds: Any) -> str:
    """Seconds as `m:ss` (under an hour) or `h:mm:ss`, rounded to the second: 1485 -> "24:45", 59.6 ->
    "1:00", 3725 -> "1:02:05"; "n/a" for a missing, negative or non-finite value."""
    if not _finite(seconds) or seconds < 0:
        return "n/a"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


_BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def size(n_bytes: Any) -> str:
    """Bytes in decimal units with 3 significant digits: 4.051e9 -> "4.05 GB", 512 -> "512 B",
    1.5e6 -> "1.50 MB"; "n/a" for a missing, negative or non-finite value."""
    if not _finite(n_bytes) or n_bytes < 0:
        return "n/a"
    for unit, scale in _BYTE_UNITS:
        if n_bytes >= scale:
            v = n_bytes / scale
            return f"{v:.{0 if v >= 100 else 1 if v >= 10 else 2}f} {unit}"
    return f"{int(n_bytes)} B"


def with_unit(value: Any, unit: str, spec: str = ".4g") -> str:
    """A value in its schema unit, for a person: "s" -> "12.3 s" below a minute, "24:45 min" below an hour, else
    "1:02:05 h" (the unit said, as beside "5.0 s" in one table), "bytes" -> size, others `format(value, spec)`;
    "n/a" when not a finite number."""
    if not _finite(value):
        return "n/a"
    if unit == "bytes":
        return size(value)
    if unit == "s":
        return f"{value:.1f} s" if value < 60 else f"{duration(value)} {'min' if value < 3599.5 else 'h'}"
    return format(value, spec)


# words that stay as written in a label (units, abbreviations)
_KEEP = {"kl": "KL", "lr": "lr", "id": "id", "ids": "ids", "nll": "NLL", "gpu": "GPU", "cpu": "CPU", "is": "IS"}


def label(name: str) -> str:
    """A metric or statistic name as plot/axis text: the prefix dropped, underscores as spaces, units in
    words: "tools/malformed_calls" -> "malformed calls", "time/rollout_s" -> "rollout (s)",
    "peak_memory_bytes" -> "peak memory (bytes)", "kl_sampler" -> "KL sampler"."""
    key = name.split("/")[-1]
    unit = ""
    for suffix, word in (("_s", "s"), ("_bytes", "bytes"), ("_frac", "fraction")):
        if key.endswith(suffix) and len(key) > len(suffix):
            key, unit = key[: -len(suffix)], word
            break
    words = " ".join(_KEEP.get(w, w) for w in key.split("_") if w)
    return f"{words} ({unit})" if unit and unit != "fraction" else f"{words} fraction" if unit else words
