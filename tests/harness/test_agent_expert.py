"""The opencode expert (agentrl.harness.expert): its replies, and `agentrl sft --agent opencode` end to end
through the real harness against tiny-qwen3 (rows = opencode's own token stream, rewards from hidden tests)."""

import json

import pytest
from test_opencode import needs_opencode

from agentrl.cli import main
from agentrl.envs.experts import candidate_line_edits
from agentrl.harness.episode import task_message
from agentrl.harness.expert import CLOSING_TEXT, opencode_expert_reply, shown_tests_command
from agentrl.tasks import make_tasks


def _context(task, workdir, assistant_turns):
    """A decoded context as opencode's requests render: system prompt with the working directory, the task
    message, and `assistant_turns` earlier assistant turns (the first one's result: the file, numbered as
    opencode's read tool shows it), then the generation prompt."""
    head = f"<|im_start|>system\nWorking directory: {workdir}\n<|im_end|>\n<|im_start|>user\n{task_message(task)}<|im_end|>\n"
    numbered = "\n".join(f"{i}: {line}" for i, line in enumerate(task.files[task.source_file].splitlines(), 1))
    turns = [f"<|im_start|>assistant\n...<|im_end|>\n<|im_start|>user\n<tool_response>\n{numbered if k == 0 else 'ok'}"
             "\n</tool_response><|im_end|>\n" for k in range(assistant_turns)]
    return head + "".join(turns) + "<|im_start|>assistant\n"


def _call(text):
    body = text.split("<tool_call>\n", 1)[1].split("\n</tool_call>", 1)[0]
    return json.loads(body)


def test_expert_reads_then_applies_the_correct_line_edit_then_stops():
    tasks = make_tasks(6, ["minmax", "compare", "zero"], seed=3, split="train")
    reply = opencode_expert_reply(tasks)
    for task in tasks:
        path = f"/w/repo/{task.source_file}"
        assert _call(reply(_context(task, "/w/repo", 0))) == {"name": "read", "arguments": {"filePath": path}}
        edit = _call(reply(_context(task, "/w/repo/", 1)))
        (correct,) = [e for name, e in candidate_line_edits(task) if name == task.correct_op.name]
        assert edit == {"name": "edit", "arguments": {"filePath": path, "oldString": correct[0],
                                                      "newString": correct[1]}}
        source = task.files[task.source_file]
        assert source.count(correct[0]) == 1  # opencode's edit needs a unique match
        assert _call(reply(_context(task, "/w/repo", 2))) == {
            "name": "bash", "arguments": {"command": shown_tests_command(task), "description": "Run the tests"}}
        assert reply(_context(task, "/w/repo", 3)) == CLOSING_TEXT


def test_the_experts_test_command_runs_the_shown_tests_without_pytest(tmp_path):
    """In a black-box workspace (write_repo) the command needs only python3 (the harness's interpreter may lack
    pytest): on the buggy source it exits 1 with the failing test's traceback, on the reference it passes every
    shown test, one line each; a source that does not import fails too."""
    import os
    import subprocess

    from agentrl.harness.episode import write_repo

    def run(d):
        env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}
        return subprocess.run(shown_tests_command(task), shell=True, cwd=d, capture_output=True, text=True,
                              env=env, timeout=60)

    for task in make_tasks(4, ["minmax", "range", "compare", "zero"], seed=5, split="train"):
        n_shown = len(task.public_tests)
        for source, ok in ((None, False), (task.reference, True), ("def broken(:\n", False)):
            d = tmp_path / f"{task.id}-{len(list(tmp_path.iterdir()))}"
            d.mkdir()
            write_repo(d, task)
            if source is not None:
                (d / task.source_file).write_text(source)
            r = run(d)
            assert (r.returncode == 0) == ok, (task.id, r.stdout, r.stderr)
            assert ("all tests passed" in r.stdout) == ok and (("Traceback" in r.stderr) != ok)
            if ok:
                ran = [ln for ln in r.stdout.splitlines() if "::test_" in ln and ln.endswith(" passed")]
                assert len(ran) == n_shown, r.stdout  # every shown test ran, none skipped
            else:
                assert "FAILED" in r.stdout or "could not be imported" in r.stdout


def test_black_box_task_message_says_how_to_run_the_tests():
    from agentrl.harness.episode import TEST_RUNNER

    (task,) = make_tasks(1, ["minmax"], seed=2, split="train")
    assert f"python3 {TEST_RUNNER}" in task_message(task) and shown_tests_command(task) == f"python3 {TEST_RUNNER}"


def test_random_op_expert_picks_menu_ops_reproducibly_per_task():
    tasks = make_tasks(30, ["minmax", "compare"], seed=4, split="train")
    picks = [_call(opencode_expert_reply(tasks, random_op=True, seed=7)(_context(t, "/w", 1)))["arguments"]
             for t in tasks]
    again = [_call(opencode_expert_reply(tasks, random_op=True, seed=7)(_context(t, "/w", 1)))["arguments"]
             for t in tasks]
    assert picks == again
    menus = [{e for _, e in candidate_line_edits(t)} for t in tasks]
    assert all((p["oldString"], p["newString"]) in m for p, m in zip(picks, menus, strict=True))
    correct = [p["newString"] == dict(candidate_line_edits(t))[t.correct_op.name][1] for p, t in zip(picks, tasks, strict=True)]
    assert 0 < sum(correct) < len(tasks)  # sometimes right, sometimes not: GRPO's signal after the warm start


def test_expert_refuses_a_context_without_a_known_task():
    reply = opencode_expert_reply(make_tasks(2, ["minmax"], seed=0, split="train"))
    with pytest.raises(ValueError, match="no known task"):
        reply("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")


def test_sft_agent_needs_room_for_opencodes_prompt(tmp_path, capsys):
    assert main(["sft", "--agent", "opencode", "--n-tasks", "1", "--out", str(tmp_path / "o")]) != 0
    assert "--max-tokens >= 8192" in capsys.readouterr().err


@needs_opencode
@pytest.mark.slow
def test_sft_agent_opencode_trains_on_opencodes_own_rows(tmp_path):
    out, rows = tmp_path / "sft", tmp_path / "rows.jsonl"
    assert main(["sft", "--agent", "opencode", "--n-tasks", "2", "--families", "minmax,compare", "--max-tokens",
                 "8192", "--epochs", "1", "--batch", "2", "--agent-timeout-s", "200", "--out", str(out),
                 "--save-jsonl", str(rows)]) == 0
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(recs) == 2 and all(r["reward"] == 1.0 for r in recs)  # the correct op, graded by hidden tests
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    for r in recs:
        assert len(r["completion_ids"]) == len(r["policy_mask"])
        spans, cur = [], None
        for t, m in zip(r["completion_ids"], r["policy_mask"], strict=True):
            if m != cur:
                spans.append([m, []])
                cur = m
            spans[-1][1].append(t)
        text = [(m, tok.decode(ids)) for m, ids in spans]
        # read, its result, edit, its result, the tests, their output, closing text
        assert [m for m, _ in text] == [1, 0, 1, 0, 1, 0, 1]
        assert '"name": "read"' in text[0][1] and '"name": "edit"' in text[2][1] and '"name": "bash"' in text[4][1]
        assert "<content>" in text[1][1] and "all tests passed" in text[5][1] and CLOSING_TEXT in text[6][1]
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["data"]["trajectories"] == 2 and summary["data"]["mean_reward"] == 1.0
    assert summary["run"]["agent"] == "opencode"
