"""vlan_dev_fill_forward_path (net/8021q/vlan_dev.c)."""

from __future__ import annotations

import errno

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.kernel.devices import vlan
from flowsim.kernel.devices.base import ETH_P_8021AD, ETH_P_8021Q, DevPathType, Encap, PathCtx, PathError
from flowsim.profiles import get_profile

TEXT = """[netns.r]
commands = '''
ip link add e0 type dummy
ip link add link e0 name e0.5 type vlan id 5 protocol 802.1ad
ip link add link e0.5 name e0.5.6 type vlan id 6
'''
"""


@pytest.fixture
def ns():
    return load_topology_text(TEXT, "vlan.toml").netns("r")


def ctx(ns, dev, vlans=()):
    return PathCtx(ns, get_profile("linux-7.0"), ns.devices[dev], "02:00:00:00:00:01", list(vlans))


def test_records_vid_and_protocol_and_moves_to_real_device(ns):
    """DEV_PATH_VLAN with encap.id = VID, encap.proto = VLAN protocol; ctx.dev = real_dev; ctx.vlan pushed."""
    c = ctx(ns, "e0.5")
    entry = vlan.fill_forward_path(c)
    assert entry.type == DevPathType.VLAN and entry.dev == "e0.5"
    assert (entry.encap.id, entry.encap.proto) == (5, ETH_P_8021AD)
    assert c.dev.name == "e0" and c.vlans == [Encap(5, ETH_P_8021AD)]


def test_default_protocol_is_8021q(ns):
    """`type vlan id N` without protocol is 802.1Q."""
    assert vlan.fill_forward_path(ctx(ns, "e0.5.6")).encap.proto == ETH_P_8021Q


def test_third_vlan_is_enospc_after_moving(ns):
    """With two VLANs in the context: -ENOSPC, after ctx.dev already moved (kernel order)."""
    c = ctx(ns, "e0.5.6", [Encap(1, ETH_P_8021Q), Encap(2, ETH_P_8021Q)])
    result = vlan.fill_forward_path(c)
    assert isinstance(result, PathError) and result.errno == -errno.ENOSPC
    assert c.dev.name == "e0.5" and len(c.vlans) == 2
