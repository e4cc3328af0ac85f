"""The group view's pages (``/api/groups``): a page's groups with their members, by task."""

from __future__ import annotations

from pathlib import Path

import orjson

from rollgym.reading.group_view import MEMBERS_SHOWN, run_groups


def _write_run(root: Path, repeats: dict[int, int]) -> Path:
    """A run whose task ``t`` has ``repeats[t]`` rollouts (rewards alternating 1, 0) and one
    failed attempt of its last repeat."""
    root.mkdir()
    rollouts, failures = [], []
    for task, count in repeats.items():
        for index in range(count - 1):
            record = {
                "rollout_id": f"{task}-{index}",
                "task_index": task,
                "rollout_index": index,
                "dispatch_name": "solver",
                "reward": float(index % 2 == 0),
            }
            rollouts.append(orjson.dumps(record))
        failed = {"rollout_id": f"{task}-{count - 1}", "task_index": task}
        failures.append(orjson.dumps({**failed, "rollout_index": count - 1, "error_kind": "x"}))
    (root / "rollouts.jsonl").write_bytes(b"\n".join(rollouts) + b"\n")
    (root / "failures.jsonl").write_bytes(b"\n".join(failures) + b"\n")
    return root


def test_a_page_lists_its_groups_members_by_index_and_counts_what_it_leaves_out(
    tmp_path: Path,
) -> None:
    """A group of thousands of repeats (an evaluation's) sends the first
    :data:`MEMBERS_SHOWN` of them and their count, not a page of megabytes."""
    run = _write_run(tmp_path / "run", {0: 5, 1: 3000, 2: 4})
    page = run_groups(run, 3000).page(offset=1, limit=1)
    assert page["total"] == 3 and page["offset"] == 1
    (row,) = page["rows"]
    assert row["task_index"] == 1 and row["dispatch_name"] == "solver"
    assert row["members_total"] == 3000
    members = row["members"]
    assert len(members) == MEMBERS_SHOWN
    assert [m["rollout_index"] for m in members] == list(range(MEMBERS_SHOWN))
    assert [m["reward"] for m in members[:3]] == [1.0, 0.0, 1.0]
    small = run_groups(run, 3000).page(offset=0, limit=1)["rows"][0]
    assert small["members_total"] == 5 and len(small["members"]) == 5
    assert small["members"][-1] == {
        "rollout_id": "0-4",
        "rollout_index": 4,
        "reward": None,
        "outcome": "failed",
        "error_kind": "x",
    }
