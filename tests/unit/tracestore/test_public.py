"""The package's front door stays small, sorted and importable."""

from __future__ import annotations

import rollgym.reading as reading
import rollgym.tracestore as tracestore


def test_public_names_sorted_and_present() -> None:
    assert tracestore.__all__ == sorted(tracestore.__all__)
    for name in tracestore.__all__:
        assert getattr(tracestore, name) is not None


def test_the_check_is_still_named_where_programs_found_it() -> None:
    """``check_run`` moved to the read side; the store's door still hands out the same one."""
    assert tracestore.check_run is reading.check_run
    assert tracestore.CheckReport is reading.CheckReport
