"""Collecting ahead for TRL (rollgym.integrations.trl.ahead), without TRL: when a result that
waited for the trainer is too old to train on, and the row such a result becomes."""

from __future__ import annotations

from test_trl_columns import EOS, _failure, _result, _tool_walk

from rollgym.integrations.trl import Columns
from rollgym.integrations.trl.ahead import _numbered, too_old


def test_a_result_is_too_old_only_past_the_bound() -> None:
    made_at_3 = _result("a0", 0, _tool_walk())  # both model calls at version 3
    assert not too_old(made_at_3, 3, 1)
    assert not too_old(made_at_3, 4, 1)  # one version behind: max_staleness 1 allows it
    assert too_old(made_at_3, 5, 1)
    assert too_old(made_at_3, 4, 0)
    assert not too_old(made_at_3, 9, None)  # no bound
    assert not too_old(_failure(0), 9, 0)  # a failure is a failure row already


def test_a_result_too_old_by_now_is_a_stale_row_without_reward() -> None:
    columns = Columns()
    group = [_result("a0", 0, _tool_walk()), _result("a0-r1", 1, _tool_walk())]
    columns.add_group(group, EOS, stale=[True, False])
    assert columns.completion_ids[0] == [EOS] and columns.env_mask[0] == [0]
    assert columns.env_reward == [None, 0.0]
    assert columns.error_kind == ["stale", None]
    assert columns.prompt_ids[0] == columns.prompt_ids[1]  # the group's prompt


def test_rows_collected_ahead_get_rollout_ids_of_their_own() -> None:
    rows = [{"question": "1 + 1"}, {"question": "2 + 2", "rollout_id": "theirs"}]
    numbered = list(_numbered(rows * 2))
    assert [row["rollout_id"] for row in numbered] == ["a0", "a1", "a2", "a3"]
    assert rows[1]["rollout_id"] == "theirs"  # the caller's rows are left as they were
