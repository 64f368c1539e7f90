import random

import numpy as np
import pytest
import torch

from agentrl.rl.checkpoint import (
    CorruptCheckpointError,
    check_checkpoint_root,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)


def _draw():
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist())


@pytest.mark.parametrize("tie", [False, True])
def test_reload_reproduces_weights_optimizer_and_rng(tiny_qwen3, tmp_path, tie):
    model = tiny_qwen3(dtype=torch.float32, tie=tie)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = save_checkpoint(tmp_path / "ck", 5, model, opt, extra={"cursor": 17})
    expected = _draw()
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    other = tiny_qwen3(dtype=torch.float32, tie=tie, seed=99)
    opt2 = torch.optim.AdamW(other.parameters(), lr=1e-3)
    _draw()  # advance the streams: the reload must rewind them
    meta = load_checkpoint(path, other, opt2)
    assert meta["step"] == 5 and meta["extra"] == {"cursor": 17}
    assert _draw() == expected
    for k, v in other.state_dict().items():
        assert torch.equal(v, saved[k]), k
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg"], s2[i]["exp_avg"]) for i in s1)


def test_latest_ignores_incomplete_and_temporary(tiny_qwen3, tmp_path):
    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert latest_checkpoint(tmp_path / "none") is None
    save_checkpoint(tmp_path, 2, model, opt)
    save_checkpoint(tmp_path, 10, model, opt)
    (tmp_path / "step_000020").mkdir()  # killed before meta.json: not a checkpoint
    (tmp_path / ".tmp-step_000030-abcd").mkdir()
    assert latest_checkpoint(tmp_path).name == "step_000010"
    assert not list(tmp_path.glob(".tmp-step_0000[01]*"))
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path / "step_000020", model)
    deleted = prune_checkpoints(tmp_path, keep_last=1)
    assert sorted(p.name for p in deleted) == [".tmp-step_000030-abcd", "step_000002"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000010", "step_000020"]


def _truncate(path):
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])


@pytest.mark.parametrize("broken", ["meta.json", "optimizer.pt", "rng.json", "rng_torch.pt", "model/model.safetensors"])
def test_a_corrupt_file_is_named_with_the_checkpoint_to_fall_back_to(tiny_qwen3, tmp_path, broken):
    """Truncated files (a full disk, a copy cut short) raise one clear error, never the reader's traceback."""
    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    save_checkpoint(tmp_path, 1, model, opt)
    path = save_checkpoint(tmp_path, 2, model, opt)
    _truncate(path / broken)
    with pytest.raises(CorruptCheckpointError, match=rf"{broken.split('/')[-1]} is unreadable .*resume from step_000001"):
        load_checkpoint(path, model, opt)
    assert load_checkpoint(tmp_path / "step_000001", model, opt)["step"] == 1  # the earlier one still loads
    _truncate(tmp_path / "step_000001" / broken)
    with pytest.raises(ValueError, match="no earlier checkpoint"):
        load_checkpoint(tmp_path / "step_000001", model, opt)


@pytest.mark.parametrize("step, why", [("two", "has step 'two'; expected a count"), (-1, "has step -1; expected"),
                                       (True, "has step True; expected"), (99, "has step 99, but its folder is step_000002")])
def test_a_meta_step_that_is_no_count_or_not_its_folders_is_refused_by_name(tiny_qwen3, tmp_path, step, why):
    """--resume on a step_000002 whose meta.json said step 99 resumed "at step 99" of --steps 3 and evaluated
    "after at step 99"; "two" failed on int() without naming the file."""
    import json

    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    save_checkpoint(tmp_path, 1, model, opt)
    path = save_checkpoint(tmp_path, 2, model, opt)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "step": step}))
    with pytest.raises(CorruptCheckpointError, match=rf"step_000002/meta\.json {why}.*resume from step_000001"):
        load_checkpoint(path, model)
    assert load_checkpoint(tmp_path / "step_000001", model)["step"] == 1


def test_optimizer_state_of_another_model_is_refused_by_name(tiny_qwen3, tmp_path):
    model = tiny_qwen3(dtype=torch.float32)
    path = save_checkpoint(tmp_path, 1, model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    fewer = torch.optim.AdamW(list(model.parameters())[:2], lr=1e-3)
    with pytest.raises(ValueError, match="optimizer.pt does not fit this run's optimizer"):
        load_checkpoint(path, model, fewer)


def test_failed_save_leaves_nothing(tiny_qwen3, tmp_path):
    model = tiny_qwen3(dtype=torch.float32)
    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, 1, model, torch.optim.SGD(model.parameters(), lr=0.1), extra={"x": object()})
    assert list(tmp_path.iterdir()) == [] and latest_checkpoint(tmp_path) is None


def test_kill_during_checkpointing_leaves_a_loadable_latest(tmp_path):
    """SIGKILL a process that checkpoints in a loop; the latest complete checkpoint always loads."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(f"""
        import torch
        from agentrl.rl.checkpoint import save_checkpoint
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))  # plain module: state_dict.pt
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = 0
        while True:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float(step))
            save_checkpoint({str(tmp_path)!r}, step, model, opt)
            step += 1
            if step == 2:
                print("ready", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    latest = latest_checkpoint(tmp_path)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
    meta = load_checkpoint(latest, model)
    assert meta["step"] >= 1
    assert all(torch.all(p == float(meta["step"])) for p in model.parameters())


def test_a_file_where_checkpoints_go_is_a_named_value_error(tiny_qwen3, tmp_path):
    """A file named `checkpoints` (or `step_000002` in it) made save_checkpoint raise a bare FileExistsError
    or NotADirectoryError (shutil.rmtree) after the step's work; both are now ValueErrors naming the file, and
    check_checkpoint_root finds them before a run starts. The file itself is left alone."""
    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters())
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file is a file; expected a checkpoints directory"):
        save_checkpoint(tmp_path / "file", 1, model, opt)
    with pytest.raises(ValueError, match="'.*file' is a file; expected a directory"):
        check_checkpoint_root(tmp_path / "file")
    root = tmp_path / "ck"
    save_checkpoint(root, 1, model, opt)
    (root / "step_000002").write_text("x")
    with pytest.raises(ValueError, match="step_000002 is a file; expected a checkpoint directory"):
        save_checkpoint(root, 2, model, opt)
    with pytest.raises(ValueError, match="step_000002' is a file; expected a checkpoint directory"):
        check_checkpoint_root(root)
    assert (root / "step_000002").read_text() == "x" and latest_checkpoint(root) == root / "step_000001"
    check_checkpoint_root(tmp_path / "missing")  # a run makes it


def test_weights_of_another_shape_are_a_named_value_error(tiny_qwen3, tmp_path):
    """A checkpoint whose safetensors hold a tensor of another shape (another model's, a hand-edited file) made
    --resume end in torch's RuntimeError traceback ('size mismatch ...'); it is now a ValueError naming the
    folder and the tensor, with the earlier checkpoint to fall back to."""
    from safetensors.torch import load_file, save_file

    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path / "ck", 1, model, opt)
    path = save_checkpoint(tmp_path / "ck", 2, model, opt)
    [weights] = (path / "model").glob("*.safetensors")
    state = load_file(str(weights))
    name = sorted(state)[0]
    save_file({**state, name: torch.zeros(3, 3)}, str(weights))
    with pytest.raises(ValueError, match=rf"step_000002/model do not fit the model \(size mismatch for {name}.*"
                                         r"resume from step_000001"):
        load_checkpoint(path, tiny_qwen3(dtype=torch.float32), restore_rng=False)


@pytest.mark.parametrize("missing", ["rng.json", "optimizer.pt", "model/model.safetensors"])
def test_a_missing_file_names_the_checkpoint_to_fall_back_to(tiny_qwen3, tmp_path, missing):
    """A checkpoint missing a state file said only that it was incomplete; like an unreadable one, it now names
    the complete checkpoint before it to resume from."""
    model = tiny_qwen3(dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path / "ck", 1, model, opt)
    path = save_checkpoint(tmp_path / "ck", 2, model, opt)
    (path / missing).unlink()
    with pytest.raises(FileNotFoundError, match="move step_000002 aside to resume from step_000001"):
        load_checkpoint(path, tiny_qwen3(dtype=torch.float32), torch.optim.AdamW(model.parameters()))


def test_optimizer_moments_of_another_shape_are_refused_at_load(tmp_path):
    """An optimizer.pt whose exp_avg has another shape than its parameter loaded silently (load_state_dict checks
    only counts), and the resumed run died at its first optimizer step with a size-mismatch RuntimeError."""
    from torch import nn

    def build():
        m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3)

    model, opt = build()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    path = save_checkpoint(tmp_path / "ck", 1, model, opt)
    load_checkpoint(path, *build())  # intact: loads
    state = torch.load(path / "optimizer.pt", weights_only=True)
    state["state"][0]["exp_avg"] = torch.zeros(3)
    torch.save(state, path / "optimizer.pt")
    with pytest.raises(ValueError, match=r"optimizer.pt does not fit .*parameter 0: exp_avg has shape \(3,\), the "
                                         r"parameter \(4, 4\)"):
        load_checkpoint(path, *build())


def test_a_saved_model_folder_has_the_umasks_ordinary_modes(tiny_qwen3, tmp_path):
    """save_pretrained left model.safetensors 0600 beside 0644 siblings; every file is now 0666 less the umask."""
    import os
    import stat

    from agentrl.rl.checkpoint import save_model

    old = os.umask(0o022)
    try:
        save_model(tiny_qwen3(), tmp_path / "m")
    finally:
        os.umask(old)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "m").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
