"""ConntrackTable's hash: one dict per direction (issue 16: no (entry, direction) pair per tuple)."""

from __future__ import annotations

import ipaddress as ip

from flowsim.kernel.conntrack import TCP_SYN, ConntrackTable, CtTuple

A, B, C = ip.ip_address("10.0.1.99"), ip.ip_address("10.0.2.99"), ip.ip_address("10.0.3.99")


def _confirmed(ct: ConntrackTable, t: CtTuple):
    r = ct.nf_conntrack_in(t, 0.0, tcp_flags=TCP_SYN, length=60)
    assert ct.nf_conntrack_confirm(r.entry, 0.0)
    return r.entry


def test_lookup_by_either_tuple_entries_in_confirm_order_and_kill():
    table = ConntrackTable()
    t1, t2 = CtTuple(A, B, 40000, 80, 2, 6), CtTuple(C, B, 40001, 80, 2, 6)
    e1, e2 = _confirmed(table, t1), _confirmed(table, t2)
    assert len(table) == 2
    assert table.lookup(t1) == (e1, 0) and table.lookup(t1.invert()) == (e1, 1)
    assert table.lookup(t2.invert()) == (e2, 1)
    assert table.lookup(CtTuple(A, C, 1, 2, 2, 6)) is None
    assert list(table.entries()) == [e1, e2]
    # a clash with either tuple of a confirmed entry is refused
    clash = table.create(t1.invert(), 0.0)
    assert not table.nf_conntrack_confirm(clash, 0.0)
    assert table.nf_nat_used_tuple(t1, ignored=clash) and not table.nf_nat_used_tuple(t1, ignored=e1)
    table.nf_ct_kill(e1)
    assert table.lookup(t1) is None and table.lookup(t1.invert()) is None
    assert len(table) == 1 and list(table.entries()) == [e2]


def test_a_tuple_that_is_its_own_inverse():
    """Both directions have the same tuple: it is found as the REPLY one (the second of the two inserts of a
    single hash), and the entry is counted once and killed cleanly."""
    table = ConntrackTable()
    t = CtTuple(A, A, 5000, 5000, 2, 17)
    e = table.create(t, 0.0)
    assert e.tuplehash[1] == t
    assert table.nf_conntrack_confirm(e, 0.0)
    assert table.lookup(t) == (e, 1)
    assert len(table) == 0  # one key, as before: len is the number of keys halved
    table.nf_ct_kill(e)
    assert table.lookup(t) is None
