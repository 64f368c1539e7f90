"""agentrl.rollout.decode_layer on CPU (fp32 tiny-qwen3, 2 layers): the compiled regions give the eager layer step's
output and cache, compile once for every layer, batch and span, and never take the KV cache as a mutated input
(compiling the whole step did, and the functionalized write copied the cache's slices every layer and step)."""

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from agentrl.models.load import load_policy
from agentrl.rollout.decode_attention import key_mask
from agentrl.rollout.decode_layer import EAGER, decode_layer, layer_fns
from agentrl.rollout.fast_model import arch_of, rope_tables

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def arch():
    return arch_of(load_policy("tiny-qwen3", "fp32")[0])


class Recorder:
    """A torch.compile backend that keeps each functionalized (AOTAutograd) graph and runs it unfused."""

    def __init__(self):
        self.graphs = []
        self.backend = aot_autograd(fw_compiler=self._keep, keep_inference_input_mutations=True)  # as inductor

    def _keep(self, gm, example_inputs):
        self.graphs.append(gm)
        return make_boxed_func(gm.forward)

    def copies_into_inputs(self) -> int:
        """aten.copy_ nodes: how AOTAutograd writes a mutated input back (after materializing its new value)."""
        return sum(n.target is torch.ops.aten.copy_.default for g in self.graphs for n in g.graph.nodes)


def run_steps(ar, fns, shapes, form, seed=0):
    """Each layer's step for each (batch, span) of `shapes` on a seeded cache [4, nkv, 40, D] -> (outputs, k, v)."""
    torch.manual_seed(seed)
    k = torch.randn(len(ar.layers), 4, ar.n_kv, 40, ar.head_dim)
    v = torch.randn_like(k)
    ptrs = (k.data_ptr(), v.data_ptr())
    cos, sin = rope_tables(ar, 41, torch.float32, CPU)
    outs = []
    with torch.no_grad():
        for b, span in shapes:
            lens = torch.randint(0, span, (b,))
            at = lens.view(b, 1, 1, 1).expand(b, ar.n_kv, 1, ar.head_dim)
            mask = key_mask(torch.arange(span)[None] <= lens[:, None], form, torch.float32)
            h = torch.randn(b, 1, ar.embed.weight.shape[1])
            for li, layer in enumerate(ar.layers):
                h = decode_layer(layer, h, cos[lens][:, None, None], sin[lens][:, None, None], at,
                                 k[li][:b, :, :span], v[li][:b, :, :span], mask, form, ar.scaling, fns)
            outs.append(h)
    assert (k.data_ptr(), v.data_ptr()) == ptrs
    return outs, k, v


@pytest.mark.parametrize("form", ["sdpa", "flex"])
def test_compiled_regions_equal_eager_and_compile_once_for_all_layers(arch, form):
    """Two layers x batches 3 and 2 x spans 24 and 40 (the whole cache): one graph per outer region; "flex" also
    compiles its attention (statically on the CPU: one graph per shape), which reads the cache and writes nothing."""
    torch._dynamo.reset()
    shapes = [(3, 24), (3, 40), (2, 24), (2, 40)]
    rec = Recorder()
    got, gk, gv = run_steps(arch, layer_fns(True, form, CPU, backend=rec.backend), shapes, form)
    ref, rk, rv = run_steps(arch, EAGER, shapes, form)
    assert max((a - r).abs().max().item() for a, r in zip(got, ref, strict=True)) < 1e-5
    assert torch.equal(gk, rk) and torch.equal(gv, rv)  # the same new columns, written in place by the same op
    assert len(rec.graphs) == (2 + len(shapes) if form == "flex" else 2)
    assert rec.copies_into_inputs() == 0


def test_compiling_the_cache_write_copies_the_cache(arch):
    """Why the write stays out of the compiled regions: compiled with it, AOTAutograd turns kc/vc into mutated
    inputs, whose new values it materializes (a full copy of each slice) and copies back (one copy_ each)."""
    torch._dynamo.reset()
    rec = Recorder()
    whole = torch.compile(decode_layer, backend=rec.backend, dynamic=False)  # as compiled before the split
    ar = arch
    b, span = 2, 8
    k, v = torch.zeros(b, ar.n_kv, span, ar.head_dim), torch.zeros(b, ar.n_kv, span, ar.head_dim)
    lens = torch.tensor([3, 5])
    cos, sin = rope_tables(ar, span, torch.float32, CPU)
    with torch.no_grad():
        whole(ar.layers[0], torch.randn(b, 1, ar.embed.weight.shape[1]), cos[lens][:, None, None],
             sin[lens][:, None, None], lens.view(b, 1, 1, 1).expand(b, ar.n_kv, 1, ar.head_dim), k, v,
             key_mask(torch.arange(span)[None] <= lens[:, None], "sdpa", torch.float32), "sdpa", ar.scaling)
    assert rec.copies_into_inputs() == 2
