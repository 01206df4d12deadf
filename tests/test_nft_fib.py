"""nft ``fib``: net/netfilter/nft_fib.c (init, validation), net/ipv4/netfilter/nft_fib_ipv4.c and
net/ipv6/netfilter/nft_fib_ipv6.c (evaluation), Debian's linux-source-7.2.

``fib saddr|daddr [. iif|oif] [. mark] oif|oifname|type``: the route to the source (or destination) address,
answered as the device it leaves by (none for a local or reject route, or, with the iif or oif flag, when the
route does not use that device: the reverse-path filter ``fib saddr . iif oif missing drop``), or as the address's
type (``local`` only on the given device with the flag).  ``nft_fib_init`` refuses both iif and oif, and the oif
flag with a device result (-EINVAL); ``nft_fib_validate`` the hooks a result cannot run at (-EOPNOTSUPP).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import jsonschema
import pytest

from flowsim.config.topology import load_topology
from flowsim.errors import RulesetError
from flowsim.kernel.stack.nf import nft_fib_eval
from flowsim.nft.eval import NftPacket
from flowsim.nft.parse import parse_ruleset
from flowsim.schemas import load as load_schema
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGY = Path(__file__).resolve().parent / "data" / "scenarios" / "fib-rpfilter.toml"
ip = ipaddress.ip_address


def chain(hook: str, rule: str, family: str = "inet") -> str:
    return f"table {family} t {{\n  chain c {{\n    type filter hook {hook} priority 0;\n    {rule}\n  }}\n}}\n"


@pytest.mark.parametrize("text, key", [
    ("fib saddr . iif oif missing drop", "saddr . iif oif"),
    ("fib saddr . mark . iif oif missing drop", "saddr . iif . mark oif"),  # firewalld's IPv6 rpfilter
    ("fib daddr type local accept", "daddr type"),
    ("fib daddr . iif type { local, broadcast } accept", "daddr . iif type"),
    ('fib daddr oifname "eth0" accept', "daddr oifname"),
])
def test_fib_selectors_parse(text, key):
    (match, _verdict) = parse_ruleset(chain("prerouting", text)).tables[0].chains["c"].rules[0].exprs
    assert (match.selector.kind, match.selector.key) == ("fib", key)


@pytest.mark.parametrize("hook, rule, family, message", [
    ("prerouting", "fib saddr . oif oif missing drop", "inet", "Invalid argument"),  # oif flag, oif result
    ("prerouting", "fib saddr . iif . oif type local drop", "inet", "Invalid argument"),  # iif and oif
    ("prerouting", "fib saddr . daddr oif missing drop", "inet", "Invalid argument"),
    ("output", "fib saddr . iif oif missing drop", "inet", "not valid at hook output"),
    ("prerouting", "fib daddr . oif type local accept", "ip", "not valid at hook prerouting"),
    ("postrouting", "fib daddr . iif type local accept", "ip6", "not valid at hook postrouting"),
])
def test_fib_refusals_are_located(hook, rule, family, message):
    with pytest.raises(RulesetError, match=message) as err:
        parse_ruleset(chain(hook, rule, family), file="fib.nft")
    assert (err.value.file, err.value.line) == ("fib.nft", 4)


@pytest.fixture(scope="module")
def router():
    return Simulation(load_topology(TOPOLOGY)).kernel.netns["r"]


def _pkt(src: str, dst: str, iif: str | None = None, oif: str | None = None, l4proto: int = 17) -> NftPacket:
    s, d = ip(src), ip(dst)
    return NftPacket(nfproto=2 if s.version == 4 else 10, l4proto=l4proto, saddr=s, daddr=d, iif=iif, oif=oif)


@pytest.mark.parametrize("key, pkt, hook, answer", [
    # the reverse path: the route back to the source leaves by the input device, or not
    ("saddr . iif oif", _pkt("192.0.2.2", "198.51.100.2", iif="veth0"), "prerouting", "veth0"),
    ("saddr . iif oif", _pkt("10.9.9.3", "198.51.100.2", iif="veth2"), "prerouting", None),
    ("saddr . iif oif", _pkt("2001:db8:99::3", "2001:db8:2::2", iif="veth2"), "prerouting", None),
    ("saddr oif", _pkt("10.9.9.3", "198.51.100.2", iif="veth2"), "prerouting", "veth1"),
    ("daddr oif", _pkt("192.0.2.2", "198.51.100.1", iif="veth0"), "prerouting", None),  # a local route
    ("daddr oif", _pkt("192.0.2.2", "8.8.8.8", iif="veth0"), "forward", None),  # no route
    # DHCP from 0.0.0.0 and IPv6 DAD from ::: the input device
    ("saddr . iif oif", _pkt("0.0.0.0", "255.255.255.255", iif="veth0"), "prerouting", "veth0"),
    ("saddr . iif oif", _pkt("::", "fe80::1", iif="veth2", l4proto=58), "prerouting", "veth2"),
    # nft_fib_can_skip: what came in on lo
    ("saddr . iif oif", _pkt("10.9.9.3", "127.0.0.1", iif="lo"), "input", "lo"),
])
def test_the_device_found(router, key, pkt, hook, answer):
    found = nft_fib_eval(router, key, pkt, hook)
    assert (found[0] if found else None) == answer


@pytest.mark.parametrize("key, pkt, rtn", [
    ("daddr type", _pkt("192.0.2.2", "198.51.100.1"), 2),  # local, on any device
    ("daddr . iif type", _pkt("192.0.2.2", "198.51.100.1", iif="veth0"), 1),  # not on the input device: unicast
    ("daddr . iif type", _pkt("192.0.2.2", "192.0.2.1", iif="veth0"), 2),
    ("daddr type", _pkt("192.0.2.2", "255.255.255.255"), 3),  # broadcast
    ("saddr type", _pkt("0.0.0.0", "192.0.2.1"), 3),  # zeronet counts as broadcast (inet_addr_type)
    ("daddr type", _pkt("192.0.2.2", "224.0.0.5"), 5),  # multicast
    ("daddr type", _pkt("192.0.2.2", "198.51.100.2"), 1),
    ("daddr type", _pkt("2001:db8:1::2", "2001:db8:2::1"), 2),  # a local route, no device given
    ("daddr . iif type", _pkt("2001:db8:1::2", "2001:db8:2::1", iif="veth0"), 1),
    ("daddr . iif type", _pkt("2001:db8:1::2", "2001:db8:1::1", iif="veth0"), 2),
    ("daddr type", _pkt("2001:db8:1::2", "2001:db8:2::"), 4),  # the subnet-router anycast address
    ("daddr type", _pkt("2001:db8:1::2", "ff02::1"), 5),
    ("daddr type", _pkt("2001:db8:1::2", "2001:db8:77::1"), 7),  # no route: unreachable
])
def test_the_address_type(router, key, pkt, rtn):
    assert nft_fib_eval(router, key, pkt, "prerouting") == rtn


def test_conform_fib_drops_what_fails_the_reverse_path():
    """tests/data/scenarios/fib-rpfilter.toml: the spoofed sources (3 IPv4, 3 IPv6) are dropped by the rpfilter rule, the
    rest arrive; the rules' counters are the kernel's (tests/ and docs/conformance.md: four Debian kernels)."""
    sim = Simulation(load_topology(TOPOLOGY))
    sim.run()
    delivered = {t["name"]: t["directions"]["original"]["delivered"] for t in build_report(sim)["traffic"]}
    assert delivered == {"udp-ok": 4, "udp6-ok": 4, "udp-spoof": 0, "udp6-spoof": 0, "udp-local": 2}
    counters = [c.packets for _k, c in sorted(sim.kernel.netns["r"].nft.rule_counters.items())]
    # type local, . iif type local, daddr oif missing, oifname "veth1", the rpfilter drop
    assert counters == [2, 0, 2, 14, 6]
    # the spoofed flows never reached a server: the report says null there, and its schema takes it
    report = build_report(sim)
    assert [f["server"] for t in report["traffic"] if "spoof" in t["name"] for f in t["flows"]] == [None, None]
    jsonschema.validate(report, load_schema("run"))
