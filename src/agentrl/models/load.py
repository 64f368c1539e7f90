"""Load a policy (HF causal LM + tokenizer with a chat template) from a path, the HF cache, or a preset.

Not a downloader unless asked (`allow_download=True`), and not the sampler (agentrl.rollout.hf_sampler).
Presets (agentrl.models.presets) "tiny-qwen3" (tests), "small-qwen3" (the warm-started learning-run model) and
"demo-qwen3" (the demo's model): Qwen3 architecture from small configs derived from Qwen3-0.6B's
config.json, random weights from a fixed seed, and the real Qwen3 tokenizer; "demo-qwen3" has tiny-qwen3's
trunk with a trimmed copy of that tokenizer (agentrl.chat.trim: only the tokens edit-menu shows and its
experts write on bug-fix tasks, same segmentation there, byte fallback elsewhere), so its embedding and
softmax are 1,644 wide instead of 151,936 (docs/design.md, "The demo's vocabulary").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from agentrl.chat.template import chat_template_of
from agentrl.models.device import canonical_dtype
from agentrl.models.device import torch_dtype as resolve_torch_dtype
from agentrl.models.presets import (
    PRESET_OVERRIDES,
    PRESET_VOCABS,
    qwen3_tokenizer_source,
    resolve_model_dir,
    tiny_qwen3_config,
)
from agentrl.preflight import loads_json

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def context_limit(model: Any) -> int | None:
    """The most positions `model` was made for (prompt + completion tokens): its config's max_position_embeddings
    (GPT-2's n_positions), times a RoPE scaling factor when the config extends it without recording the original
    length (a config that records original_max_position_embeddings already states the extended one); None when
    the config says nothing."""
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return None
    scaling = getattr(config, "rope_scaling", None)
    if isinstance(scaling, dict) and "original_max_position_embeddings" not in scaling:
        factor = scaling.get("factor")
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
            limit = int(limit * factor)
    return limit


def fit_context_tokens(model: Any, value: int, default: int, flag: str, model_name: str) -> int:
    """The prompt + completion budget to run with: `value`, or, when `value` is the flag's `default` (not a number
    the user chose) and the model was made for fewer positions (context_limit), that limit, as vLLM's
    max_model_len defaults to the model's (a 2,048-position model runs with the default 4,096 lowered, logged).

    Raises: ValueError from check_context_tokens for any other value beyond the model's context."""
    limit = context_limit(model)
    if value == default and limit is not None and limit < value:
        logging.getLogger("agentrl").info("%s %d lowered to %d, the context of model %r", flag, value, limit,
                                          model_name)
        return limit
    check_context_tokens(model, value, flag, model_name)
    return value


def check_context_tokens(model: Any, value: int, flag: str, model_name: str) -> None:
    """Refuse a prompt + completion budget (`flag` = `value`) beyond the positions `model` was made for
    (context_limit): past it a learned position table fails mid-run, and RoPE models sample on (transformers
    only warns), so `--max-context-tokens 1000000000` with a large --max-new-tokens generated until memory ran out.

    Raises: ValueError naming the flag, the value, the model and its limit."""
    limit = context_limit(model)
    if limit is not None and value > limit:
        raise ValueError(f"{flag} {value:,} is beyond the context of model {model_name!r}: {limit:,} tokens "
                         f"(its config's max_position_embeddings); pass at most {limit}")


def load_tokenizer(name_or_path: str | os.PathLike, *, allow_download: bool = False):
    """An HF tokenizer that has a chat template and a pad token.

    Raises:
        FileNotFoundError: nothing loadable at `name_or_path` (locally, unless downloads are allowed).
        ValueError: `name_or_path` is a file, not a folder; the tokenizer has no chat template.
    """
    from transformers import AutoTokenizer

    local = Path(name_or_path).expanduser()
    if local.is_file():  # transformers would read it as a config, or as a hub id, and blame either
        raise ValueError(f"tokenizer path {str(local)!r} is a file; expected a folder holding a tokenizer (one of "
                         f"{', '.join(TOKENIZER_FILES)}), a model folder saved with its tokenizer, or an HF-cache repo id")
    if local.is_dir() and not any((local / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"folder {str(local)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); pass the tokenizer "
            f"folder with --tokenizer / tokenizer_path, or a model folder saved together with its tokenizer")
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), local_files_only=not allow_download)
    except (OSError, ValueError) as e:
        hint = "" if allow_download else " (local files only; pass allow_download=True / --allow-download to fetch)"
        raise FileNotFoundError(f"could not load a tokenizer from {str(name_or_path)!r}{hint}: {e}") from e
    chat_template_of(tok)
    if tok.pad_token_id is None:  # left padding needs a pad id; it is masked out everywhere
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def check_model_config(folder: Path) -> None:
    """Check `folder/config.json` before transformers reads it: JSON, an object, a known `model_type`.

    transformers' own errors for these are several paragraphs (and blame the tokenizer when the
    tokenizer loads first, or advise installing transformers from git); this says what is wrong in one line.

    Raises:
        ValueError: unreadable or invalid JSON, not an object, or a `model_type` this transformers lacks.
    """
    import transformers
    from transformers import CONFIG_MAPPING

    path = folder / "config.json"
    try:
        raw = loads_json(path.read_text(encoding="utf-8"), f"model folder {str(folder)!r}: config.json")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"model folder {str(folder)!r}: config.json is not valid JSON ({e}); a truncated copy?") \
            from None
    if not isinstance(raw, dict):
        raise ValueError(f"model folder {str(folder)!r}: config.json holds a {type(raw).__name__}, expected an object")
    model_type = raw.get("model_type")
    if model_type is not None and model_type not in CONFIG_MAPPING:  # none: transformers guesses
        raise ValueError(f"model folder {str(folder)!r}: config.json has model_type {model_type!r}, which "
                         f"transformers {transformers.__version__} does not know (e.g. qwen3, qwen2, llama)")


def _load_hint(path: Path, allow_download: bool) -> str:
    """Advice for a model that failed to load: a local folder needs its weight files; only a hub id
    can come from the HF cache or a download."""
    if path.is_dir():
        if not any((path / f).is_file() for f in WEIGHT_FILES):
            return (f" (a local folder without weights: it needs one of {', '.join(WEIGHT_FILES)}, as written by "
                    f"save_pretrained; an agentrl checkpoint keeps them in step_N/model/)")
        return " (a local folder: its config.json or weight files are unreadable or do not match)"
    if allow_download:
        return ""
    return " (a hub id, local files only: put it in the HF cache or pass --allow-download)"


def preset_trimmed_tokenizer(vocab: str):
    """The real Qwen3 tokenizer trimmed to the kept tokens of `agentrl/chat/vocab/<vocab>.json`.

    Raises:
        FileNotFoundError: the Qwen3 tokenizer is not found (says how to fetch it).
        ValueError: the vocab file is damaged (its tokens' sha256 differs from the one it records), or was
            built from another tokenizer.json than the one found (rebuild: scripts/build_demo_vocab.py).
    """
    from agentrl.chat.trim import trimmed_tokenizer_files, vocab_file_digest

    path = Path(__file__).resolve().parents[1] / "chat" / "vocab" / f"{vocab}.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    if vocab_file_digest(spec["tokens"]) != spec["tokens_sha256"]:
        raise ValueError(f"{path}: the kept tokens do not match their recorded sha256 (damaged or hand-edited)")
    source = Path(qwen3_tokenizer_source())
    sha = hashlib.sha256((source / "tokenizer.json").read_bytes()).hexdigest()
    if sha != spec["source_tokenizer_sha256"]:
        raise ValueError(f"{path} was built from a tokenizer.json with sha256 {spec['source_tokenizer_sha256'][:12]}..., "
                         f"but {source} has {sha[:12]}...; rebuild it with scripts/build_demo_vocab.py")
    with tempfile.TemporaryDirectory(prefix="agentrl-trim-") as tmp:  # a fast tokenizer loads into memory
        return load_tokenizer(trimmed_tokenizer_files(source, spec["tokens"], tmp))


def in_hf_cache(repo_id: str) -> bool:
    """Whether the local HF hub cache holds `repo_id`'s config.json (an id that is not a valid repo id: False)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # HFValidationError: "runs/x/y", "a b", ... are not repo ids
        return False


def _close_folders(p: Path) -> list[str]:
    """Folders beside the missing path `p` whose names are close to its name ("runs/defualt" -> runs/default)."""
    import difflib

    parent = p.parent if str(p.parent) else Path(".")
    try:
        names = [c.name for c in parent.iterdir() if c.is_dir()]
    except OSError:
        return []
    return [str(parent / n) for n in difflib.get_close_matches(p.name, names, n=3, cutoff=0.6)]


def model_not_found(name_or_path: str | os.PathLike, allow_download: bool = False) -> str | None:
    """model_not_found_reason followed by what a model can be (model_kinds), or None when it is found."""
    reason = model_not_found_reason(name_or_path, allow_download)
    return f"{reason}. {model_kinds()}" if reason else None


def model_not_found_reason(name_or_path: str | os.PathLike, allow_download: bool = False) -> str | None:
    """Why the model `name_or_path` cannot be found, before the tokenizer or transformers try it, or None.

    A path that does not exist, and (local files only) a name that is neither a folder here nor a repo id in
    the local HF cache, used to reach transformers, whose error blamed the tokenizer and the internet
    connection ("runs/defualt" for runs/default). The reason names close folder names. Presets and fetched
    model names are found here (load_policy resolves them)."""
    name = str(name_or_path)
    p = Path(name).expanduser()
    if p.exists() or name in known_model_names():
        return None
    path_like = name.startswith((".", "/", "~"))
    if not path_like and (allow_download or in_hf_cache(name)):
        return None
    close = _close_folders(p)
    guess = f" (did you mean {' or '.join(close)}?)" if close else ""
    what = (f"model path {name!r} does not exist{guess}" if path_like else
            f"model {name!r} not found{guess}: no such folder (from {os.getcwd()}) and not in the local HF cache "
            f"(local files only; pass --allow-download to fetch an HF hub id)")
    return what


def known_model_names() -> tuple[str, ...]:
    """The model names agentrl resolves itself: the presets and the fetchable pretrained models."""
    from agentrl.models.presets import MODEL_PRESETS
    from agentrl.models.pretrained import PRETRAINED

    return (*MODEL_PRESETS, *PRETRAINED)


def model_kinds() -> str:
    """One sentence naming what `--model` takes."""
    from agentrl.models.presets import MODEL_PRESETS
    from agentrl.models.pretrained import PRETRAINED

    return (f"A model is a run folder (runs/x), a checkpoint (runs/x/checkpoints/step_N), a model folder, a preset "
            f"({', '.join(MODEL_PRESETS)}), a fetched model ({', '.join(PRETRAINED)}) or an HF-cache repo id")


def check_not_a_file(name_or_path: str | os.PathLike) -> None:
    """Raise ValueError when the model `name_or_path` is an existing file (a weights file, a results.json, a
    GGUF): a model is a folder or a name, and transformers' own error for a file blames the tokenizer or
    calls it an invalid repo id."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        raise ValueError(f"model path {str(p)!r} is a file; expected a model folder (config.json + weights, as "
                         f"save_pretrained writes), a run folder (runs/x), a checkpoint (runs/x/checkpoints/step_N), "
                         f"a preset such as 'tiny-qwen3', a fetched model name or an HF-cache repo id")


def load_policy(
    name_or_path: str | os.PathLike,
    dtype: str = "fp32",
    device: str = "cpu",
    allow_download: bool = False,
    *,
    tokenizer_path: str | os.PathLike | None = None,
    seed: int = 0,
    chat_template: str | None = None,
) -> tuple[Any, Any]:
    """Load `(model, tokenizer)`: a preset, a local folder, or an HF hub id from the local cache.

    Args:
        name_or_path: a preset ("tiny-qwen3", "small-qwen3", "demo-qwen3"), a fetched pretrained model
            ("smollm2-135m-instruct": its folder in the agentrl model cache, agentrl.models.pretrained), a
            folder with config + weights, an agentrl checkpoint folder (`.../checkpoints/step_N`: its
            `model/` is loaded), a folder of LoRA adapters (its base is loaded and the adapters merged
            in), or a hub id ("Qwen/Qwen3-0.6B").
        dtype: any spelling agentrl.models.device accepts: "fp32" (default: the sampler's and trainer's
            log-probs agree), "bf16", "fp16", "auto" (the checkpoint's own dtype; a LoRA folder's base's),
            or an alias ("float32", "bfloat16", ...).
        device: torch device string.
        allow_download: fetch from the HF hub if missing locally (default: `local_files_only=True`).
        tokenizer_path: tokenizer folder (default: the model's own; for "tiny-qwen3" and "small-qwen3", the
            asset "qwen3-tokenizer", resolved as in agentrl.paths; for "demo-qwen3", that tokenizer trimmed
            by `preset_trimmed_tokenizer`; a path given here replaces it, and the model then has
            tiny-qwen3's full 151,936-row embedding).
        seed: weight seed for presets (random init).
        chat_template: replace the tokenizer's template (a bundled name such as "chatml-tools", or a path;
            agentrl.chat.bundled); saving the tokenizer then saves it too.

    Returns:
        (model in eval mode on `device`, tokenizer with `padding_side="left"`).

    Raises:
        FileNotFoundError: model or tokenizer not found (message names the path and the cache rule, or
            how to fetch a pretrained model).
        ValueError: bad dtype, a path that is a file (not a model folder), a local folder whose config.json
            is broken or names an unknown model_type (`check_model_config`), or the tokenizer has no chat
            template.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.models.lora import is_adapter_dir
    from agentrl.models.pretrained import PRETRAINED, resolve_pretrained

    canonical_dtype(dtype)  # a bad spelling fails before anything is loaded
    if str(name_or_path) in PRETRAINED:
        name_or_path = resolve_pretrained(str(name_or_path))
    check_not_a_file(name_or_path)
    if missing := model_not_found(name_or_path, allow_download):
        raise FileNotFoundError(missing)
    if is_adapter_dir(resolve_model_dir(name_or_path)):
        return _load_adapter_policy(Path(resolve_model_dir(name_or_path)), dtype, device, allow_download,
                                    tokenizer_path=tokenizer_path, chat_template=chat_template)
    torch_dtype = resolve_torch_dtype(dtype, name_or_path, allow_download=allow_download)
    if str(name_or_path) in PRESET_OVERRIDES:
        overrides = dict(PRESET_OVERRIDES[str(name_or_path)])
        if tokenizer_path is None and str(name_or_path) in PRESET_VOCABS:
            tok = preset_trimmed_tokenizer(PRESET_VOCABS[str(name_or_path)])
            overrides |= {"vocab_size": len(tok), "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
                          "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>")}
        else:
            tok = load_tokenizer(tokenizer_path or qwen3_tokenizer_source(), allow_download=allow_download)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            config = tiny_qwen3_config(**overrides)
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    else:
        name_or_path = resolve_model_dir(name_or_path)  # a checkpoint dir -> its model/ subfolder
        p = Path(name_or_path).expanduser()
        if p.is_dir() and not (p / "config.json").is_file() and (p / "results.json").is_file():
            ckpts = sorted((p / "checkpoints").glob("step_*")) if (p / "checkpoints").is_dir() else []
            raise FileNotFoundError(
                f"run folder {str(p)!r} has no model/: the run did not finish (a run writes <out>/model at its "
                f"end)" + (f"; its latest checkpoint: {ckpts[-1]}" if ckpts else "; it saved no checkpoints"))
        if p.is_dir() and not (p / "config.json").is_file():
            raise FileNotFoundError(
                f"model folder {str(p)!r} has no config.json; expected a folder written by save_pretrained, "
                f"or an agentrl checkpoint folder (checkpoints/step_N, which holds model/)")
        if p.is_dir():
            check_model_config(p)
        tok = load_tokenizer(tokenizer_path or name_or_path, allow_download=allow_download)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(name_or_path), dtype=torch_dtype, local_files_only=not allow_download
            )
        except OSError as e:
            raise FileNotFoundError(f"could not load model {str(name_or_path)!r}"
                                    f"{_load_hint(p, allow_download)}: {e}") from e
    if chat_template:
        from agentrl.chat.bundled import apply_chat_template

        apply_chat_template(tok, chat_template)
    return model.to(device).eval(), tok


def _load_adapter_policy(folder: Path, dtype: str, device: str, allow_download: bool, *,
                         tokenizer_path: Any, chat_template: str | None) -> tuple[Any, Any]:
    """A LoRA adapter folder (agentrl.models.lora.save_adapter): its base with the adapters merged in, and the
    tokenizer saved beside the adapters (so its chat template too)."""
    from agentrl.models.lora import adapter_base, load_adapter_into

    base, seed = adapter_base(folder)
    model, _ = load_policy(base, "fp32", device, allow_download, seed=seed)  # merged in fp32, then cast
    model = load_adapter_into(model, folder).to(resolve_torch_dtype(dtype, base, allow_download=allow_download))
    # peft froze the base to train the adapters; merged, it is a plain model again, trainable like any other
    # loaded one (`agentrl sft/train --model <LoRA run>` had an empty parameter list)
    model.requires_grad_(True)
    tok = load_tokenizer(tokenizer_path or folder, allow_download=allow_download)
    if chat_template:
        from agentrl.chat.bundled import apply_chat_template

        apply_chat_template(tok, chat_template)
    return model.to(device).eval(), tok
