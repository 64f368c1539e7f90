"""`agentrl env check mbpp|humaneval|bugfix`: print the reference-solution ceilings of agentrl.envs.ceiling."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from typing import Any

from agentrl.cli.args import positive_float, positive_int
from agentrl.envs.ceiling import bugfix_check, session_ceiling

MAX_TEST_TIMEOUT_S = 86_400.0  # a day: beyond it the doubled job limits overflow what the sandbox can set


def per_test_timeout(text: str) -> float:
    """argparse `type=` for --test-timeout-s: a finite number of seconds in (0, MAX_TEST_TIMEOUT_S];
    argparse.ArgumentTypeError otherwise (1e308 doubled to inf crashed the CPU-limit arithmetic)."""
    value = positive_float(text)
    if value > MAX_TEST_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TEST_TIMEOUT_S:g} seconds (a day), got {value:g}")
    return value


def register(subparsers: Any) -> None:
    """Add `env check ...` to the agentrl command line."""
    env = subparsers.add_parser("env", help="environment tools")
    sub = env.add_subparsers(dest="env_command", metavar="ENV_COMMAND", required=True, help="what to do")
    check = sub.add_parser("check", help="reference-solution ceiling of a task set in its environment")
    check.add_argument("dataset", choices=("mbpp", "humaneval", "bugfix"), help="task source to check")
    check.add_argument("--data", default=None, help="dataset file (default: the shared data folder / package)")
    check.add_argument("--split", default="all", help="mbpp: train | test | all (default all)")
    check.add_argument("--limit", type=positive_int, default=None,
                       help="check only the first N tasks of each split (bugfix: N tasks per family and split, default 2)")
    check.add_argument("--through-session", action="store_true",
                       help="play a real run_python episode per task instead of grading the reference directly")
    check.add_argument("--seed", type=int, default=0, help="seed of the generated tasks and names")
    check.add_argument("--repeats", type=positive_int, default=3,
                       help="mbpp / humaneval: grade each reference this many times, each run in a fresh interpreter "
                            "(its own hash seed); tasks whose outcome differs between runs are reported as flaky "
                            "(default 3; 1 = once, in the warm pool)")
    check.add_argument("--reward-includes-shown-test", action="store_true",
                       help="score the test shown in the prompt too (the write-up's scoring; default: hidden tests only)")
    check.add_argument("--test-timeout-s", type=per_test_timeout, default=None,
                       help="per-test wall-clock limit of the grader, seconds (default: SandboxLimits); the "
                            "job's wall-clock and CPU limits are raised to at least twice this")
    check.set_defaults(func=main)


def _print_ceiling(name: str, res: dict[str, Any]) -> None:
    print(f"{name}: {res['passed_all']}/{res['n']} reference solutions pass all tests "
          f"(ceiling {res['ceiling']:.3f}); mean reward {res['mean_reward']:.3f}; "
          f"share of reward from tests shown in the prompt {res['shown_share']:.3f}")
    for task_id, reason in res["failures"]:
        print(f"  FAIL {task_id}: {reason}")
    if "flaky" in res:
        print(f"  flaky (outcome differs between fresh processes): {len(res['flaky'])}")
    for task_id, how in res.get("flaky", []):
        print(f"  FLAKY {task_id}: {how}")
    kinds = Counter(reason.split(":")[0] for _, reason in res["failures"])
    if kinds:
        print("  failure kinds: " + ", ".join(f"{k} x{v}" for k, v in kinds.most_common()))


def main(args: argparse.Namespace) -> int:
    """Run `agentrl env check DATASET`; exit code 0 (numbers are reported, not judged)."""
    from dataclasses import replace

    from agentrl.sandbox import Sandbox, SandboxLimits

    limits = SandboxLimits()
    if args.test_timeout_s is not None:
        t = args.test_timeout_s
        limits = replace(limits, test_timeout_s=t, timeout_s=max(limits.timeout_s, 2 * t),
                         cpu_s=max(limits.cpu_s, math.ceil(2 * t)))
    # repeated runs need fresh interpreters: forks of one warm-pool worker share its hash seed
    sandbox = Sandbox(limits=limits, warm_pool=args.repeats == 1)
    shown = args.reward_includes_shown_test
    t0 = time.perf_counter()
    if args.dataset == "bugfix":
        for env_name, fams in bugfix_check(sandbox, args.limit or 2, args.seed).items():
            print(f"{env_name}: " + ", ".join(f"{f} {r:.2f}" for f, r in fams.items()))
    elif args.dataset == "humaneval":
        from agentrl.tasks.humaneval import load_humaneval

        tasks = load_humaneval(args.data, reward_includes_shown=shown)[: args.limit]
        _print_ceiling("humaneval", session_ceiling(tasks, sandbox, args.through_session, args.repeats))
    else:
        from agentrl.tasks.mbpp import load_mbpp

        splits = ("train", "test") if args.split == "all" else (args.split,)
        for split in splits:
            tasks = load_mbpp(args.data, split=split, reward_includes_shown=shown)[: args.limit]
            _print_ceiling(f"mbpp {split}", session_ceiling(tasks, sandbox, args.through_session, args.repeats))
    if args.dataset != "bugfix":
        print("reward: " + ("every test, the shown one included (--reward-includes-shown-test)" if shown
                            else "the tests not shown in the prompt"))
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0
