"""Write a tiny llama-architecture GGUF file with the `gguf` package's own writer (for conversion tests).

2 layers, hidden 64, a byte-level BPE vocabulary of the 256 byte symbols, a few merges and the ChatML
special tokens, random weights; the large matrices are stored Q8_0-quantized (as llama.cpp writes them),
the norms F32, so loading it exercises transformers' dequantization path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode table: the printable symbol of each byte value 0..255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def write_tiny_gguf(path: str | Path, *, seed: int = 0, quantize: bool = True) -> dict[str, np.ndarray]:
    """Write the file; returns the float32 weights as written (before quantization), by GGUF name."""
    import gguf

    rng = np.random.default_rng(seed)
    hidden, ff, layers, heads, kv_heads = 64, 128, 2, 4, 2
    head_dim = hidden // heads
    merges = ["Ġ t", "Ġ a", "h e", "i n"]
    tokens = list(SPECIALS) + _byte_symbols() + [m.replace(" ", "") for m in merges]
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(layers)
    w.add_context_length(4096)  # room for an edit-menu prompt (~1,500 tokens) and its turns
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.ffn_norm.weight": (hidden,),
                   f"blk.{i}.attn_q.weight": (hidden, hidden), f"blk.{i}.attn_k.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_v.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_output.weight": (hidden, hidden), f"blk.{i}.ffn_gate.weight": (ff, hidden),
                   f"blk.{i}.ffn_up.weight": (ff, hidden), f"blk.{i}.ffn_down.weight": (hidden, ff)}
    weights = {}
    for name, shape in shapes.items():
        a = (1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else 0.05 * rng.standard_normal(shape))
        a = a.astype(np.float32)
        weights[name] = a
        if quantize and len(shape) == 2:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights
