"""White-box GRPO with TRL against an agentrl environment served over OpenEnv (the TRL/OpenEnv write-up's demo 1).

TRL's GRPOTrainer drives the loop; its `environment_factory` class talks to `agentrl serve` through
OpenEnv's own EnvClient (one WebSocket session per rollout), exactly as the write-up's
train_coding_whitebox_eval.py talks to its hosted coding environment. The environment owns the reward
(the fraction of MBPP's hidden tests that pass, graded in agentrl's sandbox), so there are no
reward_funcs beyond `env_stats`, which only logs the environment's tool statistics, and `episode_log`, which
writes every training and evaluation episode to `<output-dir>/episodes.jsonl` to be read. A fixed held-out
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
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast over fp32 weights (default: fp32 throughout). Weights stay fp32 either way: "
                        "a bf16 weight cannot hold a 1e-6-sized update")
    p.add_argument("--eval-first", action="store_true",
                   help="score the fixed eval set once before the first step (step 0 of the curve; TrainingArguments' "
                        "eval_on_start, so the point stays in the trainer's log history)")
    p.add_argument("--max-train-s", type=float, default=0.0,
                   help="stop after the step that crosses this many seconds of training (0: no limit); the "
                        "curve, the model and curve.json are still written")
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
    from pathlib import Path

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.integrations.trl import ensure_tool_call_parser, env_stats, episode_log, remote_trl_env_class

    train, held = datasets_for(args.env_url, args.dataset_size, args.eval_size)
    env_cls = remote_trl_env_class(args.env_url)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    how = ensure_tool_call_parser(tokenizer)  # Qwen2.5-Coder's own template is not one TRL recognises
    if how == "hermes":
        print("TRL does not recognise this chat template; its tool calls are ChatML <tool_call> JSON, so TRL's "
              "Qwen/Hermes response parser is used")
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, learning_rate=args.learning_rate,
        temperature=args.temperature, max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calling_iterations,
        chat_template_kwargs={"enable_thinking": False}, logging_steps=1, report_to=args.report_to,
        save_strategy="no", seed=args.seed, use_cpu=args.use_cpu, bf16=args.bf16,
        eval_strategy="steps" if held is not None and args.eval_steps else "no",
        eval_steps=args.eval_steps or None, per_device_eval_batch_size=args.per_device_eval_batch_size,
        num_generations_eval=1,
        # inside train(): an evaluate() before train() is logged into a state that train() then replaces, so
        # its point never reached curve.json (the H200 run of 2026-12-02 lost it)
        eval_on_start=bool(args.eval_first and held is not None and args.eval_steps),
    )
    return GRPOTrainer(model=model if model is not None else args.model, processing_class=tokenizer,
                       reward_funcs=[env_stats, episode_log(Path(args.output_dir) / "episodes.jsonl")], args=config,
                       train_dataset=train, eval_dataset=held,
                       environment_factory=env_cls, callbacks=callbacks)


def time_limit_callback(max_train_s: float) -> Any:
    """A TrainerCallback that ends training after the step that crosses `max_train_s` seconds (wall clock
    from the first step), with a last evaluation when an eval set is configured."""
    import time

    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        start = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.start >= max_train_s:
                control.should_training_stop = True
                control.should_evaluate = args.eval_strategy != "no"
            return control

    return TimeLimit()


def eval_curve(log_history: list[dict]) -> dict[str, Any]:
    """The fixed eval set's curve from TRL's log history: points (step, eval_reward) in step order and its
    OLS trend (agentrl.eval.noise.trend: slope per step, rise over the span, t = slope / stderr), the
    step-to-step noise of the training reward, as the write-up's noise analysis reports them."""
    from agentrl.eval.noise import step_noise, trend

    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    points = sorted({int(h["step"]): float(h["eval_reward"]) for h in log_history if num(h.get("eval_reward"))}.items())
    train = [float(h["reward"]) for h in log_history if num(h.get("reward"))]  # TRL's summed reward per step
    out: dict[str, Any] = {"points": [{"step": s, "eval_reward": r} for s, r in points],
                           "train_reward": train}
    if len(points) >= 3:
        tr = trend([r for _, r in points], [s for s, _ in points])
        out["trend"] = {"n": tr.n, "slope_per_step": tr.slope, "rise": tr.rise, "rise_stderr": tr.rise_stderr,
                        "t": tr.t, "p_value": tr.p_value, "first": points[0][1], "last": points[-1][1]}
    if len(train) >= 3:
        out["train_step_noise"] = step_noise(train)
    return out


def main(argv: list[str] | None = None, **overrides: Any) -> Any:
    """(Evaluate,) train, then save the model and tokenizer to --output-dir and the eval curve with its trend to
    <output-dir>/curve.json; returns the trainer (its state.log_history holds train/eval rewards and env/...)."""
    import json
    from pathlib import Path

    args = parse_args(argv)
    callbacks = list(overrides.pop("callbacks", None) or [])
    if args.max_train_s > 0:
        callbacks.append(time_limit_callback(args.max_train_s))
    trainer = build_trainer(args, callbacks=callbacks, **overrides)
    trainer.train()
    trainer.save_model(args.output_dir)  # model + tokenizer: `agentrl eval --env-url ... --models <output_dir>`
    curve = eval_curve(trainer.state.log_history)
    Path(args.output_dir, "curve.json").write_text(json.dumps(curve, indent=2))
    if "trend" in curve:
        t = curve["trend"]
        print(f"eval curve: {t['first']:.3f} -> {t['last']:.3f} over {t['n']} points, rise {t['rise']:+.3f} "
              f"+- {t['rise_stderr']:.3f}, t = {t['t']:.2f}")
    return trainer


if __name__ == "__main__":
    main()
