import dataclasses
import re

import pytest

from agentrl.cli.flags import config_from_args, rlconfig_parser
from agentrl.rl.config import RLConfig, flat_fields


def test_defaults_follow_the_writeup():
    c = RLConfig()
    assert (c.sampling.group_size, c.sampling.prompts_per_step, c.env.max_turns, c.update.adv_mode) == (8, 8, 6, "grpo")
    assert (c.update.clip_low, c.update.clip_high, c.update.epochs, c.update.minibatches, c.update.kl_coef) == (0.2, 0.2, 1, 2, 0.0)
    assert (c.update.max_grad_norm, c.update.weight_decay, c.sampling.temperature, c.sampling.top_k, c.sampling.top_p) == (1.0, 0.0, 1.0, None, 1.0)
    assert c.tasks.randomize_names is True and c.policy.dtype == "fp32"


def test_every_field_has_a_flag_with_help():
    parser = rlconfig_parser()
    flags = {opt: a for a in parser._actions for opt in a.option_strings}
    for name, _, f, _ in flat_fields():
        assert f.metadata.get("help"), name
        action = flags[f"--{name.replace('_', '-')}"]
        assert flags.get(f"--{name}", action) is action  # the underscore spelling is the same flag
        assert action.dest == name and f.metadata["help"] in action.help


def test_flags_parse_literal_bool_optional():
    (c,) = rlconfig_parser().parse_args_into_dataclasses(
        ["--adv_mode", "rloo", "--no_randomize_names", "--top_k", "20", "--dtype", "bf16", "--gradient_checkpointing",
         "true", "--lr", "3e-6"])
    assert c.update.adv_mode == "rloo" and c.tasks.randomize_names is False and c.sampling.top_k == 20
    assert c.policy.dtype == "bf16" and c.update.gradient_checkpointing is True and c.update.lr == 3e-6
    with pytest.raises(SystemExit):
        rlconfig_parser().parse_args_into_dataclasses(["--adv_mode", "ppo"])


def test_flags_added_to_foreign_parser_roundtrip():
    import argparse
    p = argparse.ArgumentParser().add_subparsers().add_parser("train", parents=[rlconfig_parser(add_help=False)])
    c = config_from_args(p.parse_args(["--steps", "3", "--resume", "true"]))
    assert c.run.steps == 3 and c.run.resume is True
    assert RLConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("kw,field", [
    ({"group_size": 1}, "group_size"), ({"clip_low": 1.0}, "clip_low"), ({"micro": 0}, "micro"),
    ({"adv_mode": "x"}, "adv_mode"), ({"top_p": 0.0}, "top_p"), ({"kl_coef": -1.0}, "kl_coef"),
    ({"minibatches": 65}, "minibatches"), ({"dtype": "fp16"}, "dtype"),
])
def test_validation_names_the_field(kw, field):
    with pytest.raises(ValueError, match=f"RLConfig.{field}"):
        RLConfig.from_flat(**kw)


def test_group_size_one_allowed_without_baseline():
    assert RLConfig.from_flat(adv_mode="none", group_size=1).sampling.group_size == 1
    with pytest.raises(ValueError, match="unknown keys"):
        RLConfig.from_dict({"nope": 1})


FLOAT_FIELDS = [name for name, _, f, _ in flat_fields() if isinstance(f.default, float)]


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), True, "1.0"])
def test_float_fields_reject_non_finite_and_wrong_types(name, bad):
    with pytest.raises(ValueError, match=f"RLConfig.{name}: expected"):
        RLConfig.from_flat(**{name: bad})


@pytest.mark.parametrize("name,bad", [("steps", "3"), ("steps", 2.5), ("group_size", True), ("top_k", 2.5),
                                      ("top_k", True), ("resume", "yes"), ("randomize_names", 2), ("model", 3),
                                      ("seed", None)])
def test_fields_reject_the_wrong_type(name, bad):
    with pytest.raises(ValueError, match=f"RLConfig.{name}: expected"):
        RLConfig.from_flat(**{name: bad})


def test_ints_are_accepted_for_float_fields_and_top_k_help_matches():
    assert RLConfig.from_flat(lr=1, kl_coef=0, top_k=5).update.lr == 1
    help_text = next(f.metadata["help"] for name, _, f, _ in flat_fields() if name == "top_k")
    assert "None" not in help_text and "leave the flag out" in help_text


@pytest.mark.parametrize("given,stored", [
    ("auto", "auto"), ("on", "on"), ("off", "off"), ("Auto", "auto"), ("ON", "on"), (True, "on"), (False, "off"),
    ("true", "on"), ("False", "off"), ("yes", "on"), ("0", "off"),
])
def test_compile_layers_is_auto_on_off_and_reads_the_old_booleans(given, stored):
    """compile_layers was a boolean before 2026-12-04: a config file's or a caller's true/false still read."""
    assert RLConfig().update.compile_layers == "auto"
    assert RLConfig.from_flat(compile_layers=given).update.compile_layers == stored
    assert RLConfig.from_dict({"compile_layers": given}).update.compile_layers == stored  # an old results.json
    with pytest.raises(ValueError, match="RLConfig.compile_layers: expected one of 'auto', 'on', 'off'"):
        RLConfig.from_flat(compile_layers="maybe")


def test_every_choice_field_with_an_off_choice_reads_true_and_false():
    """The whole kind: a choice field whose choices include off or none carries `switch` metadata, so a config
    file's `on`/`off` (YAML bools) and 1/0 read as its choices; and RLConfig reads them through from_flat too."""
    from agentrl.rl.config import _choices

    for name, _, f, kind in flat_fields():
        choices = _choices(f, kind)
        if {"off", "none"} & set(choices) and name != "adv_mode":  # adv_mode none: the raw reward, not off
            assert "switch" in f.metadata, name
            off = f.metadata["switch"][1]
            assert RLConfig.from_flat({name: False}).to_flat()[name] == off
            assert RLConfig.from_flat({name: 0}).to_flat()[name] == off


@pytest.mark.parametrize("argv,stored", [
    ([], "auto"), (["--compile-layers"], "on"), (["--compile-layers", "auto"], "auto"),
    (["--compile-layers", "off"], "off"), (["--compile-layers", "true"], "on"), (["--compile_layers", "False"], "off"),
    (["--no-compile-layers"], "off"), (["--compile-layers", "--steps", "3"], "on"),
])
def test_compile_layers_flag_keeps_the_bare_and_no_forms(argv, stored):
    (c,) = rlconfig_parser().parse_args_into_dataclasses(argv)
    assert c.update.compile_layers == stored
    with pytest.raises(SystemExit):
        rlconfig_parser().parse_args_into_dataclasses(["--compile-layers", "maybe"])


def test_compile_layers_auto_resolves_on_for_cuda_runs_past_the_payback():
    import torch

    from agentrl.rl.update import COMPILE_PAYBACK_STEPS, resolve_compile_layers

    assert COMPILE_PAYBACK_STEPS == 40  # bench/README.md: ~25 s of compile against 0.65 s saved per update
    assert resolve_compile_layers("auto", "cuda", 40) and resolve_compile_layers("auto", torch.device("cuda:1"), 500)
    assert not resolve_compile_layers("auto", "cuda", 39)
    assert not resolve_compile_layers("auto", "cpu", 500) and not resolve_compile_layers("auto", torch.device("cpu"), 40)
    assert resolve_compile_layers("on", "cpu", 1) and not resolve_compile_layers("on", "cuda", 0)  # 0: nothing trains
    assert not resolve_compile_layers("off", "cuda", 500)
    with pytest.raises(ValueError, match="expected 'auto', 'on' or 'off'"):
        resolve_compile_layers(True, "cuda", 500)
    help_text = next(f.metadata["help"] for name, _, f, _ in flat_fields() if name == "compile_layers")
    assert f"at least {COMPILE_PAYBACK_STEPS} steps" in help_text and "pays for itself" in help_text


def test_compile_layers_on_is_accepted_with_every_sampler():
    """The compiled forward runs inside the update only, so HF generate (the hf sampler) runs the eager layers."""
    from agentrl.rollout.samplers import SAMPLERS

    for sampler in SAMPLERS:
        assert RLConfig.from_flat(compile_layers="on", sampler=sampler).update.compile_layers == "on"


@pytest.mark.slow
def test_compile_layers_on_trains_one_step_with_the_hf_sampler(tmp_path, monkeypatch):
    """--compile-layers on with the default hf sampler (tiny-qwen3, CPU): the session compiles every decoder layer
    before the first update (torch.compile's "eager" backend, not inductor), the update runs them compiled
    (kl_coef > 0: every row is trained, against an eager copy), and results.json records the setting and the
    layers compiled."""
    import torch

    import agentrl.rl.training_state as training_state
    from agentrl.report.results import validate_results
    from agentrl.rl.trainer import train

    compiled, calls = [], []

    def counted(fn):
        def run(*a, **kw):
            calls.append(1)
            return fn(*a, **kw)
        return run

    def compile_counted(model, **kw):
        compiled.append(real(model, backend="eager", **kw))
        for layer in model.model.layers:  # count the compiled forward's calls
            layer._compiled_call_impl.compiled = counted(layer._compiled_call_impl.compiled)
        return compiled[-1]

    real = training_state.compile_decoder_layers  # patched where the training state calls it
    monkeypatch.setattr(training_state, "compile_decoder_layers", compile_counted)
    cfg = RLConfig.from_flat(env="edit-menu", compile_layers=True, steps=1, prompts_per_step=2, group_size=2, eval_size=1,
                             eval_n=1, train_size=4, max_new_tokens=8, micro=2, micro_tokens=0, kl_coef=0.01,
                             n_boot=100, out=str(tmp_path / "r"))
    assert cfg.sampling.sampler == "hf"
    torch._dynamo.reset()  # a fresh `_call_impl` cache (tests/rl/test_compile_layers.py), and none left for later tests
    try:
        data = validate_results(train(cfg))
    finally:
        torch._dynamo.reset()
    assert compiled == [2] and data["status"] == "completed" and data["config"]["compile_layers"] == "on"
    assert data["model"]["compiled_layers"] == 2
    # 2 layers x 2 microbatches (2 minibatches of 2 rows, micro 2), twice where the checkpointed recompute calls them
    assert len(calls) in (4, 8)


def test_sections_and_flat_names_map_one_to_one():
    """Every field has one flat name (its flag, its results-file key) and one (section, field); the tree and
    the flat mapping carry the same values, and an old flat config (results.json, agentrl_run.json) reads back."""
    from agentrl.rl.config import FLAT, SECTIONS

    c = RLConfig.from_flat(lr=3e-6, env="edit-menu", agent_timeout_s=5.0, eval_n=2, dtype="bfloat16")
    assert (c.update.lr, c.env.name, c.agent.timeout_s, c.eval.n, c.policy.dtype) == (3e-6, "edit-menu", 5.0, 2, "bf16")
    flat = c.to_flat()
    assert list(flat) == list(FLAT) and len(FLAT) == sum(len(dataclasses.fields(s)) for s in SECTIONS.values())
    assert flat["agent_timeout_s"] == 5.0 and flat["dtype"] == "bf16" and "update" not in flat
    assert c.to_dict()["update"]["lr"] == 3e-6 and c.to_dict()["env"]["name"] == "edit-menu"
    assert RLConfig.from_dict(flat) == c == RLConfig.from_dict(c.to_dict())  # flat (old files) or nested
    assert RLConfig.from_dict({"sampling": {"temperature": 0.5}, "lr": 1e-5}).sampling.temperature == 0.5
    assert c.replace_flat(steps=0).run.steps == 0 and c.run.steps == 3  # a copy; sections are frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.update.lr = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown keys.*section 'sampling'"):
        RLConfig.from_dict({"sampling": {"lr": 1e-5}})
    with pytest.raises(ValueError, match="RLConfig.lr: expected > 0"):
        c.replace_flat(lr=0.0)


def test_config_file_takes_flat_keys_and_nested_sections(tmp_path):
    from agentrl.cli.config_file import read_config_file

    path = tmp_path / "c.yaml"
    path.write_text("lr: 1.0e-5\nsampling:\n  temperature: 0.5\n  max-new-tokens: 16\nenv: {name: edit-menu}\n")
    assert read_config_file(path) == {"lr": 1e-5, "temperature": 0.5, "max_new_tokens": 16, "env": "edit-menu"}
    path.write_text("update: {learning_rate: 1}\n")
    with pytest.raises(ValueError, match="unknown key 'learning_rate' in section 'update'"):
        read_config_file(path)


@pytest.mark.parametrize("name", ["model", "tasks", "out", "env", "device"])
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_names_are_refused_by_name(name, value):
    """`--model ''` used to reach the loader as '.' ("model folder '.' has no config.json"); an empty
    --out, --tasks, --env or --device is refused the same way, naming the field."""
    with pytest.raises(ValueError, match=rf"RLConfig\.{name}: expected a non-empty string"):
        RLConfig.from_flat(**{name: value})


@pytest.mark.parametrize("kw, name", [({"group_size": 10**11}, "prompts_per_step*group_size"),
                                      ({"prompts_per_step": 2**20, "group_size": 2}, "prompts_per_step*group_size"),
                                      ({"eval_n": 10**9}, "eval_n")])
def test_absurd_episode_counts_are_refused_up_front(kw, name):
    """--group-size 1e11 used to start the run and allocate until memory ran out; now the config names it."""
    from agentrl.rl.config import MAX_EPISODES_PER_CALL
    with pytest.raises(ValueError, match=rf"RLConfig\.{re.escape(name)}: expected at most 1,048,576 episodes"):
        RLConfig.from_flat(**kw)
    assert MAX_EPISODES_PER_CALL == 1 << 20
    RLConfig.from_flat(group_size=1024, prompts_per_step=1024)  # 2**20 exactly: allowed


def test_absurd_cpu_threads_are_refused_up_front():
    """--cpu-threads 1000000000 passed the config (>= 0) and reached torch.set_num_threads after the model loaded:
    libgomp aborted the process ("Out of memory allocating 216000001344 bytes"), leaving results.json "running"."""
    from agentrl.rl.config import MAX_CPU_THREADS

    with pytest.raises(ValueError, match=r"RLConfig\.cpu_threads: expected an integer in \[0, 1024\] .*got 1000000000"):
        RLConfig.from_flat(cpu_threads=10**9)
    assert MAX_CPU_THREADS == 1024 and RLConfig.from_flat(cpu_threads=1024).scale.cpu_threads == 1024
