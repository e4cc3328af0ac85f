"""Where :mod:`rollgym.child_process` used to live: its names stay importable from here."""

from rollgym.child_process import (
    describe_exit,
    die_with_parent,
    log_tail,
    read_ready_file,
    spawn_child,
)

__all__ = ["describe_exit", "die_with_parent", "log_tail", "read_ready_file", "spawn_child"]
