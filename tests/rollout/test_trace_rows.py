"""Rows rebuilt from black-box traces: recorded traces (fixtures/) and hand-built ones."""

import json
from pathlib import Path

import pytest

from agentrl.rollout.trace import Trace, TraceCall, rows_from_trace, side_calls

FIX = Path(__file__).parent / "fixtures"


def load(name: str) -> Trace:
    return Trace.from_dict(json.loads((FIX / name).read_text()))


def check_row_invariants(row, calls_by_index):
    assert len(row.completion_ids) == len(row.policy_mask) == len(row.sampler_logprobs)
    ids = list(row.prompt_ids) + list(row.completion_ids)
    last = calls_by_index[row.calls[-1]]
    assert ids == list(last.prompt_ids) + list(last.completion_ids)  # the row is the last call's full context
    sampled = [t for t, m in zip(row.completion_ids, row.policy_mask, strict=True) if m]
    assert sampled == [t for i in row.calls for t in calls_by_index[i].completion_ids]
    lps = [lp for lp, m in zip(row.sampler_logprobs, row.policy_mask, strict=True) if m]
    assert lps == [lp for i in row.calls for lp in calls_by_index[i].logprobs]
    assert all(lp == 0.0 for lp, m in zip(row.sampler_logprobs, row.policy_mask, strict=True) if not m)


def test_recorded_opencode_trace_is_one_row_without_the_title_call():
    tr = load("opencode_trace.json")
    by = {c.index: c for c in tr.calls}
    assert side_calls(tr.calls) == {0}  # opencode's title generation: no tools
    assert not by[0].has_tools and by[1].has_tools and by[2].extends_call == 1
    rows = rows_from_trace(tr)
    assert [r.calls for r in rows] == [(1, 2)]
    check_row_invariants(rows[0], by)
    gap = len(by[2].prompt_ids) - len(by[1].prompt_ids) - len(by[1].completion_ids)
    assert gap > 0  # the tool result and the next assistant header, mask 0
    assert rows[0].num_policy_tokens == len(by[1].completion_ids) + len(by[2].completion_ids)
    assert rows[0].policy_mask[: len(by[1].completion_ids)] == (1,) * len(by[1].completion_ids)
    assert rows[0].policy_mask[len(by[1].completion_ids):][:gap] == (0,) * gap


def test_recorded_history_rewrite_starts_a_new_row_and_side_call_is_left_out():
    tr = load("rewrite_trace.json")
    by = {c.index: c for c in tr.calls}
    rows = rows_from_trace(tr)
    assert [r.calls for r in rows] == [(0, 1), (2,)]
    assert side_calls(tr.calls) == {3}
    for r in rows:
        check_row_invariants(r, by)
    assert sum(r.num_policy_tokens for r in rows) == sum(len(by[i].completion_ids) for i in (0, 1, 2))


def call(i, prompt, completion, *, tools=True, version=0):
    return TraceCall(index=i, prompt_ids=tuple(prompt), completion_ids=tuple(completion),
                     logprobs=tuple(-0.1 * (k + 1) for k in range(len(completion))), finish_reason="stop",
                     has_tools=tools, policy_version=version)


def test_a_call_may_continue_an_older_row_after_a_rewrite():
    a = call(0, [1, 2], [3, 4])
    b = call(1, [9, 9], [5])  # rewrite: new row
    c = call(2, [1, 2, 3, 4, 7], [8], version=1)  # continues row 0, not the latest row
    rows = rows_from_trace([a, b, c])
    assert [r.calls for r in rows] == [(0, 2), (1,)]
    assert rows[0].completion_ids == (3, 4, 7, 8)
    assert rows[0].policy_mask == (1, 1, 0, 1)
    assert rows[0].sampler_logprobs == pytest.approx((-0.1, -0.2, 0.0, -0.1))
    assert rows[0].policy_versions == (0, 1)


def test_prefix_must_match_token_for_token():
    a = call(0, [1, 2], [3, 4])
    b = call(1, [1, 2, 3, 5, 6], [7])  # differs at position 3
    assert [r.calls for r in rows_from_trace([a, b])] == [(0,), (1,)]


def test_no_tools_anywhere_means_no_side_calls():
    calls = [call(0, [1], [2], tools=False), call(1, [1, 2, 3], [4], tools=False)]
    assert side_calls(calls) == set()
    assert [r.calls for r in rows_from_trace(calls)] == [(0, 1)]


def test_trace_round_trips_through_json():
    tr = Trace("r", (call(0, [1], [2, 3]),), budget_exceeded="max_calls", refused=2)
    assert Trace.from_dict(json.loads(json.dumps(tr.to_dict()))) == tr


@pytest.mark.parametrize("kw", [dict(logprobs=(0.0,)), dict(finish_reason="done"), dict(prompt_ids=())])
def test_trace_call_rejects_bad_records(kw):
    base = dict(index=0, prompt_ids=(1,), completion_ids=(2, 3), logprobs=(0.0, 0.0), finish_reason="stop")
    with pytest.raises(ValueError):
        TraceCall(**{**base, **kw})


def test_expand_rows_gives_every_row_its_episodes_advantage():
    from agentrl.rollout.trace import TraceRow, expand_rows
    from agentrl.rollout.trajectory import Trajectory

    extra = TraceRow((9, 9), (5, 6), (1, 0), (-0.5, 0.0), (2,), (3,))
    a = Trajectory("t", 0, (1, 2), (3,), (1,), (-0.1,), 1.0, end_reason="harness_exit", policy_version=2,
                   meta={"extra_rows": [extra]})
    b = Trajectory("t", 0, (1, 2), (4,), (1,), (-0.2,), 0.0, end_reason="harness_exit")
    rows, adv = expand_rows([a, b], [0.7, -0.7])
    assert adv == [0.7, 0.7, -0.7]
    assert rows[0] is a and rows[2] is b
    assert rows[1].prompt_ids == (9, 9) and rows[1].policy_mask == (1, 0) and rows[1].reward == 1.0
    assert rows[1].group_id == 0 and rows[1].policy_version == 3
