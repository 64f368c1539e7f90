"""TRL's own GRPOTrainer (trl 1.16, CPU) training tiny-qwen3 through agentrl environments via environment_factory.

Real parts throughout: TRL's trainer, tool-call parsing and tool loop, our environment classes with
tools executing in agentrl's sandbox, rewards from the hidden tests, two optimizer steps on real
parameters. Only sampling is steered (agentrl.rollout.scripted.script_generate): a random model never
calls a tool.

TRL requirements met here: HF_HUB_OFFLINE=1 (tests/conftest.py; TRL would otherwise look models up on
the hub), TRL_EXPERIMENTAL_SILENCE=1 (environment_factory is experimental and warns), and the Qwen3 chat
template at the revision TRL recognises (asset qwen3-tokenizer-current; the original Qwen3 release's
template makes GRPOTrainer fail with "Unrecognized chat template").
"""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from scripted_policy import mbpp_reference_or_stub, qwen3_tokenizer, scripted_tiny_qwen3  # noqa: E402

from agentrl.rollout.scripted import RowReply, tool_call_text, turns_done  # noqa: E402


def _trainer(tmp_path, env_cls, dataset, model, tok, *, reward_funcs):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                      gradient_accumulation_steps=1, max_completion_length=768, learning_rate=1e-3,
                      logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0,
                      chat_template_kwargs={"enable_thinking": False}, max_tool_calling_iterations=4,
                      dataloader_num_workers=0, bf16=False)
    return GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward_funcs, args=args,
                       train_dataset=dataset, environment_factory=env_cls)


def _train_and_check(tmp_path, env_name: str, tasks, script: RowReply, reward_name: str) -> list[dict]:
    """Two GRPOTrainer steps of scripted tiny-qwen3 on `tasks` in agentrl's `env_name`; the two steps' logs."""
    from transformers.utils import get_json_schema

    from agentrl.envs.registry import make_env
    from agentrl.integrations.trl import env_stats, make_trl_env_class, task_dataset

    tok = qwen3_tokenizer()
    trainer = _trainer(tmp_path, make_trl_env_class(env_name), task_dataset(tasks, env_name),
                       scripted_tiny_qwen3(tok, script), tok, reward_funcs=[env_stats])
    # The schemas TRL renders into the prompt are ours, exactly.
    assert [get_json_schema(t) for t in trainer.tools] == make_env(env_name).tools()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2
    moved = sum(not (p.detach() == before[n]).all() for n, p in trainer.model.named_parameters())
    assert moved > 0, "no parameter changed in two optimizer steps"
    steps = [h for h in trainer.state.log_history if f"rewards/{reward_name}/mean" in h]
    assert len(steps) == 2
    return steps


@pytest.mark.slow
def test_grpo_trainer_python_session_mbpp(tmp_path):
    from agentrl.tasks.mbpp import load_mbpp

    tasks = load_mbpp(split="train")[:2]
    script = mbpp_reference_or_stub({t.entry: t.reference for t in tasks})
    steps = _train_and_check(tmp_path, "python-session", tasks, script, "PythonSessionTRL")
    for h in steps:
        # one episode per group runs the reference (all hidden tests pass), the other a stub (none pass)
        assert h["rewards/PythonSessionTRL/mean"] == pytest.approx(0.5)
        assert h["env/cells"] == pytest.approx(1.0)          # one run_python cell per episode, in the sandbox
        assert h["env/end_reason/final_answer"] == pytest.approx(1.0)
        assert h["tools/call_frequency"] == pytest.approx(1.0)
        assert h["tools/failure_frequency"] == pytest.approx(0.0)
        assert h["frac_reward_zero_std"] == pytest.approx(0.0)


@pytest.mark.slow
def test_grpo_trainer_coding_tools_bugfix(tmp_path):
    from agentrl.tasks import make_tasks

    tasks = make_tasks(2, families=["minmax"], seed=0, split="train")
    by_file = {f"/repo/{t.source_file}": t for t in tasks}

    def script(context: str, row: int) -> str:
        # Rows keep their batch order in TRL's tool loop, so at turn 1 (every rollout read the file) even
        # rows are the same rollouts as at turn 0: they write the fix, odd rows stop without one.
        path = re.findall(r"in (/repo/\S+\.py) has a bug", context)[-1]
        done = turns_done(context)
        if done == 0:
            return tool_call_text("Read", {"file_path": path})
        if done == 1 and row % 2 == 0:
            return tool_call_text("Write", {"file_path": path, "content": by_file[path].reference})
        return "The tests pass."

    steps = _train_and_check(tmp_path, "coding-tools", tasks, script, "CodingToolsTRL")
    for h in steps:
        assert h["env/reads"] == pytest.approx(1.0)
        assert 0.0 < h["env/writes"] < 1.0
        assert 0.0 < h["rewards/CodingToolsTRL/mean"] < 1.0
        assert h["env/claims_tests_pass"] == pytest.approx(1.0)  # the final reply reached the environment
        assert h["tools/failure_frequency"] == pytest.approx(0.0)
