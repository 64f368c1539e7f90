"""The trimmed tokenizer (agentrl.chat.trim) and the demo model built on it ("demo-qwen3").

Hand-worked BPE on a four-merge table; then the real Qwen3 tokenizer: the demo's trimmed copy segments the
environment's prompts and the experts' episodes of the demo's own tasks exactly as Qwen3 does, round-trips
any text, keeps the chat template (the start-up token-in/token-out check passes) and saves/loads as an
ordinary HF tokenizer next to an ordinary Qwen3ForCausalLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.chat.trim import (
    bpe_symbols,
    byte_level_alphabet,
    merge_closure,
    trimmed_tokenizer_files,
    trimmed_vocab,
)

MERGES = [("a", "b"), ("c", "d"), ("ab", "cd"), ("b", "c")]


def test_bpe_merges_the_lowest_ranked_pair_first_and_records_every_symbol():
    # "abcd": (a,b) rank 0 -> ab c d; (c,d) rank 1 -> ab cd; (ab,cd) rank 2 -> abcd. (b,c) never applies.
    final, seen = bpe_symbols("abcd", {m: i for i, m in enumerate(MERGES)})
    assert final == ["abcd"] and seen == {"a", "b", "c", "d", "ab", "cd", "abcd"}
    # "bcd": (c,d) rank 1 beats (b,c) rank 3 -> b cd; no merge (b,cd) -> two symbols
    assert bpe_symbols("bcd", {m: i for i, m in enumerate(MERGES)})[0] == ["b", "cd"]


def test_merge_closure_keeps_the_path_and_refuses_a_token_the_merges_do_not_build():
    assert merge_closure(["abcd"], MERGES) == {"a", "b", "c", "d", "ab", "cd", "abcd"}
    assert merge_closure(["ab", "d"], MERGES) == {"a", "b", "ab", "d"}
    assert merge_closure(["bc"], MERGES) == {"b", "c", "bc"}  # alone, "bc" is built by (b, c)
    with pytest.raises(ValueError, match="'bc' is not built by the merges"):
        merge_closure(["bc"], MERGES[:3])


def test_byte_level_alphabet_is_tokenizers_own():
    from tokenizers.pre_tokenizers import ByteLevel

    alpha = byte_level_alphabet()
    assert len(alpha) == len(set(alpha)) == 256 and set(alpha) == set(ByteLevel.alphabet())
    assert alpha[ord("A")] == "A" and alpha[ord(" ")] == "Ġ" and alpha[ord("\n")] == "Ċ"


@pytest.fixture(scope="module")
def qwen3():
    from agentrl.models.load import load_tokenizer
    from agentrl.models.presets import qwen3_tokenizer_source as _qwen3_tokenizer_source

    return load_tokenizer(_qwen3_tokenizer_source())


@pytest.fixture(scope="module")
def demo_tok():
    from agentrl.models.load import preset_trimmed_tokenizer
    from agentrl.models.presets import PRESET_VOCABS

    return preset_trimmed_tokenizer(PRESET_VOCABS["demo-qwen3"])


def _segments(tok, text: str) -> list[str]:
    return tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])


def test_trimmed_vocab_of_a_text_segments_it_as_the_source(qwen3, tmp_path):
    """Trim to one sentence's tokens: that sentence keeps its segmentation; other text round-trips in bytes."""
    from agentrl.models.load import load_tokenizer
    from agentrl.models.presets import qwen3_tokenizer_source as _qwen3_tokenizer_source

    src = _qwen3_tokenizer_source()
    tj = json.loads((Path(src) / "tokenizer.json").read_text(encoding="utf-8"))
    text = "def tawny_thistle(nums):\n    return max(nums) * 4  # résumé"
    keep = trimmed_vocab(tj, qwen3(text, add_special_tokens=False)["input_ids"])
    assert 256 < len(keep) < 400  # the bytes, the used tokens and their merge paths only
    tok = load_tokenizer(trimmed_tokenizer_files(src, keep, tmp_path / "t"))
    assert len(tok) == len(keep) + len(tj["added_tokens"])
    assert _segments(tok, text) == _segments(qwen3, text)
    other = "Über 🙂 naïve café — 漢字 \t\r\n"
    ids = tok(other, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == other and max(ids) < len(keep)
    assert tok.convert_tokens_to_ids("<|im_end|>") == len(keep) + 2  # added tokens follow, in their order


def test_demo_tokenizer_round_trips_any_text_and_keeps_the_chat_tokens(demo_tok, qwen3):
    assert len(demo_tok) < 2_000 and demo_tok.chat_template == qwen3.chat_template
    for text in ("Über 🙂 naïve café — 漢字", "x = {'a': [1, 2.5e-3]}\n\tprint(x)\r\n", "\x00\x7f ~`|\\"):
        assert demo_tok.decode(demo_tok(text, add_special_tokens=False)["input_ids"]) == text
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"):
        assert demo_tok.convert_ids_to_tokens(demo_tok.convert_tokens_to_ids(special)) == special
    assert demo_tok.pad_token == "<|endoftext|>" and demo_tok.padding_side == "left"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demo_tasks_and_expert_episodes_tokenize_as_qwen3(demo_tok, qwen3, seed):
    """Every prompt and expert episode of the demo's tasks (warm-start tasks, held-out tasks) at seeds 0-2:
    the same token strings as Qwen3, and decode(encode(x)) == x."""
    from agentrl.rl.config import RLConfig
    from agentrl.sandbox import Sandbox
    from agentrl.sft.data import expert_trajectories
    from agentrl.tasks.sets import task_sets

    cfg = RLConfig.from_preset("demo", seed=seed)
    sets = task_sets("bugfix", families=cfg.tasks.families, eval_size=cfg.eval.size, seed=seed)
    tasks = list(sets.train[: cfg.warm_start.tasks]) + list(sets.heldout)
    trajs = expert_trajectories("edit-menu", tasks, qwen3, random_op=True, seed=seed, sandbox=Sandbox(), check=False)
    for tr in trajs:
        text = qwen3.decode(list(tr.prompt_ids) + list(tr.completion_ids))
        ids = demo_tok(text, add_special_tokens=False)["input_ids"]
        assert demo_tok.decode(ids) == text
        assert demo_tok.convert_ids_to_tokens(ids) == qwen3.convert_ids_to_tokens(
            list(tr.prompt_ids) + list(tr.completion_ids)), tr.task_id


def test_demo_model_passes_the_start_up_template_check_and_saves_as_plain_hf(tmp_path):
    from agentrl.chat.tito import assert_tito_consistent
    from agentrl.envs import make_env
    from agentrl.models.load import load_policy
    from agentrl.tasks.sets import task_sets

    model, tok = load_policy("demo-qwen3")
    assert model.config.vocab_size == len(tok) and model.get_input_embeddings().weight.shape[0] == len(tok)
    assert model.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert sum(p.numel() for p in model.parameters()) < 300_000  # tiny-qwen3's trunk, a 1.6k-row embedding
    obs = make_env("edit-menu").reset(task_sets("bugfix", families="minmax", eval_size=1).heldout[0])
    assert_tito_consistent(tok, obs)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2, tok2 = load_policy(tmp_path)
    assert type(model2).__name__ == "Qwen3ForCausalLM" and len(tok2) == len(tok)
    text = obs.user
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
