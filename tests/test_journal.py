"""The undo journal behind the caches' and the error-feedback residuals' rewinds."""

from __future__ import annotations

import pytest

from shardgnn.journal import Journal


def _log(journal: Journal, state: dict, tag, key, value, snapshot=None) -> None:
    journal.open(tag, snapshot)
    journal.record(key, state.get(key))
    state[key] = value


def _restore(state: dict):
    def restore(key, before):
        if before is None:
            state.pop(key, None)
        else:
            state[key] = before

    return restore


def test_rewind_undoes_the_tag_and_later_latest_first_and_keeps_earlier():
    state: dict = {}
    journal: Journal = Journal(keep=4)
    _log(journal, state, (0, 0), "a", 1)
    _log(journal, state, (0, 1), "a", 2)
    before = dict(state)
    _log(journal, state, (0, 2), "a", 3)
    _log(journal, state, (0, 2), "b", 3)  # the same tag continues its entry
    _log(journal, state, (0, 3), "a", 4)
    assert len(journal.entries) == 4
    journal.rewind((0, 2), _restore(state))
    assert state == before and not journal


def test_rewind_returns_the_earliest_undone_snapshot():
    journal: Journal = Journal(keep=4)
    for batch in range(3):
        journal.open((0, batch), f"state at {batch}")
    assert journal.rewind((0, 1), lambda where, before: None) == "state at 1"
    assert journal.rewind((0, 0), lambda where, before: None) is None  # nothing journalled


def test_an_entry_without_state_or_writes_is_replaced_not_kept():
    journal: Journal = Journal(keep=2)
    for batch in range(10):  # a window's batches after its first write nothing
        journal.open((0, batch))
    journal.record("x", 0)
    assert [entry.tag for entry in journal.entries] == [(0, 9)]
    journal.open((0, 10), "snapshot")
    journal.open((0, 11), "snapshot")  # an entry with a snapshot is kept even without writes
    assert [entry.tag for entry in journal.entries] == [(0, 10), (0, 11)]


def test_a_rewind_needing_an_entry_let_go_is_refused_and_one_after_it_is_not():
    state: dict = {}
    journal: Journal = Journal(keep=2)
    for batch in range(4):
        _log(journal, state, (0, batch), batch, batch)
    journal.rewind((0, 2), _restore(state))  # (0, 0) and (0, 1) were let go: not needed
    assert state == {0: 0, 1: 1}
    for batch in range(4):
        _log(journal, state, (1, batch), "k", batch)
    with pytest.raises(AssertionError, match=r"from \(1, 1\) on were not all kept"):
        journal.rewind((1, 1), _restore(state))
