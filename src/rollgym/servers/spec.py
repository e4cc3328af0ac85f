"""The spec a launcher hands to a server process (JSON in ``_ROLLGYM_SERVER_SPEC``).

Its own small module so the launcher can build specs without importing the server stack.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from rollgym.defaults import MAX_REQUEST_BYTES
from rollgym.environment_variables import ROLLGYM_SERVER_SPEC

ENV_SPEC = ROLLGYM_SERVER_SPEC


@dataclass(frozen=True)
class ServeSpec:
    """What the launcher tells a server process (the JSON in ``_ROLLGYM_SERVER_SPEC``)."""

    name: str
    kind: str
    impl: str
    ready_file: str
    options: dict[str, Any] = field(default_factory=dict)
    server_urls: dict[str, str] = field(default_factory=dict)
    #: ``{server: [replica URLs]}`` of the servers it calls that have several replicas.
    server_replicas: dict[str, list[str]] = field(default_factory=dict)
    #: Which replica of ``name`` this process is (0 .. ``servers.<name>.replicas`` - 1).
    replica: int = 0
    run_id: str = ""
    output_dir: str | None = None
    max_request_bytes: int = MAX_REQUEST_BYTES
    #: 0: the process picks a free port. A restart asks for the port the server had, so the
    #: servers that call it (their URLs were fixed at launch) reach it again.
    port: int = 0
    #: A socket already listening, inherited from the launcher (local placement): its address
    #: was known, and handed to the servers that call it, before this process started, so
    #: every server starts at once instead of waiting for the ones it names. None: bind
    #: ``port`` itself (a restart, a Ray actor).
    listen_fd: int | None = None

    @property
    def instance(self) -> str:
        """This replica's own name: ``name`` for the first, ``name@<i>`` for the others.

        Names its log, ready file and telemetry counts (``@`` is never in a server name).
        """
        return instance_name(self.name, self.replica)

    @classmethod
    def from_env(cls) -> ServeSpec:
        raw = os.environ.get(ENV_SPEC)
        if not raw:
            raise SystemExit(f"{ENV_SPEC} is not set; this module is started by rollgym's launcher")
        return cls(**json.loads(raw))

    def to_env(self) -> str:
        return json.dumps(asdict(self))


def instance_name(server: str, replica: int) -> str:
    """``server`` for replica 0, ``server@<replica>`` for the others."""
    return server if replica == 0 else f"{server}@{replica}"
