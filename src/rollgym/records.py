"""A dataclass's fields as a JSON record, in field order: the one writer of that shape.

``summary.json``'s summary and ``run.json``'s run record are written field for field; spelling
each field out again in a dict literal is how a new field gets forgotten in the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def fields_record(obj: DataclassInstance, *, leave_out: Collection[str] = ()) -> dict[str, object]:
    """``{field name: value}`` of ``obj`` in declaration order (values as they are, not copied),
    without the fields named in ``leave_out``."""
    return {
        f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.name not in leave_out
    }
