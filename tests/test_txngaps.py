"""A numbered transaction that never comes (appservice/homeserver/txngaps.py): the rooms
are read again from their cursors once, after the grace; a late one closes its gap."""

from __future__ import annotations

from appservice.homeserver.txngaps import MAX_GAP, TransactionGaps


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gaps():
    calls: list[int] = []
    clock = Clock()
    return TransactionGaps(lambda: calls.append(1), grace=10, clock=clock), calls, clock


def test_a_missing_transaction_backfills_once_after_the_grace():
    g, calls, clock = gaps()
    for txn in ("1570", "1571", "1573", "1574"):
        g.answered(txn)
    assert g.missing == [1572]
    clock.now += 9.9
    g.check()
    assert calls == []
    clock.now += 0.2
    g.check()
    g.check()
    assert calls == [1] and g.missing == []


def test_a_late_or_retried_transaction_closes_its_gap():
    g, calls, clock = gaps()
    for txn in ("7", "9", "8", "9"):  # 8 late, 9 retried
        g.answered(txn)
    clock.now += 60
    g.check()
    assert calls == [] and g.missing == []


def test_opaque_ids_and_another_counter_are_not_gaps():
    g, calls, clock = gaps()
    for txn in ("abc", "5", "txn-7", "٣", str(5 + MAX_GAP + 1), str(5 + MAX_GAP + 2)):
        g.answered(txn)
    clock.now += 60
    g.check()
    assert calls == [] and g.missing == []
