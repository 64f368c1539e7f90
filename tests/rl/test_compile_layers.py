"""Decoder layers compiled for the update (agentrl.rl.update.compile_decoder_layers): the compiled forward runs
inside compiled_layers_active() only, in the update's thread and in its backward (checkpointed recompute
included, in whichever thread autograd runs it); everywhere else the layer runs eager. A recording backend
stands in for inductor: what is pinned is where the compiled callable runs, not what it computes."""

import copy
import threading

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from agentrl.rl.config import RLConfig
from agentrl.rl.update import (
    accumulate_gradients,
    compile_decoder_layers,
    compiled_layer_count,
    compiled_layers_active,
    enable_gradient_checkpointing,
)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every nn.Module shares one `_call_impl` code object, whose dynamo cache holds at most
    torch._dynamo.config.recompile_limit entries: these tests' models and backends would fill it for later tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Recording:
    """A torch.compile backend that runs dynamo's graph as is and counts the graph calls (`runs`)."""

    def __init__(self):
        self.runs = 0

    def __call__(self, gm, example_inputs):
        def run(*args):
            self.runs += 1
            return gm.forward(*args)
        return run


def _count_compiled_calls(model) -> list[int]:
    """Count (in the returned one-element list) the calls of every compiled layer's compiled callable."""
    calls = [0]
    for m in model.modules():
        dispatch = getattr(m, "_compiled_call_impl", None)
        if dispatch is not None:
            def counted(*a, _real=dispatch.compiled, **kw):
                calls[0] += 1
                return _real(*a, **kw)
            dispatch.compiled = counted
    return calls


def _in_thread(fn):
    """Run fn() in a new thread; re-raise its exception here."""
    err = []

    def target():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test's thread
            err.append(e)
    t = threading.Thread(target=target)
    t.start()
    t.join()
    if err:
        raise err[0]


def test_the_compiled_forward_runs_inside_the_context_in_its_thread_only(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float32).eval()
    rec = Recording()
    assert compile_decoder_layers(model, backend=rec) == 2 == compiled_layer_count(model)
    ids = torch.randint(0, 61, (2, 7))
    with torch.no_grad():
        eager = model(ids).logits
        assert rec.runs == 0  # outside the context: the eager layers (HF generate, evaluation, scoring)
        with compiled_layers_active():
            compiled = model(ids).logits
            assert rec.runs == 2  # one graph call per layer
            _in_thread(lambda: model(ids))  # another thread (the asynchronous producer) while the update runs
            assert rec.runs == 2
            with compiled_layers_active():  # nests
                model(ids)
            assert rec.runs == 4
            model(ids)
        assert rec.runs == 6
        model(ids)
        assert rec.runs == 6  # closed again
    assert torch.equal(compiled, eager)


def test_a_copy_of_a_compiled_model_runs_eager(tiny_qwen3):
    """The KL reference and the asynchronous rollout copy are deepcopies: nn.Module.__getstate__ leaves the
    compiled dispatch out, so they run eager even inside the update."""
    model = tiny_qwen3(dtype=torch.float32)
    rec = Recording()
    compile_decoder_layers(model, backend=rec)
    ref = copy.deepcopy(model)
    assert compiled_layer_count(ref) == 0
    with torch.no_grad(), compiled_layers_active():
        ref(torch.randint(0, 61, (1, 5)))
    assert rec.runs == 0


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.proj(x)) + x


class _Trunk(nn.Module):
    """Layers checkpointed around their whole call, as transformers' GradientCheckpointingLayer.__call__ did
    before 5.2x: the recompute in backward calls the layer again, through the dispatch."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return x


class _LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = _Trunk()  # where agentrl.rl.update.decoder_layers looks

    def forward(self, x):
        return self.model(x)


def _grads(model):
    return [p.grad.clone() for p in model.parameters()]


def test_checkpointed_recompute_in_backward_runs_compiled():
    """Forward inside the context: 2 graph calls; its backward recomputes both layers through the compiled
    forward (2 more), in the update's thread (CPU) and in another one (CUDA runs backward on autograd's device
    thread) while the update is open. The gradient is the eager one."""
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    eager = _LM()
    eager(x).square().sum().backward()
    for backward_elsewhere in (False, True):
        model, rec = copy.deepcopy(eager), Recording()
        model.zero_grad(set_to_none=True)
        compile_decoder_layers(model, backend=rec)
        with compiled_layers_active():
            loss = model(x).square().sum()
            assert rec.runs == 2
            if backward_elsewhere:
                _in_thread(loss.backward)
            else:
                loss.backward()
        assert rec.runs == 4
        for a, b in zip(_grads(eager), _grads(model), strict=True):
            torch.testing.assert_close(a, b)
    model(x).square().sum().backward()  # outside any update: forward and recompute eager
    assert rec.runs == 4


def test_update_with_checkpointing_and_compiled_layers_gives_the_eager_gradient(tiny_qwen3, make_batch):
    """accumulate_gradients enters the context itself: with HF checkpointing (the recompute through whichever
    path this transformers takes) the layers run compiled, and loss and gradient equal the eager update's."""
    b = make_batch(n=4, zero_adv_rows=(1,))
    cfg = RLConfig.from_flat(micro=2, micro_tokens=0, minibatches=1, max_grad_norm=1e9, pack_rows=True)
    out = []
    for compiled in (False, True):
        model = tiny_qwen3(dtype=torch.float32)
        enable_gradient_checkpointing(model)
        if compiled:
            compile_decoder_layers(model, backend=Recording())
            calls = _count_compiled_calls(model)
        st = accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens)
        out.append((st["loss"], _grads(model)))
    n = calls[0]  # 2 layers x 2 microbatches (3 trained rows, 2 a microbatch), x 2 where the recompute calls them
    assert n in (4, 8)
    with torch.no_grad():
        model(b.input_ids)  # after the update: eager again
    assert calls[0] == n
    (l0, g0), (l1, g1) = out
    assert l1 == pytest.approx(l0, rel=1e-6)
    for a, c in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_lora_added_after_the_compile_trains_through_the_compiled_layers(tiny_qwen3, make_batch):
    """build_training_state compiles before with_lora: peft swaps the layers' linears for adapter ones and the
    layers keep their compiled dispatch; with the adapter-off reference (the same layers, KL on) the update runs
    them compiled and gives the eager LoRA gradient."""
    from agentrl.models.lora import AdapterOffReference, apply_lora

    b = make_batch(n=4)
    cfg = RLConfig.from_flat(micro=2, micro_tokens=0, minibatches=1, max_grad_norm=1e9, kl_coef=0.1)
    out = []
    for compiled in (False, True):
        model = tiny_qwen3(dtype=torch.float32)
        if compiled:
            compile_decoder_layers(model, backend=Recording())
        model = apply_lora(model, r=2, alpha=4, dropout=0.0, target_modules="all-linear")
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():  # the adapters' B starts at zero: move it, so the adapters count
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1, generator=g)
        if compiled:
            assert compiled_layer_count(model) == 2
            calls = _count_compiled_calls(model)
        st = accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens, ref_model=AdapterOffReference(model))
        out.append((st["loss"], [p.grad.clone() for p in model.parameters() if p.requires_grad]))
    assert calls[0] >= 2 * 2 * 2  # 2 layers x 2 microbatches, policy and reference
    (l0, g0), (l1, g1) = out
    assert l1 == pytest.approx(l0, rel=1e-6)
    for a, c in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)
