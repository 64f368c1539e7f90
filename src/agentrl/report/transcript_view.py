"""The HTML report's transcript browser: held-out episodes before/after side by side, turn by turn.

Not the page around it (agentrl.report.html). Transcripts written by this version carry structured turns
(agentrl.rollout.transcript.turn_records); older files carry only the text rendering, which
`parse_transcript_text` reads back (its markers are agentrl's own: `[assistant k]`, `[tool NAME ->
STATUS]`, `[end] REASON, reward R`).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

_MARK = re.compile(r"^\[(system|tools|user|end|assistant \d+|"
                   r"tool (?P<name>[^\]\s]*) -> (?P<status>[a-z ]+?)(?: \((?P<why>[^\]]*)\))?)\]"
                   r"(?P<cut> \(hit token limit\))? ?", re.M)


def parse_transcript_text(text: str) -> dict[str, Any]:
    """{"system", "user", "tools", "turns", "end_reason", "reward"} read back from a text transcript
    (agentrl.rollout.transcript.render_transcript); turns as turn_records without arguments."""
    out: dict[str, Any] = {"system": "", "user": "", "tools": "", "turns": [], "end_reason": None, "reward": None}
    marks = list(_MARK.finditer(text))
    for m, nxt in zip(marks, [*marks[1:], None], strict=False):
        body = text[m.end(): nxt.start() if nxt else len(text)].rstrip("\n")
        tag = m.group(1)
        if tag in ("system", "user", "tools"):
            out[tag] = body
        elif tag.startswith("assistant"):
            out["turns"].append({"text": body, "hit_token_limit": bool(m.group("cut")), "calls": []})
        elif tag == "end":
            end = re.match(r"(.*), (?:reward (-?[\d.]+|nan)|unscorable \(no reward\))$", body.strip())
            if end:
                out["end_reason"] = end.group(1)
                out["reward"] = float(end.group(2)) if end.group(2) else None
            else:
                out["end_reason"] = body.strip()
        elif out["turns"]:
            out["turns"][-1]["calls"].append({"name": m.group("name"), "arguments": None, "status": m.group("status"),
                                              "malformed": m.group("why"), "content": body})
    return out


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _episode(rec: dict[str, Any] | None, side: str) -> str:
    """One episode's column: its turns, each call with arguments, status and result; end reason, reward."""
    if rec is None:
        return f'<div class="episode"><h4>{side}</h4><p class="muted">no transcript recorded</p></div>'
    parsed = parse_transcript_text(rec.get("text") or "")
    turns = rec.get("turns") if rec.get("turns") is not None else parsed["turns"]
    end = rec.get("end_reason") or parsed["end_reason"] or "?"
    reward = rec.get("reward") if rec.get("reward") is not None else parsed["reward"]
    rtxt = "n/a (unscorable)" if reward is None else f"{reward:.3f}"
    cls = "pass" if reward is not None and reward >= 1.0 else "fail"
    parts = [f'<div class="episode"><h4>{side} <span class="badge {cls}">reward {rtxt}</span> '
             f'<span class="badge end">ended: {_esc(end)}</span></h4>']
    if parsed["user"]:
        parts.append(f'<details><summary>prompt</summary><pre>{_esc(parsed["system"])}\n\n'
                     f'[tools] {_esc(parsed["tools"])}\n\n{_esc(parsed["user"])}</pre></details>')
    for k, turn in enumerate(turns, 1):
        cut = ' <span class="badge fail">hit token limit</span>' if turn.get("hit_token_limit") else ""
        parts.append(f'<div class="turn"><div class="who">assistant turn {k}{cut}</div>'
                     f'<pre class="say">{_esc(turn.get("text", ""))}</pre>')
        for call in turn.get("calls") or []:
            args = "" if call.get("arguments") is None else _esc(json.dumps(call["arguments"], ensure_ascii=False))
            why = f' ({_esc(call["malformed"])})' if call.get("malformed") else ""
            parts.append(f'<div class="call {_esc(call.get("status", ""))}"><b>{_esc(call.get("name"))}</b>'
                         f'<code>{args}</code> &rarr; <span class="status">{_esc(call.get("status"))}{why}</span>'
                         f'<pre>{_esc(call.get("content", ""))}</pre></div>')
        parts.append("</div>")
    parts.append(f'<div class="endline">end: {_esc(end)}, reward {rtxt}</div></div>')
    return "".join(parts)


# the held-out transcript kinds, in the order of their columns, and each column's title
HELDOUT_SIDES: tuple[tuple[str, str], ...] = (
    ("heldout_before", "before training"), ("heldout_after", "after training"), ("heldout_eval", "evaluation"))


def transcript_browser(transcripts: list[dict[str, Any]]) -> str:
    """The held-out tasks' episodes side by side (before and after training; `agentrl eval`'s one column),
    one panel per task, chosen from a list (all panels are in the DOM; the inline script only shows one at a
    time); training episodes of step 0 below."""
    by_kind = {k: {t["task_id"]: t for t in transcripts if t.get("kind") == k} for k, _ in HELDOUT_SIDES}
    sides = [(k, title) for k, title in HELDOUT_SIDES if by_kind[k]]
    before, after = by_kind["heldout_before"], by_kind["heldout_after"]
    ids = sorted({i for k, _ in sides for i in by_kind[k]})
    if not ids and not transcripts:
        return '<p class="muted">No transcripts in this results file.</p>'
    opts = []
    for i in ids:
        b, a = before.get(i, {}).get("reward"), after.get(i, {}).get("reward")
        mark = "" if b is None or a is None else (" ▲" if a > b else " ▼" if a < b else "")
        opts.append(f'<option value="{_esc(i)}">{_esc(i)}{mark}</option>')
    panels = [f'<div class="task-panel" data-task="{_esc(i)}"><h3>{_esc(i)}</h3><div class="sidebyside">'
              + "".join(_episode(by_kind[k].get(i), title) for k, title in sides) + "</div></div>"
              for i in ids]
    known = {k for k, _ in HELDOUT_SIDES}
    train = [t for t in transcripts if t.get("kind") not in known]
    extra = "".join(f'<details class="train-ep"><summary>{_esc(t.get("kind"))}: {_esc(t.get("task_id"))}</summary>'
                    f'{_episode(t, "episode")}</details>' for t in train)
    legend = "▲ reward rose, ▼ fell; " if before and after else ""
    picker = (f'<label>held-out task <select id="task-pick">{"".join(opts)}</select></label>'
              f' <span class="muted">({legend}one episode per task in each column)</span>') if ids else ""
    return (picker + "".join(panels) + (f"<h3>Training episodes</h3>{extra}" if extra else "")
            + "<script>" + _PICK_JS + "</script>")


_PICK_JS = """
(function(){var s=document.getElementById('task-pick');if(!s)return;
function show(){document.querySelectorAll('.task-panel').forEach(function(p){
p.style.display=p.getAttribute('data-task')===s.value?'':'none';});}
s.addEventListener('change',show);show();})();
"""
