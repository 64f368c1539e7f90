"""The registry of bug-fix task families: name -> Family. Generators only; tasks are built in generate.py."""

from agentrl.tasks.families.base import OP_NAMES, Family, Mutation, Spec
from agentrl.tasks.families.review_calls import REVIEW2_FAMILIES
from agentrl.tasks.families.review_expressions import REVIEW_FAMILIES
from agentrl.tasks.families.writeup import WRITEUP_FAMILIES

# The write-up's five families first (its held-out set is two tasks each of these, in this order).
FAMILIES: dict[str, Family] = {**WRITEUP_FAMILIES, **REVIEW_FAMILIES, **REVIEW2_FAMILIES}
WRITEUP_FAMILY_NAMES: tuple[str, ...] = tuple(WRITEUP_FAMILIES)

__all__ = ["FAMILIES", "OP_NAMES", "WRITEUP_FAMILY_NAMES", "Family", "Mutation", "Spec"]
