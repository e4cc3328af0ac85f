"""The front door stays small, sorted and honest: every listed name exists and is importable."""

from __future__ import annotations

import rollgym


def test_public_list_is_sorted_and_every_name_exists() -> None:
    names = list(rollgym.__all__)
    assert names == sorted(names, key=lambda n: (n.startswith("_"), n)) or names == sorted(names)
    for name in names:
        assert hasattr(rollgym, name), name


def test_public_list_is_short_and_holds_the_entry_points() -> None:
    assert len(rollgym.__all__) <= 20
    for name in (
        "Collector",
        "RolloutResult",
        "RolloutFailure",
        "run_job",
        "load_config",
        "JobConfig",
    ):
        assert name in rollgym.__all__
    assert isinstance(rollgym.__version__, str)


def test_public_classes_claim_the_package() -> None:
    """Nothing public is a re-export of a third-party object."""
    for name in rollgym.__all__:
        value = getattr(rollgym, name)
        module = getattr(value, "__module__", "rollgym")
        assert module.startswith("rollgym"), (name, module)


def test_errors_share_one_root() -> None:
    for name in ("ConfigError", "InputError", "LaunchError", "DispatchError"):
        assert issubclass(getattr(rollgym, name), rollgym.RollgymError)


def test_every_public_name_is_listed_in_the_lazy_table() -> None:
    from rollgym import _EXPORTS

    assert set(_EXPORTS) | {"__version__"} == set(rollgym.__all__)
    try:
        rollgym.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("unknown names must raise AttributeError")


def test_the_sandbox_door_is_sorted_and_its_error_shares_the_root() -> None:
    import rollgym.sandbox as sandbox

    assert list(sandbox.__all__) == sorted(sandbox.__all__)
    for name in sandbox.__all__:
        # its own names, or its error, which lives in the one error tree
        module = getattr(sandbox, name).__module__
        assert module.startswith(("rollgym.sandbox", "rollgym.errors")), name
    assert issubclass(sandbox.SandboxUnavailable, rollgym.RollgymError)
