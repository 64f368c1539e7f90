import json

import pytest

from agentrl.tasks import heldout_tasks, load_tasks, make_tasks, save_tasks
from agentrl.tasks.jsonl import TASK_SCHEMA, task_to_dict


def _lines(tmp_path, tasks):
    path = tmp_path / "tasks.jsonl"
    save_tasks(tasks, path)
    return path, path.read_text().splitlines()


def test_round_trip(tmp_path):
    tasks = make_tasks(40) + heldout_tasks()
    path, lines = _lines(tmp_path, tasks)
    assert len(lines) == len(tasks)
    assert load_tasks(path) == tasks


def test_schema_names_every_task_field():
    assert set(TASK_SCHEMA["properties"]) == set(task_to_dict(make_tasks(1)[0]))


@pytest.mark.parametrize("edit, pattern", [
    (lambda d: d.pop("hidden_tests"), r":3: field 'hidden_tests': 'hidden_tests' is a required property"),
    (lambda d: d.update(public_tests="assert True"), r":3: field 'public_tests': .* is not of type 'array'"),
    (lambda d: d["edit_ops"][0].update(correct="yes"), r":3: field 'edit_ops\.0\.correct': 'yes' is not of type 'boolean'"),
    (lambda d: d.update(files={"a.py": 3}), r":3: field 'files\.a\.py': 3 is not of type 'string'"),
    (lambda d: d.update(extra=1), r":3: field '\(top level\)': Additional properties"),
])
def test_bad_field_names_line_and_field(tmp_path, edit, pattern):
    path, lines = _lines(tmp_path, make_tasks(4))
    data = json.loads(lines[2])
    edit(data)
    lines[2] = json.dumps(data)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=pattern):
        load_tasks(path)


@pytest.mark.parametrize("edit, pattern", [
    (lambda d: d["files"].update({"/tmp/evil.py": "x"}), r":3: field 'files\./tmp/evil\.py': .*relative path inside"),
    (lambda d: d["files"].update({"../../evil.py": "x"}), r":3: field 'files\.\.\./\.\./evil\.py': .*relative path"),
    (lambda d: d["files"].update({"d/" * 100 + "x.py": "x"}), r":3: field 'files\.d/d/.*deeper than"),
    (lambda d: d["files"].update({"a" * 300 + ".py": "x"}), r":3: field 'files\.a+': .*longer than 255 bytes"),
    (lambda d: d["files"].update({"a\x00.py": "x"}), r":3: field 'files\.a.*: .*control character"),
    (lambda d: d.update(source_file="my-module.py"), r":3: field 'source_file': .*not an importable \.py module"),
    (lambda d: d.update(source_file="notes.txt"), r":3: field 'source_file': .*not an importable \.py module"),
    (lambda d: d.update(entry="not a name!"), r":3: field 'entry': 'not a name!' is not a Python function name"),
    # keywords match the name pattern but no `def` or `import` takes them: every test failed, every episode a 0
    (lambda d: d.update(entry="class"), r":3: field 'entry': 'class' is not a Python function name \(a keyword\)"),
    (lambda d: d.update(source_file="lambda.py"), r":3: field 'source_file': 'lambda\.py' is not an importable"),
    (lambda d: d.update(source_file="pkg/None.py"), r":3: field 'source_file': 'pkg/None\.py' is not an importable"),
    (lambda d: d.update(hidden_tests=[]), r":3: field 'hidden_tests': no hidden tests; .*every episode would score 0"),
    (lambda d: d["hidden_tests"].append("  \n"), r":3: field 'hidden_tests\.\d+': blank test snippet; it passes whatever"),
    # lone surrogates (JSON \ud800 escapes): they loaded, and every episode failed in the sandbox as unscorable
    (lambda d: d["files"].update({d["source_file"]: "x = '\ud800'\n"}), r":3: field 'files\.\w+\.py': .*lone surrogate"),
    (lambda d: d["hidden_tests"].append("assert '\udcff'"), r":3: field 'hidden_tests\.\d+': .*lone surrogate"),
    (lambda d: d.update(meta={"k\udfff": 1}), r":3: field 'meta\.k.*udfff': .*lone surrogate"),
    (lambda d: d.update(reference="\udc80"), r":3: field 'reference': .*lone surrogate"),
    # an edit menu naming two ops alike: the menu listed the name twice, `edit` applied the last of them, and the
    # scripted expert's correct op could be the other one (an SFT warm start taught a wrong edit as the fix)
    (lambda d: d["edit_ops"][1].update(name=d["edit_ops"][0]["name"]),
     r":3: field 'edit_ops\.1\.name': duplicate edit op name '\w+' \(first at edit_ops\.0\)"),
    # an op with nothing to replace is refused by the env whenever it is picked: a menu entry that never applies
    (lambda d: d["edit_ops"][0].update(old=""), r":3: field 'edit_ops\.0\.old': empty; .*never applies"),
])
def test_tasks_no_environment_could_run_name_line_and_field(tmp_path, edit, pattern):
    """A task file is operator input: a task the schema passes but that no sandbox could hold or grade
    (a file outside the work dir, an unimportable source file, an entry that is no Python name) is
    refused at load, naming line and field; it used to load and run, every episode a silent 0 or a
    failed call. Hidden tests that cannot grade (none, which `tasks check` worded "reference fails 0 hidden
    test(s)" and the run's start-of-run reference check skipped; or a blank one) are refused too."""
    path, lines = _lines(tmp_path, make_tasks(4))
    data = json.loads(lines[2])
    edit(data)
    lines[2] = json.dumps(data)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=pattern):
        load_tasks(path)


def test_dataset_tasks_round_trip_with_a_source_file_the_model_writes(tmp_path):
    from agentrl.tasks.jsonl import task_from_dict

    task = make_tasks(1)[0]
    data = task_to_dict(task) | {"source_file": "solution.py", "files": {}}  # MBPP's shape
    assert task_from_dict(data).source_file == "solution.py"


def test_bad_json_and_truncated_last_line(tmp_path):
    path, lines = _lines(tmp_path, make_tasks(3))
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(ValueError, match=r":2: invalid JSON at column 2"):
        load_tasks(path)
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])
    with pytest.raises(ValueError, match=r":3: invalid JSON .*truncated line"):
        load_tasks(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r":1: field '\(top level\)': \[1, 2\] is not of type 'object'"):
        load_tasks(path)


def test_duplicate_ids_and_missing_file(tmp_path):
    path, lines = _lines(tmp_path, make_tasks(2))
    path.write_text(lines[0] + "\n\n" + lines[0] + "\n")
    with pytest.raises(ValueError, match=r":3: field 'id': duplicate task id .* \(first on line 1\)"):
        load_tasks(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tasks(tmp_path / "missing.jsonl")


def test_non_utf8_line_names_the_line(tmp_path):
    path, lines = _lines(tmp_path, make_tasks(2))
    path.write_bytes(lines[0].encode() + b"\n" + b"\xff\xfe{}\n")
    with pytest.raises(ValueError, match=r":2: not UTF-8 text at byte 0"):
        load_tasks(path)


@pytest.mark.parametrize("text,column", [
    ('{"id": "x", \n', 13),          # an object cut off before the line's newline: the column is on this line
    ('{"id": "x",,}\n', 12),
    ('  {"id" 1}\n', 9),
])
def test_bad_json_column_counts_within_the_line(tmp_path, text, column):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf":1: invalid JSON at column {column}:") as e:
        load_tasks(path)
    assert ("truncated line?" in str(e.value)) == text.rstrip().endswith(",")


def test_directory_is_named_as_a_directory_not_as_missing(tmp_path):
    (tmp_path / "tasks.jsonl").mkdir()
    for p in (tmp_path, tmp_path / "tasks.jsonl"):
        with pytest.raises(ValueError, match="is a directory; expected a JSONL file"):
            load_tasks(p)


@pytest.mark.parametrize("field", ["id", "family", "split"])
@pytest.mark.parametrize("value, why", [
    ("x" * 10_000_000, "10,000,000 characters, at most 200"),
    ("a\nb", "holds a control character"),
    ("tab\there", "holds a control character"),
])
def test_a_name_field_is_one_short_printable_line_and_the_error_stays_short(tmp_path, field, value, why):
    """A 10 MB id loaded and was copied into results.json and every log line about its task; jsonschema's own
    message quoted the whole value. Now refused at load, with an error of a line."""
    from agentrl.tasks.jsonl import load_tasks

    d = task_to_dict(make_tasks(1)[0])
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({**d, field: value}) + "\n")
    with pytest.raises(ValueError, match=why) as got:
        load_tasks(path)
    assert f"field '{field}'" in str(got.value) and len(str(got.value)) < 400
