"""bench_rollout's greedy graphs-vs-eager comparison (equal up to each row's first tied top logit) and its
target figures' naming of the decode attention."""

from bench_rollout import greedy_agreement, targets

from agentrl.rollout.hf_sampler import Sample


def s(ids, logprobs):
    return Sample(tuple(ids), tuple(logprobs), hit_token_limit=True)


def test_rows_agreeing_until_a_tie_count_as_equal_and_a_difference_before_it_does_not():
    a = [s([1, 2, 3, 4], [0, 0, -0.693, 0]), s([5, 6], [0, 0])]
    b = [s([1, 2, 9, 8], [0, 0, -0.693, 0]), s([5, 6], [0, 0])]
    assert greedy_agreement(a, b) == (True, 1, 4)  # row 0 compared on its 2 tokens before the tie, row 1 on 2
    c = [s([1, 7, 3, 4], [0, 0, -0.693, 0]), s([5, 6], [0, 0])]
    assert greedy_agreement(a, c) == (False, 1, 4)
    d = [s([1, 2, 3, 4], [0, 0, 0, 0]), s([5, 0], [0, 0])]  # no tie anywhere: every token compared
    assert greedy_agreement(d, d) == (True, 0, 6) and greedy_agreement(d, a[:1] + d[1:])[0] is True
    assert greedy_agreement(d, [d[0], s([5, 6], [0, 0])]) == (False, 0, 6)


def test_the_default_attentions_figures_are_untagged_and_the_others_named():
    rows = [{"batch": b, "attn": a, "frac_bound": f, "ratio": 9.0} for a, f in (("triton", 0.6), ("matmul", 0.3))
            for b in (64, 128, 256)]
    figs = {t["figure"]: t["value"] for t in targets(rows, "bf16", default_attention="triton")}
    assert figs["decode-only fraction of the bandwidth bound at batch 64"] == 0.6
    assert figs["decode-only fraction of the bandwidth bound at batch 64 (decode_attention=matmul)"] == 0.3
    old = {t["figure"] for t in targets(rows)}  # tables written before 2026-12-04: matmul was the default
    assert "decode-only fraction of the bandwidth bound at batch 64 (decode_attention=triton)" in old
