"""The run folder: the lock on --out, SIGTERM as an interrupt, the earlier run moved aside, train.log, the
results file and its final status. Not the inputs (agentrl.rl.run_setup) or the training state.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentrl.chat.bundled import tokenizer_template
from agentrl.preflight import archive_previous
from agentrl.report.log import log_config, setup_logging
from agentrl.report.results import RunResults
from agentrl.rl.checkpoint import latest_checkpoint
from agentrl.rl.config import RLConfig, cli_command
from agentrl.rl.offload import resolve_activation_offloading
from agentrl.rl.run_setup import RunInputs, env_kwargs, env_section
from agentrl.rl.update import compiled_layer_count, layers_checkpointed
from agentrl.tasks.sets import TaskSets

log = logging.getLogger("agentrl.train")


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on `out` for the run (a lock file beside it, so archiving cannot move it);
    the lock file is removed when the run ends, so nothing is left beside `out`.

    A lock is taken only on the file that is at the path after locking (an inode check), so a job
    that opened the file just before the previous holder removed it retries on the new file instead
    of holding a lock nobody else sees.

    Raises:
        ValueError: another live process holds the lock (it names that process), or the lock file cannot
            be made beside `out` (a read-only or special directory such as /proc or /sys).
    """
    lock_path = out.with_name(f".{out.name}.lock")
    for _ in range(100):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ValueError(f"--out {str(out)!r}: cannot write in {str(out.parent)!r} "
                             f"({e.strerror or e}); pass an --out in a writable directory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ValueError(f"--out {out} is in use by a running job (pid {holder}); pass another --out, "
                             "or wait for it to finish") from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                break
        os.close(fd)  # the holder removed this file after we opened it: lock the new one
    else:
        raise ValueError(f"--out {out}: could not take the lock {lock_path}")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()  # while still holding the lock, so no other job holds this inode
        os.close(fd)  # releases the lock


class Terminated(KeyboardInterrupt):
    """SIGTERM (preemption, `timeout`, `docker stop`): the run ends as "interrupted", like Ctrl-C."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` while the run is open (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def resume_hint(cfg: RLConfig, out: Path) -> str:
    """How to continue an interrupted or failed run: the command (every non-default setting, then --resume)
    when a checkpoint exists, else why it cannot be resumed. A run with no training steps (`agentrl eval`, or
    train --steps 0) has no checkpoints to resume from: it says to run the command again (an interrupted eval
    used to be told to pass --checkpoint-every, a flag eval does not take)."""
    if cfg.run.steps == 0:
        return "an evaluation is not resumed: run the same command again to evaluate from the start"
    ckpt = latest_checkpoint(out / "checkpoints")
    if ckpt is None:
        return ("no checkpoint was saved, so this run cannot be resumed"
                + ("" if cfg.run.checkpoint_every else " (pass --checkpoint-every N to save them)"))
    return f"to resume from {ckpt.name}: {cli_command(cfg, resume=True)}"


def start_run_folder(cfg: RLConfig, out: Path, tasks: TaskSets, log_name: str = "train.log") -> None:
    """Make `out` this run's folder: an earlier run's output moved aside (not on --resume), the folder made,
    its log (`log_name`: train.log, `agentrl eval`'s eval.log) opened with the config and the task counts.
    Call it after every input is loaded and checked."""
    archived = None if cfg.run.resume else archive_previous(out, "results.json")
    out.mkdir(parents=True, exist_ok=True)
    logger = setup_logging(out / log_name)
    if archived:
        log.info("an earlier run in %s was moved to %s", out, archived)
    log_config(logger, cfg.to_flat())
    log.info("tasks: %d train, %d held-out (%s)", len(tasks.train), len(tasks.heldout), tasks.source)


def open_results(cfg: RLConfig, out: Path, tasks: TaskSets, sandbox: Any, inputs: RunInputs, model: Any,
                 start_step: int) -> RunResults:
    """The run's results file (`<out>/results.json`): continued on --resume after `start_step` completed
    steps, else a new one; with the sections known before the first step (tools, env, chat template,
    model size and how it trains: LoRA, the decoder layers compiled for the update, whether the update
    offloads activations; sandbox, tasks)."""
    path = out / "results.json"
    if cfg.run.resume and path.exists():
        results = RunResults.resume(path, completed_steps=start_step, config=cfg.to_flat())
    else:
        results = RunResults(path, cfg.to_flat(), seed=cfg.run.seed)
    results.set("tool_schemas", inputs.tool_schemas)
    results.set("env", env_section(cfg.env.name, env_kwargs(cfg, sandbox)))
    results.set("chat_template", tokenizer_template(inputs.tokenizer, cfg.policy.chat_template or "model").describe())
    results.set("model", {"parameters": sum(p.numel() for p in model.parameters()),
                          "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
                          "lora": bool(cfg.update.lora_r),
                          "compiled_layers": compiled_layer_count(model),  # compile_layers resolved (0: eager)
                          "activation_offloading": update_offloads(cfg, model)})
    results.set("sandbox", sandbox.describe())
    results.set("tasks", {"source": tasks.source, "train": len(tasks.train),
                          "heldout_ids": [t.id for t in tasks.heldout],
                          "reward_includes_shown_test": cfg.tasks.reward_includes_shown_test,
                          "heldout_families": {t.id: t.family for t in tasks.heldout}})
    return results


def update_offloads(cfg: RLConfig, model: Any) -> bool:
    """Whether this run's update offloads saved activations: cfg.update.activation_offloading resolved as
    agentrl.rl.update.accumulate_gradients resolves it (the policy's device and checkpointing), for a run that
    trains (steps > 0)."""
    return cfg.run.steps > 0 and resolve_activation_offloading(
        cfg.update.activation_offloading, next(model.parameters()).device, layers_checkpointed(model))


def record_failure(results: RunResults | None, cfg: RLConfig, out: Path, error: BaseException,
                   wall_clock_s: float) -> None:
    """The run ended by `error`: the results file (if one was opened) marked "interrupted" (Ctrl-C, SIGTERM)
    or "failed", keeping every completed step; the log says why and how to resume."""
    status = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
    # Ctrl-C's KeyboardInterrupt has no message: "KeyboardInterrupt:  (results: ...)" read as if one were missing
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if results is not None:
        results.finish(status, wall_clock_s=wall_clock_s, error=what)
    log.error("run %s: %s (results: %s)", status, what, results.path if results is not None else "none written")
    hint = memory_hint(cfg, error)
    if hint:
        log.error("%s", hint)
    if results is not None:
        log.error("%s", resume_hint(cfg, out))
        log.error("plots and the HTML report of what it did: agentrl report --html %s", out)


def memory_hint(cfg: RLConfig, error: BaseException) -> str:
    """For an out-of-memory error (torch.OutOfMemoryError, or any error whose text says "out of memory"): the
    settings that bound this run's memory and the ones to change, in the order they usually pay; else "".

    The update's activations grow with the tokens of one microbatch (rows x context, every layer's activations
    kept for backward unless checkpointed, each checkpointed layer's input unless offloaded); the fast sampler's static KV cache with gen_batch x
    max_context_tokens; an asynchronous run holds both at once."""
    if type(error).__name__ != "OutOfMemoryError" and "out of memory" not in str(error).lower():
        return ""
    u, s = cfg.update, cfg.sampling
    steps = []
    if not u.gradient_checkpointing:
        steps.append("--gradient-checkpointing (recompute each layer's activations in backward)")
    if u.activation_offloading == "off":
        steps.append("--activation-offloading auto (each checkpointed layer's input kept in host memory)")
    if not u.micro_tokens:
        steps.append(f"--micro-tokens {max(1024, s.max_context_tokens)} (token-budget microbatches instead of "
                     f"--micro {u.micro} rows of up to {s.max_context_tokens} tokens)")
    else:
        steps.append(f"a smaller --micro-tokens than {u.micro_tokens}")
    steps.append(f"a smaller --gen-batch than {s.gen_batch} (the sampler's KV cache)")
    if cfg.policy.dtype == "fp32":
        steps.append("--dtype bf16 (weights, gradients and the sampler's cache in half the bytes)")
    return "out of GPU memory: this run's memory is set by " + "; ".join(
        [f"micro {u.micro}", f"micro_tokens {u.micro_tokens}", f"gradient_checkpointing {u.gradient_checkpointing}",
         f"activation_offloading {u.activation_offloading}",
         f"gen_batch {s.gen_batch}", f"max_context_tokens {s.max_context_tokens}",
         f"dtype {cfg.policy.dtype}"]) + ". Try, in this order: " + "; ".join(steps)
