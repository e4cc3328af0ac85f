"""``traces serve --runs RUN ...``: a missing folder is one line and exit 2, before listening;
the routes offer what was given, by index only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from rollgym.reading import runs_page


def test_a_missing_runs_folder_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-runs"
    done = subprocess.run(
        [sys.executable, "-m", "rollgym", "traces", "serve", "--runs", str(tmp_path), str(missing)]
        + ["--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"rollgym traces serve: --runs {missing}: no such directory"
    assert "Traceback" not in done.stderr and not (tmp_path / "traces.db").exists()


def _run(folder: Path, rewards: list[float]) -> Path:
    folder.mkdir(parents=True)
    lines = [
        orjson.dumps({"task_index": 0, "dispatch_name": "d", "reward": r, "policy_versions": [1]})
        for r in rewards
    ]
    (folder / "rollouts.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return folder


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("", "pick at least one run: runs=0,1,..."),
        ("0,2", "no run 2: 2 runs are offered (0 to 1)"),
        ("0,0", "a run is picked twice"),
        ("../etc", "runs must be indices of offered runs (runs=0,1,...), got '../etc'"),
    ],
)
async def test_the_series_route_picks_offered_runs_by_index_only(
    tmp_path: Path, query: str, error: str
) -> None:
    app = web.Application()
    runs_page.mount(app, (_run(tmp_path / "a", [0.0, 1.0]), _run(tmp_path / "b", [1.0, 1.0])))
    async with TestClient(TestServer(app)) as client:
        listed = await (await client.get("/api/runs/list")).json()
        assert [r["path"] for r in listed["runs"]] == [str(tmp_path / "a"), str(tmp_path / "b")]
        answer = await client.get("/api/runs/series", params={"runs": query})
        assert (answer.status, await answer.json()) == (400, {"error": error})
        good = await (await client.get("/api/runs/series", params={"runs": "1,0"})).json()
        assert [r["mean_reward"] for r in good["runs"]] == [1.0, 0.5]
        assert [p["x"] for p in good["version"]["points"]] == [1]
        assert good["runs"][1]["vs_first"]["reward_diff"] == -0.5
