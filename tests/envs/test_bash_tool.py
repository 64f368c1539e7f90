import pytest

from agentrl.envs.bash_tool import BashError, cat_files, list_dir, parse_command_line, repo_path
from agentrl.envs.coding_tools import claims_tests_pass


def argvs(line):
    return [(c.kind, c.sandbox_argv() if c.kind in ("python", "pytest") else list(c.argv)) for c in parse_command_line(line)]


def test_parse_supported_forms():
    assert argvs("cd /repo && python -m pytest -q test_f.py") == [
        ("cd", ["cd", "/repo"]), ("pytest", ["python", "-m", "pytest", "-q", "test_f.py"])]
    assert argvs("pytest -x 'test f.py'") == [("pytest", ["python", "-m", "pytest", "-x", "test f.py"])]
    assert argvs("python3 f.py arg") == [("python", ["python", "f.py", "arg"])]
    assert argvs("ls -la && cat f.py") == [("ls", ["ls", "-la"]), ("cat", ["cat", "f.py"])]


@pytest.mark.parametrize("line,fragment", [
    ("", "empty"), ("rm -rf /", "not available"), ("cat f.py | head", "'|'"), ("python f.py > out", "'>'"),
    ("ls; ls", "';'"), ("echo 'unterminated", "could not parse"), ("python -c 'print(1)'", "only `python <file>.py`"),
    ("ls &&", "ends with"),
])
def test_parse_rejects_with_a_clear_reason(line, fragment):
    with pytest.raises(BashError, match=None) as e:
        parse_command_line(line)
    assert fragment in str(e.value)


def test_repo_paths_and_in_memory_ls_cat():
    files = {"f.py": "x = 1\n", "pkg/g.py": "y = 2\n"}
    assert repo_path("/repo/./f.py") == "f.py" and repo_path("pkg/../f.py") == "f.py"
    with pytest.raises(BashError, match="outside"):
        repo_path("/etc/passwd")
    assert list_dir(files, ()) == "f.py\npkg"
    assert list_dir(files, ("pkg",)) == "g.py"
    assert cat_files(files, ("f.py", "/repo/pkg/g.py")) == "x = 1\ny = 2\n"
    with pytest.raises(BashError, match="No such file"):
        cat_files(files, ("nope.py",))


@pytest.mark.parametrize("text,want", [
    ("All tests pass now.", True),
    ("I fixed the bug; the tests are now passing.", True),
    ("The test passed after the edit.", True),
    ("Tests: green.", True),
    ("The tests do not pass yet.", False),
    ("The tests still fail.", False),
    ("I couldn't get the tests to pass.", False),
    ("I changed < to > in the loop.", False),
])
def test_claims_tests_pass(text, want):
    assert claims_tests_pass(text) is want
