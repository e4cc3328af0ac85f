"""Where the run's servers run: one small interface, two implementations.

- :class:`~rollgym.placement.base.Placement`: start a server (its base URL), stop them all,
  kill what is left; :mod:`rollgym.placement.local` (child processes of the driver) and
  :mod:`rollgym.placement.ray` (Ray actors, ``run.placement: ray``) implement it;
- :mod:`rollgym.placement.launcher` starts the configured servers in dependency order through
  a placement and stops them all on leaving; :mod:`rollgym.placement.supervisor` watches
  local processes during the run and restarts a dead one;
- :mod:`rollgym.placement.health` waits until ``GET /health`` answers; the child processes
  themselves (die with the parent, ready files, log tails) are :mod:`rollgym.child_process`,
  on the ground floor because the trace store starts its own the same way.

What a server *is* lives in :mod:`rollgym.servers`; this package only decides where it runs.
Imports run downwards: placement imports servers, never the other way. Nothing is imported
here, so importing one module of it stays light.
"""
