"""Policies from outside the HF cache: fetched pretrained models (GGUF -> HF folder) and LoRA adapters."""
