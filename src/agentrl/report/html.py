"""`report.html`: one self-contained page per run (inline CSS and JS, plots as base64 PNG, no network).

Not the plots themselves (agentrl.report.plots) or the transcript browser (agentrl.report.transcript_view).
Sections: summary, warm start (when the run had one: its settings, data, loss curve, NLL before and
after), held-out evaluation (curve with intervals, evaluations and paired differences, per family, per
task), training curves, tool statistics (with what each means), transcripts, config,
versions and sandbox.
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from agentrl.report.readable import duration, verdict, with_unit
from agentrl.report.results import atomic_write_text
from agentrl.report.schema import RESULTS_SCHEMA, STEP_METRICS, dedupe_stats, stat_description
from agentrl.report.transcript_view import transcript_browser

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .meta{opacity:.85;font-size:13px}nav{background:#e5e7eb;padding:6px 24px;position:sticky;top:0;z-index:2}
nav a{margin-right:14px;color:#1f2937;text-decoration:none;font-weight:600}
main{padding:8px 24px 40px;max-width:1400px}section{background:#fff;border-radius:8px;padding:10px 18px;
margin:14px 0;box-shadow:0 1px 2px rgba(0,0,0,.08)}h2{font-size:17px;margin:6px 0 10px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{border-bottom:1px solid #e5e7eb;
padding:3px 10px;text-align:left;vertical-align:top}th{background:#f3f4f6}td.num{text-align:right;
font-variant-numeric:tabular-nums}img{max-width:100%;height:auto}section img{width:100%}.muted{color:#6b7280}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#f3f4f6;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:18px}.up{color:#047857}.down{color:#b91c1c}.flat{color:#374151}.na{color:#6b7280}
.verdict{font-size:16px;font-weight:700;margin:8px 0}.verdict.up{color:#047857}.verdict.down{color:#b91c1c}
.sidebyside{display:grid;grid-template-columns:1fr 1fr;gap:12px}.episode{border:1px solid #e5e7eb;
border-radius:6px;padding:6px 10px;min-width:0}.episode h4{margin:4px 0 8px}
pre{white-space:pre-wrap;word-break:break-word;background:#f9fafb;padding:6px;border-radius:4px;margin:4px 0;
font-size:12px;max-height:320px;overflow:auto}.turn{border-left:3px solid #93c5fd;padding-left:8px;margin:8px 0}
.who{font-weight:600;font-size:12px;color:#1e40af}.call{margin:4px 0 4px 8px;font-size:12px}
.call code{margin-left:6px;color:#374151}.call.ok .status{color:#047857}.call.failed .status{color:#b45309}
.call.malformed .status{color:#b91c1c}.badge{font-size:11px;border-radius:10px;padding:1px 8px;
margin-left:6px;font-weight:600}.badge.pass{background:#d1fae5;color:#065f46}.badge.fail{background:#fee2e2;
color:#991b1b}.badge.end{background:#e0e7ff;color:#3730a3}.endline{font-size:12px;color:#374151;margin-top:6px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:10px}
select{font-size:13px;padding:2px 4px}.figs img{display:block;margin:6px 0}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, spec: str = ".3f") -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return format(value, spec) if ok else "n/a"


def _iv(iv: dict[str, Any] | None, signed: bool = False) -> str:
    """`mean [lo, hi]`, or `mean [n/a: reason]` for an undefined interval (agentrl.eval.bootstrap)."""
    from agentrl.eval.bootstrap import format_interval

    return format_interval(iv if isinstance(iv, dict) else None, signed=signed)


_NUMERIC = re.compile(r"^(n/a|[-+]?\d[\d.e+-]*( \[.*\])?|\d+/\d+( \(.*\))?|\d+(:\d\d){1,2}|[\d.]+ (B|kB|MB|GB|TB|s))$")


def _table(head: list[str], rows: list[list[Any]], numeric: bool = True) -> str:
    """An HTML table; with `numeric`, cells after the first that read as numbers (3, 0.25, +0.1 [lo, hi],
    5/8, n/a) are right-aligned."""
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if numeric and i and _NUMERIC.match(str(c)) else ""}>'
                                    f'{_esc(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: Path | None, alt: str) -> str:
    if png is None or not png.is_file():
        return ""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{data}">'


def _plots(data: dict[str, Any], drawn: list[Path] | None = None) -> dict[str, str]:
    """{plot file name: <img> tag} of every plot the data supports: the PNGs `drawn` from this same data
    (agentrl.report.plots.plot_results' return value), else drawn now into a temporary folder."""
    from agentrl.report.plots import plot_results

    if drawn is not None:
        return {Path(p).name: _img(Path(p), Path(p).stem.replace("_", " ")) for p in drawn}
    with tempfile.TemporaryDirectory(prefix="agentrl-report-") as tmp:
        return {p.name: _img(p, p.stem.replace("_", " ")) for p in plot_results(data, tmp)}


def _evals(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["label"]: e for e in data.get("evaluations") or []}


def _summary(data: dict[str, Any]) -> str:
    cfg, ev = data.get("config") or {}, _evals(data)
    steps = data.get("steps") or []
    cards = [("status", data.get("status", "?")), ("steps done", len(steps))]
    trained = [s["tokens_trained"] > 0 for s in steps if isinstance(s.get("tokens_trained"), (int, float))]
    if trained:  # a step whose groups all scored alike trains nothing: "steps done" alone hid a run that never updated
        cards.append(("steps that trained", sum(trained)))
    cards.append(("wall clock (min:s)", duration(data.get("wall_clock_s"))))
    for label in ("before", "after", "eval"):
        if label in ev:
            cards.append((f"held-out pass@1 {label}", _iv(ev[label].get("pass_at_1"))))
    verdicts = []
    for p in data.get("paired") or []:
        v = verdict(p.get("diff"))  # coloured by the interval, not by the sign of the mean
        cards.append((f"paired {p['after']} - {p['before']}", f'<span class="{v.css}">{_esc(_iv(p.get("diff"), True))}</span>'))
        verdicts.append(f'<p class="verdict {v.css}">{_esc(p["after"])} vs {_esc(p["before"])}: {_esc(v.text)}</p>')
    body = "".join(f'<div class="card">{_esc(k)}<b>{v if str(v).startswith("<span") else _esc(v)}</b></div>'
                   for k, v in cards)
    err = f'<p class="down">error: {_esc(data["error"])}</p>' if data.get("error") else ""
    if data.get("status") == "running":  # `agentrl report --html` on a run still going
        err += (f'<p>The run is still going: this page shows its results file as of {_esc(data.get("updated", "?"))} '
                '(rewritten after every step); the run writes its own report.html when it ends.</p>')
    if trained and not any(trained):
        err += ('<p class="down">the policy never changed: every advantage was 0 in every step (each group\'s '
                'episodes scored alike); the transcripts show why</p>')
    what = (f'model <b>{_esc(cfg.get("model", "?"))}</b>, env <b>{_esc(cfg.get("env", "?"))}</b>, tasks '
            f'<b>{_esc(cfg.get("tasks", "?"))}</b>, seed {_esc(data.get("seed", "?"))}, '
            f'{_esc(cfg.get("group_size", "?"))} episodes x {_esc(cfg.get("prompts_per_step", "?"))} prompts per step')
    return (f'<section id="summary"><h2>Summary</h2><p>{what}</p>{"".join(verdicts)}<div class="cards">{body}</div>'
            f'{err}</section>')


def _warm_start_section(data: dict[str, Any], imgs: dict[str, str]) -> str:
    """The supervised warm start (results "warm_start"): NLL before -> after, its data, the loss curve, its
    settings and per-step records; "" when the run had none."""
    ws = data.get("warm_start")
    if not isinstance(ws, dict):
        return ""
    spec = RESULTS_SCHEMA["properties"]["warm_start"]["properties"]
    d, before, after = ws.get("data") or {}, ws.get("nll_before"), ws.get("nll_after")
    change = after - before if all(isinstance(v, (int, float)) for v in (before, after)) else None
    cards = [("method", ws.get("method", "?")), ("policy NLL before", _num(before, ".4f") + " nats/token"),
             ("policy NLL after", _num(after, ".4f") + " nats/token"), ("after - before", _num(change, "+.4f")),
             ("optimizer steps", len(ws.get("losses") or [])), ("wall clock", with_unit(ws.get("wall_clock_s"), "s"))]
    body = "".join(f'<div class="card">{_esc(k)}<b>{_esc(v)}</b></div>' for k, v in cards)
    def what(field: dict[str, Any]) -> list[str]:  # the schema's words, less its note on nulls
        return [str(field.get("description", "")).split(" (null:")[0], field.get("unit", "")]

    dspec = spec["data"]["properties"]
    data_rows = [[k, _num(v, ".4g") if isinstance(v, float) else v, *what(dspec.get(k, {}))] for k, v in d.items()]
    data_rows += [[k, with_unit(ws.get(k), "s"), *what(spec[k])] for k in ("data_s", "train_s", "wall_clock_s") if k in ws]
    settings = {k: v for k, v in (ws.get("settings") or {}).items() if k != "task_ids"}
    ids = (ws.get("settings") or {}).get("task_ids") or []
    steps = [s for s in ws.get("steps") or [] if isinstance(s, dict)]
    cols = [c for c in ("step", "epoch", "loss", "grad_norm", "lr", "policy_tokens", "tokens", "wall_clock_s")
            if any(c in s for s in steps)]
    return ('<section id="warm_start"><h2>Warm start</h2><p>Supervised fine-tuning before the first held-out '
            "evaluation; the NLL is the token-mean negative log-likelihood of the warm-start episodes' policy "
            f'tokens, over all of them.</p><div class="cards">{body}</div>{imgs.get("warm_start.png", "")}'
            "<div class='grid2'><div><h3>Data and time</h3>"
            + _table(["field", "value", "what it is", "unit"], data_rows) + "</div><div><h3>Settings</h3>"
            + _table(["setting", "value"], [[k, repr(v)] for k, v in sorted(settings.items())], numeric=False)
            + (f"<details><summary>{len(ids)} task ids</summary><p>{_esc(', '.join(map(str, ids)))}</p></details>"
               if ids else "") + "</div></div>"
            + (f"<details><summary>per optimizer step ({len(steps)})</summary>"
               + _table(cols, [[_num(s.get(c), ".4g") if isinstance(s.get(c), float) else s.get(c, "n/a")
                                for c in cols] for s in steps]) + "</details>" if steps else "")
            + "</section>")


def _family_of(data: dict[str, Any], task: dict[str, Any]) -> str:
    """The task record's family; older files: the run's task table, else the id's first part."""
    fams = (data.get("tasks") or {}).get("heldout_families") or {}
    tid = task["task_id"]
    return task.get("family") or fams.get(tid) or tid.split("-heldout")[0].split("-")[0]


def _eval_section(data: dict[str, Any], imgs: dict[str, str]) -> str:
    evs = data.get("evaluations") or []
    if not evs:
        return '<section id="eval"><h2>Held-out evaluation</h2><p class="muted">No evaluation yet.</p></section>'
    rows = [[e["label"], e["step"], len(e["tasks"]), e["tasks"][0].get("episodes", e["tasks"][0]["trials"]),
             _iv(e.get("pass_at_1")),
             _num((e.get("tool_stats") or {}).get("hidden_pass_fraction")),
             ", ".join(f"{k} {v}" for k, v in (e.get("end_reasons") or {}).items()) or "n/a"] for e in evs]
    alpha = evs[0]["pass_at_1"].get("alpha", 0.05)
    out = [f'<section id="eval"><h2>Held-out evaluation</h2>{imgs.get("eval_curve.png", "")}',
           _table(["evaluation", "step", "tasks", "episodes per task", f"pass@1 [{100 * (1 - alpha):.0f}% interval]",
                   "hidden_pass_fraction", "episodes ended by"], rows),
           '<p class="muted">pass@1: mean over tasks of the fraction of episodes whose final file passes every hidden '
           'test; the interval resamples tasks (task-level percentile bootstrap). hidden_pass_fraction: '
           + _esc(stat_description("hidden_pass_fraction")[0]) + ".</p>"]
    if data.get("paired"):
        out.append(_table(["paired difference", "after - before [interval]", "verdict"],
                          [[f"{p['after']} - {p['before']}", _iv(p.get("diff"), True), verdict(p.get("diff")).text]
                           for p in data["paired"]]))
    ev = _evals(data)
    first, last = evs[0], ev.get("after", evs[-1])
    fams = sorted(set(first.get("per_family") or {}) | set(last.get("per_family") or {}))
    if fams:
        def rate(e: dict[str, Any], f: str) -> str:
            d = (e.get("per_family") or {}).get(f)
            return f"{d['successes']}/{d['trials']} ({d['successes'] / d['trials']:.2f})" if d and d["trials"] else "n/a"
        out.append("<h3>Per family</h3>" + _table(["family", "tasks", first["label"], last["label"]],
                   [[f, (first.get("per_family") or {}).get(f, {}).get("tasks", "?"), rate(first, f), rate(last, f)]
                    for f in fams]))
    out.append("<h3>Per task</h3>" + _per_task(data, first, last) + "</section>")
    return "".join(out)


def _per_task(data: dict[str, Any], first: dict[str, Any], last: dict[str, Any]) -> str:
    a = {t["task_id"]: t for t in last["tasks"]}
    rows = []
    for t in first["tasks"]:
        b_rate = t["successes"] / t["trials"] if t["trials"] else None
        la = a.get(t["task_id"])
        a_rate = la["successes"] / la["trials"] if la and la["trials"] else None
        change = "n/a" if a_rate is None or b_rate is None else f"{a_rate - b_rate:+.3f}"
        rows.append([t["task_id"], _family_of(data, t), f"{t['successes']}/{t['trials']}",
                     f"{la['successes']}/{la['trials']}" if la else "n/a", change])
    return _table(["task", "family", first["label"], last["label"], "change in pass rate"], rows)


def _training_section(data: dict[str, Any], imgs: dict[str, str]) -> str:
    steps = data.get("steps") or []
    if not steps:
        return ""
    figs = "".join(imgs.get(n, "") for n in ("train_reward.png", "update.png", "entropy.png"))
    if "entropy.png" not in imgs:
        figs += ('<p class="muted">No entropy or update curves: no step trained a token (every update was '
                 "skipped: all groups had zero reward spread).</p>" if "update.png" not in imgs else
                 '<p class="muted">No entropy curve: the trainer logged no entropy.</p>')
    last = steps[-1]
    keys = [k for k in STEP_METRICS if k in last] + sorted(k for k in last if k.startswith("tools/") and k not in STEP_METRICS)
    rows = [[k, with_unit(last[k], stat_description(k)[1]), *stat_description(k)] for k in keys if k in dedupe_stats(last)]
    return (f'<section id="training"><h2>Training</h2><div class="figs">{figs}</div>'
            f"<details><summary>last step ({last['step']}) metrics</summary>"
            + _table(["metric", "value", "what it is", "unit"], rows) + "</details></section>")


def _tools_section(data: dict[str, Any], imgs: dict[str, str]) -> str:
    ev = _evals(data)
    labels = [x for x in ("before", "after") if x in ev] or list(ev)[:1]
    stats = {lab: dedupe_stats(ev[lab].get("tool_stats") or {}) for lab in labels}
    names = sorted({k for s in stats.values() for k in s})
    if not names:
        return ""
    rows = [[k, *(_num(stats[lab].get(k), ".3g") for lab in labels), *stat_description(k)] for k in names]
    schemas = ", ".join(_esc((s.get("function") or s).get("name", "?")) for s in data.get("tool_schemas") or [])
    return (f'<section id="tools"><h2>Tool statistics (held-out, mean per episode)</h2>'
            f'<p>tools shown to the model: {schemas or "none"}</p>{imgs.get("tool_stats.png", "")}'
            + _table(["statistic", *labels, "what it is", "unit"], rows) + "</section>")


def _limit(name: str, value: Any) -> Any:
    """A sandbox limit in human units by its name's suffix (`memory_bytes` -> GB, `timeout_s` -> s or min:s)."""
    unit = "bytes" if name.endswith("_bytes") else "s" if name.endswith("_s") else ""
    return with_unit(value, unit) if unit and isinstance(value, (int, float)) else value


# what the noise table's columns mean (agentrl.eval.noise); the table had only its headers
NOISE_COLUMNS = ("train: the mean training reward per step; eval: the held-out pass@1 curve. step noise: the noise "
                 "of one point (sd of the step-to-step differences / sqrt 2). rise: the change of the least-squares line "
                 "from the first point to the last, with its standard error; t = rise / rise stderr (beyond about 2: "
                 "a trend larger than the noise). n: points in the series (a trend needs at least 3; n/a below).")


def _config_section(data: dict[str, Any]) -> str:
    cfg = data.get("config") or {}
    sandbox = data.get("sandbox") or {}
    limits = sandbox.get("limits") or {}
    noise = data.get("noise") or {}
    noise_rows = [[k, _num(v.get("step_noise")), _num(v.get("rise"), "+.3f"), _num(v.get("rise_stderr")),
                   _num(v.get("t"), ".2f"), _num(v.get("n"), ".0f")] for k, v in noise.items() if isinstance(v, dict)]
    return ('<section id="config"><h2>Config, versions, sandbox</h2><div class="grid2"><div><h3>Config</h3>'
            + _table(["field", "value"], [[k, repr(v)] for k, v in sorted(cfg.items())], numeric=False)
            + "</div><div><h3>Versions</h3>"
            + _table(["package", "version"], [[k, v] for k, v in sorted((data.get("versions") or {}).items())], False)
            + f"<h3>Sandbox</h3><p>backend <b>{_esc(sandbox.get('backend', '?'))}</b></p>"
            + _table(["limit", "value"], [[k, _limit(k, v)] for k, v in sorted(limits.items())])
            + ("<h3>Noise analysis</h3>" + _table(["series", "step noise", "rise", "rise stderr", "t", "n"], noise_rows)
               + f"<p class='muted'>{_esc(NOISE_COLUMNS)}</p>" if noise_rows else "")
            + f"<p class='muted'>created {_esc(data.get('created'))}, updated {_esc(data.get('updated'))}, "
              f"schema version {_esc(data.get('schema_version'))}</p></div></div></section>")


def _warnings_section(data: dict[str, Any]) -> str:
    """The run-health warnings (agentrl.rl.health), or "" when the run had none."""
    warnings = data.get("warnings") or []
    if not warnings:
        return ""
    items = "".join(f"<li>{_esc(w.get('message', ''))}</li>" for w in warnings)
    return (f'<section id="warnings"><h2>Warnings</h2><p class="down">{len(warnings)} step'
            f'{"s" * (len(warnings) > 1)} jumped against the run\'s recent steps; read the transcripts of the steps '
            f'named (a learning rate too high shows here first).</p><ul>{items}</ul></section>')


def render_html(data: dict[str, Any], *, title: str | None = None, plots: list[Path] | None = None) -> str:
    """The report page of a (validated) results dict, as one self-contained HTML string.

    Args:
        plots: PNGs already drawn from `data` by agentrl.report.plots.plot_results (embedded as they are);
            None draws them afresh.
    """
    cfg = data.get("config") or {}
    title = title or f"agentrl run: {cfg.get('out') or 'results'}"
    imgs = _plots(data, plots)
    sections = [_summary(data) + _warnings_section(data), _warm_start_section(data, imgs), _eval_section(data, imgs), _training_section(data, imgs), _tools_section(data, imgs),
                '<section id="transcripts"><h2>Transcripts</h2>' + transcript_browser(data.get("transcripts") or [])
                + "</section>", _config_section(data)]
    links = (("summary", "Summary"), ("warm_start", "Warm start"), ("eval", "Evaluation"), ("training", "Training"),
             ("tools", "Tools"), ("transcripts", "Transcripts"), ("config", "Config"))
    nav = "".join(f'<a href="#{k}">{v}</a>' for k, v in links if k != "warm_start" or sections[1])
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
            f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body><header><h1>{_esc(title)}</h1>"
            f"<div class='meta'>status {_esc(data.get('status'))} &middot; updated {_esc(data.get('updated'))}</div>"
            f"</header><nav>{nav}</nav><main>{''.join(sections)}</main></body></html>\n")


def write_html_report(data: dict[str, Any], path: str | os.PathLike, *, title: str | None = None,
                      plots: list[Path] | None = None) -> Path:
    """Render `data` (see render_html) and write it atomically to `path` (usually `<run dir>/report.html`)."""
    return atomic_write_text(path, render_html(data, title=title, plots=plots))
