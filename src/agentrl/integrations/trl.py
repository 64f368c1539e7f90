"""agentrl environments inside TRL's GRPOTrainer: `environment_factory` classes, task datasets, tool statistics.

TRL 1.16's contract for `environment_factory` (trl.GRPOTrainer): a zero-argument class; `reset(**row)`
receives every column of the dataset row and may return a string (appended to the last user message
with no separator); every other public method is a tool, its schema built by transformers'
`get_json_schema` from type hints and a Google-style docstring; an optional `get_reward()` owns the
reward (None: unscorable, excluded from the group baseline). This module builds such a class from any
agentrl `Env` (local, or `agentrl.serve.env.client.RemoteEnv` for an `agentrl serve` server),
with tool methods generated from the environment's own schemas, so that the schemas TRL renders are
exactly the ones agentrl's own trainer renders (checked when the class is built).

What TRL's contract costs (the same environment under agentrl's trainer does better):
- No turn boundary: TRL calls tools one at a time, so one call is one `Env.step` (one turn). The
  environment's `max_turns` counts calls here and `max_calls_per_turn` never applies; set
  GRPOConfig.max_tool_calling_iterations to bound assistant turns.
- No way to end an episode: once the environment is done (solved, submitted, out of turns), every
  further tool call raises "The episode is over", which TRL counts in tools/failure_frequency and shows
  the model as an error; the tokens the model spends after the end are still trained on, with the
  episode's reward. Bound them with max_tool_calling_iterations / max_completion_length.
- No reason for the end: TRL does not tell the environment why its loop stopped (a reply without tool
  calls, max_completion_length, max_tool_calling_iterations). `get_reward` ends a running episode as
  "rollout_ended" (truncated) and grades its final state; adding `env_stats` to reward_funcs lets the
  environment see the final reply first (a final answer, as in agentrl's driver).
- Tool errors: a failed or malformed call raises, so TRL counts it as a failure and shows the model
  `{'error': '<our message>'}` instead of our plain message.
- Per-task schemas (edit-menu's menu enum) cannot be expressed: TRL renders one schema per class, so the
  class carries the environment's task-independent schemas (the menu is in the user message).
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from agentrl.envs.base import Env, ToolCall
from agentrl.tasks.task import Task

ROLLOUT_ENDED = "rollout_ended"
_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool,
                                "array": list, "object": dict}


class EpisodeOver(RuntimeError):
    """Raised by a tool called after the episode ended (TRL shows it to the model as an error)."""


class ToolCallFailed(RuntimeError):
    """Raised by a tool whose call the environment answered "failed" or "malformed" (message = its answer)."""


def task_rows(tasks: Sequence[Task], env: Env) -> list[dict[str, Any]]:
    """One dataset row per task: `prompt` ([system, user] messages, TRL's conversational format, as
    `env.reset` renders them), `task_id`, and `task` (the whole Task as JSON, for the environment).

    Raises:
        ValueError: `env` cannot reset on a task.
    """
    from agentrl.tasks.jsonl import task_to_dict

    rows = []
    for task in tasks:
        obs = env.reset(task)
        rows.append({"prompt": [{"role": "system", "content": obs.system}, {"role": "user", "content": obs.user}],
                     "task_id": task.id, "task": json.dumps(task_to_dict(task))})
    return rows


def task_dataset(tasks: Sequence[Task], env: Env | str, **env_kwargs: Any):
    """A `datasets.Dataset` of `task_rows(tasks, env)` (env: an Env, or a registry name built with env_kwargs).

    Raises:
        ValueError: no tasks, or the environment cannot reset on one.
    """
    from datasets import Dataset

    if not tasks:
        raise ValueError("task_dataset needs at least one task")
    if isinstance(env, str):
        from agentrl.envs.registry import make_env

        env = make_env(env, **env_kwargs)
    try:
        return Dataset.from_list(task_rows(tasks, env))
    finally:
        env.close()


def served_task_dataset(url: str, split: str = "train", limit: int = 0):
    """A `datasets.Dataset` of a served split (`agentrl serve`): `prompt`, `task_id` per task (first
    `limit` tasks; 0 = all). The tasks' files and hidden tests stay on the server.

    Raises:
        ConnectionError: the server cannot be reached; ValueError: an unknown split or an empty one.
    """
    from datasets import Dataset

    from agentrl.serve.env.client import fetch_tasks

    specs = fetch_tasks(url, split)[: limit or None]
    if not specs:
        raise ValueError(f"{url}: split {split!r} has no tasks")
    return Dataset.from_list([{"prompt": s["prompt"], "task_id": s["id"]} for s in specs])


_TASK_KEYS = ("id", "family", "split", "files", "entry", "source_file", "public_tests", "hidden_tests", "reference")


def _decode_task(raw: Any) -> Task:
    """The Task of a row's `task` column (task_to_dict's JSON; Wordle tasks, which have no source file,
    included, so the task-file schema of agentrl.tasks.jsonl is not applied here).

    Raises:
        ValueError: not a JSON object with the Task fields, or a field of the wrong type (id, family, split,
            entry, source_file, reference, test_setup strings; files an object of strings; public_tests and
            hidden_tests lists of strings; edit_ops a list of {name, old, new} string objects; meta an object).
    """
    from agentrl.tasks.task import EditOp

    try:
        d = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ValueError(f"dataset row 'task' is not JSON: {e}") from None
    missing = [k for k in _TASK_KEYS if not isinstance(d, dict) or k not in d]
    if missing:
        raise ValueError(f"dataset row 'task' is not a task (missing or bad: {missing})")
    d = {"test_setup": "", "edit_ops": [], "meta": {}, **d}
    if d["meta"] is None:
        d["meta"] = {}

    def strings(v: Any) -> bool:
        return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)

    checks = {
        **{k: (lambda v: isinstance(v, str), "a string")
           for k in ("id", "family", "split", "entry", "source_file", "reference", "test_setup")},
        "files": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in (*v, *v.values())),
                  "an object of file names to strings"),
        "public_tests": (strings, "a list of strings"), "hidden_tests": (strings, "a list of strings"),
        "edit_ops": (lambda v: isinstance(v, (list, tuple)) and all(
            isinstance(o, dict) and all(isinstance(o.get(k), str) for k in ("name", "old", "new")) for o in v),
            "a list of objects with string name, old and new"),
        "meta": (lambda v: isinstance(v, dict), "an object"),
    }
    for key, (ok, expected) in checks.items():
        if not ok(d[key]):
            raise ValueError(f"dataset row 'task' field {key!r} is {type(d[key]).__name__} {str(d[key])[:60]}; "
                             f"expected {expected}")
    return Task(id=d["id"], family=d["family"], split=d["split"], files=dict(d["files"]),
                entry=d["entry"], source_file=d["source_file"], public_tests=tuple(d["public_tests"]),
                hidden_tests=tuple(d["hidden_tests"]), reference=d["reference"], test_setup=d["test_setup"],
                edit_ops=tuple(EditOp(o["name"], o["old"], o["new"], bool(o.get("correct", False)))
                               for o in d["edit_ops"]),
                meta=dict(d["meta"]))


def _row_task(row: dict[str, Any], full: bool) -> Task:
    """The Task a dataset row names: its `task` JSON, else (served environments) a stub with `task_id`."""
    if row.get("task"):
        return _decode_task(row["task"])
    if full or not isinstance(row.get("task_id"), str):
        raise ValueError("the dataset row has no 'task' column (the task as JSON); build rows with "
                         f"agentrl.integrations.trl.task_dataset (got columns {sorted(row)})")
    return Task(id=row["task_id"], family="", split="", files={}, entry="", source_file="", public_tests=(),
                hidden_tests=(), reference="")


class AgentrlTRLEnv:
    """Base of the generated classes (see `trl_env_class`); holds one agentrl Env per instance."""

    _new_env: Callable[[], Env]
    _full_tasks: bool = True

    def __init__(self) -> None:
        self._env = type(self)._new_env()
        self._task: Task | None = None

    def reset(self, **row: Any) -> str | None:
        """Start an episode on the row's task; returns None (the row's prompt already holds the task)
        or, for a row without a prompt, the user message to append."""
        self._task = _row_task(row, type(self)._full_tasks)
        seed = row.get("seed")
        obs = self._env.reset(self._task, seed=seed if isinstance(seed, int) else None)
        return None if row.get("prompt") else obs.user

    def get_reward(self) -> float | None:
        """The episode's reward from the environment (hidden tests); ends a running episode first
        ("rollout_ended", graded on its final state). None: unscorable."""
        self._finish(None)
        return self._env.reward()

    def _finish(self, final_text: str | None) -> None:
        if self._task is None or self._env.done:
            return
        if final_text is not None:
            self._env.final_answer(final_text)
        else:
            self._env.truncate(ROLLOUT_ENDED)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._task is None:
            raise EpisodeOver("no episode is running (reset was not called)")
        if self._env.done:
            raise EpisodeOver(f"The episode is over ({self._env.end_reason}); no tool runs any more. "
                              "Reply without a tool call.")
        call = ToolCall(name=name, arguments=dict(arguments), raw=json.dumps({"name": name, "arguments": arguments},
                                                                              default=str))
        res = self._env.step([call])
        result = res.results[0]
        text = result.content
        if res.done:
            text += f"\n[The episode is over ({res.end_reason}); reply without a tool call.]"
        if result.status != "ok":
            raise ToolCallFailed(text)
        return text

    def _close(self) -> None:
        self._env.close()

    def __del__(self) -> None:
        # A finalizer does no network I/O and starts no thread: an environment that would (RemoteEnv)
        # offers release(); a local one is closed (its sandbox worker processes are stopped).
        try:
            env = self.__dict__.get("_env")
            if env is not None:
                release = getattr(env, "release", None)
                release() if release is not None else env.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown; nothing to report to
            pass


def _annotation(name: str, prop: dict[str, Any]) -> Any:
    """The Python type hint whose get_json_schema rendering is `prop` (without its description)."""
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    t = prop.get("type")
    if t == "array" and isinstance(prop.get("items"), dict) and prop["items"].get("type") in _JSON_TYPES:
        item_type = _JSON_TYPES[prop["items"]["type"]]
        return list[item_type]
    if t not in _JSON_TYPES:
        raise ValueError(f"parameter {name!r}: JSON type {t!r} has no Python type hint")
    return _JSON_TYPES[t]


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method `tool(self, **arguments) -> str` with the signature and Google docstring of `schema`."""
    fn_schema = schema["function"]
    name = fn_schema["name"]
    params = fn_schema.get("parameters") or {"type": "object", "properties": {}}
    props: dict[str, Any] = params.get("properties", {})
    required = set(params.get("required", ()))

    def tool(self: AgentrlTRLEnv, **arguments: Any) -> str:
        return self._call(name, arguments)

    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = [fn_schema.get("description", "").strip() or name]
    if props:
        lines += ["", "Args:"]
    for pname, prop in props.items():
        annotations[pname] = _annotation(pname, prop)
        default = inspect.Parameter.empty if pname in required else None
        sig_params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotations[pname]))
        lines.append(f"    {pname}: {' '.join(str(prop.get('description', '')).split())}")
    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = "\n".join(lines)
    tool.__signature__ = inspect.Signature(sig_params)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def trl_env_class(env_factory: Callable[[], Env], *, class_name: str | None = None,
                  full_tasks: bool = True) -> type[AgentrlTRLEnv]:
    """A class for `GRPOTrainer(environment_factory=...)` over the environments `env_factory` builds.

    Each public method of the class is one tool of the environment (name, parameters and descriptions
    from `env.tools()`); `reset(**row)` starts the row's task; `get_reward()` is the environment's
    reward. A call the environment answers "failed"/"malformed" raises ToolCallFailed; a call after
    the end raises EpisodeOver (see the module docstring for what TRL's contract costs).

    Args:
        env_factory: builds one fresh agentrl Env (called once per class instance; TRL pools instances).
        class_name: the class name TRL logs the reward under (default: "<EnvClass>TRL").
        full_tasks: rows carry the whole task as JSON (`task_dataset`); False for served
            environments, whose rows carry only `task_id` (`served_task_dataset`).

    Raises:
        ValueError: a tool schema TRL cannot express (checked: transformers' get_json_schema of each
            generated method must equal the environment's schema), or a tool name that is not public.
    """
    from transformers.utils import get_json_schema

    probe = env_factory()
    try:
        schemas = probe.tools()
        base_name = class_name or f"{type(probe).__name__}TRL"
    finally:
        probe.close()
    members: dict[str, Any] = {"_new_env": staticmethod(env_factory), "_full_tasks": full_tasks,
                               "__doc__": f"TRL environment_factory class over {base_name[:-3] or base_name}."}
    for schema in schemas:
        name = schema["function"]["name"]
        if not name.isidentifier() or name.startswith("_") or name in ("reset", "get_reward"):
            raise ValueError(f"tool {name!r} cannot be a public method of a TRL environment class")
        members[name] = _tool_method(schema)
    cls = type(base_name, (AgentrlTRLEnv,), members)
    for schema in schemas:
        built = get_json_schema(members[schema["function"]["name"]])
        if built != schema:
            raise ValueError(f"tool {schema['function']['name']!r}: TRL would render {built}, agentrl renders "
                             f"{schema}; the schema must be expressible as type hints + a Google docstring")
    return cls


_PROBE_CALL = {"name": "probe_tool", "arguments": {"code": "print(1)"}}


def ensure_tool_call_parser(tokenizer: Any) -> str:
    """Make sure TRL can parse the tool calls this tokenizer's chat template asks for; returns how.

    TRL 1.16 parses sampled tool calls with a response parser that it picks by comparing the chat template
    with the templates it ships, character for character (`trl.chat_template_utils.add_response_schema`).
    A template that differs by one character is refused ("Unrecognized chat template"), even where its
    tool-call format is one TRL parses: Qwen2.5-Coder-Instruct's own template (in its GGUF and on the hub)
    differs from Qwen2.5-Instruct's only in the instruction line's example (`{{"name": ...}}`). So:

    - "preset": the tokenizer already has a response parser (`response_template` or `response_schema`);
    - "trl": TRL recognises the template (its own parser is set, as GRPOTrainer would set it);
    - "hermes": TRL does not, but the template renders an assistant tool call as
      `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` inside ChatML turns (checked by
      rendering one and parsing it back with agentrl.chat.parse, the parser agentrl's own trainer uses), so
      TRL's Qwen3/Hermes parser (`qwen3_template`) is set: the same format, with `<think>` blocks optional.

    Raises:
        ValueError: the template renders tool calls in another format, or not at all; the message says
            to set `tokenizer.response_template` by hand (transformers' response parsing docs).
    """
    from trl.chat_template_utils import add_response_schema

    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return "preset"
    try:
        add_response_schema(tokenizer)
        return "trl"
    except ValueError:
        pass
    from trl.chat_template_utils import qwen3_template

    from agentrl.chat.parse import parse_tool_calls

    msgs = [{"role": "user", "content": "probe"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": _PROBE_CALL}]}]
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False)
    except Exception as e:  # noqa: BLE001 - a template that cannot render a tool call at all
        raise ValueError(f"the chat template cannot render an assistant tool call ({type(e).__name__}: {e}); "
                         "TRL needs one it can parse") from e
    turn = text.rsplit("<|im_start|>assistant\n", 1)[-1] if "<|im_start|>assistant\n" in text else ""
    calls = parse_tool_calls(turn.split("<|im_end|>")[0])[0] if turn else []
    if [(c.name, c.arguments, c.malformed) for c in calls] != [(_PROBE_CALL["name"], _PROBE_CALL["arguments"], None)]:
        raise ValueError("TRL does not recognise this chat template and it does not render tool calls as "
                         "ChatML <tool_call>{json}</tool_call> blocks; set tokenizer.response_template by hand "
                         f"(rendered: {text[-200:]!r})")
    tokenizer.response_template = qwen3_template
    return "hermes"


def trl_tool_schemas(cls: type) -> list[dict[str, Any]]:
    """The tool schemas TRL builds from an environment_factory class, the way GRPOTrainer does: public
    functions of the class except reset/get_reward, rendered by transformers' get_json_schema."""
    from transformers.utils import get_json_schema

    instance = cls()
    methods = [getattr(instance, n) for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
               if n not in ("reset", "get_reward") and not n.startswith("_")]
    order = {s["function"]["name"]: i for i, s in enumerate(instance._env.tools())} if hasattr(instance, "_env") else {}
    methods.sort(key=lambda m: order.get(m.__name__, len(order)))
    return [get_json_schema(m) for m in methods]


def env_stats(environments: Sequence[Any], completions: Sequence[Any] | None = None,
              log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[None]:
    """A TRL reward function that scores nothing (returns None each) and puts the episodes' tool
    statistics into TRL's logs through `log_metric`: `env/<stat>` (mean over the batch's episodes),
    `env/end_reason/<reason>` (fractions) and `env/unscorable` (fraction with reward None).

    Pass it in `reward_funcs` beside the environment's own `get_reward`. Before reading the stats it
    ends each running episode from its completion: a final assistant message without tool calls is the
    episode's final answer; anything else ends it "rollout_ended".
    """
    if log_metric is None:
        return [None] * len(environments)
    ended = _ended_episodes(environments, completions)
    if not ended:
        return [None] * len(environments)
    totals: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    unscorable = 0
    for _, e in ended:
        for k, v in e._env.stats().items():
            totals[k] += float(v)
        reasons[e._env.end_reason or "running"] += 1
        unscorable += e._env.reward() is None
    n = len(ended)
    for k in sorted(totals):
        log_metric(f"env/{k}", totals[k] / n)
    for r in sorted(reasons):
        log_metric(f"env/end_reason/{r}", reasons[r] / n)
    log_metric("env/unscorable", unscorable / n)
    return [None] * len(environments)


def episode_log(path: Any) -> Callable[..., list[None]]:
    """A TRL reward function that scores nothing and appends each episode of the batch to the JSONL file `path`
    (created with its folder): `step` (TRL's global step when TRL passes its trainer_state, else null), `task_id`,
    `reward` (the environment's; null when unscorable), `end_reason`, `stats` (the episode's tool statistics) and
    `completion` (TRL's conversational completion: the assistant and tool messages as TRL kept them). So a TRL
    run's training and evaluation episodes can be read, not only counted.

    A running episode is ended from its completion first, as env_stats does (either may come first in reward_funcs).

    Raises:
        ValueError: `path` cannot be a file to append to (a directory, a device, under a file, not writable),
            checked here rather than when TRL first calls the function, after a step's generation.
    """
    from agentrl.preflight import check_output_file

    out = check_output_file(path, "episode_log")

    def log_episodes(environments: Sequence[Any], completions: Sequence[Any] | None = None,
                     trainer_state: Any = None, **_: Any) -> list[None]:
        rows = [{"step": getattr(trainer_state, "global_step", None), "task_id": e._task.id, "reward": e._env.reward(),
                 "end_reason": e._env.end_reason, "stats": e._env.stats(),
                 "completion": completions[i] if completions is not None else None}
                for i, e in _ended_episodes(environments, completions)]
        if rows:
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("a") as f:
                f.writelines(json.dumps(r, default=str) + "\n" for r in rows)
        return [None] * len(environments)

    return log_episodes


def _ended_episodes(environments: Sequence[Any], completions: Sequence[Any] | None) -> list[tuple[int, Any]]:
    """[(index in the batch, env)] of the batch's agentrl episodes, each ended from its completion if still running
    (a final assistant message without tool calls is its final answer, anything else "rollout_ended"; a no-op for
    an ended one), so its reward, end reason and statistics can be read."""
    ended = []
    for i, e in enumerate(environments):
        if isinstance(e, AgentrlTRLEnv) and e._task is not None:
            e._finish(_final_text(completions[i]) if completions is not None else None)
            ended.append((i, e))
    return ended


def _final_text(completion: Any) -> str | None:
    """The final answer of a conversational completion: the last assistant message's text when it has
    no tool calls, else None (the rollout stopped after a tool result or mid-call)."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return None
    last = completion[-1]
    if isinstance(last, dict) and last.get("role") == "assistant" and not last.get("tool_calls"):
        content = last.get("content")
        return content if isinstance(content, str) else ""
    return None


def make_trl_env_class(env: str, *, class_name: str | None = None, max_turns: int = 6,
                       **env_kwargs: Any) -> type[AgentrlTRLEnv]:
    """`trl_env_class` over the registered environment `env`, configured as `agentrl train --env env
    --max-turns max_turns` configures it (e.g. Wordle gets its word list); `env_kwargs` override the
    constructor arguments (sandbox=, ...). One sandbox is shared by all instances unless given.

    Raises:
        ValueError: unknown environment, or a tool schema TRL cannot express.
    """
    from agentrl.envs.registry import get_spec
    from agentrl.rl.config import RLConfig

    spec = get_spec(env)
    if "sandbox" not in env_kwargs:
        from agentrl.sandbox import Sandbox

        env_kwargs["sandbox"] = Sandbox()
    cfg = RLConfig.from_flat(env=env, max_turns=max_turns)
    kwargs = {**spec.kwargs_from_config(cfg.env), **env_kwargs}
    default_name = "".join(p.capitalize() for p in env.split("-")) + "TRL"
    return trl_env_class(lambda: spec.make(**kwargs), class_name=class_name or default_name)


def remote_trl_env_class(url: str, *, class_name: str | None = None) -> type[AgentrlTRLEnv]:
    """`trl_env_class` over an `agentrl serve` server: each instance holds one WebSocket session
    (OpenEnv's EnvClient); rows carry `task_id` (`served_task_dataset`).

    Raises:
        ConnectionError: the server cannot be reached; ValueError: a schema TRL cannot express.
    """
    from agentrl.serve.env.client import RemoteEnv, server_info

    name = server_info(url)["env"]
    default_name = "".join(p.capitalize() for p in name.split("-")) + "RemoteTRL"
    return trl_env_class(lambda: RemoteEnv(url, name=name), class_name=class_name or default_name, full_tasks=False)
