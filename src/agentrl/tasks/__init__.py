"""Tasks: the Task record, bug-fix task families, datasets (MBPP, HumanEval), word lists."""

from agentrl.tasks.families import FAMILIES, OP_NAMES, WRITEUP_FAMILY_NAMES, Family
from agentrl.tasks.generate import heldout_tasks, make_tasks
from agentrl.tasks.jsonl import load_tasks, save_tasks
from agentrl.tasks.rename import randomize_names
from agentrl.tasks.task import EditOp, Task

__all__ = [
    "FAMILIES", "OP_NAMES", "WRITEUP_FAMILY_NAMES", "EditOp", "Family", "Task", "heldout_tasks", "load_tasks",
    "make_tasks", "randomize_names", "save_tasks",
]
