"""Count flags of sft, smoke and serve are checked when parsed, naming the flag: they were plain `int`, so a zero
or negative count reached a config check that named no flag ("bad SFTConfig: epochs, batch, micro must be >= 1
..."), or failed after the model loaded and --out was made (sft --lora-r -3), or was taken (smoke --show -1)."""

from __future__ import annotations

import pytest

from agentrl.cli import main


@pytest.mark.parametrize("argv, expected", [
    (["sft", "--epochs", "0"], "argument --epochs: expected an integer >= 1, got 0"),
    (["sft", "--batch", "-1"], "argument --batch: expected an integer >= 1, got -1"),
    (["sft", "--micro", "0"], "argument --micro: expected an integer >= 1, got 0"),
    (["sft", "--max-tokens", "0"], "argument --max-tokens: expected an integer >= 1, got 0"),
    (["sft", "--warmup-steps", "-1"], "argument --warmup-steps: expected an integer >= 0, got -1"),
    (["sft", "--lora-r", "-3"], "argument --lora-r: expected an integer >= 0, got -3"),
    (["sft", "--max-turns", "0"], "argument --max-turns: expected an integer >= 1, got 0"),
    (["smoke", "--gen-batch", "0"], "argument --gen-batch: expected an integer >= 1, got 0"),
    (["smoke", "--max-turns", "-2"], "argument --max-turns: expected an integer >= 1, got -2"),
    (["smoke", "--show", "-1"], "argument --show: expected an integer >= 0, got -1"),
    (["serve", "--max-turns", "0"], "argument --max-turns: expected an integer >= 1, got 0"),
    (["serve", "--train-size", "-5"], "argument --train-size: expected an integer >= 0, got -5"),
    (["serve", "--eval-size", "-1"], "argument --eval-size: expected an integer >= 0, got -1"),
    (["serve", "--max-concurrent-envs", "0"], "argument --max-concurrent-envs: expected an integer >= 1, got 0"),
])
def test_a_bad_count_is_refused_at_parse_naming_the_flag(argv, expected, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"agentrl {argv[0]}: error: {expected}"
