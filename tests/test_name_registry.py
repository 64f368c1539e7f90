"""agentrl.registry.Registry: the shared name -> entry table behind estimators, samplers, warm starts, agents."""

from dataclasses import dataclass

import pytest

from agentrl.registry import Registry


@dataclass(frozen=True)
class _Spec:
    name: str
    help: str


def test_registry_is_an_ordered_mapping_with_one_error_and_help_form():
    reg = Registry("a widget", (_Spec("b", "second"), _Spec("a", "first")), hint="see widgets.py")
    assert list(reg) == ["b", "a"] and len(reg) == 2 and "a" in reg and reg["a"].help == "first"
    assert reg.lookup("b", flag="--widget") is reg["b"]
    with pytest.raises(ValueError, match=r"^--widget 'c' is not a widget; expected one of b, a \(see widgets.py\)$"):
        reg.lookup("c", flag="--widget")
    assert reg.help("Widgets", lambda s: f"{s.name}: {s.help}") == "Widgets: b: second; a: first."
    replaced = reg.register(_Spec("a", "again"))
    assert reg["a"] is replaced and list(reg) == ["b", "a"]
    with pytest.raises(ValueError, match="non-empty name"):
        reg.register(_Spec("", "x"))
    with pytest.raises(TypeError):
        reg["d"] = _Spec("d", "x")  # readers cannot write; register() is the one way in
    empty = Registry("a gadget", key=lambda f: f.__name__)
    with pytest.raises(ValueError, match=r"expected one of \(none registered\)"):
        empty.lookup("x", flag="--gadget")
    assert empty.register(len) is len and list(empty) == ["len"]


def test_the_library_registries_share_it():
    from agentrl.rl.agent_backends import _AGENTS, agent_factory
    from agentrl.rl.estimators import ADV_ESTIMATORS
    from agentrl.rl.warm_start import _WARM_STARTS
    from agentrl.rollout.samplers import SAMPLERS

    assert all(isinstance(r, Registry) for r in (ADV_ESTIMATORS, SAMPLERS, _WARM_STARTS, _AGENTS))
    with pytest.raises(ValueError, match="--agent 'nobody' is not a registered agent backend; expected one of"):
        agent_factory("nobody")
