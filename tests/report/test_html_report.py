"""`agentrl report --html`: one self-contained page, checked in headless Chromium from its DOM."""

import re
import shutil
import subprocess

import pytest
from synthetic_results import build_synthetic, warm_start_record

from agentrl.cli import main
from agentrl.report.html import render_html
from agentrl.report.results import RunResults, validate_results
from agentrl.report.transcript_view import parse_transcript_text
from agentrl.rollout.transcript import render_transcript, turn_records

TURNS = [{"text": '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/repo/f.py"}}\n</tool_call>',
          "hit_token_limit": False,
          "calls": [{"name": "Read", "arguments": {"file_path": "/repo/f.py"}, "status": "ok", "malformed": None,
                     "content": "     1\tdef coral_lagoon(data):"}]},
         {"text": "Fixed: the tests pass.", "hit_token_limit": False, "calls": []}]


def _run_dir(tmp_path):
    res = build_synthetic(tmp_path / "results.json")
    res.add_transcript("heldout_after", "task0", "[end] final_answer, reward 1.000", reward=1.0,
                       end_reason="final_answer", turns=TURNS)
    res.add_transcript("heldout_before", "task1", "[user] fix it\n[assistant 1] hmm\n[end] out_of_turns, reward 0.000")
    res.add_transcript("train_step0", "train7", "[assistant 1] x\n[end] final_answer, reward 0.000", step=0,
                       reward=0.0, end_reason="final_answer", turns=[])
    res.evaluation("before")["per_family"] = {"minmax": {"tasks": 10, "successes": 8, "trials": 80}}
    res.evaluation("after")["per_family"] = {"minmax": {"tasks": 10, "successes": 39, "trials": 80}}
    res.evaluation("after")["tool_stats"]["hidden_pass_fraction"] = 0.6
    res.write()
    return tmp_path


def test_report_html_is_self_contained(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert main(["report", "--html", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "wrote" in capsys.readouterr().out
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("data:image/png;base64,") >= 4  # plots inline
    for words in ("Held-out evaluation", "Per family", "Per task", "Training", "Tool statistics", "Transcripts",
                  "Config", "Versions", "hidden_pass_fraction", "partial credit"):
        assert words in page, words


def test_transcript_text_reads_back():
    from agentrl.envs.base import Observation, ToolCall, ToolResult
    from agentrl.rollout.trajectory import Turn

    call = ToolCall(name="edit", arguments={"op": "fix_minmax"}, raw="")
    turns = [Turn(completion_ids=(1, 2), sampler_logprobs=(0.0, 0.0), text="<tool_call>...</tool_call>",
                  calls=(call,), results=(ToolResult(call, "ok", "Applied edit 'fix_minmax'.\nmore"),)),
             Turn(completion_ids=(3,), sampler_logprobs=(0.0,), text="done", hit_token_limit=True)]
    obs = Observation(system="sys", user="fix [it]", tools=[{"type": "function", "function": {"name": "edit"}}])
    back = parse_transcript_text(render_transcript(obs, turns, "out_of_turns", 0.5))
    assert back["user"] == "fix [it]" and back["end_reason"] == "out_of_turns" and back["reward"] == 0.5
    assert [t["text"] for t in back["turns"]] == ["<tool_call>...</tool_call>", "done"]
    assert back["turns"][1]["hit_token_limit"] and back["turns"][0]["calls"][0]["content"].endswith("more")
    unscorable = parse_transcript_text(render_transcript(obs, turns, "env_error", None))
    assert unscorable["end_reason"] == "env_error" and unscorable["reward"] is None
    rec = turn_records(turns)
    assert rec[0]["calls"][0] == {"name": "edit", "arguments": {"op": "fix_minmax"}, "status": "ok",
                                  "malformed": None, "content": "Applied edit 'fix_minmax'.\nmore"}


def test_render_handles_a_run_without_steps_or_transcripts(tmp_path):
    res = RunResults(tmp_path / "results.json", {"model": "m"}, seed=0)
    page = render_html(validate_results(res.path))
    assert "No evaluation yet" in page and "No transcripts" in page


def test_summary_counts_the_steps_that_trained(tmp_path):
    """`train --preset quick --env coding-tools` showed "steps done 10" and nothing else, though every group scored 0
    and no step updated the policy: the summary counts the steps that trained, and says so when none did."""
    res = build_synthetic(tmp_path / "results.json")
    for i, step in enumerate(res.data["steps"]):
        step["tokens_trained"] = 100.0 if i % 2 else 0.0
    page = render_html(res.data, plots=[])
    n = len(res.data["steps"])
    assert f"steps that trained<b>{n // 2}</b>" in page and "the policy never changed" not in page
    for step in res.data["steps"]:
        step["tokens_trained"] = 0.0
    page = render_html(res.data, plots=[])
    assert "steps that trained<b>0</b>" in page and "the policy never changed" in page
    for step in res.data["steps"]:
        del step["tokens_trained"]  # a file without the metric: no card, no claim
    page = render_html(res.data, plots=[])
    assert "steps that trained" not in page and "the policy never changed" not in page


def test_noise_table_counts_points_as_integers(tmp_path):
    res = build_synthetic(tmp_path / "results.json")
    res.set("noise", {"train": {"n": 10, "step_noise": 0.1, "rise": 0.2, "rise_stderr": 0.1, "t": 2.0},
                      "eval": {"n": 2.0}})  # files written before 2026-12-05 stored a short curve's n as 2.0
    page = render_html(res.data, plots=[])
    row = re.search(r"<tr><td>eval</td>.*?</tr>", page).group(0)
    assert ">2<" in row and "2.0" not in row


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian's chromium is not installed (scripts/setup.sh installs it when run as root)")
def test_report_renders_in_headless_chromium(tmp_path):
    run = _run_dir(tmp_path)
    assert main(["report", "--html", "--no-plots", str(run / "results.json")]) == 0
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'chrome'}", "--dump-dom", (run / "report.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0 and "</html>" in dom, proc.stderr[-2000:]
    # the evaluation: curve image, the paired interval, per-family and per-task rows
    assert re.search(r'<img alt="eval curve" src="data:image/png;base64,', dom)
    assert "+0.388 [" in dom and "8/80 (0.10)" in dom and "39/80 (0.49)" in dom and "task9" in dom
    # transcripts: the picker lists held-out tasks; the after episode shows the call, its result, end and reward
    assert '<option value="task0">' in dom and '<option value="task1">' in dom
    assert "coral_lagoon" in dom and "ended: final_answer" in dom and "reward 1.000" in dom
    assert "ended: out_of_turns" in dom  # the text-only transcript, read back
    # the inline script ran: only the selected task's panel is shown
    panels = re.findall(r'<div class="task-panel" data-task="(\w+)"( style="display: none;")?', dom)
    assert panels == [("task0", ""), ("task1", ' style="display: none;"')]
    assert "Training episodes" in dom and "train7" in dom
    assert "group_size" in dom and "transformers" in dom and "rlimit" in dom


def test_warm_start_section_only_when_the_run_had_one(tmp_path):
    from agentrl.report.plots import plot_warm_start

    plain = build_synthetic(tmp_path / "plain" / "results.json")
    page = render_html(plain.data)
    assert 'id="warm_start"' not in page and "Warm start" not in page
    assert plot_warm_start(plain.data, tmp_path / "ws.png") is None and not (tmp_path / "ws.png").exists()

    res = build_synthetic(tmp_path / "ws" / "results.json")
    res.set("warm_start", warm_start_record())
    res.write()
    data = validate_results(tmp_path / "ws" / "results.json")  # the record is what the schema allows
    assert main(["report", "--html", str(tmp_path / "ws")]) == 0
    page = (tmp_path / "ws" / "report.html").read_text()
    section = page[page.index('<section id="warm_start">'):]
    section = section[: section.index("</section>")]
    assert '<a href="#warm_start">Warm start</a>' in page
    assert page.index('id="warm_start"') < page.index('id="eval"')  # it ran before the first evaluation
    for words in ("2.7183 nats/token", "0.9123 nats/token", "after - before", "-1.8059", "data:image/png;base64,", "mean_reward",
                  "policy tokens trained on per epoch", "warmup_steps", "12 task ids", "minmax-11",
                  "per optimizer step (6)", "grad_norm"):
        assert words in section, words
    assert "(null:" not in section
    assert (tmp_path / "ws" / "plots" / "warm_start.png").is_file()
    assert plot_warm_start(data, tmp_path / "ws.png") == tmp_path / "ws.png"
    del data["warm_start"]["steps"]  # older files: the losses list alone still draws the curve
    assert plot_warm_start(data, tmp_path / "ws2.png") == tmp_path / "ws2.png"


def test_noise_table_says_what_its_columns_mean(tmp_path):
    """The report's noise table had only the headers "step noise, rise, rise stderr, t, n": a newcomer could not
    tell a trend from noise by them."""
    res = build_synthetic(tmp_path / "results.json")
    res.set("noise", {"train": {"n": 20, "step_noise": 0.118, "rise": 0.553, "rise_stderr": 0.101, "t": 5.47}})
    page = render_html(res.data, plots=[])
    note = page[page.index("<h3>Noise analysis</h3>"):].split("</p>")[0]
    for words in ("step noise: the noise of one point", "rise: the change of the least-squares line",
                  "t = rise / rise stderr", "n: points in the series"):
        assert words in note, words
    res.set("noise", {})
    assert "step noise: the noise of one point" not in render_html(res.data, plots=[])
