"""What the bench scripts' jobs share: the quickstart config and its command line, the
simulated arithmetic servers, and writing a job config (one writer, not one per script)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def server_stack() -> str:
    """Which HTTP server stack this machine's servers run, for the head of a CPU figure: the
    lean cycle is used only under the uvicorn releases it was tested on, so a new uvicorn
    quietly changes every server's CPU per request."""
    import uvicorn

    from rollgym.http.bounded_reads import bounded_protocol

    return f"servers: {bounded_protocol().__name__} on uvicorn {uvicorn.__version__}"


def simulated_model(latency_s: float, accuracy: float = 1.0) -> dict[str, Any]:
    """The simulated policy model answering after a fixed ``latency_s``."""
    return {
        "kind": "model",
        "impl": "simulated",
        "accuracy": accuracy,
        "latency": {"kind": "fixed", "seconds": latency_s},
    }


def arithmetic_servers(latency_s: float, accuracy: float = 1.0) -> dict[str, dict[str, Any]]:
    """``policy`` (:func:`simulated_model`), the ``arith`` environment and the single-turn
    ``solver`` agent: the smallest job that goes through every kind of server."""
    return {
        "policy": simulated_model(latency_s, accuracy),
        "arith": {"kind": "environment", "impl": "arithmetic"},
        "solver": {
            "kind": "agent",
            "impl": "single_turn",
            "model": "policy",
            "environment": "arith",
        },
    }


def write_job(root: Path, config: dict[str, Any]) -> Path:
    """``config`` as ``root/job.yaml``; its path, for ``rollgym run``."""
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def quickstart_run(output_dir: Path, *overrides: str) -> list[str]:
    """The command line of ``rollgym run`` on the quickstart into ``output_dir``, with
    ``overrides`` (dotted ``key=value`` words, or options such as ``--no-table``)."""
    return [
        sys.executable,
        "-m",
        "rollgym",
        "run",
        str(QUICKSTART),
        f"run.output_dir={output_dir}",
        *overrides,
    ]
