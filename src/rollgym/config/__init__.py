"""The job config, in one place: its model, its defaults, reading its YAML and validating it.

- :mod:`~rollgym.config.model`: the ``run:``, ``servers:`` and ``telemetry:`` blocks
  (:class:`JobConfig`), frozen once validated;
- :mod:`~rollgym.config.collector_options`: what a Collector is told, and the one source of
  the ``run:`` block's defaults;
- :mod:`~rollgym.config.yaml_reading` and :mod:`~rollgym.config.data`: the YAML file read,
  overrides applied, paths resolved, before any validation;
- :mod:`~rollgym.config.loading`: :func:`load_config` and its one-line errors, and
  :func:`redacted`.

Names are imported on first use (as in :mod:`rollgym` and :mod:`rollgym.servers`), so the CLI
that only reads the YAML (:mod:`rollgym.config.data`) does not pay for pydantic and the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door

if TYPE_CHECKING:
    from rollgym.config.collector_options import CollectorOptions
    from rollgym.config.data import ConfigRead, apply_override, parse_override, read_config
    from rollgym.config.loading import (
        blame_override,
        load_config,
        redacted,
        validate_config,
        validate_read,
    )
    from rollgym.config.model import (
        JobConfig,
        RayResources,
        RunConfig,
        ServerConfig,
        new_run_id,
    )
    from rollgym.server_options import ServerKind, ServerOptions
    from rollgym.telemetry.config_block import TelemetryConfig

#: public name -> the module that defines it
_EXPORTS = {
    "CollectorOptions": "rollgym.config.collector_options",
    "ConfigRead": "rollgym.config.data",
    "JobConfig": "rollgym.config.model",
    "RayResources": "rollgym.config.model",
    "RunConfig": "rollgym.config.model",
    "ServerConfig": "rollgym.config.model",
    "ServerKind": "rollgym.server_options",
    "ServerOptions": "rollgym.server_options",
    "TelemetryConfig": "rollgym.telemetry.config_block",
    "apply_override": "rollgym.config.data",
    "blame_override": "rollgym.config.loading",
    "load_config": "rollgym.config.loading",
    "new_run_id": "rollgym.config.model",
    "parse_override": "rollgym.config.data",
    "read_config": "rollgym.config.data",
    "redacted": "rollgym.config.loading",
    "validate_config": "rollgym.config.loading",
    "validate_read": "rollgym.config.loading",
}

__all__ = [
    "CollectorOptions",
    "ConfigRead",
    "JobConfig",
    "RayResources",
    "RunConfig",
    "ServerConfig",
    "ServerKind",
    "ServerOptions",
    "TelemetryConfig",
    "apply_override",
    "blame_override",
    "load_config",
    "new_run_id",
    "parse_override",
    "read_config",
    "redacted",
    "validate_config",
    "validate_read",
]

__getattr__, __dir__ = lazy_door(globals(), _EXPORTS)
