"""Tests of bench/'s library-free helpers: bench/ is put on sys.path the way `python bench/<script>.py` has it."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
