"""Shared helpers of the GPU benchmarks: model config lookup, random-weight model, table printing, timing.

Not a benchmark itself and not part of the library (bench/ is run with PYTHONPATH=src).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.models.device import torch_dtype
from agentrl.models.presets import TINY_QWEN3_OVERRIDES

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"  # named architectures (--config NAME): the Qwen2.5-Coder configs, bench/configs/README.md
CONFIG_CANDIDATES = (HERE.parent / "shared/assets/qwen3-0.6b-config", HERE.parent.parent / "shared/assets/qwen3-0.6b-config",
                     Path("../shared/assets/qwen3-0.6b-config"))
# CPU smoke-test sizes (the --tiny flag): the library's "tiny-qwen3" preset sizes, so the same code path runs
# in seconds on two cores (max_position_embeddings left as the config has it).
TINY = {k: v for k, v in TINY_QWEN3_OVERRIDES.items() if k != "max_position_embeddings"}


def find_config(path: str | None) -> Path:
    """The model's config.json: `path` (a file, a folder holding config.json, or the name of a folder of
    bench/configs/, e.g. "qwen2.5-coder-1.5b-instruct"); without `path` Qwen3-0.6B's: the first of
    CONFIG_CANDIDATES, else the asset "qwen3-0.6b-config" (agentrl.paths).

    Raises: FileNotFoundError naming every place looked at.
    """
    tried = []
    if path and not Path(path).exists() and (CONFIGS / path / "config.json").is_file():
        return CONFIGS / path / "config.json"
    for cand in ([Path(path)] if path else []) + list(CONFIG_CANDIDATES):
        f = cand / "config.json" if cand.is_dir() else cand
        tried.append(str(f))
        if f.is_file():
            return f
        if path:  # an explicit path that does not exist is an error, not a fallback
            break
    if not path:
        try:
            from agentrl.paths import resolve_asset

            return resolve_asset("qwen3-0.6b-config") / "config.json"
        except (FileNotFoundError, ImportError) as e:
            tried.append(f"asset qwen3-0.6b-config ({e})")
    names = ", ".join(sorted(d.name for d in CONFIGS.iterdir() if (d / "config.json").is_file()))
    raise FileNotFoundError(f"no config.json found; looked at: {', '.join(tried)} (pass --config PATH or one of "
                            f"{names})")


def model_name(config_path: str | None) -> str:
    """Short name of the architecture `config_path` names (its folder's name; "qwen3-0.6b" by default)."""
    f = find_config(config_path)
    return "qwen3-0.6b" if f.parent.name == "qwen3-0.6b-config" else f.parent.name


def make_model(config_path: str | None, dtype: str, device: str, tiny: bool = False, seed: int = 0) -> Any:
    """Random-weight causal LM of the config's `model_type` (qwen3, qwen2, llama: the config class
    transformers maps it to; TINY overrides when `tiny`), in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(find_config(config_path).read_text())
    raw.pop("torch_dtype", None)
    raw.pop("dtype", None)
    if tiny:
        raw.update(TINY)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw),
                                                 dtype=torch_dtype(dtype))
    return model.eval()


def param_bytes(model: Any) -> int:
    """Bytes of all (deduplicated, e.g. tied) parameters."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def sync(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str) -> tuple[Any, float]:
    """(fn(), wall seconds) with device synchronisation before and after."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if str(device).startswith("cuda") else float("nan")


def is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def write_out(filename: str, text: str) -> Path | None:
    """Write `text` to $OUT/`filename` (the folder made if needed); None, writing nothing, when OUT is unset."""
    out = os.environ.get("OUT")
    if not out:
        return None
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / filename
    path.write_text(text)
    return path


class Table:
    """Prints a header once and each row as it comes (flushed), and writes all rows to $OUT/<name>.{txt,json}.

    `extra`: further top-level keys of the JSON beside "meta" and "rows" (e.g. bench_rollout's "profile")."""

    def __init__(self, name: str, columns: list[tuple[str, str]], meta: dict[str, Any]):
        self.name, self.columns, self.meta, self.rows = name, columns, meta, []
        self.extra: dict[str, Any] = {}
        self.lines = [f"# {name}: " + ", ".join(f"{k}={v}" for k, v in meta.items())]
        self.lines.append("  ".join(f"{c:>{max(len(c), 9)}}" for c, _ in columns))
        for line in self.lines:
            print(line, flush=True)

    def add(self, **row: Any) -> None:
        self.rows.append(row)
        cells = []
        for c, fmt in self.columns:
            v = row.get(c, "")
            width = max(len(c), 9)
            cells.append(f"{v:>{width}{fmt}}" if isinstance(v, (int, float)) and fmt else f"{str(v):>{width}}")
        line = "  ".join(cells)
        self.lines.append(line)
        print(line, flush=True)
        self.save()

    def note(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)
        self.save()

    def save(self) -> None:
        if write_out(f"{self.name}.txt", "\n".join(self.lines) + "\n") is not None:
            write_out(f"{self.name}.json", json.dumps({"meta": self.meta, "rows": self.rows, **self.extra}, indent=1))


def device_meta(device: str) -> dict[str, Any]:
    import torch
    import transformers

    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0]}
    if str(device).startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name()
    return meta


def verdict(value: Any, op: str, threshold: float) -> str:
    """'met' / 'short' for `value op threshold` (op '>=' or '<=', 1e-9 relative tolerance), 'reported' for op
    'info' (no target), 'missing' when value is not a number.

    The one rule behind every issue-15 target line (the benchmarks' notes and bench/issue15_summary.py).
    """
    if not isinstance(value, (int, float)) or value != value:  # None, "OOM", NaN
        return "missing"
    if op == "info":  # a figure reported without a target (e.g. a real model's row beside the targets)
        return "reported"
    if op not in (">=", "<="):
        raise ValueError(f"verdict: op must be '>=' or '<=', got {op!r}")
    tol = 1e-9 * abs(threshold)  # a figure equal to its threshold up to float rounding (e.g. 1/G) is met
    return "met" if (value >= threshold - tol if op == ">=" else value <= threshold + tol) else "short"


def target(tid: str, figure: str, value: Any, op: str, threshold: float) -> dict[str, Any]:
    """One issue-15 target figure: {target, figure, value, op, threshold, ratio (value / threshold, None when
    value is missing), status ('met' / 'short' / 'missing', see verdict)}. The benchmarks' `targets(rows)`
    return these; bench/issue15_summary.py tabulates them."""
    num = isinstance(value, (int, float)) and value == value
    return {"target": tid, "figure": figure, "value": value if num else None, "op": op, "threshold": threshold,
            "ratio": value / threshold if num and threshold and op != "info" else None,
            "status": verdict(value, op, threshold)}


def fmt_num(v: Any) -> str:
    """'-' for None, whole numbers from 1000 up, else 3 significant digits."""
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def target_text(t: dict[str, Any]) -> str:
    """'target <target>: <figure> = <value> (<op> <threshold>: <status>, ratio <ratio>)'."""
    v = fmt_num(t["value"])
    ratio = "" if t["ratio"] is None else f", ratio {t['ratio']:.2f}"
    if t["op"] == "info":
        return f"target {t['target']}: {t['figure']} = {v} ({t['status']})"
    return f"target {t['target']}: {t['figure']} = {v} ({t['op']} {t['threshold']:.6g}: {t['status']}{ratio})"
