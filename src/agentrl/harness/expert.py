"""Expert episodes through the real opencode harness: the SFT warm start of a black-box agent.

A pretrained model that has never seen opencode's tools (`read`, `edit`, `write`, `bash`, with opencode's
argument names) never calls them, so every GRPO group of a black-box run has zero reward spread and
nothing trains. As the edit-menu warm start does for agentrl's own loop (agentrl.envs.experts), a
scripted expert plays the bug-fix procedure, here through opencode itself: the policy server answers
opencode's model calls with the expert's replies, so the training rows are exactly the tokens opencode
sends and the model would have to write (opencode's system prompt, tool schemas and tool-result
formatting included), rebuilt from the server's trace as a black-box GRPO run rebuilds them
(agentrl.rollout.trace.rows_from_trace).

The procedure, one model call each:
  1. `read` the file the task message names (opencode refuses an edit of a file it has not read);
  2. `edit` it: the whole-line (oldString, newString) of the task's correct edit op, or with
     `random_op` of an op picked at random from the task's edit menu (agentrl.envs.experts
     .candidate_line_edits), so the warm-started model knows the procedure but not which op fixes which
     bug: what GRPO then learns;
  3. `bash`: run the shown tests (`shown_tests_command`), as the coding-tools expert runs pytest: the write-up's
     read, edit, test, submit procedure, so the warm-started policy has seen how to check an edit (with
     `random_op` most of the experts' edits fail their tests, and the result shows it);
  4. a short closing text without a tool call, which ends opencode's loop.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from agentrl.rollout.scripted import Reply, ScriptedSampler, tool_call_text
from agentrl.tasks.task import Task

CLOSING_TEXT = "I fixed the bug with that edit."
_TASK_RE = re.compile(r"The function `([^`]+)` in (\S+) has a bug\.")
_WORKDIR_RE = re.compile(r"Working directory: (\S+)")


def shown_tests_command(task: Task) -> str:
    """The shell command the expert runs to check its edit: the workspace's test runner
    (agentrl.harness.episode.TEST_RUNNER: every `test_*` function of the shown test file, plain `python3`, no
    pytest), in the repository (opencode's bash tool runs in the work dir). Prints one line per test and "all
    tests passed", or exits 1 with each failing assert's traceback.

    A short command on purpose: the earlier one-line `python3 -c "import test_x as t; [f() for ...]"` was
    garbled by the warm-started 1.5B (unbalanced quotes, a comprehension that ran no test), and after GRPO the
    policy had dropped the step (results/coder/opencode-1.5b-graded)."""
    from agentrl.harness.episode import TEST_RUNNER

    del task  # every task's workspace has the same runner
    return f"python3 {TEST_RUNNER}"


def _expert_edit(task: Task, random_op: bool, seed: int) -> tuple[str, str]:
    """(oldString, newString) of the expert's edit of `task`: its correct op, or a menu op at random
    (random.Random(f"{seed}:{task.id}"), so concurrent episodes pick independently and reproducibly).

    Raises:
        ValueError: the task has no op that applies as a unique whole-line edit (or no correct one).
    """
    from agentrl.envs.experts import candidate_line_edits

    edits = candidate_line_edits(task)
    if random_op:
        if not edits:
            raise ValueError(f"task {task.id!r}: no edit op applies as a unique line edit")
        return random.Random(f"{seed}:{task.id}").choice(edits)[1]
    correct = task.correct_op.name if task.correct_op is not None else None
    for name, edit in edits:
        if name == correct:
            return edit
    raise ValueError(f"task {task.id!r}: its correct op does not apply as a unique line edit")


def opencode_expert_reply(tasks: Sequence[Task], *, random_op: bool = False, seed: int = 0) -> Reply:
    """The expert's reply to one opencode model call, from the decoded context (see the module docstring).

    The task is the one whose entry point and source file the user message names (the message of
    agentrl.harness.episode.task_message); where several tasks share both (names not randomized), the
    one whose source lines the context shows (opencode's read result). The absolute path comes from
    opencode's "Working directory" line; the step is the number of assistant turns the context holds.

    Raises:
        ValueError: (when called) a context naming no task of `tasks`, or no working directory.
    """
    by_key: dict[tuple[str, str], list[Task]] = {}
    for t in tasks:
        by_key.setdefault((t.entry, t.source_file), []).append(t)

    def shown(task: Task, text: str) -> bool:
        return all(line in text for line in task.files[task.source_file].splitlines() if line.strip())

    def reply(text: str) -> str:
        named, where = _TASK_RE.search(text), _WORKDIR_RE.search(text)
        same = by_key.get(named.groups(), []) if named else []
        if not same or where is None:
            raise ValueError("opencode expert: the context names no known task or no working directory")
        task = next((t for t in same if shown(t, text)), same[0])
        path = f"{where.group(1).rstrip('/')}/{task.source_file}"
        step = text.count("<|im_start|>assistant") - 1  # the generation prompt opens one more
        if step == 0:
            return tool_call_text("read", {"filePath": path})
        if step == 1:
            old, new = _expert_edit(task, random_op, seed)
            return tool_call_text("edit", {"filePath": path, "oldString": old, "newString": new})
        if step == 2:
            return tool_call_text("bash", {"command": shown_tests_command(task), "description": "Run the tests"})
        return CLOSING_TEXT

    return reply


def agent_expert_trajectories(tasks: Sequence[Task], model: Any, tokenizer: Any, *, random_op: bool = False,
                              seed: int = 0, cfg: Any = None, max_context_tokens: int = 8192,
                              sandbox: Any = None, on_progress: Any = None) -> list:
    """Play `opencode_expert_reply` through opencode on every task; one Trajectory per training row.

    Args:
        tasks: bug-fix tasks (repositories); model / tokenizer: the policy (its template renders
            opencode's requests; its log-probs are recorded as a sampler's would be).
        random_op / seed: the expert's edit choice (module docstring).
        cfg: agentrl.harness.episode.AgentConfig (default: AgentConfig()).
        max_context_tokens: the policy server's per-call context cap.
        sandbox: grades the final workspaces (default: a fresh agentrl Sandbox, closed after).
        on_progress: called with (episodes done, episodes in all) once all have run.

    Returns:
        Trajectories: prompt_ids / completion_ids / policy_mask of each row the trace rebuilds (mask 1 on
        the expert's tokens, 0 on opencode's tool results between calls), reward from the hidden tests
        (None if unscorable), meta {"source": "opencode-expert", "random_op", "rollout_id", "model_calls"}.
        Episodes that end without a row (a crashed harness) are left out and logged.

    Raises:
        FileNotFoundError: opencode is not installed.
        RuntimeError: no episode produced a row (the message gives the end reasons seen).
    """
    import logging
    from collections import Counter

    from agentrl.harness.episode import AgentConfig, BlackBoxRunner
    from agentrl.rollout.hf_sampler import SamplingConfig
    from agentrl.rollout.trajectory import Trajectory
    from agentrl.sandbox import Sandbox
    from agentrl.serve.policy.server import PolicyServer

    cfg = cfg or AgentConfig()
    sampler = ScriptedSampler(opencode_expert_reply(tasks, random_op=random_op, seed=seed))
    sampler.bind(model, tokenizer)
    server = PolicyServer(model, tokenizer, sampler=sampler, max_context_tokens=max_context_tokens,
                          sampling=SamplingConfig(max_new_tokens=max(cfg.output_tokens, 1024)), budget=cfg.budget)
    own_sandbox = sandbox is None
    sandbox = sandbox or Sandbox()
    try:
        with BlackBoxRunner(server, sandbox, cfg) as runner:
            episodes = runner.run(list(tasks))
    finally:
        server.close()
        if own_sandbox:
            sandbox.close()
    if on_progress is not None:
        on_progress(len(episodes), len(tasks))
    out = []
    for gid, ep in enumerate(episodes):
        for row in ep.rows:
            out.append(Trajectory(task_id=ep.task_id, group_id=gid, prompt_ids=row.prompt_ids,
                                  completion_ids=row.completion_ids, policy_mask=row.policy_mask,
                                  sampler_logprobs=(0.0,) * len(row.completion_ids), reward=ep.reward,
                                  end_reason=ep.end_reason,
                                  meta={"source": "opencode-expert", "random_op": random_op,
                                        "rollout_id": ep.rollout_id, "model_calls": len(ep.trace.calls)}))
    reasons = Counter(ep.end_reason for ep in episodes)
    dropped = sum(1 for ep in episodes if not ep.rows)
    if dropped:
        logging.getLogger("agentrl.harness").warning("%d of %d expert episodes left no row: %s", dropped,
                                                    len(episodes), dict(reasons))
    if not out:
        raise RuntimeError(f"no opencode expert episode produced a training row (end reasons: {dict(reasons)})")
    return out
