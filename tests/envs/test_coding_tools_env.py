import random

from agentrl.envs import ToolCall, check_env, make_env
from agentrl.envs.coding_tools import coding_tools_turns
from agentrl.envs.experts import candidate_line_edits, play

SRC = "/repo/stack_peak.py"


def c(name, **args):
    return ToolCall(name, args)


def test_expert_and_random_line_edits(minmax_task, zero_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox)
    for task in (minmax_task, zero_task):
        assert play(env, task, coding_tools_turns(task, random.Random(0))) == 1.0
        s = env.stats()
        assert (s["reads"], s["edits"], s["bash_calls"], s["test_runs"], s["failed_calls"]) == (1, 1, 1, 1, 0)
    assert [name for name, _ in candidate_line_edits(minmax_task)] == ["fix_compare", "fix_init", "fix_range"]
    rewards = {play(env, minmax_task, coding_tools_turns(minmax_task, random.Random(s), random_op=True))
               for s in range(8)}
    assert rewards == {0.0, 1.0}


def test_read_format_and_repo_contents(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox)
    obs = env.reset(minmax_task)
    assert "/repo" in obs.system and "stack_peak.py" in obs.user and "test_stack_peak.py" in obs.user
    (r,) = env.step([c("Read", file_path=SRC, offset=3, limit=2)]).results
    assert r.content == "     3\t    best = values[0]\n     4\t    for v in values[1:]:"
    r1, r2 = env.step([c("Bash", command="ls"), c("Bash", command="cd /repo && cat test_stack_peak.py")]).results
    assert r1.content == "stack_peak.py\ntest_stack_peak.py" and "def test_1" in r2.content
    assert "-9" not in r2.content  # hidden tests never enter the repository


def test_scripted_mistakes_produce_the_right_stats(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
    env.reset(minmax_task)
    results = env.step([
        c("Edit", file_path=SRC, old_string="if v < best:", new_string="if v > best:"),  # before Read
        c("Read", file_path=SRC),
        c("Edit", file_path=SRC, old_string="if x < y:", new_string="if x > y:"),        # invented text
        c("Edit", file_path=SRC, old_string="best", new_string="best"),                  # identical
    ]).results
    assert [r.status for r in results] == ["failed", "ok", "failed", "failed"]
    results = env.step([
        c("Edit", file_path=SRC, old_string="best", new_string="top"),                   # not unique
        c("Write", file_path="/repo/test_stack_peak.py", content="def test_x():\n    pass\n"),  # not read
        c("Write", file_path="/repo/notes.txt", content="hi"),                            # creates
        c("Bash", command="rm -rf /"),
        c("Read", file_path=SRC),                                                         # 5th call: not run
    ]).results
    assert [r.status for r in results] == ["failed", "failed", "ok", "failed", "failed"]
    results = env.step([ToolCall("Grep", {"pattern": "x"}), c("Read", path=SRC), c("Write", file_path=SRC, content="x = 1\n")]).results
    assert [r.status for r in results] == ["malformed", "malformed", "ok"]
    env.final_answer("Done! All tests pass now.")
    s = env.stats()
    want = {"edit_before_read": 1, "edit_missing_old_string": 1, "edit_identical_strings": 1, "edit_not_unique": 1,
            "write_before_read": 1, "write_creates_file": 1, "write_overwrites_source": 1, "write_overwrites_test": 0,
            "malformed_calls": 2, "failed_calls": 7, "bash_calls": 1, "test_runs": 0, "claims_tests_pass": 1,
            "turns": 4}
    assert {k: s[k] for k in want} == want
    assert env.end_reason == "final_answer" and env.reward() == 0.0 and s["hidden_pass_fraction"] == 0.0


def test_bash_runs_scripts_in_the_sandbox_and_files_come_back(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    script = "from stack_peak import stack_peak\nprint(stack_peak([4, 9, 1]))\nopen('out.txt', 'w').write('made')\n"
    env.step([c("Write", file_path="/repo/try.py", content=script)])
    (r,) = env.step([c("Bash", command="python try.py && cat out.txt")]).results
    assert r.status == "ok" and r.content.splitlines() == ["1", "made"]  # the bug: min instead of max
    (r,) = env.step([c("Bash", command="python -m pytest -q test_stack_peak.py", timeout=20000)]).results
    assert "1 failed" in r.content and "assert 1 == 3" in r.content and env.stats()["test_runs"] == 1
    (r,) = env.step([c("Bash", command="python -c 'import os'")]).results
    assert r.status == "failed"


def test_bash_timeout_lowers_the_limit(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    env.step([c("Write", file_path="/repo/spin.py", content="while True:\n    pass\n")])
    (r,) = env.step([c("Bash", command="python spin.py", timeout=500)]).results
    assert "[stopped: wall-clock limit of 0.5 s reached]" in r.content


def test_check_env_coding_tools(minmax_task, sandbox):
    assert check_env(make_env("coding-tools", sandbox=sandbox), minmax_task)["reward"] == 1.0


CONTROL_NAMES = ["/repo/n\x00ul.py", "/repo/new\nline.py", "/repo/esc\x1b.py", "/repo/tab\t.py", "/repo/del\x7f.py"]


def test_control_characters_in_paths_are_failed_calls(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
    env.reset(minmax_task)
    files_before = dict(env.files)
    for name in CONTROL_NAMES:
        results = env.step([c("Write", file_path=name, content="x"), c("Read", file_path=name),
                            c("Edit", file_path=name, old_string="a", new_string="b")]).results
        assert [r.status for r in results] == ["failed"] * 3, name
        assert all("control character" in r.content for r in results)
        if env.done:
            break
    assert env.files == files_before
    env.reset(minmax_task)
    (r,) = env.step([c("Bash", command="python -m pytest -q 'test_stack\x00_peak.py'")]).results
    assert r.status == "failed" and "control character" in r.content
    (r,) = env.step([c("Bash", command="python -m pytest -q test_stack_peak.py")]).results
    assert r.status == "ok" and "1 failed" in r.content  # the repository is still usable
    assert env.stats()["failed_calls"] == 1 and env.stats()["ok_calls"] == 1


def test_bash_commands_the_sandbox_refuses_or_cannot_run_are_failed(minmax_task, sandbox):
    from agentrl.sandbox.api import RunResult

    env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
    env.reset(minmax_task)
    results = env.step([c("Bash", command="python ../../etc/x.py"), c("Bash", command="python /usr/lib/x.py"),
                        c("Bash", command="ls && cd /tmp")]).results
    assert [r.status for r in results] == ["failed"] * 3
    assert "stack_peak.py" in results[2].content  # earlier output is kept in the failure message

    class BrokenSandbox:  # fault injection: the sandbox reports that it could not start the command
        def run(self, files, argv, **kw):
            return RunResult(exit_code=None, stdout="", stderr="", timed_out=False, wall_clock_s=0.0,
                             error="could not start: embedded null byte")

    env = make_env("coding-tools", sandbox=BrokenSandbox())
    env.reset(minmax_task)
    (r,) = env.step([c("Bash", command="python -m pytest -q")]).results
    assert r.status == "failed" and "sandbox error: could not start" in r.content
    assert env.stats()["failed_calls"] == 1 and env.stats()["ok_calls"] == 0


def test_overlong_bash_command_is_malformed(minmax_task, sandbox):
    from agentrl.envs.coding_tools import MAX_BASH_COMMAND_CHARS

    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    (r,) = env.step([c("Bash", command="ls " + "a" * MAX_BASH_COMMAND_CHARS)]).results
    assert r.status == "malformed"


def test_paths_the_sandbox_cannot_hold_are_failed_writes_and_the_repository_stays_usable(minmax_task, sandbox):
    """A Write of a path no file system holds (2,000 folders deep, a 300-byte name, a file where a folder is
    needed, a folder where a file is) is a failed call; text or a path that is not UTF-8 a malformed one. It used to be taken:
    files cannot be deleted, so every later Bash of the episode then failed with "sandbox file ..."."""
    writes = [("/repo/" + "d/" * 2000 + "z.py",), ("/repo/" + "a" * 300 + ".py",), ("/repo/q.py", "/repo/q.py/z.py"),
              ("/repo/w/z.py", "/repo/w"), ("/repo/s.py", "/repo/\udcff.py")]
    for paths in writes:
        env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
        env.reset(minmax_task)
        results = env.step([c("Write", file_path=p, content="x = 1\n" if p != "/repo/s.py" else "x = '\ud800'\n")
                            for p in paths]).results
        # text or a path holding a lone surrogate is refused before the tool runs (bad_arguments), as in any tool
        assert results[-1].status == ("malformed" if paths[-1] == "/repo/\udcff.py" else "failed"), [r.content for r in results]
        assert all(r.content.encode("utf-8") for r in results)  # no lone surrogate reaches the tokenizer
        (r,) = env.step([c("Bash", command="python -m pytest -q")]).results
        assert r.status == "ok" and "1 failed" in r.content, r.content  # the repository is still usable
        env.final_answer("done")
        assert env.reward() == 0.0  # graded as usual: the source file is still the buggy one
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    results = env.step([c("Read", file_path=SRC),
                        c("Edit", file_path=SRC, old_string="best = values[0]", new_string="best = '\udcff'")]).results
    assert results[1].status == "malformed" and "UTF-8" in results[1].content
    assert "udcff" not in env.files["stack_peak.py"] and "\udcff" not in env.files["stack_peak.py"]


def test_files_a_run_leaves_that_no_run_could_take_back_stay_out_of_the_repository(minmax_task, sandbox):
    """A script that makes a file name of non-UTF-8 bytes, a control character or 100 folders deep: those files
    used to come back into the repository, so `ls` showed a lone surrogate (the tokenizer raised TypeError: the
    run crashed) and every later Bash failed with "sandbox file ..."."""
    script = ("import os\n"
              "os.close(os.open(b'bad\\xff.py', os.O_CREAT | os.O_WRONLY))\n"
              "open('a\\nb.py', 'w').write('1')\n"
              "p = '/'.join(['d'] * 100)\nos.makedirs(p)\nopen(p + '/x.py', 'w').write('1')\n"
              "open('kept.py', 'w').write('2')\n")
    env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
    env.reset(minmax_task)
    results = env.step([c("Write", file_path="/repo/e.py", content=script), c("Bash", command="python e.py"),
                        c("Bash", command="ls")]).results
    assert [r.status for r in results] == ["ok"] * 3, [r.content for r in results]
    assert results[2].content.split("\n") == ["e.py", "kept.py", "stack_peak.py", "test_stack_peak.py"]
    assert sorted(env.files) == ["e.py", "kept.py", "stack_peak.py", "test_stack_peak.py"]
    (r,) = env.step([c("Bash", command="python -m pytest -q test_stack_peak.py")]).results
    assert r.status == "ok" and "1 failed" in r.content, r.content


def test_what_a_run_deletes_leaves_the_repository(minmax_task, sandbox):
    """A Bash run's deletions stick, as in a real shell: a removed file is gone from `ls`, Read and every later
    run, a file the run turned into a folder is that folder, and a removed source file scores 0. A file the
    run only made unreadable to the repository (a link, binary bytes) keeps its last text. They used to come
    back: the read-back could not tell a deleted file from a skipped one."""
    script = ("import os\nos.remove('gone.py')\nos.remove('tree.py')\nos.mkdir('tree.py')\n"
              "open('tree.py/leaf.py', 'w').write('leaf = 1\\n')\n"
              "os.remove('linked.py')\nos.symlink('/etc/hostname', 'linked.py')\n"
              "open('binary.py', 'wb').write(b'\\xff\\xfe')\n")
    env = make_env("coding-tools", sandbox=sandbox, max_turns=8, max_calls_per_turn=None)
    env.reset(minmax_task)
    writes = [c("Write", file_path=f"/repo/{n}.py", content=f"{n} = 1\n") for n in ("gone", "tree", "linked", "binary")]
    results = env.step([*writes, c("Write", file_path="/repo/e.py", content=script),
                        c("Bash", command="python e.py")]).results
    assert [r.status for r in results] == ["ok"] * 6, [r.content for r in results]
    assert sorted(env.files) == ["binary.py", "e.py", "linked.py", "stack_peak.py", "test_stack_peak.py",
                                 "tree.py/leaf.py"]
    assert env.files["linked.py"] == "linked = 1\n" and env.files["binary.py"] == "binary = 1\n"
    (r,) = env.step([c("Read", file_path="/repo/gone.py")]).results
    assert r.status == "failed"
    (r,) = env.step([c("Write", file_path="/repo/k.py", content="import os\nos.remove('stack_peak.py')\n"),
                     c("Bash", command="python k.py"), c("Bash", command="python -m pytest -q")]).results[2:]
    assert "stack_peak.py" not in env.files and "ERROR collecting" in r.content, r.content
    env.final_answer("done")
    assert env.reward() == 0.0


def _assert_final_source_scores(task, sandbox, source, want):
    """A coding-tools episode that writes `source` as the task's source file and stops scores `want`, with no
    sandbox error."""
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(task)
    env.step([c("Read", file_path=SRC), c("Write", file_path=SRC, content=source)])
    env.final_answer("done")
    assert env.reward() == want, source
    assert env.stats()["sandbox_errors"] == 0


def test_a_source_that_games_the_hidden_tests_scores_0(minmax_task, sandbox):
    """Coding-tools grades through the hardened grader (plain data at the test boundary): a function returning
    an object whose __eq__ is always True used to pass every hidden `assert f(x) == y` (reward 1.0), and a file
    that killed its grader at import made the episode unscorable (reward None) instead of 0. The whole file runs
    at import (as it would anywhere), so a correct function behind the kill scores 0 too."""
    always_equal = ("class Same:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n\n"
                    "def stack_peak(values):\n    return Same()\n")
    kill_grader = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    for source, want in ((always_equal, 0.0), (kill_grader, 0.0), (kill_grader + minmax_task.reference, 0.0),
                         (minmax_task.reference, 1.0)):
        _assert_final_source_scores(minmax_task, sandbox, source, want)


def test_a_correct_file_with_module_level_code_scores_1(minmax_task, sandbox):
    """The hardened grader rebuilt the file from its definitions and plain assignments only (the python-session
    rule), so a correct fix scored 0 when it began with `from __future__ import annotations` (placed after the
    grader's prelude: SyntaxError), filled a table in a module-level loop, or imported in a try/except. The whole
    file is graded now, as importing it runs it; a module-level loop that breaks the function still scores 0."""
    ref = minmax_task.reference
    fixes = ["from __future__ import annotations\n\n" + ref,
             "_SEEN = {}\nfor _k in range(3):\n    _SEEN[_k] = _k\n\n" + ref + "\nassert _SEEN[2] == 2\n",
             "try:\n    import math\nexcept ImportError:\n    math = None\n\n" + ref,
             ref + "\nif __name__ == '__main__':\n    raise SystemExit(1)\n"]
    broken = ref + "\nfor _name in ['stack_peak']:\n    globals()[_name] = lambda values: 0\n"
    for source, want in [(f, 1.0) for f in fixes] + [(broken, 0.0)]:
        _assert_final_source_scores(minmax_task, sandbox, source, want)


def test_a_chain_of_commands_shares_one_wall_clock_limit(minmax_task):
    """Each sandboxed run of `python s.py && python s.py && ...` had its own limit, so one Bash call could run
    ~1,000 of them (the command's length cap) and hold the trainer for hours; now the chain shares one."""
    import time

    from agentrl.sandbox import Sandbox, SandboxLimits

    env = make_env("coding-tools", sandbox=Sandbox(SandboxLimits(timeout_s=2.0)))
    env.reset(minmax_task)
    env.step([c("Write", file_path="/repo/s.py", content="import time\ntime.sleep(0.8)\n")])
    start = time.monotonic()
    (r,) = env.step([c("Bash", command=" && ".join(["python s.py"] * 8))]).results
    took = time.monotonic() - start
    assert took < 4.0, took  # 8 x 0.8 s = 6.4 s before
    assert r.status == "ok" and "stopped" in r.content, r.content
    assert env.stats()["wall_timeouts"] >= 1
    start = time.monotonic()
    (r,) = env.step([c("Bash", command=" && ".join(["python s.py"] * 8), timeout=1000)]).results
    assert time.monotonic() - start < 2.5 and "stopped" in r.content  # `timeout` lowers the whole line's limit
    (r,) = env.step([c("Bash", command="ls && pwd && cat s.py")]).results
    assert r.status == "ok" and "time.sleep" in r.content  # quick chains are unaffected


def test_a_file_python_cannot_import_scores_0(minmax_task, sandbox):
    """The grader puts `from __future__` imports first, so a correct fix followed by one (which Python refuses:
    the shown tests error at collection) scored 1.0."""
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    source = minmax_task.reference + "\nfrom __future__ import annotations\n"
    results = env.step([c("Read", file_path=SRC), c("Write", file_path=SRC, content=source),
                        c("Bash", command="python -m pytest -q test_stack_peak.py")]).results
    assert "must occur at the beginning of the file" in results[2].content, results[2].content
    env.final_answer("done")
    assert env.reward() == 0.0


def test_a_run_keeps_the_files_it_did_not_remove(minmax_task, sandbox):
    """A file in a cache folder the read-back does not read (a Write to /repo/__pycache__/notes.py), or one a
    run turned into a link to a folder, counted as deleted: it vanished from the repository after any Bash."""
    env = make_env("coding-tools", sandbox=sandbox, max_calls_per_turn=None)
    env.reset(minmax_task)
    script = "import os\nos.remove('linked.py')\nos.symlink('/tmp', 'linked.py')\n"
    results = env.step([c("Write", file_path="/repo/__pycache__/notes.py", content="notes = 1\n"),
                        c("Write", file_path="/repo/linked.py", content="linked = 1\n"),
                        c("Write", file_path="/repo/e.py", content=script), c("Bash", command="python e.py")]).results
    assert [r.status for r in results] == ["ok"] * 4, [r.content for r in results]
    assert env.files["__pycache__/notes.py"] == "notes = 1\n" and env.files["linked.py"] == "linked = 1\n"
