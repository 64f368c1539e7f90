"""As root, the rlimit backend works when TMPDIR and pytest's install dir are private (0700, as in CI)."""

import json
import os
import subprocess
import sys

import pytest

from agentrl.sandbox.uid_reach import others_can_reach, others_can_traverse, sandbox_tmp_base, stage_pytest

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches children to an unprivileged uid")

# Runs in a separate interpreter whose pytest is found first in a private dir and whose TMPDIR is private.
PROBE = """
import json, sys
import pytest
from agentrl.sandbox import Sandbox, TestJob
out = {"pytest": pytest.__file__}
with Sandbox(backend=sys.argv[1], max_workers=1) as sb:
    files = {"m.py": "def add(a, b):\\n    return a + b\\n",
             "test_m.py": "from m import add\\ndef test_ok():\\n    assert add(1, 2) == 3\\n"
                          "def test_bad():\\n    assert add(1, 2) == 4\\n"}
    r = sb.run(files, ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    rep = sb.run_tests(TestJob(files={"m.py": files["m.py"]}, module="m", tests=("assert add(2, 2) == 4",)))
    with sb.session(files={"m.py": files["m.py"]}) as s:
        sess = s.execute("from m import add\\nprint(add(20, 22))")
    out.update(backend=sb.backend, root=sb._root, notes=sb.describe()["notes"], pytest_out=r.stdout + r.stderr,
               graded=rep.all_passed, grade_error=rep.error, session=sess.stdout + sess.stderr)
print(json.dumps(out))
"""


def test_traversal_checks(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "f.py").write_text("x = 1\n")
    (private / "f.py").chmod(0o644)
    assert others_can_traverse("/usr/lib") and others_can_reach("/usr/bin/env")
    assert not others_can_traverse(str(private)) and not others_can_reach(str(private / "f.py"))
    assert not others_can_reach(str(tmp_path / "missing"))


@ROOT_ONLY
def test_private_tmpdir_falls_back_to_a_public_one(tmp_path, monkeypatch):
    private = tmp_path / "tmp"
    private.mkdir(mode=0o700)
    monkeypatch.setattr("tempfile.tempdir", str(private))
    base = sandbox_tmp_base(drop_uid=True)
    assert base != str(private) and others_can_traverse(base)
    assert sandbox_tmp_base(drop_uid=False) == str(private)


@ROOT_ONLY
@pytest.mark.parametrize("backend", ["rlimit", "bwrap"])
def test_private_pytest_install_and_tmpdir(tmp_path, backend):
    private = tmp_path / "ci-clone"  # like `mktemp -d`: 0700, owned by root
    private.mkdir(mode=0o700)
    site, _ = stage_pytest(str(private / "venv-site"))
    (private / "tmp").mkdir(mode=0o700)
    src = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["agentrl"].__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, src]), "TMPDIR": str(private / "tmp")}
    p = subprocess.run([sys.executable, "-c", PROBE, backend], env=env, capture_output=True, text=True, timeout=60)
    if backend == "bwrap" and "bubblewrap unusable" in p.stderr:
        pytest.skip("bubblewrap unusable on this host")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["pytest"].startswith(str(private)) and out["backend"] == backend
    assert not out["root"].startswith(str(private))  # the job uid could not enter it
    assert "1 failed, 1 passed" in out["pytest_out"], out
    assert out["graded"] and out["grade_error"] is None and out["session"] == "42\n"
    if backend == "rlimit":
        assert any("read-only copy of pytest" in n for n in out["notes"]), out["notes"]
    assert any("is private; sandbox root is in" in n for n in out["notes"]), out["notes"]
