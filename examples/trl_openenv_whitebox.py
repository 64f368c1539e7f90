"""White-box GRPO with TRL against an agentrl environment served over OpenEnv (the TRL/OpenEnv write-up's demo 1).

TRL's GRPOTrainer drives the loop; its `environment_factory` class talks to `agentrl serve` through
OpenEnv's own EnvClient (one WebSocket session per rollout), exactly as the write-up's
train_coding_whitebox_eval.py talks to its hosted coding environment. The environment owns the reward
(the fraction of MBPP's hidden tests that pass, graded in agentrl's sandbox), so there are no
reward_funcs beyond `env_stats`, which only logs the environment's tool statistics. A fixed held-out
eval set (64 problems of MBPP's test split, task ids disjoint from training, checked at start-up) is
scored every `--eval-steps` steps, so the curve measures the model, not which problems were drawn.

    agentrl serve --env python-session --tasks mbpp --port 8001 &
    python examples/trl_openenv_whitebox.py --model Qwen/Qwen3-1.7B --env-url http://127.0.0.1:8001

Defaults are the write-up's: 170 training problems, 42 steps, 4 generations, 8 x 2 generation batch
(16 live sessions), an eval every 4 steps (10 points), temperature 1.0, at most 6 tool-calling turns.
Wordle goes through the same path: `agentrl serve --env wordle`, then this script with
`--dataset-size 2000 --eval-size 20`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="Qwen/Qwen3-1.7B", help="policy: an HF id in the cache or a folder")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model's)")
    p.add_argument("--env-url", default="http://127.0.0.1:8001", help="the `agentrl serve` server")
    p.add_argument("--dataset-size", type=int, default=170, help="training problems (the server's train split)")
    p.add_argument("--eval-size", type=int, default=64, help="fixed held-out problems (the server's heldout split)")
    p.add_argument("--max-steps", type=int, default=42)
    p.add_argument("--eval-steps", type=int, default=4, help="evaluate every this many steps (0: never)")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--per-device-train-batch-size", type=int, default=8)
    p.add_argument("--gradient-accumulation-steps", type=int, default=2)
    p.add_argument("--per-device-eval-batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-completion-length", type=int, default=2048)
    p.add_argument("--max-tool-calling-iterations", type=int, default=6)
    p.add_argument("--output-dir", default="runs/trl-whitebox")
    p.add_argument("--report-to", default="none", help="trackio | tensorboard | wandb | none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--use-cpu", action="store_true")
    return p.parse_args(argv)


def datasets_for(url: str, dataset_size: int, eval_size: int) -> tuple[Any, Any]:
    """The served train and held-out sets, checked: the requested sizes exist and no task id is in both."""
    from agentrl.integrations.trl import served_task_dataset

    train = served_task_dataset(url, "train", limit=dataset_size)
    held = served_task_dataset(url, "heldout", limit=eval_size) if eval_size else None
    if len(train) < dataset_size:
        raise SystemExit(f"the server has {len(train)} training tasks, fewer than --dataset-size {dataset_size}; "
                         "silently training on fewer would change the step count and break comparability")
    if held is not None:
        if len(held) < eval_size:
            raise SystemExit(f"the server has {len(held)} held-out tasks, fewer than --eval-size {eval_size}")
        overlap = set(train["task_id"]) & set(held["task_id"])
        if overlap:
            raise SystemExit(f"{len(overlap)} task ids are both in training and in the eval set, e.g. "
                             f"{sorted(overlap)[:3]}")
    return train, held


def build_trainer(args: argparse.Namespace, model: Any = None, tokenizer: Any = None, callbacks: list | None = None):
    """GRPOTrainer over the served environment (`model`/`tokenizer` objects override --model/--tokenizer)."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.integrations.trl import env_stats, remote_trl_env_class

    train, held = datasets_for(args.env_url, args.dataset_size, args.eval_size)
    env_cls = remote_trl_env_class(args.env_url)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        temperature=args.temperature, max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calling_iterations,
        chat_template_kwargs={"enable_thinking": False}, logging_steps=1, report_to=args.report_to,
        save_strategy="no", seed=args.seed, use_cpu=args.use_cpu, bf16=False,
        eval_strategy="steps" if held is not None and args.eval_steps else "no",
        eval_steps=args.eval_steps or None, per_device_eval_batch_size=args.per_device_eval_batch_size,
        num_generations_eval=1,
    )
    return GRPOTrainer(model=model if model is not None else args.model, processing_class=tokenizer,
                       reward_funcs=[env_stats], args=config, train_dataset=train, eval_dataset=held,
                       environment_factory=env_cls, callbacks=callbacks)


def main(argv: list[str] | None = None, **overrides: Any) -> Any:
    """Train, then save the model and tokenizer to --output-dir; returns the trainer (its
    state.log_history holds train/eval rewards and env/... stats)."""
    args = parse_args(argv)
    trainer = build_trainer(args, **overrides)
    trainer.train()
    trainer.save_model(args.output_dir)  # model + tokenizer: `agentrl eval --env-url ... --models <output_dir>`
    return trainer


if __name__ == "__main__":
    main()
