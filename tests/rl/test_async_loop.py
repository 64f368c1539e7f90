"""AsyncRollouts: the staleness bound, ordering, overlap, errors; truncated IS weights and the corrected loss."""

import threading
import time

import pytest
import torch

from agentrl.rl.async_loop import AsyncRollouts
from agentrl.rl.loss import policy_loss
from agentrl.rl.offpolicy import truncated_is_weights


def run_loop(max_staleness, steps=5, produce_s=0.0, learn_s=0.0):
    log, versions = [], []

    def produce(step, version):
        log.append(("produce", step, version))
        time.sleep(produce_s)
        return step * 10

    with AsyncRollouts(produce, lambda: None, start=0, stop=steps, max_staleness=max_staleness) as loop:
        for step in range(steps):
            b = loop.get(step, timeout_s=30)
            assert b.payload == step * 10
            versions.append(b.version)
            with loop.lock:
                time.sleep(learn_s)
                log.append(("learn", step))
            loop.publish(step + 1)
    return log, versions


def test_staleness_zero_alternates_exactly_like_the_sync_loop():
    log, versions = run_loop(0)
    assert versions == [0, 1, 2, 3, 4]
    assert log == [e for s in range(5) for e in (("produce", s, s), ("learn", s))]


@pytest.mark.parametrize("bound", [1, 2])
def test_staleness_is_bounded(bound):
    _, versions = run_loop(bound, steps=6, produce_s=0.01)
    assert all(0 <= s - v <= bound for s, v in enumerate(versions))


def test_rollouts_overlap_training():
    t0 = time.perf_counter()
    run_loop(1, steps=4, produce_s=0.2, learn_s=0.2)
    overlapped = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_loop(0, steps=4, produce_s=0.2, learn_s=0.2)
    serial = time.perf_counter() - t0
    assert overlapped < 0.8 * serial  # ~1.0 s vs ~1.6 s


def test_producer_errors_reach_the_learner():
    def produce(step, version):
        if step == 1:
            raise RuntimeError("sandbox died")
        return step

    with AsyncRollouts(produce, lambda: None, start=0, stop=3, max_staleness=1) as loop:
        loop.get(0, timeout_s=10)
        loop.publish(1)
        with pytest.raises(RuntimeError, match="sandbox died"):
            loop.get(1, timeout_s=10)


def test_sync_weights_never_runs_during_an_update():
    inside = threading.Event()
    bad = []

    def sync():
        if inside.is_set():
            bad.append(True)

    with AsyncRollouts(lambda s, v: s, sync, start=0, stop=4, max_staleness=2) as loop:
        for step in range(4):
            loop.get(step, timeout_s=10)
            with loop.lock:
                inside.set()
                time.sleep(0.02)
                inside.clear()
            loop.publish(step + 1)
    assert not bad


def test_truncated_is_weights_by_hand():
    prox = torch.tensor([[0.0, -1.0, -0.5, 0.0]])
    behav = torch.tensor([[0.0, -2.0, -0.25, -3.0]])
    mask = torch.tensor([[0, 1, 1, 1]])
    w, st = truncated_is_weights(prox, behav, mask, cap=2.0)
    # ratios on policy tokens: e^1 = 2.718 (capped to 2), e^-0.25 = 0.7788, e^3 = 20.09 (capped)
    assert w.tolist()[0] == pytest.approx([1.0, 2.0, 0.7788008, 2.0], rel=1e-6)
    assert st["is/frac_capped"] == pytest.approx(2 / 3)
    assert st["is/ratio_max"] == pytest.approx(20.0855369, rel=1e-6)
    assert st["is/ratio_mean"] == pytest.approx((2.7182818 + 0.7788008 + 20.0855369) / 3, rel=1e-6)
    with pytest.raises(ValueError):
        truncated_is_weights(prox, behav, mask, cap=0.0)


def test_weights_scale_each_tokens_surrogate():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])
    mask = torch.tensor([[1, 1]])
    adv = torch.tensor([1.0])
    loss, _ = policy_loss(logp, old, adv, mask, normalizer=2.0, weights=torch.tensor([[2.0, 0.5]]))
    assert float(loss.detach()) == pytest.approx(-(2.0 + 0.5) / 2)  # ratio 1: surrogate -A per token, weighted
    loss.backward()
    assert logp.grad.tolist() == [[pytest.approx(-1.0), pytest.approx(-0.25)]]
