"""rollgym: collect LLM-agent rollouts on environments at high concurrency, observably.

The public surface is this short list; everything else is machinery behind it. Names are
loaded on first use (PEP 562), so ``import rollgym`` and ``rollgym --help`` stay light: the
HTTP client, pydantic models and the driver load only when a program touches them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollgym._lazy_door import lazy_door
from rollgym._version import __version__

#: public name -> the module that defines it
_EXPORTS = {
    "Collector": "rollgym.driver.collector",
    "ConfigError": "rollgym.errors",
    "DispatchError": "rollgym.errors",
    "InputError": "rollgym.errors",
    "JobConfig": "rollgym.config.model",
    "LaunchError": "rollgym.errors",
    "PermanentDispatchError": "rollgym.errors",
    "Probe": "rollgym.driver.weight_probe",
    "RollgymError": "rollgym.errors",
    "RolloutFailure": "rollgym.driver.outcomes",
    "RolloutResult": "rollgym.driver.outcomes",
    "Summary": "rollgym.driver.summary",
    "TransientDispatchError": "rollgym.errors",
    "load_config": "rollgym.config.loading",
    "run_job": "rollgym.driver.job",
}

__all__ = [
    "Collector",
    "ConfigError",
    "DispatchError",
    "InputError",
    "JobConfig",
    "LaunchError",
    "PermanentDispatchError",
    "Probe",
    "RollgymError",
    "RolloutFailure",
    "RolloutResult",
    "Summary",
    "TransientDispatchError",
    "__version__",
    "load_config",
    "run_job",
]


__getattr__, __dir__ = lazy_door(globals(), _EXPORTS)


if TYPE_CHECKING:
    from rollgym.config import JobConfig, load_config
    from rollgym.driver.collector import Collector
    from rollgym.driver.job import run_job
    from rollgym.driver.outcomes import RolloutFailure, RolloutResult
    from rollgym.driver.summary import Summary
    from rollgym.driver.weight_probe import Probe
    from rollgym.errors import (
        ConfigError,
        DispatchError,
        InputError,
        LaunchError,
        PermanentDispatchError,
        RollgymError,
        TransientDispatchError,
    )
