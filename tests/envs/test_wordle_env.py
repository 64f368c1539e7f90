import random

import pytest

from agentrl.envs import ToolCall, check_env, make_env
from agentrl.envs.experts import play
from agentrl.envs.wordle import feedback, shaped_score, wordle_turns
from agentrl.tasks.words import load_words, wordle_task

C, P, A = "correct", "present", "absent"


@pytest.mark.parametrize("guess,secret,want", [
    ("crane", "crane", (C, C, C, C, C)),
    ("speed", "abide", (A, A, P, A, P)),   # abide has one e: the first e is present, the second absent
    ("eerie", "there", (P, A, P, A, C)),   # two e's in secret: one green (last), one left for the first e
    ("lolly", "hello", (A, P, C, C, A)),   # both l's of hello are green, so the first l is absent
    ("abbey", "babes", (P, P, C, C, A)),
])
def test_feedback_handles_repeated_letters_like_the_game(guess, secret, want):
    assert feedback(guess, secret) == want


def test_shaped_score_formula():
    assert shaped_score((C, P, A, A, A)) == pytest.approx((1 + 0.5) / 5)


def g(word):
    return ToolCall("guess", {"word": word})


def test_solved_game_and_stats():
    env = make_env("wordle")
    env.reset(wordle_task("crane"), seed=0)
    (r,) = env.step([g("slate")]).results
    assert r.status == "ok" and "a correct" in r.content and "s absent" in r.content
    (r,) = env.step([g("CRANE")]).results
    assert env.done and env.end_reason == "solved" and env.terminated and env.reward() == 1.0
    assert env.stats()["guesses"] == 2 and env.stats()["turns"] == 2


def test_invalid_guesses_fail_without_using_a_guess():
    env = make_env("wordle", words=["crane", "slate"], max_calls_per_turn=None)
    env.reset(wordle_task("crane"))
    res = env.step([g("toolong"), g("zzzzz"), g("sl4te"), ToolCall("guess", {}), g("slate")]).results
    assert [r.status for r in res] == ["failed", "failed", "failed", "malformed", "ok"]
    s = env.stats()
    assert s["invalid_guesses"] == 3 and s["guesses"] == 1 and s["malformed_calls"] == 1 and s["failed_calls"] == 3


def test_out_of_guesses_and_shaped_reward():
    plain, shaped = (make_env("wordle", max_calls_per_turn=None, shaped=s) for s in (False, True))
    for env in (plain, shaped):
        env.reset(wordle_task("crane"))
        env.step([g("crank"), g("crank"), g("slate"), g("slate"), g("slate"), g("slate")])
        assert env.end_reason == "out_of_guesses" and env.stats()["repeated_guesses"] == 4
    assert plain.reward() == 0.0
    assert shaped.reward() == pytest.approx(0.5 * 4 / 5)  # crank: four greens


def test_shaped_reward_from_the_run_config():
    """--shaped-reward reaches the env through the registry (a 1.5B's Wordle groups all scored 0 with the
    binary reward, so no update ever ran: results/coder/wordle-1.5b); it is off by default."""
    from agentrl.envs.registry import get_spec
    from agentrl.rl.config import RLConfig

    spec = get_spec("wordle")
    assert spec.kwargs_from_config(RLConfig.from_flat(env="wordle", tasks="wordle").env)["shaped"] is False
    kw = spec.kwargs_from_config(RLConfig.from_flat(env="wordle", tasks="wordle", shaped_reward=True).env)
    env = make_env("wordle", **{**kw, "max_calls_per_turn": None})
    assert env.shaped is True


def test_expert_solves_with_real_word_list_and_check_env_passes():
    words = load_words()
    assert all(len(w) == 5 and w.islower() and w.isascii() for w in words) and "crane" in words
    env = make_env("wordle", words=words)
    solved = [play(env, wordle_task("crane"), wordle_turns(wordle_task("crane"), random.Random(s), words=words))
              for s in range(10)]
    assert sum(solved) >= 7  # a consistent-guess strategy on ~4.7k words usually solves within six guesses
    assert check_env(env, wordle_task("crane"))["reward"] == 1.0


@pytest.mark.parametrize("secret", ["CRANE", "ÄÄÄÄÄ", "cr ne", ["a"] * 5, 12345, None])
def test_a_secret_no_guess_can_match_is_refused_at_reset(secret):
    """A task (a TRL row's task JSON, a task file) with meta secret "CRANE" or "ÄÄÄÄÄ" started a game no guess
    could win (guesses are lowered ascii letters), and 12345 or null raised a TypeError; each is a ValueError."""
    from dataclasses import replace

    task = replace(wordle_task("crane"), meta={"secret": secret})
    with pytest.raises(ValueError, match=r"meta\['secret'\] .*expected five lower-case ascii letters"):
        make_env("wordle").reset(task)
