"""The Wordle environment: a `guess(word)` tool, per-letter feedback, six guesses, reward for solving.

Not a word-list loader (agentrl.tasks.words) and not a solver (experts.py plays scripted games).
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Iterable
from typing import Any

from agentrl.envs.base import ToolCall
from agentrl.envs.experts import call
from agentrl.envs.registry import EnvSpec
from agentrl.envs.toolenv import ToolEnv, ToolRejected, ToolSpec, object_schema
from agentrl.tasks.task import Task
from agentrl.tasks.words import WORD_LENGTH, is_secret, wordle_task  # noqa: F401  (re-exported)

SYSTEM_PROMPT = (
    "You are playing Wordle. Guess the secret five-letter English word with the guess tool. After each "
    "guess you get feedback per letter: correct (right letter, right place), present (in the word, "
    "elsewhere), absent (not in the word, or no more copies of it). You have {max_guesses} guesses."
)


def feedback(guess: str, secret: str) -> tuple[str, ...]:
    """Per-letter feedback of `guess` against `secret`, as in the real game (repeated letters included).

    Greens are marked first; then, left to right, a letter is "present" only while the secret still
    has unmatched copies of it, else "absent" (so "speed" vs "abide" gives one present e, one absent e).

    Returns:
        tuple of len(guess) strings, each "correct" | "present" | "absent".
    """
    if len(guess) != len(secret):
        raise ValueError(f"guess {guess!r} and secret have different lengths")
    out = ["absent"] * len(guess)
    unmatched = Counter(s for g, s in zip(guess, secret, strict=False) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=False)):
        if g == s:
            out[i] = "correct"
        elif unmatched[g] > 0:
            out[i] = "present"
            unmatched[g] -= 1
    return tuple(out)


def shaped_score(marks: tuple[str, ...]) -> float:
    """Partial credit of one unsolved guess: (greens + 0.5 * yellows) / 5, in [0, 1]."""
    return (marks.count("correct") + 0.5 * marks.count("present")) / len(marks)


class WordleEnv(ToolEnv):
    """Wordle over `agentrl.tasks.words.wordle_task` tasks.

    Reward: 1.0 for solving within `max_guesses`, else 0.0. With `shaped=True` an unsolved game scores
    0.5 * max over its guesses of shaped_score (greens + 0.5 * yellows, over 5), so it stays below
    any solved game; a solved game still scores 1.0. Invalid guesses (wrong length, non-letters, or
    not in `words` when given) fail and do not use a guess, as in the real game; they do use the turn.

    Args:
        max_guesses: guesses per game (default 6).
        max_turns: assistant turns per episode (default: max_guesses + 2, room for invalid guesses).
        words: accepted guesses (default: any five lower-case letters).
        shaped: use the shaped reward.
        sandbox: accepted so that every environment takes `make_env(name, sandbox=...)`; unused.
        rules: ToolEnv's max_calls_per_turn (default 4) and max_observation_chars (default 4000).

    Ends: "solved" and "out_of_guesses" (the game is over: terminated), "final_answer" (a reply
    without a guess; terminated), "out_of_turns" (truncated).

    Raises (reset): ValueError: the task's meta["secret"] is not five lower-case ascii letters.
    """

    name = "wordle"

    def __init__(self, max_guesses: int = 6, max_turns: int | None = None, words: Iterable[str] | None = None,
                 shaped: bool = False, sandbox: object = None, **rules: Any):
        super().__init__(max_turns=max_turns or max_guesses + 2, **rules)
        self.max_guesses = max_guesses
        self.words = frozenset(words) if words is not None else None
        self.shaped = shaped
        self.guesses: list[tuple[str, tuple[str, ...]]] = []

    def _specs(self) -> list[ToolSpec]:
        word = {"type": "string", "description": "A five-letter English word in lower case."}
        return [ToolSpec("guess", "Guess the secret word; returns feedback per letter.",
                         object_schema({"word": word}, ("word",)), self._guess)]

    def _stat_names(self) -> tuple[str, ...]:
        return ("guesses", "invalid_guesses", "repeated_guesses")

    def _reset_episode(self, task: Task, seed: int | None) -> tuple[str, str]:
        secret = task.meta.get("secret", "")
        if not is_secret(secret):  # "CRANE" or "ÄÄÄÄÄ" was a game no guess could win; 12345 a TypeError
            raise ValueError(f"task {task.id!r} has meta['secret'] {str(secret)[:40]!r}; expected five lower-case "
                             "ascii letters")
        self.secret = secret
        self.guesses = []
        return SYSTEM_PROMPT.format(max_guesses=self.max_guesses), "Guess the secret word."

    def _guess(self, word: str) -> str:
        w = word.strip().lower()
        if len(w) != WORD_LENGTH or not (w.isascii() and w.isalpha()):
            self._bump("invalid_guesses")
            raise ToolRejected(f"{word!r} is not a five-letter word; this did not use a guess")
        if self.words is not None and w not in self.words:
            self._bump("invalid_guesses")
            raise ToolRejected(f"{w!r} is not in the word list; this did not use a guess")
        if any(w == g for g, _ in self.guesses):
            self._bump("repeated_guesses")
        marks = feedback(w, self.secret)
        self.guesses.append((w, marks))
        self._bump("guesses")
        lines = [f"Guess {len(self.guesses)}/{self.max_guesses}: {w}"]
        lines += [f"{c} {m}" for c, m in zip(w, marks, strict=False)]
        if w == self.secret:
            self._end("solved")
            lines.append("Solved!")
        elif len(self.guesses) >= self.max_guesses:
            self._end("out_of_guesses")
            lines.append(f"Out of guesses. The word was {self.secret}.")
        return "\n".join(lines)

    def _score(self) -> float:
        if any(g == self.secret for g, _ in self.guesses):
            return 1.0
        if self.shaped and self.guesses:
            return 0.5 * max(shaped_score(m) for _, m in self.guesses)
        return 0.0


def wordle_turns(task: Task, rng: random.Random, random_op: bool = False, words: list[str] | None = None,
                 max_guesses: int = 6) -> list[list[ToolCall]]:
    """The scripted expert: guess a random word consistent with all feedback so far (simulated against
    the known secret). Without `words` the candidate pool is the secret alone (a one-guess game)."""
    secret = task.meta["secret"]
    pool = sorted(set(words or []) | {secret})
    turns = []
    for _ in range(max_guesses):
        guess = rng.choice(pool)
        turns.append([call("guess", word=guess)])
        if guess == secret:
            break
        marks = feedback(guess, secret)
        pool = [w for w in pool if feedback(guess, w) == marks]
    return turns


def registry_expert(task: Task, rng: random.Random, random_op: bool = False) -> list[list[ToolCall]]:
    """The expert as the registry plays it (`agentrl sft --env wordle`, check): `wordle_turns` over the
    default word list, so its games are real games (without a list it would guess the secret at once).

    Raises:
        FileNotFoundError: no word list (Debian's `wamerican`, or $AGENTRL_WORDS).
    """
    return wordle_turns(task, rng, random_op=random_op, words=sorted(default_words()))


@functools.cache
def default_words() -> frozenset[str]:
    """The default Wordle dictionary (agentrl.tasks.words.load_words), loaded once per process."""
    from agentrl.tasks.words import load_words

    return frozenset(load_words())


def _config_kwargs(cfg: Any) -> dict[str, Any]:
    """A run gets the word list, so a guess that is not a word is refused as in the real game, and the env
    section's shaped_reward (--shaped-reward)."""
    return {"words": default_words(), "shaped": bool(getattr(cfg, "shaped_reward", False))}


ENV_SPEC = EnvSpec(
    name="wordle", cls=WordleEnv, expert=registry_expert,
    summary="guess a five-letter word in six guesses with per-letter feedback",
    task_sources="Wordle words (--tasks wordle)",
    accepts=lambda task: task.family == "wordle",
    end_reasons=("solved", "out_of_guesses", "final_answer", "out_of_turns"),
    config_kwargs=_config_kwargs,
    default_tasks="wordle",
)
