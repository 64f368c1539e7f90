"""The summary table of a results file (`agentrl report` prints it): one (item, value) row per headline
figure. Not the plots (agentrl.report.plots) and not the command (agentrl.cli.report)."""

from __future__ import annotations

import math
from typing import Any

MISSING = "n/a"


def _fmt_num(value: Any, spec: str = ".3f") -> str:
    """One number formatted with `spec`; None, NaN, +-inf and non-numbers (bool included) give MISSING."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return MISSING
    return format(value, spec)


def _fmt_iv(iv: Any, signed: bool = False) -> str:
    """`mean [lo, hi]` of a bootstrap interval dict, `mean [n/a: reason]` for an undefined one; missing or
    non-finite parts print as MISSING (agentrl.eval.bootstrap.format_interval)."""
    from agentrl.eval.bootstrap import format_interval

    return format_interval(iv if isinstance(iv, dict) else None, signed=signed)


# last-step rows: (label, candidate keys in the step dict, first present wins)
_LAST_STEP_KEYS = (("reward_mean", ("reward_mean",)), ("entropy", ("entropy",)), ("clip_frac", ("clip_frac",)),
                   ("grad_norm", ("grad_norm",)), ("frac_zero_std", ("adv/frac_zero_std", "frac_zero_std")),
                   ("peak_memory_bytes", ("peak_memory_bytes",)))


def summary_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) rows of the summary table of a validated results dict.

    Any statistic that is None (stored for NaN/inf, or not computable, e.g. a regression stderr over a
    constant reward) or absent prints as MISSING ("n/a"); this never raises on a schema-valid file,
    including partial (running / interrupted / failed) ones.
    """
    from agentrl.report.readable import verdict

    cfg = data.get("config") or {}
    steps = data.get("steps") or []
    running = data.get("status") == "running"
    wall = _fmt_num(data.get("wall_clock_s"), ".1f")
    rows = [("status", str(data.get("status", "?"))), ("model", str(cfg.get("model", "?"))),
            ("env", str(cfg.get("env", "?"))), ("seed", str(data.get("seed", "?"))),
            ("steps done", str(len(steps))),
            ("wall clock", f"{wall} s" if wall != MISSING else MISSING + (" (still running)" if running else ""))]
    if running:  # `agentrl report` on a run still going: say what the figures are
        rows.append(("note", f"the run is still going: this is its results file as of {data.get('updated', MISSING)} "
                             "(rewritten after every step); the run draws its own plots and report.html when it ends"))
    if data.get("error"):
        rows.append(("error", str(data["error"])))
    for e in data.get("evaluations") or []:
        counts = " ".join(str(t.get("successes", MISSING)) for t in e.get("tasks") or [])
        rows.append((f"pass@1 {e.get('label')} (step {e.get('step')})",
                     f"{_fmt_iv(e.get('pass_at_1'))}  counts {counts}"))
    for p in data.get("paired") or []:
        v = verdict(p.get("diff"))  # the HTML report's words: learned / got worse / no measurable change
        rows.append((f"paired {p.get('after')} - {p.get('before')}",
                     _fmt_iv(p.get("diff"), signed=True) + ("" if v.css == "na" else f"  ({v.text})")))
    rows += _partial_credit_rows(data)
    if steps:
        last = steps[-1]
        for label, keys in _LAST_STEP_KEYS:
            key = next((k for k in keys if k in last), None)
            if key is not None:
                rows.append((f"last {label}", _fmt_num(last[key], ".4g")))
    noise = data.get("noise") or {}
    for key in ("train", "eval"):
        rep = noise.get(key) or {}
        if "step_noise" in rep:
            rows.append((f"noise {key}", f"step noise {_fmt_num(rep.get('step_noise'))}, "
                                          f"rise {_fmt_num(rep.get('rise'), '+.3f')} "
                                          f"+- {_fmt_num(rep.get('rise_stderr'))}, t {_fmt_num(rep.get('t'), '.2f')} "
                                          f"(n={rep.get('n', MISSING)})"))
    return rows


def _partial_credit_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """hidden_pass_fraction per evaluation, with what it means next to pass@1 (once)."""
    from agentrl.report.schema import TOOL_STATS

    rows = []
    for e in data.get("evaluations") or []:
        value = (e.get("tool_stats") or {}).get("hidden_pass_fraction")
        if value is not None:
            rows.append((f"hidden_pass_fraction {e.get('label')}", _fmt_num(value)))
    if rows:
        rows.append(("  what it is", TOOL_STATS["hidden_pass_fraction"][0] + "; mean over episodes"))
    return rows
