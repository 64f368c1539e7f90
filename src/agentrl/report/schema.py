"""The results file's JSON schema, self-documenting: every field carries a `description` and a `unit`.

Not the writer (agentrl.report.results) or the validator. `unit` is a custom keyword (JSON Schema ignores
unknown keywords): "1" for dimensionless numbers (fractions, ratios, rewards in [0, 1]), "count",
"s", "bytes", "tokens", "nats/token", "tokens/s", "text" for free text, "ISO 8601" for timestamps,
"object"/"list" for containers whose members are described below them. `STEP_METRICS` and
`TOOL_STATS` describe the per-step metrics and the tool statistics by name, for the schema, the
report and the HTML page.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("running", "completed", "failed", "interrupted")


def _d(schema: dict[str, Any], description: str, unit: str) -> dict[str, Any]:
    """`schema` plus its description and unit."""
    return {**schema, "description": description, "unit": unit}


def _num(description: str, unit: str) -> dict[str, Any]:
    return _d({"type": ["number", "null"]}, description + " (null: not computable, e.g. NaN)", unit)


# name -> (description, unit) of each per-step metric the trainer writes (agentrl.rl.trainer.train_step).
STEP_METRICS: dict[str, tuple[str, str]] = {
    "reward_mean": ("mean environment reward over the step's B*G episodes", "1"),
    "reward_std": ("population standard deviation of the step's episode rewards", "1"),
    "pass_rate": ("fraction of the step's episodes with reward 1 (every hidden test passed)", "1"),
    "loss": ("clipped policy loss (token-mean), averaged over optimizer steps", "1"),
    "grad_norm": ("global gradient norm before clipping, mean over optimizer steps", "1"),
    "grad_norm_max": ("largest pre-clip gradient norm of the step's optimizer steps", "1"),
    "entropy": ("policy entropy on the trained policy tokens, computed by the trainer from its own logits "
                "(null when no token was trained)", "nats/token"),
    "sampler_nll": ("minus the mean sampler log-probability of all sampled tokens (an entropy estimate that "
                    "includes rows skipped in backward)", "nats/token"),
    "ratio_mean": ("mean importance ratio pi_theta / pi_sampler on trained tokens", "1"),
    "clip_frac": ("fraction of trained tokens whose ratio was clipped (either side)", "1"),
    "clip_frac_low": ("fraction of trained tokens clipped below (ratio < 1 - clip_low, negative advantage)", "1"),
    "clip_frac_high": ("fraction of trained tokens clipped above (ratio > 1 + clip_high, positive advantage)", "1"),
    "kl_sampler": ("k3 estimate of KL(sampler || trainer) on trained tokens", "nats/token"),
    "kl_ref": ("k3 estimate of KL to the frozen reference model (only with kl_coef > 0)", "nats/token"),
    "logprob_gap": ("mean trainer minus sampler log-probability on trained tokens", "nats/token"),
    "logprob_gap_abs": ("mean absolute trainer-sampler log-probability gap on trained tokens", "nats/token"),
    "outside_support": ("fraction of trained tokens outside the trainer's top-k/top-p kept set (log-prob -inf, "
                        "ratio 0, no gradient; the KL and gap metrics are over the others)", "1"),
    "optimizer_steps": ("optimizer steps taken (epochs x minibatches)", "count"),
    "rows_skipped": ("episode rows skipped in backward (zero advantage, no KL), summed over minibatches", "count"),
    "tokens_trained": ("policy tokens that went through backward", "tokens"),
    "policy_tokens": ("policy (sampled) tokens in the step's batch", "tokens"),
    "tokens_per_s": ("policy tokens times epochs per second of update", "tokens/s"),
    "peak_memory_bytes": ("peak accelerator memory (CUDA) or process RSS (CPU) during the update", "bytes"),
    "update_s": ("seconds spent in the update", "s"),
    "adv/reward_mean": ("mean reward entering the advantage estimator", "1"),
    "adv/reward_std": ("standard deviation of the rewards entering the advantage estimator", "1"),
    "adv/frac_zero_std": ("fraction of groups whose rewards are all equal (they train nothing)", "1"),
    "adv/frac_untrainable": ("fraction of groups with fewer than two scorable episodes (they train nothing)", "1"),
    "adv/masked_truncated": ("truncated episodes given advantage 0 by --mask-truncated", "count"),
    "adv/adv_abs_mean": ("mean absolute advantage", "1"),
    "adv/num_groups": ("groups (prompts) in the step", "count"),
    "rollout/episodes": ("episodes sampled in the step", "count"),
    "rollout/sampled_tokens": ("policy tokens sampled in the step", "tokens"),
    "rollout/tokens_per_s": ("sampled policy tokens per second of rollout", "tokens/s"),
    "async/staleness": ("optimizer steps between the weights that sampled the step and the learner's", "count"),
    "async/wait_s": ("seconds the learner waited for the step's rollouts", "s"),
    "async/producer_wait_s": ("seconds the rollout producer waited for the learner", "s"),
    "is/ratio_mean": ("mean untruncated importance ratio pi_proximal / pi_sampler on policy tokens", "1"),
    "is/ratio_max": ("largest untruncated importance ratio pi_proximal / pi_sampler", "1"),
    "is/frac_capped": ("fraction of policy tokens whose importance ratio exceeded --is-cap", "1"),
    "is/frac_outside_support": ("fraction of policy tokens outside the proximal policy's top-k/top-p kept set "
                                "(importance weight 0)", "1"),
    "time/rollout_s": ("seconds spent sampling episodes and running their tools", "s"),
    "time/update_s": ("seconds spent in the update", "s"),
    "time/step_s": ("seconds of the whole step", "s"),
}

# name -> (description, unit) of the tool statistics (per episode; mean over episodes when aggregated).
TOOL_STATS: dict[str, tuple[str, str]] = {
    "turns": ("assistant turns in the episode", "count"),
    "tool_calls": ("tool calls the model made", "count"),
    "ok_calls": ("tool calls that ran and succeeded", "count"),
    "failed_calls": ("well-formed tool calls the tool rejected (e.g. an Edit whose old_string is absent)", "count"),
    "malformed_calls": ("tool calls that could not be parsed, named an unknown tool or failed the schema", "count"),
    "turns_hit_token_limit": ("turns cut at max_new_tokens without an end-of-turn token", "count"),
    "policy_tokens": ("tokens the policy sampled in the episode", "tokens"),
    "hidden_pass_fraction": ("fraction of the hidden tests the final file passes (partial credit; pass@1 "
                             "counts an episode only when this is 1)", "1"),
    "sandbox_errors": ("grading runs that failed in the sandbox itself (not the model's fault)", "count"),
    "reads": ("file reads", "count"), "edits": ("edits applied", "count"), "writes": ("file writes", "count"),
    "bash_calls": ("Bash calls", "count"), "test_runs": ("test runs (pytest or run_tests)", "count"),
    "submits": ("submit calls", "count"), "edits_over_limit": ("edits refused over max_edits", "count"),
    "unknown_ops": ("edit ops not on the menu", "count"),
    "claims_tests_pass": ("final answers claiming that the tests pass", "count"),
    "guesses": ("Wordle guesses", "count"), "invalid_guesses": ("guesses that are not 5-letter words", "count"),
    "repeated_guesses": ("guesses repeated", "count"), "cells": ("run_python cells", "count"),
    "blocked_imports": ("cells refused for a blocked import", "count"),
    "session_restarts": ("Python session restarts", "count"), "cell_timeouts": ("cells over the time limit", "count"),
    "cell_errors": ("cells that raised", "count"),
    "cpu_timeouts": ("commands or cells stopped at the sandbox's CPU-time limit", "count"),
    "wall_timeouts": ("commands or cells stopped at the wall-clock limit", "count"),
    "memory_kills": ("commands or cells stopped at the memory limit", "count"),
    "output_caps": ("commands or cells whose output was cut at the output limit", "count"),
    "process_limits": ("commands or cells refused a new process (or thread) by the process limit", "count"),
    "file_size_limits": ("commands or cells refused a write by the file-size limit", "count"),
}


# counters older results files carry twice under a second name (rollout's names before they joined the envs')
LEGACY_ALIASES: dict[str, str] = {"calls": "tool_calls", "calls_ok": "ok_calls", "calls_failed": "failed_calls",
                                  "calls_malformed": "malformed_calls"}


def dedupe_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """`stats` without the legacy twin of a counter whose current name is present (see LEGACY_ALIASES);
    keys may carry a "tools/" prefix."""
    def twin(key: str) -> str | None:
        prefix = "tools/" if key.startswith("tools/") else ""
        new = LEGACY_ALIASES.get(key.removeprefix(prefix))
        return prefix + new if new else None

    return {k: v for k, v in stats.items() if twin(k) is None or twin(k) not in stats}


def stat_description(name: str) -> tuple[str, str]:
    """(description, unit) of a tool statistic or step metric name ("tools/" prefix allowed); names not
    in the tables get a description derived from their prefix/suffix."""
    key = name.removeprefix("tools/")
    if key in TOOL_STATS:
        return TOOL_STATS[key]
    if name in STEP_METRICS:
        return STEP_METRICS[name]
    if key.startswith("malformed_"):
        return f"malformed calls of class {key.removeprefix('malformed_')!r}", "count"
    if key.startswith(("edit_", "write_")):
        return f"tool rejections: {key.replace('_', ' ')}", "count"
    if "fraction" in key or key.startswith("frac"):
        return key.replace("_", " "), "1"
    if "tokens" in key:
        return key.replace("_", " "), "tokens"
    return key.replace("_", " "), "count"


def _interval(what: str) -> dict[str, Any]:
    nullable = {"type": ["number", "null"]}
    return _d({"type": "object", "required": ["mean", "lo", "hi", "alpha", "n_boot", "seed"], "properties": {
        "mean": _d(nullable, f"point estimate of {what} (null: nothing to estimate)", "1"),
        "lo": _d(nullable, "lower end of the percentile bootstrap interval (null: undefined, see `undefined`)", "1"),
        "hi": _d(nullable, "upper end of the percentile bootstrap interval (null: undefined, see `undefined`)", "1"),
        "n_tasks": _d({"type": "integer", "minimum": 0}, "tasks the estimate is over", "count"),
        "undefined": _d({"type": ["string", "null"]}, "why the interval is undefined (one task, every task at "
                        "the same rate, ...); null when lo and hi are set", "text"),
        "alpha": _d({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                    "the interval has level 1 - alpha", "1"),
        "n_boot": _d({"type": "integer", "minimum": 1}, "bootstrap resamples", "count"),
        "seed": _d({"type": ["integer", "null"]}, "seed of the resampling RNG", "1"),
    }}, f"{what} with a task-level bootstrap interval (tasks resampled with replacement)", "object")


_STEP = _d({"type": "object", "required": ["step"], "properties": {
    "step": _d({"type": "integer", "minimum": 0}, "training step index (0-based)", "count"),
    **{k: _num(desc, unit) for k, (desc, unit) in STEP_METRICS.items()},
}, "patternProperties": {
    "^tools/": _num("a tool statistic averaged over the step's episodes (see TOOL_STATS)", "count"),
    "^rollout/": _num("a rollout counter or fraction of the step's episodes", "1"),
}, "additionalProperties": _num("another scalar metric of the step", "1")},
    "the scalar metrics of one training step", "object")

_TASK = _d({"type": "object", "required": ["task_id", "successes", "trials"], "properties": {
    "task_id": _d({"type": "string"}, "held-out task id", "text"),
    "family": _d({"type": "string"}, "the task's family (bug-fix family, dataset name, ...)", "text"),
    "episodes": _d({"type": "integer", "minimum": 1}, "episodes run on the task", "count"),
    "trials": _d({"type": "integer", "minimum": 0}, "scorable episodes (episodes minus unscorable)", "count"),
    "successes": _d({"type": "integer", "minimum": 0}, "episodes with reward 1", "count"),
    "unscorable": _d({"type": "integer", "minimum": 0}, "episodes the environment could not score "
                     "(reward None, e.g. a sandbox failure)", "count"),
    "mean_reward": _num("mean reward of the scorable episodes (differs from successes / trials for "
                        "fractional rewards)", "1"),
}}, "one held-out task's counts", "object")

# Readers index these keys (the HTML report's per-family rates): an entry without them was a KeyError traceback;
# tasks and episodes are read with a default, and results files that name neither (hand-made ones) stay valid
_FAMILY = _d({"type": "object", "required": ["trials", "successes"], "properties": {
    "tasks": _d({"type": "integer", "minimum": 0}, "tasks of the family", "count"),
    "episodes": _d({"type": "integer", "minimum": 0}, "episodes run on them", "count"),
    "trials": _d({"type": "integer", "minimum": 0}, "scorable episodes", "count"),
    "successes": _d({"type": "integer", "minimum": 0}, "episodes with reward 1", "count"),
    "pass_at_1": _num("mean over the family's scored tasks of successes / trials", "1"),
}}, "one family's counts summed over its tasks", "object")

_EVALUATION = _d({"type": "object", "required": ["label", "step", "tasks", "pass_at_1", "tool_stats"], "properties": {
    "label": _d({"type": "string", "minLength": 1}, "before | after | step_<N> | eval", "text"),
    "step": _d({"type": "integer", "minimum": 0}, "completed training steps when evaluated", "count"),
    "tasks": _d({"type": "array", "minItems": 1, "items": _TASK}, "per-task counts", "list"),
    "per_family": _d({"type": "object", "additionalProperties": _FAMILY}, "{family: counts}", "object"),
    "pass_at_1": _interval("held-out pass@1 (mean over scored tasks of successes / trials)"),
    "unscorable": _d({"type": "integer", "minimum": 0}, "unscorable episodes over all tasks", "count"),
    "end_reasons": _d({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                      "{why an episode ended: episodes} over the evaluation's episodes", "count"),
    "tool_stats": _d({"type": "object", "additionalProperties": _num("a tool statistic (see TOOL_STATS)", "count")},
                     "tool statistics, mean per episode over the evaluation's episodes", "object"),
}}, "one held-out evaluation", "object")

_PAIRED = _d({"type": "object", "required": ["before", "after", "diff"], "properties": {
    "before": _d({"type": "string"}, "label of the earlier evaluation", "text"),
    "after": _d({"type": "string"}, "label of the later evaluation", "text"),
    "diff": _interval("after - before pass@1 (paired over tasks)"),
    "tasks": _d({"type": "integer", "minimum": 0}, "tasks compared (scored in both evaluations)", "count"),
    "excluded": _d({"type": "array", "items": {"type": "string"}},
                   "tasks left out (no scorable episode before or after)", "list"),
}}, "a paired difference of two evaluations", "object")

_TRANSCRIPT = _d({"type": "object", "required": ["kind", "task_id", "text"], "properties": {
    "kind": _d({"type": "string"}, "heldout_before | heldout_after | heldout_eval (agentrl eval) | train_step0", "text"),
    "task_id": _d({"type": "string"}, "the episode's task id", "text"),
    "text": _d({"type": "string"}, "the whole episode rendered as text (system, user, turns, tool results, end)",
               "text"),
    "step": _d({"type": ["integer", "null"]}, "training step of the episode", "count"),
    "reward": _num("the episode's reward", "1"),
    "end_reason": _d({"type": ["string", "null"]}, "why the episode ended (final_answer, submitted, "
                     "out_of_turns, out_of_tokens, sandbox_error, ...)", "text"),
    "turns": _d({"type": "array", "items": {"type": "object"}},
                "structured turns: {text, hit_token_limit, calls: [{name, arguments, status, content}]}", "list"),
}}, "one full episode transcript", "object")

_WARM_START = _d({"type": "object", "required": ["method", "settings", "data", "nll_before", "nll_after", "losses"],
                  "properties": {
    "method": _d({"type": "string"}, "the warm start (RLConfig.warm_start.method), e.g. sft", "text"),
    "settings": _d({"type": "object"}, "its settings: the SFTConfig fields (epochs, lr, batch, micro, warmup_steps, "
                   "min_lr_ratio, max_tokens, seed, ...), env, tasks (count), random_op, task_ids", "object"),
    "data": _d({"type": "object", "properties": {
        "trajectories": _d({"type": "integer"}, "scripted-expert episodes played", "count"),
        "mean_reward": _num("mean environment reward of those episodes (random-op experts: about the "
                            "chance of picking the right edit)", "1"),
        "policy_tokens": _d({"type": "integer"}, "policy tokens trained on per epoch", "tokens"),
        "tokens": _d({"type": "integer"}, "all tokens (prompt, policy, tool) per epoch", "tokens"),
        "dropped": _d({"type": "integer"}, "episodes left out (longer than max_context_tokens or without policy "
                      "tokens)", "count"),
    }}, "the warm-start data", "object"),
    "nll_before": _num("token-mean negative log-likelihood of the episodes' policy tokens before the warm start",
                       "nats/token"),
    "nll_after": _num("the same after the warm start", "nats/token"),
    "losses": _d({"type": "array", "items": {"type": "number"}}, "training loss of each optimizer step "
                 "(token-mean NLL of its batch)", "nats/token"),
    "steps": _d({"type": "array", "items": {"type": "object"}}, "per optimizer step: step, epoch, loss, grad_norm, "
                "lr, policy_tokens, tokens, wall_clock_s (since the warm start's training began)", "list"),
    "data_s": _num("seconds playing the expert episodes", "s"),
    "train_s": _num("seconds of SFT optimizer steps", "s"),
    "wall_clock_s": _num("seconds of the whole warm start (data, NLL before and after, training)", "s"),
}}, "the supervised warm start run before the first evaluation (present only with --warm-start)", "object")

RESULTS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "agentrl run results",
    "description": "Everything one agentrl run measured; rewritten atomically after every step.",
    "type": "object",
    "required": ["schema_version", "status", "created", "updated", "seed", "config", "versions", "steps",
                 "evaluations", "paired", "tool_stats", "transcripts", "tool_schemas", "sandbox", "noise"],
    "properties": {
        "schema_version": _d({"const": SCHEMA_VERSION}, "version of this schema", "1"),
        "status": _d({"enum": list(STATUSES)}, "running while the run is alive, then how it ended", "text"),
        "created": _d({"type": "string"}, "when the run started (UTC)", "ISO 8601"),
        "updated": _d({"type": "string"}, "when the file was last written (UTC)", "ISO 8601"),
        "seed": _d({"type": "integer"}, "the run's seed (tasks, sampling, bootstrap)", "1"),
        "wall_clock_s": _num("seconds the run took, summed over its parts (a start and each --resume)", "s"),
        "wall_clock_parts_s": _d({"type": "array", "items": {"type": "number", "minimum": 0}},
                                 "seconds of each part of the run: one entry per start or --resume", "s"),
        "error": _d({"type": ["string", "null"]}, "why the run failed or was interrupted", "text"),
        "config": _d({"type": "object"}, "every RLConfig field by its flat name, the flag's (agentrl train --help documents each)", "object"),
        "versions": _d({"type": "object", "required": ["python", "torch", "transformers", "agentrl"],
                        "additionalProperties": {"type": ["string", "null"]}},
                       "versions of python, torch, transformers, agentrl, numpy, scipy, the platform and the "
                       "accelerator (null: absent)", "text"),
        "steps": _d({"type": "array", "items": _STEP}, "per-step training metrics, in step order", "list"),
        "evaluations": _d({"type": "array", "items": _EVALUATION}, "held-out evaluations, in order", "list"),
        "paired": _d({"type": "array", "items": _PAIRED}, "paired after - before differences", "list"),
        "tool_stats": _d({"type": "object"}, "{evaluation label: tool statistics} at the end of the run", "object"),
        "transcripts": _d({"type": "array", "items": _TRANSCRIPT}, "example episodes: one per held-out task "
                          "before and after, one per training group at step 0", "list"),
        "tool_schemas": _d({"type": "array", "items": {"type": "object"}},
                           "the tools shown to the model (chat-template JSON schema form)", "list"),
        "sandbox": _d({"type": "object"}, "the sandbox's backend and limits (agentrl.sandbox)", "object"),
        "noise": _d({"type": "object", "properties": {  # the summary reads each curve's report as an object
            "train": _d({"type": ["object", "null"]}, "the training reward curve's noise report", "object"),
            "eval": _d({"type": ["object", "null"]}, "the held-out eval curve's noise report", "object")}},
                    "noise analysis: step-to-step noise of the training reward vs the eval "
                    "curve, slopes and t statistics (agentrl.eval.noise)", "object"),
        "tasks": _d({"type": "object"}, "task source, training-set size and held-out task ids", "object"),
        "stopped_early": _d({"type": "object", "required": ["reason", "steps_done", "steps_planned"], "properties": {
            "reason": _d({"type": "string"}, "why training stopped before cfg.run.steps (max_train_s)", "text"),
            "steps_done": _d({"type": "integer"}, "training steps taken", "count"),
            "steps_planned": _d({"type": "integer"}, "cfg.run.steps", "count"),
            "train_s": _num("seconds the training steps took", "s"),
            "budget_s": _num("the time budget (cfg.run.max_train_s)", "s"),
        }}, "present only when training stopped before its planned steps; the evaluation after still ran",
            "object"),
        "warnings": _d({"type": "array", "items": {"type": "object", "required": ["step", "kind", "message"],
                                                  "properties": {
            "step": _d({"type": "integer"}, "the training step that jumped (0-based)", "index"),
            "kind": _d({"type": "string", "enum": ["malformed_calls", "end_reason", "logprob_gap", "reward_collapse",
                                                      "unsolvable_tasks"]},
                       "what jumped (agentrl.rl.health), or unsolvable_tasks: a task file's tasks whose reference "
                       "fails their hidden tests (step 0, checked at the start)", "text"),
            "metric": _d({"type": "string"}, "the per-step metric that jumped", "text"),
            "value": _num("its value at that step", "the metric's unit"),
            "baseline": _num("median of up to 5 steps before", "the metric's unit"),
            "message": _d({"type": "string"}, "the warning as logged", "text"),
        }}}, "run-health warnings: steps whose malformed-call rate, end reasons, sampler/trainer log-prob gap "
             "or reward jumped against the run's recent steps (present only when one fired)", "list"),
        "chat_template": _d({"type": "object", "required": ["name", "sha256", "source"], "properties": {
            "name": _d({"type": "string"}, "the chat template used (the model's own or a bundled one)", "text"),
            "sha256": _d({"type": "string"}, "sha256 of the template text", "text"),
            "source": _d({"type": "string"}, "where the template came from", "text"),
        }}, "the chat template of the run", "object"),
        "warm_start": _WARM_START,
        "env": _d({"type": "object", "required": ["name", "kwargs", "end_reasons"], "properties": {
            "name": _d({"type": "string"}, "the environment (agentrl.envs registry name)", "text"),
            "kwargs": _d({"type": "object"}, "its constructor arguments from the run config", "object"),
            "max_observation_chars": _d({"type": ["integer", "null"]}, "cap on one tool observation "
                                        "(head and tail kept, the cut marked)", "characters"),
            "end_reasons": _d({"type": "array", "items": {"type": "string"}},
                              "the end reasons this environment can produce (its EnvSpec)", "list"),
        }}, "the environment of the run", "object"),
    },
}


def undocumented_fields(schema: dict[str, Any], where: str = "") -> list[str]:
    """JSON paths of every named field (a `properties` or `patternProperties` entry, at any depth, also
    inside `items` and `additionalProperties`) that lacks a `description` or a `unit`; [] when all have both."""
    missing = []
    for key in ("properties", "patternProperties"):
        for name, sub in (schema.get(key) or {}).items():
            if not (sub.get("description") and sub.get("unit")):
                missing.append(f"{where}/{name}")
            missing += undocumented_fields(sub, f"{where}/{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            missing += undocumented_fields(schema[key], f"{where}/{key}")
    return missing
