"""The parser's address objects (flowsim.kernel.pkt._V4Addr / _V6Addr): ipaddress objects whose hash is
computed once, otherwise indistinguishable from the plain ones — equal, hashed, ordered, shown, pickled,
copied and looked up alike, so a route, neighbour or socket keyed by either finds the other."""

from __future__ import annotations

import copy
import ipaddress
import pickle

import pytest

from flowsim.kernel.pkt import addr_pair, build_ipv4, build_ipv6, ip_addr, parse_ip, udp_datagram

ADDRS = ["10.0.0.1", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::", "fe80::1", "::ffff:10.0.0.1"]


@pytest.mark.parametrize("text", ADDRS)
def test_a_parsed_address_is_the_plain_one(text):
    plain = ipaddress.ip_address(text)
    parsed = ip_addr(plain)
    assert parsed is not plain and isinstance(parsed, type(plain))
    assert parsed == plain and plain == parsed and hash(parsed) == hash(plain)
    assert {plain: 1}[parsed] == 1 and {parsed: 1}[plain] == 1
    assert repr(parsed) == repr(plain) and str(parsed) == str(plain) and format(parsed, "") == format(plain, "")
    assert parsed.packed == plain.packed and int(parsed) == int(plain) and parsed.version == plain.version
    for other in (pickle.loads(pickle.dumps(parsed)), copy.deepcopy(parsed), copy.copy(parsed)):
        assert other == plain and hash(other) == hash(plain)
    assert type(pickle.loads(pickle.dumps(parsed))) is type(plain)  # a pickle does not need flowsim's class
    assert sorted([parsed, plain]) == [plain, plain]
    net = ipaddress.ip_network(f"{text}/{plain.max_prefixlen}")
    assert parsed in net
    if int(plain) < 2 ** plain.max_prefixlen - 1:
        assert parsed + 1 == plain + 1 and hash(parsed + 1) == hash(plain + 1)


def test_the_parser_returns_them():
    for src, dst in (("10.0.1.2", "10.0.2.2"), ("2001:db8::1", "2001:db8:1::2")):
        a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
        seg = udp_datagram(a, b, 5000, 53, bytes(8))
        pkt = build_ipv4(a, b, 17, seg) if a.version == 4 else build_ipv6(a, b, 17, seg)
        info = parse_ip(pkt, 0)
        assert info is not None
        pair = addr_pair(a, b)
        assert info.src is pair.src and info.dst is pair.dst  # the sockets' objects, found by identity
        assert hash(info.src) == hash(a) and info.src == a
