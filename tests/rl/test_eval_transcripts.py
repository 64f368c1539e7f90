"""`agentrl eval` keeps one transcript per held-out task (as `train` does before and after), and
`agentrl report --html` on the eval folder shows them in the transcript browser."""

from __future__ import annotations

import html
import re

from agentrl.cli import main
from agentrl.report.results import validate_results


def test_eval_writes_one_transcript_per_task_and_the_report_shows_them(tmp_path):
    out = tmp_path / "ev"
    assert main(["eval", "--model", "demo-qwen3", "--env", "edit-menu", "--families", "minmax,compare",
                 "--eval-size", "4", "--eval-n", "2", "--max-new-tokens", "16", "--n-boot", "100",
                 "--out", str(out)]) == 0
    data = validate_results(out / "results.json")
    ev = next(e for e in data["evaluations"] if e["label"] == "eval")
    task_ids = [t["task_id"] for t in ev["tasks"]]
    trs = data["transcripts"]
    assert sorted(t["task_id"] for t in trs) == sorted(task_ids) and {t["kind"] for t in trs} == {"heldout_eval"}
    for t in trs:  # a full episode: the prompt, its turns, why it ended and its reward
        assert t["text"].startswith("[system]") and "[end]" in t["text"] and t["end_reason"]
        assert t["turns"] and t["step"] == 0
        assert t["reward"] is None or 0.0 <= t["reward"] <= 1.0
    assert main(["report", "--html", "--no-plots", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    panels = re.findall(r'<div class="task-panel" data-task="([^"]+)">', page)
    assert sorted(html.unescape(p) for p in panels) == sorted(task_ids)
    assert page.count("<h4>evaluation ") == len(task_ids) and "before training" not in page
    assert "No transcripts in this results file" not in page
