"""Tasks: the Task record, bug-fix task families, datasets (MBPP, HumanEval), word lists."""

from agentrl.tasks.task import EditOp, Task

__all__ = ["EditOp", "Task"]
