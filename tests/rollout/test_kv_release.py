"""The static KV cache given back between rollouts (FastSampler release_kv, agentrl.rollout.kv_memory).

On CPU the fallback runs (a plain buffer, freed and re-made); the CUDA tests (skipped without a GPU) check the
fixed-address path: the same pointers after release and restore, the memory really returned to the device, a
CUDA graph captured over the buffer still right after a release, and the sampler's tokens unchanged with no graph
re-captured."""

import pytest
import torch

from agentrl.models.load import load_policy
from agentrl.rollout.fast_model import SlotState, arch_of
from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.kv_memory import PlainBuffer, VmmBuffer, kv_buffer, vmm_supported

EOT = 151645
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-qwen3")


def contexts(tok):
    texts = ["def f(x):\n    return x + 1\n", "hi", "Fix the bug in range_sum; tests are in test_range_sum.py.",
             "a much longer context " * 6, "ok"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_plain_buffer_release_and_restore_on_cpu():
    cpu = torch.device("cpu")
    assert not vmm_supported(cpu)
    buf = kv_buffer(1000, cpu)  # "vmm" falls back to a plain buffer off CUDA
    assert isinstance(buf, PlainBuffer) and not buf.stable_address and buf.mapped and buf.mapped_bytes == 0
    buf.tensor.fill_(7)
    buf.release()
    assert not buf.mapped and buf.tensor is None
    buf.restore()
    assert buf.mapped and buf.tensor.shape == (1000,) and int(buf.tensor.sum()) == 0  # zeroed, as made
    with pytest.raises(ValueError):
        kv_buffer(0, cpu)
    with pytest.raises(ValueError, match="mode"):
        kv_buffer(10, cpu, mode="paged")


def test_slot_state_release_restore_and_grow_while_released(policy):
    model, _ = policy
    arch = arch_of(model)
    st = SlotState(arch, 4, 32, 8, torch.float32, torch.device("cpu"), releasable="allocator")
    n = len(arch.layers)
    assert len(st.k) == len(st.v) == n and st.k[0].shape == (4, arch.n_kv, 32, arch.head_dim)
    assert st.kv_held and not st.kv_stable and st.kv_mapped_bytes() == 0
    st.k[0].fill_(1.0)
    st.release_kv()
    assert not st.kv_held and st.k == [] and st.v == []
    assert isinstance(st.restore_kv(), bool)  # whether the allocator gave the same blocks back
    assert st.kv_held and len(st.k) == n and float(st.k[0].abs().sum()) == 0.0
    assert st.restore_kv() is True  # held: nothing to do
    st.k[1][:, :, :5] = 3.0  # grown keeps the held slots' columns
    big = st.grown(arch, 8, 64, 8)
    assert big.k[1].shape == (8, arch.n_kv, 64, arch.head_dim) and big.kv_held
    assert float(big.k[1][:4, :, :5].mean()) == 3.0 and float(big.k[1][:, :, 5:].abs().sum()) == 0.0
    big.release_kv()
    bigger = big.grown(arch, 8, 96, 8)  # released: nothing to copy, new zeroed slots
    assert bigger.kv_held and bigger.k[0].shape[2] == 96 and float(bigger.k[0].abs().sum()) == 0.0
    plain = SlotState(arch, 2, 16, 4, torch.float32, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="releasable"):
        plain.release_kv()


def test_sampler_with_release_samples_as_without(policy):
    """Two rollouts (sampler calls, end_rollout between): release_kv on and off draw the same tokens and
    log-probs from the same seeds; with it on the cache is given back after each rollout and re-made on the next
    call."""
    model, tok = policy
    ctx = contexts(tok)
    budgets = [6, 3, 9, 5, 7]
    outs = {}
    for release in (False, True):
        fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=8, check_every=2,
                         length_multiple=16, release_kv=release)
        assert fs.release_kv == ("allocator" if release else "")  # True: "vmm" only where CUDA has it
        got = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            got.append([(s.ids, s.logprobs) for s in fs(ctx, budgets)])
            assert fs.state.kv_held
            fs.end_rollout()
            assert fs.state.kv_held is (not release)
            assert fs.kv_mapped_bytes() == 0  # CPU: the plain buffer is the allocator's
            assert fs.graphs == {}  # CPU: no graphs to keep or drop
        outs[release] = got
    assert outs[True] == outs[False]


def test_release_is_skipped_while_another_thread_holds_the_capture_lock(policy):
    """The asynchronous learner holds CUDA_CAPTURE_LOCK through its update: end_rollout then keeps the cache
    rather than stall the rollout thread until the update ends."""
    import threading

    from agentrl.rollout.fast_sampler import CUDA_CAPTURE_LOCK

    model, tok = policy
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=8, release_kv="allocator")
    fs(contexts(tok)[:2], [3, 3])
    held, done = threading.Event(), threading.Event()

    def learner():
        with CUDA_CAPTURE_LOCK:
            held.set()
            done.wait(10)

    t = threading.Thread(target=learner)
    t.start()
    held.wait(10)
    fs.end_rollout()  # returns at once, cache kept
    assert fs.state.kv_held and not fs.store.entries
    done.set()
    t.join()
    fs.end_rollout()
    assert not fs.state.kv_held


def test_release_kv_default_and_bad_values(policy):
    model, tok = policy
    assert FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id).release_kv == ""
    with pytest.raises(ValueError, match="release_kv"):
        FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, release_kv="paged")


@cuda
def test_vmm_buffer_keeps_its_address_and_returns_memory():
    dev = torch.device("cuda")
    if not vmm_supported(dev):
        pytest.skip("the driver has no virtual memory management")
    nbytes = 256 * 2**20
    before = torch.cuda.memory_allocated()
    buf = kv_buffer(nbytes, dev)
    assert isinstance(buf, VmmBuffer) and buf.stable_address and buf.nbytes >= nbytes
    assert buf.tensor.data_ptr() == buf.ptr and torch.cuda.memory_allocated() == before  # outside the allocator
    assert buf.mapped_bytes == buf.nbytes and int(buf.tensor[:: 4096].sum()) == 0
    x = buf.tensor.view(torch.float32)
    x.fill_(2.0)
    free_mapped = torch.cuda.mem_get_info()[0]
    buf.release()
    assert not buf.mapped and buf.mapped_bytes == 0
    assert torch.cuda.mem_get_info()[0] - free_mapped >= 0.9 * buf.nbytes  # the device has it back
    buf.restore()
    assert buf.mapped and x.data_ptr() == buf.ptr and float(x.abs().sum()) == 0.0  # same address, zeroed
    x.fill_(1.5)
    assert float(x.mean()) == 1.5
    del x
    free_held = torch.cuda.mem_get_info()[0]
    del buf
    torch.cuda.synchronize()
    assert torch.cuda.mem_get_info()[0] - free_held >= 0.9 * nbytes  # freed with its last reference


@cuda
def test_graph_captured_over_a_vmm_buffer_survives_release():
    dev = torch.device("cuda")
    if not vmm_supported(dev):
        pytest.skip("the driver has no virtual memory management")
    buf = kv_buffer(4 * 2**20, dev)
    cache = buf.tensor.view(torch.float32)[: 1024]
    src = torch.arange(1024, device=dev, dtype=torch.float32)
    out = torch.zeros(1024, device=dev)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up, then capture: cache += src; out = cache * 2
        cache.add_(src)
        out.copy_(cache * 2)
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cache.add_(src)
        out.copy_(cache * 2)
    buf.release()
    buf.restore()  # zeroed at the same address
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, src * 2) and torch.equal(cache, src)


@cuda
def test_sampler_release_on_cuda_keeps_graphs_and_tokens(policy):
    dev = torch.device("cuda")
    if not vmm_supported(dev):
        pytest.skip("the driver has no virtual memory management")
    model, tok = policy
    model = model.to(dev)
    try:
        ctx = contexts(tok)
        budgets = [40, 30, 48, 36, 44]
        outs = {}
        assert FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id).release_kv == "vmm"  # the default
        for release in (False, "vmm", "allocator"):
            fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=8, release_kv=release,
                             min_graph_steps=4)
            got = []
            for seed in (0, 1):
                torch.manual_seed(seed)
                got.append([s.ids for s in fs(ctx, budgets)])
                if seed == 1:  # the second rollout replays the first one's graphs (unless the cache moved)
                    assert fs.stats["graph_captures"] == 0 or fs.stats["kv_moved"] == 1
                    assert release == "allocator" or fs.stats["kv_moved"] == 0
                held = fs.kv_mapped_bytes()
                fs.end_rollout()
                if release == "vmm":
                    assert held > 0 and fs.kv_mapped_bytes() == 0 and not fs.state.kv_held
            outs[release] = got
        assert outs["vmm"] == outs[False] and outs["allocator"] == outs[False]
    finally:
        model.to("cpu")


def test_restore_retries_once_after_emptying_the_cache(policy, monkeypatch):
    """A restore that meets a full device (the allocator still caching the update's memory) empties PyTorch's
    cache and tries once more; a second failure is raised. The driver error is injected: no CPU can run out of
    device memory."""
    from agentrl.rollout.kv_memory import CudaDriverError

    model, tok = policy
    fs = FastSampler(model, stop_ids=(EOT,), pad_id=tok.pad_token_id, max_batch=8, release_kv="allocator")
    fs(contexts(tok)[:2], [3, 3])
    fs.end_rollout()
    st = fs.state
    real = st.restore_kv
    fails = {"n": 1}
    emptied = []

    def flaky():
        if fails["n"]:
            fails["n"] -= 1
            raise CudaDriverError("cuMemCreate failed: CUDA driver error 2 (out of memory)")
        return real()

    monkeypatch.setattr(st, "restore_kv", flaky)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(fs, "device", torch.device("cuda"))  # the retry is the CUDA path's
    assert fs._restore(st) in (True, False) and emptied == [1] and st.kv_held
    fs.device = torch.device("cpu")
    fs(contexts(tok)[:2], [3, 3])
    fs.end_rollout()
    fails["n"] = 2
    monkeypatch.setattr(fs, "device", torch.device("cuda"))
    with pytest.raises(CudaDriverError):
        fs._restore(fs.state)
