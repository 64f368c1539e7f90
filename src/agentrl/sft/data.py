"""Supervised data for `agentrl sft`: expert trajectories played through real environments, and JSONL I/O.

Not the SFT loop (agentrl.sft.trainer) and not the experts themselves (agentrl.envs.experts). Expert episodes
run through the rollout driver (agentrl.rollout.driver.run_episodes) with a token "sampler" that emits
the expert's turns, so prompt ids, observation ids, end reasons and rewards are exactly those the driver
produces for a policy that sampled the expert's text. Each turn's ids are the chat template's own
rendering of an assistant message carrying the expert's tool calls (agentrl.chat.tito.assistant_turn_ids),
and every trajectory is checked against the template's rendering of the whole conversation.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentrl.chat.template import observation_messages, tool_messages
from agentrl.chat.tito import (
    TurnFormat,
    assert_conversation_ids,
    assistant_message,
    assistant_turn_ids,
    between_turns_ids,
    turn_format,
)
from agentrl.envs.base import ToolCall
from agentrl.preflight import BOM_BYTES, check_input_file, loads_json, lone_surrogate_path
from agentrl.rollout.hf_sampler import Sample
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task

FINAL_ANSWER = "I fixed the function and ran the tests."  # agentrl.envs.experts.FINAL_ANSWER


class _ExpertSampler:
    """A `SampleFn` for one episode: returns the next queued expert turn (ids end with end-of-turn).

    A turn longer than the driver's budget is cut there, as a real sampler would (hit_token_limit).
    """

    def __init__(self, turns: list[list[int]]):
        self.turns, self.next = turns, 0

    def __call__(self, contexts: list[list[int]], budgets: list[int]) -> list[Sample]:
        if len(contexts) != 1:
            raise RuntimeError(f"expert sampler drives one episode at a time, got {len(contexts)}")
        if self.next >= len(self.turns):
            raise RuntimeError("the driver asked for a turn after the expert's last one")
        ids = self.turns[self.next]
        self.next += 1
        cut = len(ids) > budgets[0]
        ids = ids[: budgets[0]]
        return [Sample(ids=tuple(ids), logprobs=(0.0,) * len(ids), hit_token_limit=cut)]


def _expert_turn_ids(tok: Any, obs, turns: list[list[ToolCall]], fmt: TurnFormat,
                     final_answer: str, enable_thinking: bool = False) -> list[list[int]]:
    """Template ids of each expert turn, plus a final-answer turn (used only if the env is still running)."""
    history = observation_messages(obs)
    msgs = [assistant_message(calls) for calls in turns] + [assistant_message(content=final_answer)]
    return [assistant_turn_ids(tok, history, m, tools=obs.tools, fmt=fmt, enable_thinking=enable_thinking)
            for m in msgs]


def check_trajectory_rendering(tokenizer: Any, traj: Trajectory, obs, *, fmt: TurnFormat | None = None,
                               enable_thinking: bool = False) -> None:
    """Assert prompt + completion ids of `traj` equal the template's rendering of its conversation.

    The conversation is rebuilt from the trajectory's turns: each turn's parsed calls as structured
    `tool_calls` (or its text as content for a final answer), then its tool results. Turns cut at the
    token limit cannot be rendered by a template, so such trajectories are not checked.

    Raises:
        agentrl.chat.tito.TitoMismatch: the ids differ (naming the first differing token).
    """
    if not traj.turns or any(t.hit_token_limit for t in traj.turns):
        return
    msgs, starts, pos = observation_messages(obs), [], len(traj.prompt_ids)
    for i, turn in enumerate(traj.turns):
        starts.append(pos)
        pos += len(turn.completion_ids) + len(turn.observation_ids)
        msgs.append(assistant_message(turn.calls) if turn.calls else assistant_message(content=turn.text))
        if i + 1 < len(traj.turns):
            msgs += tool_messages(turn.results)
    assert_conversation_ids(tokenizer, msgs, obs.tools, list(traj.prompt_ids) + list(traj.completion_ids),
                            starts, fmt=fmt, enable_thinking=enable_thinking, what=f"expert trajectory {traj.task_id}")


def _check_turn_calls(traj: Trajectory, turns: list[list[ToolCall]]) -> None:
    """The driver's parse of each rendered turn must give back the expert's calls (name and arguments)."""
    for k, (turn, calls) in enumerate(zip(traj.turns, turns, strict=False)):
        got = [(c.name, c.arguments, c.malformed) for c in turn.calls]
        want = [(c.name, dict(c.arguments), None) for c in calls]
        if got != want:
            raise ValueError(f"expert trajectory {traj.task_id}: turn {k} parses as {got}, expected {want}")


def expert_trajectories(
    env_name: str,
    tasks: Sequence[Task],
    tokenizer: Any,
    *,
    random_op: bool = False,
    seed: int = 0,
    sandbox: Any = None,
    max_turns: int | None = None,
    max_new_tokens: int = 2048,
    max_context_tokens: int = 8192,
    final_answer: str = FINAL_ANSWER,
    check: bool = True,
    enable_thinking: bool = False,
    env_kwargs: dict[str, Any] | None = None,
    on_progress: Any = None,
) -> list[Trajectory]:
    """Play the scripted expert (agentrl.envs.expert_turns) on each task through a real environment.

    Args:
        env_name: registry name (agentrl.envs.make_env), e.g. "edit-menu", "coding-tools".
        tasks: tasks to play, one episode each, in order.
        tokenizer: HF tokenizer with a chat template (the policy's).
        random_op: the expert follows its procedure but picks the edit op at random from the menu.
        seed: the expert's choices come from random.Random(seed + i) for task i; environments reset
            with their default seed (the task's own), as the trainer's episodes do.
        sandbox: shared agentrl.sandbox.Sandbox (default: each environment's own).
        max_turns: environment turn limit (None: the environment's default).
        max_new_tokens / max_context_tokens: the rollout driver's limits (a turn that does not fit is cut,
            as a sampler's would be, and the trajectory is then not rendering-checked).
        final_answer: the expert's closing message when the environment is still running after its turns.
        check: assert each trajectory's ids equal the template's rendering of the conversation.
        enable_thinking: template thinking mode (each turn as the template renders a thinking-mode turn).
        env_kwargs: further constructor arguments of the environment (e.g. a run's max_edits and
            max_observation_chars, agentrl.rl.run_setup.env_kwargs); `sandbox` and `max_turns` win over them.
        on_progress: called with (episodes played, episodes in all) after each episode.

    Returns:
        One Trajectory per task: policy mask 1 exactly on the expert's turn ids, 0 on observations;
        sampler_logprobs all 0.0 (no sampler); reward from the environment; meta["source"] = "expert".

    Raises:
        ValueError: unknown environment, a task the expert cannot play, a rendered turn that does not
            parse back to the expert's calls.
        agentrl.chat.tito.TitoMismatch: (check=True) ids differ from the template's rendering.
    """
    from dataclasses import replace

    from agentrl.envs import expert_turns, make_env
    from agentrl.rollout.driver import RolloutConfig, run_episodes
    from agentrl.rollout.hf_sampler import SamplingConfig

    fmt = turn_format(tokenizer, enable_thinking=enable_thinking)
    cfg = RolloutConfig(sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                        max_context_tokens=max_context_tokens, tool_workers=1, enable_thinking=enable_thinking)
    kwargs = dict(env_kwargs or {}) | {"sandbox": sandbox} | ({"max_turns": max_turns} if max_turns is not None else {})
    out = []
    for i, task in enumerate(tasks):
        env = make_env(env_name, **kwargs)
        turns = expert_turns(env_name, task, random.Random(seed + i), random_op=random_op)
        obs = env.reset(task)  # the driver resets again (same seed) before playing; this reads the prompt
        sampler = _ExpertSampler(_expert_turn_ids(tokenizer, obs, turns, fmt, final_answer, enable_thinking))
        traj = run_episodes(None, tokenizer, [(env, task)], cfg=replace(cfg, check_template=(i == 0)),
                            sampler=sampler)[0]
        _check_turn_calls(traj, turns)
        if check:
            check_trajectory_rendering(tokenizer, traj, obs, fmt=fmt, enable_thinking=enable_thinking)
        out.append(replace(traj, group_id=i, meta={**traj.meta, "source": "expert", "random_op": random_op}))
        if on_progress is not None:
            on_progress(i + 1, len(tasks))
    return out


# ---------------------------------------------------------------------------------------------------------
# JSONL I/O


def trajectory_record(traj: Trajectory, *, transcript: bool = True) -> dict[str, Any]:
    """The token-level JSON record of a trajectory (what `save_trajectories` writes per line)."""
    rec: dict[str, Any] = {
        "task_id": traj.task_id,
        "prompt_ids": list(traj.prompt_ids),
        "completion_ids": list(traj.completion_ids),
        "policy_mask": list(traj.policy_mask),
        "reward": None if traj.reward is None else float(traj.reward),
    }
    if traj.end_reason:
        rec["end_reason"] = traj.end_reason
    if transcript and traj.transcript:
        rec["transcript"] = traj.transcript
    return rec


def save_trajectories(trajs: Iterable[Trajectory], path: str | os.PathLike, *, transcript: bool = True) -> int:
    """Write one JSON object per line (fields: task_id, prompt_ids, completion_ids, policy_mask, reward,
    optional end_reason and transcript); parent folders are created. Returns the number written.

    Raises:
        ValueError: `path` is a directory, lies under a file, or cannot be written (names `path`).
    """
    from agentrl.preflight import check_output_file

    p = check_output_file(path, "trajectory file")
    n = 0
    tmp = p.with_name(p.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            for traj in trajs:
                f.write(json.dumps(trajectory_record(traj, transcript=transcript), ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ValueError(f"trajectory file {str(p)!r}: cannot write it ({e.strerror or e})") from None
    return n


def _int_list(rec: dict, key: str, where: str, *, binary: bool = False, vocab_size: int | None = None) -> list[int]:
    val = rec.get(key)
    if val is None and "messages" not in rec and not any(k in rec for k in ("prompt_ids", "completion_ids")):
        raise ValueError(f"{where}: a record needs prompt_ids, completion_ids and policy_mask (token level) or "
                         f"messages (chat); got the keys {sorted(rec)[:8]}")
    if not isinstance(val, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in val):
        raise ValueError(f"{where}: field {key!r} must be a list of integers, got {type(val).__name__}")
    if binary and any(v not in (0, 1) for v in val):
        raise ValueError(f"{where}: field {key!r} must hold only 0 and 1")
    if not binary and any(v < 0 for v in val):
        raise ValueError(f"{where}: field {key!r} holds a negative token id")
    if vocab_size is not None and not binary and val and max(val) >= vocab_size:
        raise ValueError(f"{where}: field {key!r} holds token id {max(val)}, outside the model's vocabulary "
                         f"(ids 0..{vocab_size - 1}); were the ids made with another tokenizer?")
    return val


def trajectory_from_record(rec: Any, where: str, vocab_size: int | None = None) -> Trajectory:
    """A Trajectory from a token-level record (see `trajectory_record`).

    `vocab_size`: the model's embedding rows; token ids must be below it (None: not checked).

    Raises:
        ValueError: naming `where` and the missing or ill-typed field, a token id outside the vocabulary,
            a non-finite reward, or mismatched lengths.
    """
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    task_id = rec.get("task_id", "")
    if not isinstance(task_id, str):
        raise ValueError(f"{where}: field 'task_id' must be a string")
    prompt = _int_list(rec, "prompt_ids", where, vocab_size=vocab_size)
    completion = _int_list(rec, "completion_ids", where, vocab_size=vocab_size)
    mask = _int_list(rec, "policy_mask", where, binary=True)
    if not prompt:
        raise ValueError(f"{where}: field 'prompt_ids' is empty (the first policy token needs a context)")
    if len(mask) != len(completion):
        raise ValueError(f"{where}: field 'policy_mask' has {len(mask)} entries for {len(completion)} completion_ids")
    reward = rec.get("reward", 0.0)
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)
                               or not math.isfinite(reward)):
        raise ValueError(f"{where}: field 'reward' must be a finite number or null (unscorable), got {reward!r}")
    return Trajectory(task_id=task_id, group_id=0, prompt_ids=tuple(prompt), completion_ids=tuple(completion),
                      policy_mask=tuple(mask), sampler_logprobs=(0.0,) * len(completion),
                      reward=None if reward is None else float(reward),
                      transcript=str(rec.get("transcript", "")), end_reason=str(rec.get("end_reason", "")))


def _content_text(content: Any, where: str) -> str:
    """OpenAI message content -> the string chat templates read: None -> "", text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ValueError(f"{where}: content must be a string, null or a list of {{'type': 'text', 'text': ...}} parts")


def _template_message(m: dict[str, Any], where: str) -> dict[str, Any]:
    """One record message in the form HF chat templates read (content a string; tool-call arguments an
    object, as agentrl's own transcripts hold them, or the raw string when it is not JSON).
    Raises ValueError naming `where` for other shapes."""
    out = {**m, "content": _content_text(m.get("content"), where)}
    calls = m.get("tool_calls")
    if calls is None:
        out.pop("tool_calls", None)
        return out
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                              and isinstance(c["function"].get("name"), str) for c in calls):
        raise ValueError(f"{where}: tool_calls must be a list of {{'function': {{'name': str, 'arguments': ...}}}}")
    fixed = []
    for c in calls:
        args = c["function"].get("arguments", {})
        if isinstance(args, str):  # OpenAI's JSON string; a string that is not JSON is kept (as serve-policy does)
            with contextlib.suppress(ValueError, RecursionError):
                args = json.loads(args)
        if not isinstance(args, (dict, str)):
            raise ValueError(f"{where}: tool call {c['function']['name']!r}: arguments must be a JSON object")
        fixed.append({**c, "function": {**c["function"], "arguments": args}})
    out["tool_calls"] = fixed
    return out


def messages_trajectory(
    rec: dict[str, Any], tokenizer: Any, where: str, *, enable_thinking: bool = False
) -> Trajectory:
    """A Trajectory from a chat record `{"messages": [...], "tools": [...]}`, token path as the driver's.

    Prompt = the template's rendering of the messages before the first assistant message (with the
    generation prompt); each assistant message = `assistant_turn_ids` (mask 1); the messages between
    assistant turns = `between_turns_ids` (mask 0); messages after the last assistant are dropped.
    The result is checked against the template's rendering of the whole conversation.

    Raises:
        ValueError: naming `where`: no assistant message, a malformed message, or ids that differ
            from the template's rendering.
    """
    from jinja2 import TemplateError

    from agentrl.chat.template import encode, render_text
    from agentrl.chat.tito import TitoMismatch

    msgs, tools = rec.get("messages"), rec.get("tools") or None
    if not isinstance(msgs, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs):
        raise ValueError(f"{where}: field 'messages' must be a list of objects with a string 'role'")
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f"{where}: field 'tools' must be a list of tool schemas")
    msgs = [_template_message(m, f"{where}: messages[{i}]") for i, m in enumerate(msgs)]
    asst = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if not asst or asst[0] == 0:
        raise ValueError(f"{where}: 'messages' needs a non-assistant message, then at least one assistant message")
    fmt = turn_format(tokenizer, enable_thinking=enable_thinking)
    try:
        prompt = encode(tokenizer, render_text(tokenizer, msgs[: asst[0]], tools, add_generation_prompt=True,
                                               enable_thinking=enable_thinking))
        completion, mask, starts = [], [], []
        for k, i in enumerate(asst):
            if k:
                obs = between_turns_ids(msgs[asst[k - 1] + 1 : i], tokenizer, tools=tools, fmt=fmt,
                                        enable_thinking=enable_thinking)
                completion += obs
                mask += [0] * len(obs)
            starts.append(len(prompt) + len(completion))
            ids = assistant_turn_ids(tokenizer, msgs[:i], msgs[i], tools=tools, fmt=fmt, enable_thinking=enable_thinking)
            completion += ids
            mask += [1] * len(ids)
        assert_conversation_ids(tokenizer, msgs[: asst[-1] + 1], tools, prompt + completion, starts, fmt=fmt,
                                enable_thinking=enable_thinking, what=where)
    except (TitoMismatch, ValueError, TypeError, TemplateError) as e:  # jinja errors on odd messages
        raise ValueError(f"{where}: cannot render the messages with the chat template: {e}") from e
    return Trajectory(task_id=str(rec.get("task_id", where)), group_id=0, prompt_ids=tuple(prompt),
                      completion_ids=tuple(completion), policy_mask=tuple(mask),
                      sampler_logprobs=(0.0,) * len(completion), reward=float(rec.get("reward", 0.0) or 0.0),
                      meta={"source": "messages"})


def load_trajectories(path: str | os.PathLike, tokenizer: Any = None, *, enable_thinking: bool = False,
                      vocab_size: int | None = None) -> list[Trajectory]:
    """Read a JSONL file of token-level records, or of chat records `{"messages", "tools"}` (needs `tokenizer`).

    Blank lines are skipped; each line may be either kind. `vocab_size` (the model's embedding rows):
    token-level ids must be below it (None: not checked).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is a directory; "PATH:LINE: ..." naming the line and the field that is wrong (a token id outside the
            vocabulary, text that is not UTF-8, ...), a chat record without a tokenizer, or a file with no records.
    """
    p = check_input_file(path, "trajectory file", "a JSONL file of trajectory records (docs/sft.md)")
    out = []
    for where, rec in _records(p):
        if isinstance(rec, dict) and "messages" in rec:
            if tokenizer is None:
                raise ValueError(f"{where}: a chat-messages record needs a tokenizer to render it")
            traj = messages_trajectory(rec, tokenizer, where, enable_thinking=enable_thinking)
        else:
            traj = trajectory_from_record(rec, where, vocab_size)
        out.append(Trajectory(**{**traj.__dict__, "group_id": len(out)}))
    if not out:
        raise ValueError(_no_trajectories(p))
    if not any(t.num_policy_tokens for t in out):
        raise ValueError(_no_policy_tokens(p, len(out)))
    return out


def check_trajectory_file(path: str | os.PathLike) -> None:
    """What load_trajectories can check of `path` without a tokenizer or a model, so `agentrl sft --from-jsonl`
    fails before the model loads: every line JSON, every token-level record valid (its line named), and some
    record with a policy token to train on (a token-level record with a policy_mask 1, or a chat record; those
    need an assistant message, which load_trajectories checks with the tokenizer).

    Raises: FileNotFoundError / ValueError as load_trajectories, naming the file (and the line)."""
    p = check_input_file(path, "trajectory file", "a JSONL file of trajectory records (docs/sft.md)")
    n = trainable = 0
    for where, rec in _records(p):
        n += 1
        if isinstance(rec, dict) and "messages" in rec:
            trainable += 1
        else:
            trainable += trajectory_from_record(rec, where).num_policy_tokens > 0
    if not n:
        raise ValueError(_no_trajectories(p))
    if not trainable:
        raise ValueError(_no_policy_tokens(p, n))


def _no_trajectories(p: Path) -> str:
    return f"{p}: no trajectories (expected JSON lines with prompt_ids/completion_ids/policy_mask or messages)"


def _no_policy_tokens(p: Path, n: int) -> str:
    return (f"{p}: none of its {n} records has a policy token to train on (every policy_mask is all 0; SFT trains "
            "on the tokens whose policy_mask is 1)")


def _records(p: Path) -> Iterator[tuple[str, Any]]:
    """("PATH:LINE", record) for each non-blank line of the JSONL file `p` (a leading byte order mark skipped).

    Raises: ValueError naming the line: not UTF-8, not JSON, a string holding a lone surrogate."""
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{p}:{lineno}"
            try:
                line = (raw.removeprefix(BOM_BYTES) if lineno == 1 else raw).decode("utf-8")  # a Windows editor's BOM
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 text at byte {e.start} of the line") from None
            if not line.strip():
                continue
            try:
                rec = loads_json(line, where)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from e
            bad = lone_surrogate_path(rec)  # the template's tokenizer raised "TextEncodeInput must be Union[...]"
            if bad is not None:
                raise ValueError(f"{where}: field {bad[:120]!r} holds a lone surrogate (an unpaired \\ud800-\\udfff "
                                 "escape), which is not UTF-8 text")
            yield where, rec
