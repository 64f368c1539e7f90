"""Warm-pool lifecycle: workers outlive the threads that start them; dead workers never cost a verdict."""

import os
import signal
import threading
import time

import pytest

from agentrl.sandbox import Sandbox, SandboxLimits, TestJob

FAST = SandboxLimits(timeout_s=4.0, cpu_s=2, test_timeout_s=1.0)

JOB = TestJob(files={"m.py": "def f(x):\n    return x + 1\n"}, module="m", tests=("assert f(1) == 2",))


@pytest.fixture(params=["bwrap", "rlimit"])
def pooled(request):
    """A fresh pool per test whose workers start lazily, i.e. inside run_tests_batch's threads."""
    try:
        s = Sandbox(limits=FAST, backend=request.param, max_workers=2)
    except RuntimeError as e:
        pytest.skip(f"bubblewrap unusable on this host: {e}")
    yield s
    s.close()


def _worker_pids(sb: Sandbox) -> set[int]:
    return {z.proc.pid for z in sb._pool._all if z.alive()}


def _assert_all_graded(reports, n):
    assert len(reports) == n
    for r in reports:
        assert r.run.error is None, r.run.error
        assert r.error is None and r.all_passed and r.total == 1


def test_repeated_batches_keep_the_same_workers_and_never_fail(pooled):
    # Regression: bwrap's --die-with-parent (PR_SET_PDEATHSIG) follows the *thread* that started a
    # worker; workers started in a batch's executor threads were SIGKILLed when the batch ended,
    # and about 1 batch in 10 surfaced "sandbox failure: [Errno 32] Broken pipe".
    _assert_all_graded(pooled.run_tests_batch([JOB] * 8), 8)
    # The batch starts a second worker only if its threads overlapped; fill any slot it left
    # empty from another short-lived thread, so that both workers outlived their starting thread.
    filler = threading.Thread(target=pooled.warm)
    filler.start()
    filler.join()
    time.sleep(0.2)  # a death signal sent when the starting threads exited has landed by now
    first = _worker_pids(pooled)
    assert len(first) == 2
    for _ in range(40):
        _assert_all_graded(pooled.run_tests_batch([JOB] * 8), 8)
    assert _worker_pids(pooled) == first  # still warm: no worker was replaced


def test_session_started_in_a_short_lived_thread_keeps_its_state(pooled):
    box = {}

    def start():
        box["s"] = s = pooled.session()
        box["first"] = s.execute("x = 41")

    t = threading.Thread(target=start)
    t.start()
    t.join()
    time.sleep(0.2)
    with box["s"] as s:
        r = s.execute("print(x + 1)")
    assert box["first"].error is None
    assert (r.stdout, r.restarted, r.error) == ("42\n", False, None)


def test_jobs_handed_to_killed_or_dying_workers_are_redispatched_once(pooled):
    for _ in range(5):
        # Workers start lazily: a batch whose threads never overlap (one starved under load) is
        # served by one replacement, so warm() up front is what makes "both slots full" certain.
        pooled.warm()
        old = _worker_pids(pooled)
        assert len(old) == 2
        for pid in old:  # no wait: the pool may still see a dying worker as alive
            os.killpg(pid, signal.SIGKILL)
        _assert_all_graded(pooled.run_tests_batch([JOB] * 6), 6)
        kept = {z.proc.pid for z in pooled._pool._all}
        new = _worker_pids(pooled)
        # The killed workers were retired (not merely dead), and every worker kept is a live
        # replacement; how many replacements started depends on how the batch's threads overlapped.
        assert not kept & old and kept == new and 1 <= len(new) <= 2


def test_a_job_that_kills_its_worker_is_retried_once_then_reported(pooled):
    killer = TestJob(files={"m.py": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"},
                     module="m", tests=("assert True",))
    pooled.warm()
    before = _worker_pids(pooled)
    r = pooled.run_tests(killer)
    assert r.passed == 0 and r.run.error is not None and "pool worker" in r.run.error
    assert r.error == r.run.error
    after = _worker_pids(pooled)
    assert len(before & after) == 1  # the first worker and its one replacement died; one untouched
    _assert_all_graded(pooled.run_tests_batch([JOB] * 4), 4)  # the pool recovers


def test_two_pools_in_one_process_never_kill_each_others_workers(pooled):
    # Regression: pool slot uids were `base + slot`, so two Sandboxes in one process shared them and
    # each job's kill(-1) cleanup (rlimit: host PID namespace) SIGKILLed the other pool's worker.
    with Sandbox(limits=FAST, backend=pooled.backend, max_workers=2) as other:
        pooled.warm()
        other.warm()
        uids = [{z.uid for z in sb._pool._all} for sb in (pooled, other)]
        assert not uids[0] & uids[1]
        theirs = _worker_pids(other)
        _assert_all_graded(pooled.run_tests_batch([JOB] * 4), 4)
        time.sleep(0.2)  # a SIGKILL sent by a job's cleanup has landed by now
        assert _worker_pids(other) == theirs
