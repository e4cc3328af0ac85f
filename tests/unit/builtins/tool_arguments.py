"""What a foreign environment's mapping does with a model's tool-call arguments, for the tests
of each mapping: the object, or the answer that tells the model what was wrong (the one shared
rule, ``rollgym.servers.model_arguments``)."""

from __future__ import annotations

from rollgym.servers import ToolMistake, model_arguments


def played_arguments(name: str, written: object) -> object:
    """The arguments of tool ``name`` as written, or the ``ToolAnswer`` the model gets."""
    try:
        return model_arguments(name, written)
    except ToolMistake as mistake:
        return mistake.answer()
