"""The results file documents itself: every schema field has a description and a unit; file modes and
the run's lock file."""

import copy
import os
import stat

from synthetic_results import counts_report

from agentrl.report.results import RunResults, atomic_write_text, validate_results
from agentrl.report.schema import RESULTS_SCHEMA, STEP_METRICS, stat_description, undocumented_fields
from agentrl.report.summary import summary_rows


def test_every_schema_field_has_a_description_and_a_unit():
    assert undocumented_fields(RESULTS_SCHEMA) == []
    # the walker really walks: a field deep inside (evaluations -> items -> tasks -> items) is found
    broken = copy.deepcopy(RESULTS_SCHEMA)
    task = broken["properties"]["evaluations"]["items"]["properties"]["tasks"]["items"]
    del task["properties"]["trials"]["unit"]
    del broken["properties"]["steps"]["items"]["patternProperties"]["^tools/"]["description"]
    assert sorted(undocumented_fields(broken)) == ["/evaluations/items/tasks/items/trials", "/steps/items/^tools/"]


def test_metric_and_stat_names_have_descriptions_and_units():
    assert STEP_METRICS["entropy"][1] == "nats/token" and STEP_METRICS["time/step_s"][1] == "s"
    assert stat_description("tools/hidden_pass_fraction")[1] == "1" and stat_description("policy_tokens")[1] == "tokens"
    assert stat_description("tools/malformed_bad_json") == ("malformed calls of class 'bad_json'", "count")
    assert stat_description("edit_missing_old_string") == ("tool rejections: edit missing old string", "count")


def test_report_explains_hidden_pass_fraction(tmp_path):
    res = RunResults(tmp_path / "r.json", {}, seed=0)
    res.add_evaluation("before", step=0, report=counts_report(["a", "b"], [0, 1], 1, n_boot=50,
                                                              tool_stats={"hidden_pass_fraction": 0.75}))
    rows = dict(summary_rows(validate_results(tmp_path / "r.json")))
    assert rows["hidden_pass_fraction before"] == "0.750"
    assert "partial credit" in rows["  what it is"] and "pass@1" in rows["  what it is"]


def test_results_file_mode_matches_ordinary_files(tmp_path):
    old = os.umask(0o022)
    try:
        RunResults(tmp_path / "results.json", {}, seed=0)
        atomic_write_text(tmp_path / "other.txt", "x")
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"results.json": 0o644, "other.txt": 0o644, "plain.txt": 0o644}


def test_run_lock_is_removed_when_the_run_ends(tmp_path):
    from agentrl.rl.run_folder import exclusive as _exclusive

    out = tmp_path / "run"
    with _exclusive(out):
        assert (tmp_path / ".run.lock").is_file()
    assert list(tmp_path.iterdir()) == []
    with _exclusive(out):  # and can be taken again
        pass
    assert list(tmp_path.iterdir()) == []
