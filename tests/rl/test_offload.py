"""Activation offloading (agentrl.rl.offload): the gradient is unchanged bit for bit, only checkpointed layers'
inputs (and what is saved outside the layers) leave the device, never parameters, and the update wires it in."""

import pytest
import torch

from agentrl.rl import offload, update
from agentrl.rl.config import RLConfig
from agentrl.rl.offload import HostOffload, resolve_activation_offloading


def _cfg(**kw):
    base = dict(micro=2, micro_tokens=0, minibatches=1, epochs=1, max_grad_norm=1e9, logprob_chunk_rows=5)
    base.update(kw)
    return RLConfig.from_flat(**base)


def _grads(model):
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("pack_rows", [False, True])
def test_offloaded_update_gives_the_same_gradient_bit_for_bit(tiny_qwen3, make_batch, monkeypatch, pack_rows):
    model = tiny_qwen3(dtype=torch.float32)
    update.enable_gradient_checkpointing(model)
    assert update.layers_checkpointed(model)
    b = make_batch(n=8, zero_adv_rows=(1,))
    cfg = _cfg(pack_rows=pack_rows, activation_offloading="on")
    st0 = update.accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens)  # CPU: resolves off
    ref = _grads(model)
    made = []

    def on_cpu(model, enabled):  # the update's offloading, with the CPU standing in for the device
        assert enabled
        off = HostOffload(model.parameters(), devices=("cpu",), min_bytes=1)
        made.append(off)
        return off.hooks()

    monkeypatch.setattr(update, "resolve_activation_offloading", lambda *a: True)
    monkeypatch.setattr(update, "offloaded", on_cpu)
    st1 = update.accumulate_gradients(model, b, cfg, normalizer=b.num_policy_tokens)
    assert st1["loss"] == st0["loss"]
    for r, p in zip(ref, model.parameters(), strict=True):
        assert torch.equal(p.grad, r)
    assert len(made) == 4  # one per microbatch (7 trained rows, 2 per microbatch)
    layers = len(update.decoder_layers(model))
    for off in made:
        assert off.count >= layers  # each checkpointed layer's input, at least
        assert all(item.fetched is None for item in off._items)  # every prefetched copy was handed to backward


def test_only_layer_inputs_leave_a_checkpointed_trunk_and_never_parameters(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float32)
    update.enable_gradient_checkpointing(model)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    off = HostOffload(model.parameters(), devices=("cpu",), min_bytes=1)
    with off.hooks():
        hidden = model.model(input_ids=ids).last_hidden_state
    layers = len(update.decoder_layers(model))
    width = model.config.hidden_size
    shapes = [tuple(item.host.shape) for item in off._items]
    assert sum(s[-1] == width and s[0] * (s[1] if len(s) == 3 else 1) == 18 for s in shapes) >= layers
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert not any(item.host.untyped_storage().data_ptr() in params for item in off._items)
    # without checkpointing every saved activation would be offloaded: many more tensors than layers
    plain = tiny_qwen3(dtype=torch.float32)
    everything = HostOffload(plain.parameters(), devices=("cpu",), min_bytes=1)
    with everything.hooks():
        plain.model(input_ids=ids).last_hidden_state.sum().backward()
    assert everything.count > 4 * layers
    hidden.sum().backward()


def test_small_tensors_and_other_devices_stay_where_they_are():
    w = torch.nn.Parameter(torch.randn(32, 64))
    x = torch.randn(8, 32, requires_grad=True)
    off = HostOffload([w], devices=("cuda",))  # a CPU tensor is not on an offloaded device
    with off.hooks():
        y = (x @ w).tanh().sum()
    y.backward()
    assert off.count == 0 and off.bytes_offloaded == 0
    big = HostOffload([w], devices=("cpu",), min_bytes=8 * 64 * 4)
    with big.hooks():
        z = (x @ w).tanh()  # saves x (1 KiB: kept), w (a parameter: kept) and tanh's output (2 KiB: offloaded)
    assert big.count == 1 and big.bytes_offloaded == 8 * 64 * 4
    g = torch.autograd.grad(z.sum(), (x, w))
    ref = torch.autograd.grad((x @ w).tanh().sum(), (x, w))
    assert all(torch.equal(a, b) for a, b in zip(g, ref, strict=True))


def test_resolve_activation_offloading():
    assert resolve_activation_offloading("auto", "cuda", True) is True
    assert resolve_activation_offloading("auto", "cuda:1", False) is False  # every activation would cross the link
    assert resolve_activation_offloading("on", "cuda", False) is True
    assert resolve_activation_offloading("off", "cuda", True) is False
    for setting in ("auto", "on"):
        assert resolve_activation_offloading(setting, "cpu", True) is False  # no device memory to spare
    with pytest.raises(ValueError, match="'auto', 'on' or 'off'"):
        resolve_activation_offloading("yes", "cuda", True)


def test_the_setting_reads_like_compile_layers():
    assert RLConfig().update.activation_offloading == "auto"
    assert RLConfig.from_flat(activation_offloading=False).update.activation_offloading == "off"
    assert RLConfig.from_flat(activation_offloading="ON").update.activation_offloading == "on"
    with pytest.raises(ValueError, match="activation_offloading"):
        RLConfig.from_flat(activation_offloading="sometimes")


def test_the_help_says_what_compile_layers_help_says_of_true_and_false(capsys):
    """Both settings take true/false (and yes/no, 1/0) as on/off, on the command line and in a config file; both
    helps say so, in the same help section."""
    from agentrl.cli import main
    from agentrl.cli.flags import group_of
    from agentrl.rl.sections import UpdateSection

    helps = {n: UpdateSection.__dataclass_fields__[n].metadata["help"] for n in ("compile_layers", "activation_offloading")}
    assert all("(true/false read as on/off)" in h for h in helps.values())
    assert group_of("activation_offloading") == group_of("compile_layers") == "optimisation"
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert " ".join(capsys.readouterr().out.split()).count("(true/false read as on/off)") >= 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: pinned host memory and a side stream")
def test_cuda_offload_keeps_the_gradient_bit_for_bit(tiny_qwen3, make_batch, monkeypatch):
    model = tiny_qwen3(dtype=torch.float32).cuda()
    update.enable_gradient_checkpointing(model)
    b = make_batch(n=8).to("cuda")
    made = []
    monkeypatch.setattr(offload, "MIN_OFFLOAD_BYTES", 1)  # the tiny model's activations are a few KiB
    monkeypatch.setattr(offload.HostOffload, "hooks", _recording(offload.HostOffload.hooks, made))
    runs = {}
    for setting in ("off", "on"):
        st = update.accumulate_gradients(model, b, _cfg(pack_rows=True, activation_offloading=setting, micro=8),
                                         normalizer=b.num_policy_tokens)
        torch.cuda.synchronize()
        runs[setting] = (st["loss"], _grads(model))
    assert runs["on"][0] == runs["off"][0]
    assert all(torch.equal(a, c) for a, c in zip(runs["on"][1], runs["off"][1], strict=True))
    assert len(made) == 1 and made[0].count >= len(update.decoder_layers(model))
    assert all(item.host.is_pinned() for item in made[0]._items)


def _recording(hooks, made):
    def wrapped(self):
        made.append(self)
        return hooks(self)
    return wrapped


def test_offloaded_context_yields_none_when_off(tiny_qwen3):
    model = tiny_qwen3(dtype=torch.float32)
    with offload.offloaded(model, False) as off:
        assert off is None
    with offload.offloaded(model, True) as off:  # on: hooks installed (a CPU model offloads nothing)
        model(input_ids=torch.zeros(1, 3, dtype=torch.long)).logits.sum().backward()
    assert off is not None and off.count == 0


@pytest.mark.parametrize("setting", ["off", "on"])
def test_the_results_file_records_whether_the_update_offloaded(tmp_path, monkeypatch, setting):
    """results.json's model section says whether the update offloaded (the setting resolved for the run's device and
    checkpointing), as compiled_layers says whether compile_layers compiled; the config keeps the setting as given."""
    from agentrl.report.results import validate_results
    from agentrl.rl import run_folder
    from agentrl.rl.trainer import train

    def on_with_setting_on(setting, device, checkpointing):  # the CPU standing in for CUDA
        return setting == "on"

    monkeypatch.setattr(run_folder, "resolve_activation_offloading", on_with_setting_on)
    cfg = RLConfig.from_flat(env="edit-menu", activation_offloading=setting, steps=1, prompts_per_step=1,
                             group_size=2, eval_size=1, eval_n=1, train_size=4, max_new_tokens=8, n_boot=100, out=str(tmp_path / "r"))
    data = validate_results(train(cfg))
    assert data["config"]["activation_offloading"] == setting
    assert data["model"]["activation_offloading"] is (setting == "on")
