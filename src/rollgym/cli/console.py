"""The console every command prints its tables and report lines to.

On a terminal rich fits the output to the window. Piped or redirected (a job's log file,
``| less``, a notebook cell, CI) it would assume 80 columns: a comparison table squeezed its
dispatch names and rewards to ``ke…`` and ``0.…``, and the run's accounting line broke in
two. Piped output gets 200 columns instead: a table as wide as its content, a trace id or a
path never cut, a line whole.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

#: Columns of piped output: wide enough for the widest table rollgym prints.
PIPED_WIDTH = 200


def stdout_console() -> Console:
    """A console on stdout: the terminal's width on a terminal, :data:`PIPED_WIDTH` piped.
    (rich is imported here: a command that prints JSON never loads it.)"""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPED_WIDTH)
