"""A task file whose reference fails its own hidden tests: the run says so at the start (log and results file),
and goes on. Such tasks reward 0 whatever the policy writes, and used to train at 0 without a word."""

import dataclasses
import logging
from types import SimpleNamespace

from agentrl.rl.session import warn_unsolvable_tasks
from agentrl.sandbox import Sandbox
from agentrl.tasks.check import failing_references
from agentrl.tasks.generate import make_tasks
from agentrl.tasks.sets import TaskSets


class Recorded:
    def __init__(self):
        self.warnings = []

    def add_warning(self, w):
        self.warnings.append(w)


def test_failing_references_are_named_and_recorded(caplog):
    train = make_tasks(3, families=["minmax"], seed=0)
    held = make_tasks(2, families=["compare"], seed=1, split="heldout")
    broken = dataclasses.replace(train[1], reference=train[1].files[train[1].source_file])  # the buggy file
    tasks = TaskSets((train[0], broken, train[2]), tuple(held), "/data/my_tasks.jsonl")
    with Sandbox() as sandbox:
        bad = failing_references([*tasks.train, *tasks.heldout], sandbox.run_tests_batch)
        assert [tid for tid, _ in bad] == [broken.id] and "hidden test(s)" in bad[0][1]
        rec = Recorded()
        cfg = SimpleNamespace(tasks=SimpleNamespace(source="/data/my_tasks.jsonl"))
        with caplog.at_level(logging.WARNING):
            assert warn_unsolvable_tasks(cfg, tasks, sandbox, rec) == bad
        (w,) = rec.warnings
        resumed = Recorded()  # a resumed run's results already hold the warning: not checked or added again
        resumed.data = {"warnings": [w]}
        assert warn_unsolvable_tasks(cfg, tasks, sandbox, resumed) == [] and resumed.warnings == []
        assert w["kind"] == "unsolvable_tasks" and w["step"] == 0 and w["value"] == 1
        assert "1 of 5 tasks in /data/my_tasks.jsonl can never be solved" in w["message"]
        assert broken.id in w["message"] and "agentrl tasks check --file /data/my_tasks.jsonl" in w["message"]
        assert w["message"] in caplog.text
        # the generator's own tasks are not re-checked at every run start, and a clean file says nothing
        assert warn_unsolvable_tasks(SimpleNamespace(tasks=SimpleNamespace(source="bugfix")), tasks, sandbox,
                                     Recorded()) == []
        clean = TaskSets(tuple(train), tuple(held), "/data/ok.jsonl")
        rec = Recorded()
        assert warn_unsolvable_tasks(SimpleNamespace(tasks=SimpleNamespace(source="/data/ok.jsonl")), clean, sandbox,
                                     rec) == [] and rec.warnings == []
