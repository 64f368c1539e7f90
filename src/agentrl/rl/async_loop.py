"""Asynchronous rollouts: a producer thread collects step k+1's episodes while the learner trains step k.

Not the GRPO maths and not the trainer's schedule (agentrl.rl.trainer drives this). The producer runs
`produce(step, version)` for steps start, start+1, ... in order; before each it waits until the learner
has published policy version >= step - max_staleness, then calls `sync_weights()` (copy the learner's
weights into the rollout policy; it runs under the same lock the learner holds while updating, so it
never sees half-updated weights). So a batch trained at step k was sampled by version v with
k - v <= max_staleness (its staleness). With max_staleness 0 the producer always waits for the previous
update: rollouts and updates alternate exactly as in the synchronous loop.

Version convention: version v = the weights after v optimizer-step rounds (train steps) of this run;
the batch of step k trained on-policy has version k.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepBatch:
    """What the producer hands to the learner.

    Attributes:
        step: the training step this batch is for.
        version: the policy version that sampled it (staleness = step - version).
        payload: produce()'s result (trajectories, advantages, metrics...).
        rollout_s: seconds produce() took.
        wait_s: seconds the producer waited for the staleness bound before starting.
    """

    step: int
    version: int
    payload: Any
    rollout_s: float
    wait_s: float

    @property
    def staleness(self) -> int:
        return self.step - self.version


class AsyncRollouts:
    """The producer thread and the staleness bound (module docstring).

    Args:
        produce: (step, version) -> payload; runs in the producer thread.
        sync_weights: () -> None; copies the learner's weights into the rollout policy (may be a no-op
            when both share one model, as with max_staleness 0).
        start, stop: steps [start, stop) are produced, in order.
        max_staleness: >= 0, optimizer steps a batch's policy may lag behind the weights it trains.
        version: the learner's version at start (normally `start`).

    Use as a context manager; `get(step)` re-raises an exception raised in the producer.
    """

    def __init__(self, produce: Callable[[int, int], Any], sync_weights: Callable[[], None], *, start: int,
                 stop: int, max_staleness: int = 1, version: int | None = None):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.produce, self.sync_weights = produce, sync_weights
        self.start, self.stop, self.max_staleness = start, stop, max_staleness
        self.version = start if version is None else version
        self.lock = threading.RLock()  # held by the learner while it updates, by the producer while it syncs
        self._cond = threading.Condition()
        self._out: queue.Queue[StepBatch | BaseException] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="agentrl-rollouts", daemon=True)

    def __enter__(self) -> AsyncRollouts:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self) -> None:
        try:
            for step in range(self.start, self.stop):
                t0 = time.perf_counter()
                with self._cond:
                    self._cond.wait_for(lambda s=step: self._closed or self.version >= s - self.max_staleness)
                    if self._closed:
                        return
                with self.lock:
                    self.sync_weights()
                    version = self.version
                waited = time.perf_counter() - t0
                t1 = time.perf_counter()
                payload = self.produce(step, version)
                self._out.put(StepBatch(step, version, payload, time.perf_counter() - t1, waited))
        except BaseException as e:  # noqa: BLE001 - handed to the learner, which re-raises it
            self._out.put(e)

    def get(self, step: int, timeout_s: float | None = None) -> StepBatch:
        """The batch for `step` (blocks until produced). Raises the producer's exception, if it had one."""
        item = self._out.get(timeout=timeout_s)
        if isinstance(item, BaseException):
            raise item
        if item.step != step:
            raise RuntimeError(f"async rollouts out of order: expected step {step}, got {item.step}")
        return item

    def publish(self, version: int) -> None:
        """The learner finished an update: its weights are now `version` (wakes the producer)."""
        with self._cond:
            self.version = version
            self._cond.notify_all()

    def close(self) -> None:
        """Stop producing (a produce() call in flight finishes first)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=600)
