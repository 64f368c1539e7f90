"""PolicyConfig: which model a command loads and how (model, tokenizer, template, dtype, device, thinking mode,
downloads). One section of RLConfig (`cfg.policy`) and the whole model config of smoke, sft and serve-policy.
Not the loader (agentrl.models.load) and not the run's other settings (agentrl.rl.config).

Standard library and agentrl.models.dtypes only: the CLI builds its flags from these fields without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.bundled import BUNDLED
from agentrl.models.dtypes import DTYPE_HELP, DTYPES, dtype_arg

# how a boolean flag's value may be spelled (any case): `--flag yes`, `--compile-layers true`
TRUE_WORDS: tuple[str, ...] = ("true", "t", "yes", "y", "1")
FALSE_WORDS: tuple[str, ...] = ("false", "f", "no", "n", "0")


def flag_field(default: Any, help: str, choices: tuple[str, ...] | None = None,  # noqa: A002 - HfArgumentParser's key
               type: Any = None, flat: str | None = None,  # noqa: A002 - argparse's keyword
               bools: tuple[str, str] | None = None, switch: tuple[str | None, str] | None = None) -> Any:
    """A config field whose metadata becomes `add_argument(help=..., choices=..., type=...)` (as in
    HfArgumentParser): `choices` from a registry (samplers, estimators, dtypes), `type` a converter run
    before the choices check (dtype aliases -> the canonical name), `flat` the field's flat name (its flag
    and its key in results files) where it differs from the field name (`cfg.env.name` is `--env`),
    `bools` the values a bare `--flag` and `--no-flag` set, for a field with choices that was a boolean
    flag (compile_layers: ("on", "off")), `switch` the choices that true and false (and their spellings: a
    config file's YAML on/off/yes/no, JSON's 1/0) read as, (None, off) where no choice means on
    (agentrl.rl.sections.read_switch; RLConfig applies it to every such field, and it is the flag's `type` when
    none is given)."""
    meta: dict[str, Any] = {"help": help}
    if choices is not None:
        meta["choices"] = list(choices)
    if type is not None:
        meta["type"] = type
    if flat is not None:
        meta["flat"] = flat
    if bools is not None:
        meta["bools"] = bools
    if switch is not None:
        meta["switch"] = switch
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class PolicyConfig:
    """The policy model: what to load, in which dtype on which device, with which tokenizer and template.

    `agentrl train` / `eval` read it as `cfg.policy`; `agentrl smoke`, `sft` and `serve-policy` take it as
    their model settings (the same flags: agentrl.cli.flags.add_policy_flags). Empty strings mean "the
    model's own" (tokenizer, chat_template).
    """

    model: str = flag_field("tiny-qwen3", "HF causal LM: local path, HF-cache repo id, 'tiny-qwen3' (random tiny "
                                          "Qwen3), 'demo-qwen3' (the same with the demo's trimmed vocabulary), or a "
                                          "fetched model: 'smollm2-135m-instruct', 'qwen2.5-coder-0.5b-instruct', "
                                          "'qwen2.5-coder-1.5b-instruct' (`agentrl assets fetch NAME`).")
    tokenizer: str = flag_field("", "Tokenizer path if it is not beside the model (empty = the model's own).")
    chat_template: str = flag_field("", "Chat template replacing the model's own, for templates without tool "
                                        f"support: a bundled name ({' | '.join(BUNDLED)}) or a .jinja path (empty = the "
                                        "model's own). Saved with checkpoints, so a trained model reloads with it.")
    dtype: str = flag_field("fp32", DTYPE_HELP + " Training refuses fp16 (no loss scaling); eval takes it.", DTYPES,
                            dtype_arg)
    device: str = flag_field("auto", "Torch device: auto (cuda if available, else cpu) | cpu | cuda | cuda:N.")
    thinking: bool = flag_field(False, "Thinking mode of templates that have one (Qwen3 enable_thinking): the policy "
                                       "writes its own <think> block each turn, kept in the rows as sampled; "
                                       "--no-thinking (default): the template's empty think block ends the prompt.")
    allow_download: bool = flag_field(False, "Let transformers download a missing model from the HF hub (default: "
                                             "local only).")
    tf32: bool = flag_field(False, "Let CUDA run fp32 matmuls and convolutions on TF32 tensor cores (transformers' "
                                   "TrainingArguments.tf32; no effect on the CPU). Weights and optimizer state stay "
                                   "fp32; matmul inputs keep 10 mantissa bits, so sampler and trainer log-probs agree "
                                   "less closely than at full fp32. Speeds fp32 prefill of long prompts (an opencode "
                                   "call's 4.7k tokens) several times over.")

    def load(self, device: str, *, dtype: str | None = None, seed: int = 0) -> tuple[Any, Any]:
        """(model, tokenizer): agentrl.models.load.load_policy of this model on `device` (a resolved torch
        device) in `dtype` (default: self.dtype; pass the resolved one for "auto"), with this tokenizer and
        template ("" = the model's own) and the download permission."""
        from agentrl.models.load import load_policy

        if self.tf32:
            set_tf32(True)
        return load_policy(self.model, dtype or self.dtype, device, self.allow_download,
                           tokenizer_path=self.tokenizer or None, seed=seed,
                           chat_template=self.chat_template or None)


def set_tf32(on: bool) -> None:
    """Allow (or forbid) TF32 tensor cores for CUDA fp32 matmuls and cuDNN convolutions, process-wide, as
    transformers' TrainingArguments(tf32=...) does (torch.backends.cuda.matmul.allow_tf32 and
    torch.backends.cudnn.allow_tf32). TF32 keeps fp32's exponent range with a 10-bit mantissa in the
    multiply (NVIDIA Ampere and later); CPU matmuls are unaffected."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
