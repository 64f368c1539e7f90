"""Wordle word lists and tasks: five-letter lower-case ascii words from a file (default Debian's wamerican).

Not the game (agentrl.envs.wordle).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from agentrl.preflight import check_input_file
from agentrl.tasks.task import Task

WORD_LENGTH = 5
DEFAULT_WORDS_PATH = "/usr/share/dict/words"


def load_words(path: str | os.PathLike | None = None) -> list[str]:
    """Sorted unique five-letter lower-case ascii words of a one-word-a-line file.

    Args:
        path: the word file; default $AGENTRL_WORDS or /usr/share/dict/words (Debian `wamerican`).

    Raises:
        FileNotFoundError: the file is missing (names the path and the Debian package).
        ValueError: the path is a directory or not a regular file; the file holds no five-letter words.
    """
    p = Path(path or os.environ.get("AGENTRL_WORDS") or DEFAULT_WORDS_PATH)
    if not p.exists():
        raise FileNotFoundError(f"word list {str(p)!r} not found; install Debian's `wamerican` or pass a path")
    check_input_file(p, "word list", "a file of one word a line")  # a directory read as "not found"
    words = sorted({w for w in (line.strip() for line in p.read_text(encoding="utf-8-sig", errors="replace").splitlines()) if is_secret(w)})
    if not words:
        raise ValueError(f"word list {str(p)!r} has no five-letter lower-case ascii words")
    return words


def word_split(word: str, heldout_percent: int = 10) -> str:
    """"heldout" for a stable `heldout_percent`% of words (sha256 of the word), else "train"."""
    h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
    return "heldout" if h % 100 < heldout_percent else "train"


def is_secret(word: object) -> bool:
    """Whether `word` can be a Wordle secret: five lower-case ascii letters (what a guess is lowered to)."""
    return isinstance(word, str) and len(word) == WORD_LENGTH and word.isascii() and word.isalpha() \
        and word.islower()


def wordle_task(secret: str, split: str = "train") -> Task:
    """A Task for one secret word (`meta["secret"]`; the reference solution is the word itself).

    Raises:
        ValueError: `secret` is not five lower-case ascii letters.
    """
    if not is_secret(secret):
        raise ValueError(f"a Wordle secret must be {WORD_LENGTH} lower-case ascii letters, got {secret!r}")
    return Task(id=f"wordle-{secret}", family="wordle", split=split, files={}, entry="guess", source_file="",
                public_tests=(), hidden_tests=(), reference=secret, meta={"secret": secret})


def wordle_tasks(path: str | os.PathLike | None = None, split: str | None = None) -> list[Task]:
    """One task per word of `load_words(path)`, split by `word_split`; only `split` if given."""
    tasks = [wordle_task(w, word_split(w)) for w in load_words(path)]
    return [t for t in tasks if split is None or t.split == split]
