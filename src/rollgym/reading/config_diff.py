"""What differs between runs' configs: the stated cause of a difference in their figures.

Each run keeps its resolved config in ``config.yaml`` (every default filled in, secrets
redacted: ``driver/job.py`` writes it). Two configs are compared as flat ``{dotted key: value}``
maps (``servers.policy.accuracy``), so a difference is named by the key a person would
override (``rollgym run CONFIG servers.policy.accuracy=0.9``). ``run.run_id`` and
``run.output_dir`` always differ and say nothing, so they are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from rollgym.json_types import JsonObject, JsonValue

#: Config keys every run has its own value of: never a difference worth showing.
IGNORED_KEYS = frozenset({"run.run_id", "run.output_dir"})


def flatten(node: JsonValue, prefix: str = "") -> dict[str, JsonValue]:
    """A config as ``{dotted key: value}``; a list or an empty mapping is one value."""
    if isinstance(node, dict) and node:
        flat: dict[str, JsonValue] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: node} if prefix else {}


def read_config(run_dir: Path) -> JsonObject:
    """The run's ``config.yaml`` as data; ``{}`` where it is missing or unreadable."""
    try:
        loaded = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def flat_config(run_dir: Path) -> dict[str, JsonValue]:
    """The run's config flattened, without the keys every run has its own value of."""
    return {k: v for k, v in flatten(read_config(run_dir)).items() if k not in IGNORED_KEYS}


def config_differences(configs: Sequence[dict[str, JsonValue]]) -> list[dict[str, object]]:
    """The keys whose values are not the same in every config, each with every config's
    value (``null`` where a config lacks the key, ``present`` saying which have it), in key
    order."""
    differences: list[dict[str, object]] = []
    for key in sorted({key for config in configs for key in config}):
        values = [config.get(key) for config in configs]
        present = [key in config for config in configs]
        if len({repr(v) for v in values}) > 1 or len(set(present)) > 1:
            entry: dict[str, object] = {"key": key, "values": values}
            if not all(present):
                entry["present"] = present
            differences.append(entry)
    return differences
