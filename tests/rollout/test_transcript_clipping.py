"""Everything a model writes into a tool call is clipped where it is shown: the tool's name, the parser's or the
environment's malformed reason (which quotes the name or the arguments), and non-object arguments, in the plain
transcript, the results file's turn records and the observation the environment sends back."""

from __future__ import annotations

from agentrl.envs import ToolCall, make_env
from agentrl.envs.base import Observation, ToolResult
from agentrl.rollout.trajectory import Turn
from agentrl.rollout.transcript import NAME_CHARS, render_transcript, turn_records
from agentrl.tasks.words import wordle_task


def test_an_unknown_tool_with_a_huge_name_gets_a_short_error():
    env = make_env("wordle")
    env.reset(wordle_task("crane"), seed=0)
    name = "g" * 50_000
    (r,) = env.step([ToolCall(name, {"word": "slate"})]).results
    assert r.status == "malformed" and len(r.content) < 400 and "(+49900 chars)" in r.content
    assert r.call.malformed.startswith("unknown_tool: ") and len(r.call.malformed) < 400
    assert env.stats()["malformed_calls"] == 1  # counted as any unknown tool


def test_transcript_and_turn_records_clip_the_models_call_fields():
    huge = "x" * 30_000
    calls = (ToolCall(huge, {}, raw="", malformed="bad_json: " + huge), ToolCall("n", {}, malformed=huge))
    turn = Turn(completion_ids=(1,), sampler_logprobs=(0.0,), text="t", calls=calls,
                results=(ToolResult(calls[0], "malformed", "Error: bad"),))
    text = render_transcript(Observation("s", "u", []), [turn], "done", 0.0, max_chars=500)
    assert len(text) < 2_000 and "more chars]" in text
    (rec,) = turn_records([turn], max_chars=500)
    ran, not_run = rec["calls"]
    assert not_run["status"] == "not run"
    for c in (ran, not_run):
        assert len(c["malformed"]) < 600
    assert len(ran["name"]) < NAME_CHARS + 40 and ran["name"].startswith("xxx")
    # short fields pass through unchanged
    short = ToolCall("guess", {"word": "a"}, malformed="bad_arguments: 'word' is too short")
    (rec,) = turn_records([Turn((1,), (0.0,), "t", (short,), (ToolResult(short, "malformed", "e"),))])
    assert rec["calls"][0]["name"] == "guess" and rec["calls"][0]["malformed"] == short.malformed
