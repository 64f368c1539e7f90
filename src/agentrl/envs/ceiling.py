"""Reference-solution ceilings of the environments (what `agentrl env check mbpp|humaneval|bugfix` prints).
Not the envs and not the command (agentrl.cli.env).

mbpp / humaneval: every reference solution is graded by the python-session environment's hardened
grader (the job the environment builds for a session whose only cell is the reference; with
--through-session, a real session episode per task); prints the ceiling, each failure's reason and
the share of the reward that comes from tests shown in the prompt.
bugfix: the scripted experts play every bug-fix task in edit-menu and coding-tools.
"""

from __future__ import annotations

import random
from typing import Any

from agentrl.envs.base import ToolCall
from agentrl.envs.experts import expert_turns, play
from agentrl.envs.grading import grade, is_sandbox_failure
from agentrl.envs.python_session import PythonSessionEnv, imported_modules
from agentrl.envs.registry import make_env
from agentrl.tasks.task import Task


def _reason(report: Any) -> str:
    if report.error:
        return report.error.strip().splitlines()[-1][:200] if report.error.strip() else "no report"
    bad = next(o for o in report.outcomes if o.status != "pass")
    msg = bad.message.strip().splitlines()[-1][:160] if bad.message.strip() else ""
    return f"test {bad.index} {bad.status}{': ' + msg if msg else ''}"


def _batch(sandbox: Any, jobs: list) -> list:
    """Grade `jobs`; a sandbox-side failure (no trustworthy report, e.g. a lost pool worker) is retried, alone."""
    reports = sandbox.run_tests_batch(jobs) if jobs else []
    return [grade(sandbox, j) if is_sandbox_failure(r) else r for j, r in zip(jobs, reports, strict=True)]


def _signature(report: Any) -> tuple:
    """What must not change between runs of one reference: the job error, or each test's status."""
    return (report.error is not None, tuple(o.status for o in report.outcomes))


def flaky_tasks(tasks: list[Task], jobs: list, sandbox: Any, repeats: int, first: list) -> list[tuple[str, str]]:
    """(task id, how) of the tasks whose grading outcome differs between `repeats` runs of the same job.

    `first` holds the reports of run 1; runs 2..repeats are graded here. With a sandbox whose runs are
    fresh interpreters (`Sandbox(warm_pool=False)`), each run has its own hash seed (`python -I` ignores
    PYTHONHASHSEED; every interpreter draws a random one), so a test whose outcome depends on set or
    string-hash order shows up here.
    """
    runs = [[_signature(r) for r in first]]
    runs += [[_signature(r) for r in _batch(sandbox, jobs)] for _ in range(repeats - 1)]
    out = []
    for i, task in enumerate(tasks):
        sigs = [run[i] for run in runs]
        if len(set(sigs)) > 1:
            passed = sum(not err and all(s == "pass" for s in st) for err, st in sigs)
            out.append((task.id, f"outcome differs between fresh processes: all tests passed in {passed} of "
                                 f"{repeats} runs"))
    return out


def session_ceiling(tasks: list[Task], sandbox: Any, through_session: bool = False, repeats: int = 1) -> dict[str, Any]:
    """Grade every task's reference in the python-session environment.

    Args:
        repeats: grade each reference this many times (see `flaky_tasks`); not with `through_session`.

    Returns:
        {"n", "passed_all", "ceiling", "mean_reward", "shown_share", "failures": [(task id, reason)],
        "flaky": [(task id, how)]} (ceiling and rewards from the first run).
        shown_share = reward from tests shown in the prompt / total reward (0 if no reward).
    """
    env = PythonSessionEnv(sandbox=sandbox)
    rewards, shown_reward, failures = [], 0.0, []
    jobs, order = [], []
    for task in tasks:
        blocked = sorted(imported_modules(task.reference) - env.allowed_imports)
        if blocked:
            rewards.append(0.0)
            failures.append((task.id, f"import not allowed: {', '.join(blocked)}"))
            continue
        if through_session:
            r = play(env, task, [[ToolCall("run_python", {"code": task.reference})]], final_answer="done")
            per_test = env._per_test
            rewards.append(0.0 if r is None else r)
            shown_reward += sum(per_test[i] for i in task.meta.get("shown_test_indices", ()) if i < len(per_test)) / len(task.hidden_tests)
            if r is None or r < 1.0:
                failures.append((task.id, "unscorable: the sandbox could not grade" if r is None else f"reward {r:.2f}"))
            continue
        env.reset(task)
        jobs.append(env.grading_job([task.reference]))
        order.append(task)
    reports = _batch(sandbox, jobs)
    flaky = flaky_tasks(order, jobs, sandbox, repeats, reports) if repeats > 1 else []
    for task, report in zip(order, reports, strict=False):
        rewards.append(report.fraction)
        passed = {o.index for o in report.outcomes if o.status == "pass"} if not report.error else set()
        shown_reward += len(passed & set(task.meta.get("shown_test_indices", ()))) / len(task.hidden_tests)
        if not report.all_passed:
            failures.append((task.id, _reason(report)))
    env.close()
    n = len(tasks)
    total = sum(rewards)
    return {"n": n, "passed_all": sum(r == 1.0 for r in rewards), "ceiling": sum(r == 1.0 for r in rewards) / max(n, 1),
            "mean_reward": total / max(n, 1), "shown_share": shown_reward / total if total else 0.0,
            "failures": sorted(failures, key=lambda f: _id_key(f[0])), "flaky": sorted(flaky, key=lambda f: _id_key(f[0]))}


def _id_key(task_id: str) -> tuple[str, int]:
    head, _, tail = task_id.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (task_id, 0)


def bugfix_check(sandbox: Any, n_per_family: int = 2, seed: int = 0) -> dict[str, dict[str, float]]:
    """Mean expert reward per (environment, family) over `n_per_family` renamed train and held-out
    tasks of every bug-fix family."""
    from agentrl.tasks import FAMILIES, make_tasks, randomize_names

    rng = random.Random(seed)
    tasks = [randomize_names(t, rng) for split in ("train", "heldout")
             for t in make_tasks(n_per_family * len(FAMILIES), seed=seed, split=split)]
    out: dict[str, dict[str, float]] = {}
    for env_name in ("edit-menu", "coding-tools"):
        env = make_env(env_name, sandbox=sandbox)
        by_family: dict[str, list[float]] = {}
        for task in tasks:
            turns = expert_turns(env_name, task, random.Random(seed))
            r = play(env, task, turns, seed=seed)
            by_family.setdefault(task.family, []).append(0.0 if r is None else r)  # unscorable: not a pass
        out[env_name] = {f: sum(v) / len(v) for f, v in sorted(by_family.items())}
        env.close()
    return out
