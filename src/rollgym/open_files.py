"""Raise this process's open-file limit: every in-flight rollout is a socket.

The driver holds one socket per rollout in flight, and a server one per request it serves,
so both raise their soft ``RLIMIT_NOFILE`` towards the hard limit (which only a privileged
process can raise; docs/scale.md says what to do where it is too low).
"""

from __future__ import annotations

import contextlib
import resource


def raise_open_files_limit(wanted: int) -> None:
    """Raise the soft RLIMIT_NOFILE towards the hard limit: each in-flight rollout is a socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    # Under an unlimited hard limit (macOS) ask for what is wanted: a soft limit of
    # RLIM_INFINITY is refused for open files, and the limit would then not be raised at all.
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    with contextlib.suppress(ValueError, OSError):  # best effort: the run goes on with what it has
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
