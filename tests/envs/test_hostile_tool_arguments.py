"""Tool arguments a model writes that pass the JSON parser but no handler takes: each is a refused call and the
episode goes on, never an exception that ends it as env_error (unscorable, so the garbage went unpunished)."""

import pytest

from agentrl.envs import ToolCall, make_env
from agentrl.tasks.words import wordle_task

SRC = "/repo/stack_peak.py"


def c(name, **args):
    return ToolCall(name, args)


@pytest.mark.parametrize(("env_name", "call"), [
    ("python-session", c("run_python", code="x = '\ud800'")),
    ("coding-tools", c("Bash", command="echo \udcff")),
    ("coding-tools", c("Read", file_path=SRC + "\ud800")),
    ("edit-menu", c("edit", op="fix_\ud800")),
    ("wordle", c("guess", word="cran\ud800")),
])
def test_a_lone_surrogate_in_any_argument_is_a_malformed_call_naming_it(env_name, call, minmax_task, sandbox):
    """JSON's `\\ud800` escape decodes to a lone surrogate: run_python's parser raised UnicodeEncodeError on it."""
    env = make_env(env_name) if env_name == "wordle" else make_env(env_name, sandbox=sandbox)
    env.reset(wordle_task("crane") if env_name == "wordle" else minmax_task)
    (r,) = env.step([call]).results
    (name,) = call.arguments
    assert r.status == "malformed" and r.call.malformed.startswith(f"bad_arguments: {name}: not UTF-8 text")
    assert not env.done and env.stats()["malformed_calls"] == 1


def test_a_lone_surrogate_in_a_nested_key_is_named_by_its_path(minmax_task, sandbox):
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    (r,) = env.step([c("Read", file_path=SRC, **{"\udcff": 1})]).results
    assert r.status == "malformed" and "not UTF-8 text" in r.content


def test_integral_floats_are_integers_to_the_handler(minmax_task, sandbox):
    """JSON Schema counts 2.0 and 1e308 as integers: Read sliced with them and raised TypeError."""
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    as_ints, as_floats = env.step([c("Read", file_path=SRC, offset=2, limit=10**308),
                                   c("Read", file_path=SRC, offset=2.0, limit=1e308)]).results
    assert as_floats.status == as_ints.status == "ok" and as_floats.content == as_ints.content
    assert as_ints.content.startswith("     2\t")
    (r,) = env.step([c("Read", file_path=SRC, offset=1.5)]).results
    assert r.status == "malformed"  # not integral: still refused by the schema


def test_a_bash_timeout_beyond_float_range_runs_under_the_sandbox_limit(minmax_task, sandbox):
    """A 400-digit `timeout` is a valid integer; dividing it into seconds raised OverflowError."""
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    assert env._bash_budget_s(10**400) == env._bash_budget_s(None) == sandbox.limits.timeout_s
    assert env._bash_budget_s(1500) == 1.5
    (r,) = env.step([c("Bash", command="pwd", timeout=10**400)]).results
    assert r.status == "ok" and r.content == "/repo"


DEEP_CODE = ("x = " + "-" * 100_000 + "1\n", "x = y" + ".a" * 100_000 + "\n")  # MemoryError, RecursionError in ast


@pytest.mark.parametrize("code", DEEP_CODE, ids=("unary", "attributes"))
def test_code_nested_too_deeply_to_parse_is_run_and_graded_not_an_env_error(code, minmax_task, sandbox):
    """ast.parse raised MemoryError / RecursionError on these: run_python's import check ended the episode, and
    grading a coding-tools file holding one made it unscorable (reward None) instead of 0."""
    from agentrl.envs.session_grader import parse_quietly

    with pytest.raises(SyntaxError, match="nested too deeply"):
        parse_quietly(code)
    env = make_env("python-session", sandbox=sandbox)
    env.reset(minmax_task)
    (r,) = env.step([c("run_python", code=code)]).results
    assert r.status == "ok"  # the cell ran in the sandbox, whose compiler refused it
    env.final_answer("done")
    assert env.reward() == 0.0
    env = make_env("coding-tools", sandbox=sandbox)
    env.reset(minmax_task)
    env.step([c("Read", file_path=SRC), c("Write", file_path=SRC, content=minmax_task.reference + code)])
    env.final_answer("done")
    assert env.reward() == 0.0


def test_the_repository_stays_bounded_however_many_files_runs_write(minmax_task, sandbox):
    """A script writing 20,000 files took a minute per Bash call to take back and hand to every later run (the
    files all came in): the repository keeps at most what one run hands back (MAX_READ_BACK_FILES files), and a
    later run's new files past that stay out, and files a run did not hand back at all, said so in the output."""
    from agentrl.envs.coding_tools import CodingToolsEnv
    from agentrl.sandbox.process import MAX_READ_BACK_FILES

    env = make_env("coding-tools", sandbox=sandbox, max_turns=8)
    env.reset(minmax_task)
    script = ("import sys\nfor i in range(int(sys.argv[1])):\n    open(f'{sys.argv[2]}{i:05d}.txt', 'w').write('x')\n")
    env.step([c("Write", file_path="/repo/w.py", content=script)])
    before = len(env.files)  # the task's files and w.py stay; of the new files, MAX_READ_BACK_FILES - before fit
    (r,) = env.step([c("Bash", command=f"python w.py {MAX_READ_BACK_FILES + 500} a")]).results
    assert r.status == "ok" and len(env.files) == MAX_READ_BACK_FILES
    # the run handed back MAX_READ_BACK_FILES of its files; the rest were not read back, and the output says so
    assert f"[{500 + before} files the command wrote were not kept" in r.content  # the new ones that did not fit
    assert "stack_peak.py" in env.files and "w.py" in env.files
    over = CodingToolsEnv._take_back(env, {"z.txt": "z", "a00000.txt": "changed"})  # full: only changes come in
    assert over == 1 and "z.txt" not in env.files and env.files["a00000.txt"] == "changed"
    (r,) = env.step([c("Bash", command="python -m pytest -q")]).results
    assert "1 failed" in r.content  # the repository still runs
