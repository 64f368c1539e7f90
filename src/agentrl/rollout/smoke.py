"""The smoke check behind `agentrl smoke`: the chat template and the tools checked, N held-out episodes run.

Not training and not evaluation (no confidence intervals): a quick end-to-end check that a model,
its template and an environment work together, on CPU in under two minutes with the defaults.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentrl.models.policy import PolicyConfig
from agentrl.preflight import check_seed


@dataclass(frozen=True)
class SmokeConfig:
    """`agentrl smoke` options (one CLI flag each).

    Attributes:
        policy: the model and how it loads (agentrl.models.policy.PolicyConfig: model, tokenizer,
            chat_template, dtype, device, thinking, allow_download), the same section as `agentrl train`'s.
        env: environment name (agentrl.envs.make_env).
        episodes: held-out episodes to run.
        max_turns / max_new_tokens / gen_batch / max_context_tokens: rollout limits (turns, tokens per turn,
            episodes per generate call, prompt + completion tokens per episode).
        families: comma-separated bug-fix families of the held-out tasks ("" = all 19, round robin).
        temperature: sampling temperature (1.0 = the policy's own distribution).
        show: transcripts to print; seed: tasks, names, sampling.
    """

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    env: str = "coding-tools"
    episodes: int = 8
    max_turns: int = 3
    max_new_tokens: int = 64
    gen_batch: int = 8
    max_context_tokens: int = 4096
    families: str = ""
    temperature: float = 1.0
    show: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        check_seed(self.seed, "SmokeConfig.seed")
        if not self.temperature > 0:
            raise ValueError(f"--temperature: expected a number > 0, got {self.temperature}")


def _envs_and_tasks(cfg: SmokeConfig) -> tuple[list, Any]:
    try:
        from agentrl.envs import make_env
        from agentrl.tasks import make_tasks, randomize_names
    except ImportError as e:
        raise ValueError(f"agentrl smoke needs agentrl.envs.make_env and agentrl.tasks.make_tasks: {e}") from e
    try:
        from agentrl.sandbox import Sandbox

        sandbox = Sandbox()
    except ImportError:
        sandbox = None  # environments build their default sandbox
    rng = random.Random(cfg.seed)
    families = [f.strip() for f in cfg.families.split(",") if f.strip()] or None
    tasks = [randomize_names(t, rng) for t in make_tasks(cfg.episodes, families, seed=cfg.seed, split="heldout")]
    pairs = [(make_env(cfg.env, sandbox=sandbox, max_turns=cfg.max_turns), t) for t in tasks]
    return pairs, sandbox


def run_smoke(cfg: SmokeConfig) -> dict[str, Any]:
    """Load the policy, check template and tools, run `cfg.episodes` held-out episodes.

    Returns:
        {"trajectories", "template_check", "env_check", "end_reasons", "mean_reward" (over scorable episodes),
         "unscorable", "tool_stats",
         "wall_clock_s", "episodes_per_s"}.

    Raises:
        TitoMismatch: the template's rendering differs from the token path.
        agentrl.envs.EnvCheckError: the environment fails its checker.
        ValueError: cfg.episodes < 1.
    """
    from agentrl.chat.tito import assert_tito_consistent
    from agentrl.envs import check_env
    from agentrl.models.device import resolve_device
    from agentrl.models.load import fit_context_tokens
    from agentrl.rollout.driver import RolloutConfig, run_episodes
    from agentrl.rollout.hf_sampler import SamplingConfig

    if cfg.episodes < 1:
        raise ValueError(f"smoke needs episodes >= 1, got {cfg.episodes}")
    t0 = time.perf_counter()
    model, tok = cfg.policy.load(resolve_device(cfg.policy.device))
    context = fit_context_tokens(model, cfg.max_context_tokens, SmokeConfig.max_context_tokens,
                                 "--max-context-tokens", cfg.policy.model)
    pairs, _ = _envs_and_tasks(cfg)
    env0, task0 = pairs[0]
    fmt = assert_tito_consistent(tok, env0.reset(task0, seed=cfg.seed), enable_thinking=cfg.policy.thinking)
    env_check = check_env(env0, task0, seed=cfg.seed)
    t1 = time.perf_counter()
    rcfg = RolloutConfig(
        sampling=SamplingConfig(max_new_tokens=cfg.max_new_tokens, gen_batch=cfg.gen_batch,
                                temperature=cfg.temperature),
        max_context_tokens=context, enable_thinking=cfg.policy.thinking,
    )
    trajs = run_episodes(model, tok, pairs, cfg=rcfg, seed=cfg.seed)
    rollout_s = time.perf_counter() - t1
    keys = sorted({k for t in trajs for k in t.stats})
    return {
        "trajectories": trajs,
        "template_check": f"ok (end-of-turn {tok.convert_ids_to_tokens(list(fmt.eot_ids))}, think stub "
        f"{tok.decode(list(fmt.stub_ids))!r}, thinking {'on' if cfg.policy.thinking else 'off'})",
        "env_check": env_check,
        "end_reasons": dict(Counter(t.end_reason for t in trajs)),
        "mean_reward": sum(t.reward for t in trajs if t.reward is not None) / max(1, sum(t.scorable for t in trajs)),
        "unscorable": sum(not t.scorable for t in trajs),
        "tool_stats": {k: sum(t.stats.get(k, 0.0) for t in trajs) / max(1, len(trajs)) for k in keys},
        "wall_clock_s": time.perf_counter() - t0,
        "episodes_per_s": len(trajs) / rollout_s if rollout_s > 0 else float("nan"),
    }
