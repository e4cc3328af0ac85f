"""Beyond one machine: the same job on a Ray cluster (``run.placement: ray``, docs/scale.md).

:mod:`rollgym.scale.ray_placement` places the run's servers as Ray actors;
:mod:`rollgym.scale.ray_context` carries trace context across Ray calls explicitly. Neither
imports Ray at module load: the core install does not have it.
"""

from rollgym.scale.ray_context import in_context, remote_with_context

__all__ = ["in_context", "remote_with_context"]
