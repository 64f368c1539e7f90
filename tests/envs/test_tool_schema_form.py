"""Advertised tool schemas are in transformers' get_json_schema form (what TRL renders from a signature and a
Google docstring), sorted by name; the checks a signature cannot express are still enforced."""

from __future__ import annotations

import pytest

from agentrl.envs.base import ToolCall
from agentrl.envs.registry import env_names, make_env


@pytest.mark.parametrize("name", ["edit-menu", "coding-tools", "python-session", "wordle"])
def test_schemas_are_signature_form_and_sorted(name):
    assert name in env_names()
    tools = make_env(name).tools()
    assert [t["function"]["name"] for t in tools] == sorted(t["function"]["name"] for t in tools)
    for t in tools:
        params = t["function"]["parameters"]
        assert set(params) <= {"type", "properties", "required"} and params["type"] == "object"
        assert params.get("required", ["x"]), "an empty required list is left out, as get_json_schema does"
        for prop in params["properties"].values():
            assert {"type", "description"} <= set(prop) <= {"type", "description", "enum", "items"}


def test_unadvertised_constraints_are_enforced(tmp_path):
    from agentrl.tasks import make_tasks

    env = make_env("coding-tools")
    task = make_tasks(1, families=["minmax"], seed=0, split="train")[0]
    env.reset(task)
    path = f"/repo/{task.source_file}"
    res = env.step([ToolCall("Read", {"file_path": path, "offset": 0}),
                    ToolCall("Read", {"file_path": path, "colour": "red"}),
                    ToolCall("Bash", {"command": "x" * 20000}),
                    ToolCall("Read", {"file_path": path, "limit": 2})]).results
    assert [r.status for r in res] == ["malformed", "malformed", "malformed", "ok"]
    assert "minimum" in res[0].content and "colour" in res[1].content
    env.close()
