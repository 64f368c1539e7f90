"""Rebuild src/agentrl/chat/vocab/edit-menu-bugfix.json: the kept tokens of the demo model's trimmed vocabulary.

The corpus is everything the edit-menu environment shows on generated bug-fix tasks and everything its
scripted expert writes, all tokenized by the real Qwen3 tokenizer:
  * expert episodes (the right edit, and an edit picked at random) on the training and held-out tasks of
    all bug-fix families at task seeds 0-3 (the demo's own tasks are among them);
  * one episode per family re-rendered with each of the 625 neutral function names (agentrl.tasks.rename);
  * the environment's answers to calls that break its rules (unknown tool, unknown edit, a second edit,
    an edit that does not apply, bad arguments, a malformed call, an empty turn).
The kept set is the tokens used, closed under their BPE merges, plus the 256 byte symbols and the
added (chat) tokens (agentrl.chat.trim). Usage (about 3 CPU-minutes):

    PYTHONPATH=src python scripts/build_demo_vocab.py [--seeds 4] [--out src/agentrl/chat/vocab/edit-menu-bugfix.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from agentrl.chat.template import observation_messages, tool_messages
from agentrl.chat.trim import trimmed_vocab, vocab_file_digest
from agentrl.envs import make_env
from agentrl.envs.base import ToolCall
from agentrl.models.load import load_tokenizer
from agentrl.models.presets import qwen3_tokenizer_source as _qwen3_tokenizer_source
from agentrl.sandbox import Sandbox
from agentrl.sft.data import expert_trajectories
from agentrl.tasks.generate import resolve_families
from agentrl.tasks.rename import _ADJECTIVES, _NOUNS
from agentrl.tasks.sets import task_sets

ENV = "edit-menu"


def _rule_breaking_ids(tok, tasks, sandbox) -> set[int]:
    """Ids of the environment's answers to calls that break its rules, rendered as the chat template does."""
    ids: set[int] = set()
    for task in tasks:
        env = make_env(ENV, sandbox=sandbox)
        obs = env.reset(task)
        turns = [
            [ToolCall("open_file", {})],
            [ToolCall("edit", {"op": "fix_everything"})],
            [ToolCall("edit", {})],
            [ToolCall("read_file", {"path": task.source_file})],
            [ToolCall("", {}, raw="<tool_call>{\"name\": ", malformed="invalid JSON: unterminated object")],
            [ToolCall("edit", {"op": task.edit_ops[0].name})],
            [ToolCall("edit", {"op": task.edit_ops[-1].name})],
            [ToolCall("run_tests", {}), ToolCall("run_tests", {}), ToolCall("submit", {})],
        ]
        msgs = observation_messages(obs)
        for calls in turns:
            res = env.step(calls)
            msgs.append({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": {"name": c.name or "invalid",
                                                                          "arguments": c.arguments}} for c in calls]})
            msgs += tool_messages(res.results)
            if res.done:
                break
        ids |= set(tok.apply_chat_template(msgs, tools=obs.tools, tokenize=True, return_dict=False))
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="task seeds 0..N-1 (default 4)")
    ap.add_argument("--out", default="src/agentrl/chat/vocab/edit-menu-bugfix.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    src = Path(_qwen3_tokenizer_source())
    tok = load_tokenizer(src)
    sandbox = Sandbox()
    used: set[int] = set()
    per_family = {}
    for seed in range(args.seeds):
        sets = task_sets("bugfix", seed=seed, eval_size=4 * len(resolve_families(None)))
        for tasks, random_op in ((sets.train, True), (sets.heldout, True), (sets.heldout, False)):
            for tr in expert_trajectories(ENV, tasks, tok, random_op=random_op, seed=seed, sandbox=sandbox,
                                          check=False):
                used |= set(tr.prompt_ids) | set(tr.completion_ids)
        for t in sets.train:
            per_family.setdefault(t.family, t)
        print(f"seed {seed}: {len(used)} token ids used so far ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    names = [f"{a}_{n}" for a in _ADJECTIVES for n in _NOUNS]
    for task in per_family.values():
        tr = expert_trajectories(ENV, [task], tok, random_op=True, sandbox=sandbox, check=False)[0]
        text = tok.decode(list(tr.prompt_ids) + list(tr.completion_ids))
        for ids in tok([text.replace(task.entry, name) for name in names], add_special_tokens=False)["input_ids"]:
            used |= set(ids)
    used |= _rule_breaking_ids(tok, list(per_family.values()), sandbox)
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    keep = trimmed_vocab(tj, used)
    out = {
        "about": "Regular tokens kept by the demo model's trimmed Qwen3 vocabulary (agentrl.chat.trim), "
                 "in the source's id order; rebuilt by scripts/build_demo_vocab.py.",
        "source": "qwen3-tokenizer",
        "source_tokenizer_sha256": hashlib.sha256((src / "tokenizer.json").read_bytes()).hexdigest(),
        "corpus": f"edit-menu on bug-fix tasks of all families, task seeds 0-{args.seeds - 1}: expert episodes, "
                  f"625 function names, rule-breaking calls",
        "used_tokens": len({i for i in used if i < len(tj["model"]["vocab"])}),
        "tokens_sha256": vocab_file_digest(keep),
        "tokens": keep,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{len(keep)} tokens kept ({out['used_tokens']} used) -> {args.out} in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
