"""Smoke tests of `agentrl tasks list|show|export|check` through the real CLI entry point."""

import dataclasses
import json

import pytest

from agentrl.cli import main
from agentrl.tasks import load_tasks, make_tasks, save_tasks


def test_list_families_and_tasks(capsys):
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "minmax" in out and "add_zero_guard" in out and "mutable_default" in out
    assert main(["tasks", "list", "--n", "4", "--families", "zero,init"]) == 0
    out = capsys.readouterr().out
    assert out.count("zero-train-") == 2 and out.count("init-train-") == 2


def test_show_by_id_and_by_family(capsys):
    task = make_tasks(2, families=["range"])[1]
    assert main(["tasks", "show", task.id, "--hidden"]) == 0
    out = capsys.readouterr().out
    assert task.files[task.source_file] in out and task.hidden_tests[-1] in out and "(correct)" in out
    assert main(["tasks", "show", "--families", "range", "--index", "1", "--rename"]) == 0
    out = capsys.readouterr().out
    assert task.entry not in out and "hidden tests" not in out and "(correct)" not in out
    assert main(["tasks", "show", "nofamily-train-0000"]) == 2
    assert "unknown task families" in capsys.readouterr().err


def test_list_refuses_unknown_or_no_families_instead_of_an_empty_table(capsys):
    assert main(["tasks", "list", "--families", "nope,zero"]) == 2
    out, err = capsys.readouterr()
    assert "unknown task families ['nope']" in err and "known: minmax" in err and "families" not in out
    assert main(["tasks", "list", "--families", ",,"]) == 2
    assert "no task family named" in capsys.readouterr().err
    assert main(["tasks", "list", "--families", "zero,sort"]) == 0
    out = capsys.readouterr().out
    assert "add_zero_guard" in out and "fix_sort" in out and "fix_minmax" not in out


def test_export_writes_loadable_jsonl(tmp_path, capsys):
    out = tmp_path / "h.jsonl"
    assert main(["tasks", "export", "--heldout-set", "--rename", "--out", str(out)]) == 0
    tasks = load_tasks(out)
    assert len(tasks) == 10 and all(t.split == "heldout" for t in tasks)
    assert all(t.entry != t.meta["original_entry"] for t in tasks)
    assert main(["tasks", "export", "--n", "7", "--split", "heldout", "--out", str(out)]) == 0
    assert load_tasks(out) == make_tasks(7, split="heldout")


def test_check_bad_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert main(["tasks", "check", "--file", str(bad)]) == 2
    assert "bad.jsonl:1: field 'family'" in capsys.readouterr().err


def test_check_runs_in_the_sandbox(tmp_path, capsys):
    pytest.importorskip("agentrl.sandbox.sandbox", reason="agentrl.sandbox backend not merged yet")
    assert main(["tasks", "check", "--n", "19", "--rename", "--split", "heldout"]) == 0
    out = capsys.readouterr().out
    assert "OK: 19 tasks" in out and "swap_args" in out
    # A task whose wrong op is really the fix makes check fail with exit code 1.
    task = make_tasks(1)[0]
    op = task.correct_op
    broken = dataclasses.replace(task, edit_ops=task.edit_ops + (type(op)("fix_sign", op.old, op.new),))
    path = tmp_path / "broken.jsonl"
    save_tasks([broken], path)
    assert json.loads(path.read_text())["id"] == task.id
    assert main(["tasks", "check", "--file", str(path)]) == 1
    assert "wrong op fix_sign passes every hidden test" in capsys.readouterr().out


def test_show_index_past_the_cap_is_refused_at_once(capsys):
    import time as _time

    from agentrl.cli import main as _main

    t0 = _time.perf_counter()
    assert _main(["tasks", "show", "--families", "minmax", "--index", "99999"]) == 2
    assert "expected < 5000" in capsys.readouterr().err and _time.perf_counter() - t0 < 5


def test_zero_or_negative_counts_and_empty_files_are_errors_not_a_failed_check(tmp_path, capsys):
    for argv in (["tasks", "check", "--n", "0"], ["tasks", "export", "--n", "-1", "--out", str(tmp_path / "x.jsonl")]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and "--n: expected an integer >= 1" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["tasks", "check", "--file", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "no tasks to check" in err and "FAILED" not in err
    assert not (tmp_path / "x.jsonl").exists()


def test_more_tasks_than_a_family_has_says_which_flag_to_lower():
    from agentrl.tasks.generate import family_stream, resolve_families

    (fam,) = resolve_families(["zero"])  # a few hundred held-out instances: quick to exhaust
    with pytest.raises(ValueError, match=r"ran out of distinct heldout instances after \d+: ask for fewer tasks"):
        for _ in family_stream(fam, 0, "heldout"):
            pass
