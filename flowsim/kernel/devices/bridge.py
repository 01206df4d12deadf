"""Linux bridge: VLAN filtering, FDB, and ``br_fill_forward_path`` (net/bridge).

Model
-----
:class:`BridgeDevice` keeps, like ``struct net_bridge``:

* ``ports`` — enslaved devices (same namespace), in enslave order;
* VLAN groups — one per port (``nbp_vlan_group``) and one for the bridge
  itself (``br_vlan_group``, the ``self``/brentry entries), each a dict
  ``vid → BridgeVlan(pvid, untagged, switchdev)``.  As in the kernel every new
  port, and the bridge itself at creation, gets ``vlan_default_pvid`` (1) as
  PVID and egress-untagged; ``switchdev`` records
  ``BR_VLFLAG_ADDED_BY_SWITCHDEV`` (set by default on DSA user ports, whose
  switch offloads the VLAN; ``bridge vlan add … switchdev on|off`` overrides);
* the FDB — ``(mac, vid) → FdbEntry``; static entries (``bridge fdb add``)
  and learned ones (:meth:`BridgeDevice.fdb_learn`, which the slow path calls
  on every frame a port receives and which the topology loader uses to
  pre-learn the MACs of every device behind a port).  Local entries (the
  bridge's and the ports' own MACs) are answered by :meth:`fdb_find` without
  being stored.  Without VLAN filtering everything uses VID 0.

Resolver (net/bridge/br_device.c): ``br_fill_forward_path`` refuses a bridge that is itself a
port; ``br_vlan_fill_forward_path_pvid`` chooses KEEP with the innermost
context VLAN when its protocol is the bridge's, else TAG with the bridge PVID;
the FDB lookup of ``ctx.daddr`` in that VID gives the egress port;
``br_vlan_fill_forward_path_mode`` requires the VID on that port and turns
TAG→KEEP or KEEP→UNTAG / UNTAG_HW when the port is egress-untagged; finally
the context VLANs are pushed (TAG, at most two) or popped (UNTAG*).
"""

from __future__ import annotations

import errno

import attrs

from flowsim.kernel.devices.base import (
    ETH_P_8021AD, ETH_P_8021Q, NET_DEVICE_PATH_VLAN_MAX, Args, BrVlanMode, DevPathType, Encap, NetDevice,
    PathBridge, PathCtx, PathEntry, PathError, parse_kind_args,
)
from flowsim.kernel.devices.vlan import VLAN_PROTOCOLS

__all__ = ["BridgeDevice", "BridgeVlan", "FdbEntry", "KINDS", "parse_args", "create", "change",
           "fill_forward_path", "br_vlan_fill_forward_path_pvid", "br_vlan_fill_forward_path_mode",
           "fdb_generation"]

KINDS = ("bridge",)

# Bumped by every change of any bridge's FDB (learnt, moved, added, deleted entries): a reader that remembers
# what br_fill_forward_path answered (the flowtable's memo of failed path resolutions) keeps it while this is
# unchanged.  One counter for all bridges: a change anywhere only costs a re-resolution.
_fdb_generation = 0


def fdb_generation() -> int:
    """The FDB generation: changes whenever any bridge's FDB changed."""
    return _fdb_generation


def _fdb_changed() -> None:
    global _fdb_generation
    _fdb_generation += 1


@attrs.frozen
class BridgeVlan:
    """``struct net_bridge_vlan``: one VID on a port or on the bridge itself."""

    vid: int
    untagged: bool = False
    switchdev: bool = False  # BR_VLFLAG_ADDED_BY_SWITCHDEV


@attrs.frozen
class FdbEntry:
    """``struct net_bridge_fdb_entry``; ``port`` is None for the bridge's own address."""

    mac: str
    vid: int
    port: str | None
    static: bool = False
    local: bool = False


@attrs.define(slots=True, eq=False)
class BridgeDevice(NetDevice):
    """A bridge master (``struct net_bridge``)."""

    vlan_filtering: bool = False
    vlan_protocol: int = ETH_P_8021Q
    default_pvid: int = 1
    ports: list[str] = attrs.field(factory=list)
    vlans: dict = attrs.field(factory=dict)  # port name | None (bridge itself) → {vid: BridgeVlan}
    pvids: dict = attrs.field(factory=dict)  # port name | None → pvid (0 = none)
    fdb: dict = attrs.field(factory=dict)  # (mac, vid) → FdbEntry
    port_macs: dict = attrs.field(factory=dict)  # port name → MAC (local FDB entries)

    def describe(self) -> str:
        proto = "802.1ad" if self.vlan_protocol == ETH_P_8021AD else "802.1Q"
        return f"bridge vlan_filtering {int(self.vlan_filtering)} vlan_protocol {proto}"

    # --- VLAN groups (br_vlan.c)
    def vlan_group(self, port: str | None) -> dict[int, BridgeVlan]:
        """``nbp_vlan_group`` (port) or ``br_vlan_group`` (None: the bridge itself)."""
        return self.vlans.setdefault(port, {})

    def vlan_find(self, port: str | None, vid: int) -> BridgeVlan | None:
        """``br_vlan_find``."""
        return self.vlans.get(port, {}).get(vid)

    def get_pvid(self, port: str | None) -> int:
        """``br_get_pvid``: 0 when the port (or bridge) has no PVID."""
        return self.pvids.get(port, 0)

    def vlan_add(self, port: str | None, vid: int, *, pvid: bool = False, untagged: bool = False,
                 switchdev: bool = False) -> None:
        """``nbp_vlan_add`` / ``br_vlan_add``: (re)set the flags of *vid*; PVID moves here or is cleared."""
        self.vlan_group(port)[vid] = BridgeVlan(vid, untagged, switchdev)
        if pvid:
            self.pvids[port] = vid
        elif self.pvids.get(port) == vid:
            self.pvids[port] = 0

    def vlan_del(self, port: str | None, vid: int) -> bool:
        """``nbp_vlan_delete``: also flushes the port's *dynamic* FDB entries in that VID."""
        if self.vlans.get(port, {}).pop(vid, None) is None:
            return False
        if self.pvids.get(port) == vid:
            self.pvids[port] = 0
        if port is not None:
            self.fdb_delete_by_port(port, vid)
        return True

    def allowed_ingress(self, port: str | None, tag: Encap | None) -> int | None:
        """``br_allowed_ingress``: the VID a frame is classified into, or None if filtered.

        *tag* is the frame's outer tag (None when untagged).  Without VLAN
        filtering every frame is accepted in VID 0.
        """
        if not self.vlan_filtering:
            return 0
        vid = tag.id if tag is not None and tag.proto == self.vlan_protocol else self.get_pvid(port)
        if not vid or self.vlan_find(port, vid) is None:
            return None
        return vid

    def allowed_egress(self, port: str | None, vid: int) -> bool | None:
        """``br_allowed_egress`` + ``br_handle_vlan``: None if filtered, else whether it leaves untagged."""
        if not self.vlan_filtering:
            return True
        v = self.vlan_find(port, vid)
        return None if v is None else v.untagged

    # --- FDB (br_fdb.c)
    def fdb_find(self, mac: str, vid: int) -> FdbEntry | None:
        """``br_fdb_find_rcu``, including the local entries of the bridge and its ports."""
        if mac == self.mac:
            return FdbEntry(mac, vid, None, static=True, local=True)
        for port, port_mac in self.port_macs.items():
            if mac == port_mac:
                return FdbEntry(mac, vid, port, static=True, local=True)
        return self.fdb.get((mac, vid))

    def fdb_add(self, mac: str, vid: int, port: str, *, static: bool = True) -> FdbEntry:
        """``__br_fdb_add``: a user-added entry (static unless ``dynamic``)."""
        entry = FdbEntry(mac, vid, port, static=static)
        self.fdb[(mac, vid)] = entry
        _fdb_changed()
        return entry

    def fdb_learn(self, mac: str, vid: int, port: str) -> FdbEntry | None:
        """``br_fdb_update``: learn or move a dynamic entry; static and local entries never move."""
        if mac == self.mac or mac in self.port_macs.values():
            return None
        old = self.fdb.get((mac, vid))
        if old is not None and (old.static or old.port == port):
            return old  # static: never moves; a dynamic entry on the same port is only refreshed (no ageing here)
        entry = FdbEntry(mac, vid, port)
        self.fdb[(mac, vid)] = entry
        _fdb_changed()
        return entry

    def fdb_delete_by_port(self, port: str, vid: int | None = None, *, do_all: bool = False) -> None:
        """``br_fdb_delete_by_port``: dynamic entries only unless *do_all*."""
        for key, entry in list(self.fdb.items()):
            if entry.port == port and (vid is None or entry.vid == vid) and (do_all or not entry.static):
                del self.fdb[key]
                _fdb_changed()

    # --- ports
    def add_port(self, port: NetDevice, *, switchdev: bool) -> None:
        """``br_add_if`` + ``nbp_vlan_init``: default PVID, egress untagged."""
        self.ports.append(port.name)
        self.port_macs[port.name] = port.mac
        self.vlans[port.name] = {}
        self.pvids[port.name] = 0
        if self.default_pvid:
            self.vlan_add(port.name, self.default_pvid, pvid=True, untagged=True, switchdev=switchdev)

    def del_port(self, name: str) -> None:
        """``br_del_if``: the port's VLANs and all its FDB entries go."""
        self.ports.remove(name)
        self.port_macs.pop(name, None)
        self.vlans.pop(name, None)
        self.pvids.pop(name, None)
        self.fdb_delete_by_port(name, do_all=True)


_ARGS = {
    "vlan_filtering": ("vlan_filtering", lambda a, k: bool(a.int(k, 0, 1))),
    "vlan_protocol": ("vlan_protocol", lambda a, k: a.choice(k, VLAN_PROTOCOLS)),
    "vlan_default_pvid": ("default_pvid", lambda a, k: a.int(k, 0, 4094)),
    # accepted for copy-paste from scripts, no effect on the model
    "stp_state": ("_stp_state", lambda a, k: a.int(k, 0, 1)),
    "forward_delay": ("_forward_delay", lambda a, k: a.int(k, 0, 1 << 31)),
    "ageing_time": ("_ageing_time", lambda a, k: a.int(k, 0, 1 << 31)),
    "mcast_snooping": ("_mcast_snooping", lambda a, k: a.int(k, 0, 1)),
}


def parse_args(args: Args, kind: str) -> dict:
    return parse_kind_args(args, _ARGS, kind)


def create(topo, cmd, req, opts) -> NetDevice:
    """``br_dev_newlink``; the bridge itself gets the default PVID untagged (brentry)."""
    dev = topo.new_device(BridgeDevice, cmd, netns=req.netns, name=req.name, kind="bridge",
                          address=req.address, mtu=req.mtu)
    change(topo, cmd, dev, {k: v for k, v in opts.items() if k != "default_pvid"})
    dev.default_pvid = opts.get("default_pvid", 1)
    if dev.default_pvid:
        dev.vlan_add(None, dev.default_pvid, pvid=True, untagged=True)
    return dev


def change(topo, cmd, dev: BridgeDevice, opts: dict) -> None:
    """``ip link set BR type bridge …`` (``br_changelink``)."""
    for key in ("vlan_filtering", "vlan_protocol", "default_pvid"):
        if key in opts:
            setattr(dev, key, opts[key])


def br_vlan_fill_forward_path_pvid(br: BridgeDevice, ctx: PathCtx) -> PathBridge:
    """Mirrors br_vlan_fill_forward_path_pvid: KEEP the context VLAN or TAG with the bridge PVID."""
    if not br.vlan_filtering:
        return PathBridge(BrVlanMode.KEEP)
    if ctx.vlans and ctx.vlans[-1].proto == br.vlan_protocol:
        return PathBridge(BrVlanMode.KEEP, ctx.vlans[-1].id, br.vlan_protocol)
    return PathBridge(BrVlanMode.TAG, br.get_pvid(None), br.vlan_protocol)


def br_vlan_fill_forward_path_mode(br: BridgeDevice, port: str, bridge: PathBridge) -> PathBridge | None:
    """Mirrors br_vlan_fill_forward_path_mode; None when the egress port lacks the VID (-EINVAL)."""
    if not br.vlan_filtering:
        return bridge
    v = br.vlan_find(port, bridge.vlan_id)
    if v is None:
        return None
    if not v.untagged:
        return bridge
    if bridge.vlan_mode == BrVlanMode.TAG:
        mode = BrVlanMode.KEEP
    elif v.switchdev:
        mode = BrVlanMode.UNTAG_HW
    else:
        mode = BrVlanMode.UNTAG
    return attrs.evolve(bridge, vlan_mode=mode)


def fill_forward_path(ctx: PathCtx) -> PathEntry | PathError:
    """Mirrors br_fill_forward_path."""
    br = ctx.dev
    assert isinstance(br, BridgeDevice)  # dev_fill_forward_path calls the resolver of the device's own kind
    func = "br_fill_forward_path"
    if br.master is not None:
        return ctx.fail(-1, func, f"{br.name} is itself a port of {br.master}")
    bridge = br_vlan_fill_forward_path_pvid(br, ctx)
    f = br.fdb_find(ctx.daddr, bridge.vlan_id)
    if f is None:
        return ctx.fail(-1, func, f"no FDB entry for {ctx.daddr} in VLAN {bridge.vlan_id}")
    if f.port is None:
        return ctx.fail(-1, func, f"FDB entry for {ctx.daddr} has no port (the bridge's own address)")
    moded = br_vlan_fill_forward_path_mode(br, f.port, bridge)
    if moded is None:
        return ctx.fail(-errno.EINVAL, "br_vlan_fill_forward_path_mode",
                        f"egress port {f.port} has no VLAN {bridge.vlan_id}")
    entry = PathEntry(DevPathType.BRIDGE, br.name, br.ifindex, bridge=moded)
    ctx.dev = ctx.ns.devices[f.port]
    if moded.vlan_mode == BrVlanMode.TAG:
        if len(ctx.vlans) >= NET_DEVICE_PATH_VLAN_MAX:
            return PathError(-errno.ENOSPC, br.name, func,
                             f"TAG with {NET_DEVICE_PATH_VLAN_MAX} VLANs already in the context")
        ctx.vlans.append(Encap(moded.vlan_id, moded.vlan_proto))
    elif moded.vlan_mode in (BrVlanMode.UNTAG, BrVlanMode.UNTAG_HW):
        ctx.vlans.pop()
    return entry
