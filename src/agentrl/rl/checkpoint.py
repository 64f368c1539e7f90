"""Atomic training checkpoints: model, optimizer, RNG streams and step. Not the trainer loop.

Layout: <root>/step_000012/{model/, optimizer.pt, rng.json, rng_torch.pt, meta.json}. A checkpoint is
written into a hidden temporary directory beside it, every file fsync'd, then renamed into place (and the
parent fsync'd), so a kill at any moment leaves either the complete checkpoint or none; `meta.json` is
written last and `latest_checkpoint` ignores directories without it. Loading uses torch.load with
weights_only=True (no pickle of arbitrary objects).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentrl.report.results import fsync_path, ordinary_modes
from agentrl.rl.run_record import write_run_record

_STEP_DIR = re.compile(r"^step_(\d{6,})$")
FORMAT_VERSION = 1




def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON-ready python/numpy global RNG states, torch CPU/CUDA generator states as uint8 tensors)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    py = {"python": [version, list(internal), gauss],
          "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    return py, tensors


def set_rng_state(py: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """Restore what rng_state() captured (CUDA states only for devices that exist here)."""
    version, internal, gauss = py["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = py["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            if f"torch_cuda_{i}" in tensors:
                torch.cuda.set_rng_state(tensors[f"torch_cuda_{i}"], i)


def save_model(model: nn.Module, path: Path) -> None:
    """Write `model` into the new folder `path`: a peft LoRA model's adapters with agentrl_lora.json (its
    base), an HF model by save_pretrained, any other nn.Module as state_dict.pt; every file with the umask's
    ordinary mode (ordinary_modes)."""
    from agentrl.models.lora import is_lora, save_adapter

    if is_lora(model):  # the adapters only, with the base they belong to
        save_adapter(model, path)
    elif hasattr(model, "save_pretrained"):
        model.save_pretrained(path)
    else:
        path.mkdir(parents=True)
        torch.save(model.state_dict(), path / "state_dict.pt")
    ordinary_modes(path)


def save_checkpoint(root: str | os.PathLike, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    *, extra: dict[str, Any] | None = None, tokenizer: Any = None,
                    run_record: dict[str, Any] | None = None) -> Path:
    """Write checkpoint `step` under `root` atomically and return its directory.

    Args:
        root: checkpoints directory (created if missing).
        step: completed training steps (>= 0); the directory is step_{step:06d}.
        model: HF model (save_pretrained), a peft LoRA model (adapters + agentrl_lora.json), or any
            nn.Module (state_dict.pt).
        optimizer: its state_dict goes to optimizer.pt.
        extra: JSON-serialisable state of the loop (e.g. task-sampler position), stored in meta.json.
        tokenizer: saved beside the weights (save_pretrained) so `<dir>/model` loads as a model path
            (`agentrl eval --model runs/x/checkpoints/step_000010/model`).
        run_record: agentrl.rl.run_record.run_record's dict, written as model/agentrl_run.json (the
            environment, tasks and settings `agentrl eval --model <checkpoint>` reuses).

    Raises:
        ValueError: negative step; `root` or the step's directory is a file (check_checkpoint_root checks
            it before a run); TypeError: `extra` not JSON-serialisable.
    """
    if step < 0:
        raise ValueError(f"save_checkpoint: step must be >= 0, got {step}")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"save_checkpoint: {root} is a file; expected a checkpoints directory (move the file aside)")
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_model(model, tmp / "model")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        if run_record is not None:
            write_run_record(tmp / "model", run_record)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        py, tensors = rng_state()
        (tmp / "rng.json").write_text(json.dumps(py))
        torch.save(tensors, tmp / "rng_torch.pt")
        meta = {"format_version": FORMAT_VERSION, "step": step, "extra": extra or {}}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        for f in sorted(tmp.rglob("*")):
            fsync_path(f)
        fsync_path(tmp)
        if final.exists() and not final.is_dir():
            raise ValueError(f"save_checkpoint: {final} is a file; expected a checkpoint directory (move the file "
                             "aside)")
        if final.exists():  # re-saving the same step: move the old one aside first
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_path(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step under `root`, or None (missing root, none yet)."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _STEP_DIR.match(p.name)) and (p / "meta.json").is_file()]
    return max(found)[1] if found else None


def checkpoint_step(path: str | os.PathLike) -> int:
    """The completed steps a checkpoint folder's name says (step_000012 -> 12).

    Raises:
        ValueError: the name is not step_N.
    """
    m = _STEP_DIR.match(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a checkpoint folder (step_NNNNNN)")
    return int(m.group(1))


def check_checkpoint_root(root: str | os.PathLike) -> None:
    """Check that `root` can hold checkpoints before a run spends any work: missing, or a directory whose
    step_N entries are directories (save_checkpoint would fail on a file there, after the step it saves).

    Raises:
        ValueError: `root`, or an entry named step_N in it, is there but not a directory (names it).
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"checkpoints folder {str(root)!r} is a file; expected a directory (move the file aside)")
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if _STEP_DIR.match(p.name) and not p.is_dir():
                raise ValueError(f"checkpoint {str(p)!r} is a file; expected a checkpoint directory (move the file "
                                 "aside)")


def remove_partial_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Delete the temporary directories that a kill during `save_checkpoint` leaves under `root`
    (`.tmp-step_*`; complete checkpoints are never touched). Call only while no run writes there.

    Returns: the removed paths.
    """
    root = Path(root)
    removed = [p for p in root.glob(".tmp-step_*") if p.is_dir()] if root.is_dir() else []
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but cannot be read (truncated, overwritten, not what it should be)."""


def _earlier_hint(path: Path) -> str:
    """Where to go from a corrupt checkpoint: the complete one before it, if any."""
    m = _STEP_DIR.match(path.name)
    earlier = sorted((int(n.group(1)), p) for p in path.parent.iterdir() if (n := _STEP_DIR.match(p.name))
                     and (p / "meta.json").is_file() and m and int(n.group(1)) < int(m.group(1))) \
        if path.parent.is_dir() else []
    if earlier:
        return f"; move {path.name} aside to resume from {earlier[-1][1].name}, the complete checkpoint before it"
    return "; no earlier checkpoint: start the run again without --resume"


def _read(ckpt: Path, file: Path, load: Any) -> Any:
    """`load(file)`, with every failure but a missing file raised as CorruptCheckpointError naming it.

    torch.load, safetensors and json fail with RuntimeError, SafetensorError, EOFError, UnpicklingError,
    JSONDecodeError, ...: to a user they all mean the same thing, this file of this checkpoint is broken.
    """
    if not file.is_file():
        raise FileNotFoundError(f"load_checkpoint: {ckpt} is not a complete checkpoint (no {file.relative_to(ckpt)})"
                                f"{_earlier_hint(ckpt)}")
    try:
        return load(file)
    except Exception as e:  # noqa: BLE001 - every reader's own error type means "this file is unreadable"
        detail = str(e).splitlines()[0][:200] if str(e) else "no detail"
        raise CorruptCheckpointError(f"load_checkpoint: {file} is unreadable ({type(e).__name__}: {detail})"
                                     f"{_earlier_hint(ckpt)}") from None


def _check_step(path: Path, step: Any) -> None:
    """meta.json's step must be a count of completed steps and agree with its folder's name (step_N): a run
    resumed from a hand-edited or misplaced one started at that step ("step 99" of --steps 3) or failed on int()."""
    folder = _STEP_DIR.match(path.name)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        why = f"has step {step!r}; expected a count of completed steps (an integer >= 0)"
    elif folder and int(folder.group(1)) != step:
        why = f"has step {step}, but its folder is {path.name}"
    else:
        return
    raise CorruptCheckpointError(f"load_checkpoint: {path / 'meta.json'} {why}{_earlier_hint(path)}")


def load_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                    *, restore_rng: bool = True) -> dict[str, Any]:
    """Load weights (in place), optimizer state and RNG streams from a checkpoint directory.

    Returns:
        meta: {"format_version", "step", "extra"}; training resumes at step meta["step"].

    Raises:
        FileNotFoundError: `path` is not a complete checkpoint (names the missing file).
        CorruptCheckpointError (a ValueError): a file is there but unreadable (names it, and the complete
            checkpoint before this one to resume from instead).
        ValueError: a format version this code does not read; weights that do not fit the model (names missing,
            unexpected or differently shaped tensors).
        CorruptCheckpointError: meta.json's step is not an integer >= 0 or differs from the folder's step_N.
    """
    path = Path(path)
    if not (path / "meta.json").is_file():
        raise FileNotFoundError(f"load_checkpoint: {path} is not a complete checkpoint (no meta.json)")
    meta = _read(path, path / "meta.json", lambda f: json.loads(f.read_text()))
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        got = meta.get("format_version") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"load_checkpoint: {path / 'meta.json'} has format_version {got!r}, "
                         f"expected {FORMAT_VERSION}")
    _check_step(path, meta.get("step"))
    device = next(model.parameters()).device
    _load_model_weights(model, path, device)
    if optimizer is not None:
        state = _read(path, path / "optimizer.pt", lambda f: torch.load(f, map_location=device, weights_only=True))
        try:
            optimizer.load_state_dict(state)
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"load_checkpoint: {path / 'optimizer.pt'} does not fit this run's optimizer ({e}); "
                             f"resume with the run's own model, --lora-* and optimizer settings") from None
        _check_optimizer_shapes(path, optimizer)
    if restore_rng:
        py = _read(path, path / "rng.json", lambda f: json.loads(f.read_text()))
        tensors = _read(path, path / "rng_torch.pt", lambda f: torch.load(f, map_location="cpu", weights_only=True))
        _read(path, path / "rng.json", lambda f: set_rng_state(py, tensors))
    return meta


# Per-parameter optimizer state that has its parameter's shape (Adam/AdamW moments, SGD momentum)
_PARAM_SHAPED_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer")


def _check_optimizer_shapes(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """Each loaded moment must have its parameter's shape: load_state_dict checks only the parameter counts, so a
    moment of another shape (another model's optimizer.pt, a damaged one) loaded silently and the resumed run
    failed at its first optimizer step ("The size of tensor a (3) must match ...").

    Raises: ValueError: names the file, the parameter's index and both shapes."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, p in enumerate(params):
        for key, value in optimizer.state.get(p, {}).items():
            if key in _PARAM_SHAPED_STATE and torch.is_tensor(value) and value.shape != p.shape:
                raise ValueError(f"load_checkpoint: {path / 'optimizer.pt'} does not fit this run's optimizer "
                                 f"(parameter {i}: {key} has shape {tuple(value.shape)}, the parameter "
                                 f"{tuple(p.shape)}){_earlier_hint(path)}")


def _load_model_weights(model: nn.Module, ckpt: Path, device: torch.device) -> None:
    from agentrl.models.lora import ADAPTER_CONFIG, is_lora, load_adapter_state

    model_dir = ckpt / "model"
    if (model_dir / ADAPTER_CONFIG).is_file():
        if not is_lora(model):
            raise ValueError(f"load_checkpoint: {model_dir} holds LoRA adapters; resume with the same --lora-r")
        _read(ckpt, model_dir / "adapter_model.safetensors", lambda f: load_adapter_state(model, model_dir))
        return
    sd_path = model_dir / "state_dict.pt"
    if sd_path.is_file():
        state = _read(ckpt, sd_path, lambda f: torch.load(f, map_location=device, weights_only=True))
    else:
        from safetensors.torch import load_file

        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"load_checkpoint: no weights (*.safetensors or state_dict.pt) in {model_dir}"
                                    f"{_earlier_hint(ckpt)}")
        state = {}
        for f in files:
            state.update(_read(ckpt, f, lambda f: load_file(str(f), device=str(device))))
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # "size mismatch for ...": weights of another model (or a hand-edited file)
        mismatch = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln), str(e).splitlines()[0])
        raise ValueError(f"load_checkpoint: weights in {model_dir} do not fit the model ({mismatch[:300]}); resume "
                         f"with the run's own --model{_earlier_hint(ckpt)}") from None
    tied = {k for k in missing if k.endswith("lm_head.weight")}  # tied heads are saved once
    if set(missing) - tied or unexpected:
        raise ValueError(f"load_checkpoint: weights in {model_dir} do not match the model: "
                         f"missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]}")


def prune_checkpoints(root: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the `keep_last` (>= 1) highest-step complete checkpoints under `root`, and any
    leftover temporary directories of interrupted saves. Returns the deleted paths."""
    if keep_last < 1:
        raise ValueError(f"prune_checkpoints: keep_last must be >= 1, got {keep_last}")
    root = Path(root)
    if not root.is_dir():
        return []
    done = sorted((int(m.group(1)), p) for p in root.iterdir()
                  if (m := _STEP_DIR.match(p.name)) and (p / "meta.json").is_file())
    doomed = [p for _, p in done[:-keep_last]] + [p for p in root.iterdir() if p.name.startswith(".tmp-step_")]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed
