"""How tests/data/snapshot/ipip-vlan/ was made (kept for provenance; not run by the tests).

1. topologies/ipip-over-vlan.toml was built in real namespaces on the development machine
   (tests/test_snapshot.py's builder, inside `unshare -m -n`) and saved with the script of
   `flowsim snapshot --script`: that machine's kernel (6.18, no modules) has veth but no 8021q,
   ipip or nf_flow_table, so the VLAN and tunnel lines and the ruleset failed.
2. This script adds by hand what they would have shown, in the shape iproute2 6.1 prints
   (ip/iplink_vlan.c, ip/link_iptnl.c, ip/ipaddress.c): veth1.10/veth0.10 (vlan id 10) and
   tun0.10 (ipip) in nsr1 and nsr2, their addresses, their proto kernel routes, the default
   route through the tunnel, their forwarding sysctls, and the topology's own ruleset text.

Usage: python handmade.py SNAPSHOT_DIR TOPOLOGY
"""

import json
import sys
import tomllib
from pathlib import Path

snap, topo = Path(sys.argv[1]), tomllib.loads(Path(sys.argv[2]).read_text())
SIDES = {"nsr1": ("veth1", "veth1.10", "192.168.20.1", "fee1:4::1", "192.168.20.2", "192.168.200.1", "192.168.200.2"),
         "nsr2": ("veth0", "veth0.10", "192.168.20.2", "fee1:4::2", "192.168.20.1", "192.168.200.2", "192.168.200.1")}


def load(ns, name):
    return json.loads((snap / ns / name).read_text())


def save(ns, name, value):
    (snap / ns / name).write_text(json.dumps(value, separators=(",", ":")) + "\n")


for ns, (lower, vlan, local, local6, remote, tun_addr, tun_peer) in SIDES.items():
    links = load(ns, "link.json")
    real = next(d for d in links if d["ifname"] == lower)
    n = max(d["ifindex"] for d in links)
    links.append({"ifindex": n + 1, "link": lower, "ifname": vlan, "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                  "mtu": real["mtu"], "qdisc": "noqueue", "operstate": "UP", "linkmode": "DEFAULT", "group": "default",
                  "txqlen": 1000, "link_type": "ether", "address": real["address"], "broadcast": "ff:ff:ff:ff:ff:ff",
                  "promiscuity": 0, "allmulti": 0, "min_mtu": 0, "max_mtu": 65535,
                  "linkinfo": {"info_kind": "vlan", "info_data": {"protocol": "802.1Q", "id": 10,
                                                                  "flags": ["REORDER_HDR"]}},
                  "inet6_addr_gen_mode": "eui64", "num_tx_queues": 1, "num_rx_queues": 1})
    links.append({"ifindex": n + 2, "link": None, "ifname": "tun0.10", "flags": ["POINTOPOINT", "NOARP", "UP", "LOWER_UP"],
                  "mtu": real["mtu"] - 20, "qdisc": "noqueue", "operstate": "UNKNOWN", "linkmode": "DEFAULT",
                  "group": "default", "txqlen": 1000, "link_type": "ipip", "address": local, "link_pointtopoint": True,
                  "broadcast": remote, "promiscuity": 0, "allmulti": 0, "min_mtu": 0, "max_mtu": 65515,
                  "linkinfo": {"info_kind": "ipip", "info_data": {"proto": "ipip", "remote": remote, "local": local,
                                                                  "ttl": 0, "pmtudisc": True}},
                  "inet6_addr_gen_mode": "eui64", "num_tx_queues": 1, "num_rx_queues": 1})
    save(ns, "link.json", links)
    addrs = load(ns, "addr.json")
    addrs.append({"ifindex": n + 1, "link": lower, "ifname": vlan, "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                  "mtu": real["mtu"], "qdisc": "noqueue", "operstate": "UP", "group": "default", "txqlen": 1000,
                  "link_type": "ether", "address": real["address"], "broadcast": "ff:ff:ff:ff:ff:ff",
                  "addr_info": [{"family": "inet", "local": local, "prefixlen": 24, "broadcast": local.rsplit(".", 1)[0] + ".255",
                                 "scope": "global", "label": vlan, "valid_life_time": 4294967295,
                                 "preferred_life_time": 4294967295},
                                {"family": "inet6", "local": local6, "prefixlen": 64, "scope": "global", "nodad": True,
                                 "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]})
    addrs.append({"ifindex": n + 2, "link": None, "ifname": "tun0.10", "flags": ["POINTOPOINT", "NOARP", "UP", "LOWER_UP"],
                  "mtu": real["mtu"] - 20, "qdisc": "noqueue", "operstate": "UNKNOWN", "group": "default", "txqlen": 1000,
                  "link_type": "ipip", "address": local, "link_pointtopoint": True, "broadcast": remote,
                  "addr_info": [{"family": "inet", "local": tun_addr, "prefixlen": 24, "scope": "global",
                                 "label": "tun0.10", "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]})
    save(ns, "addr.json", addrs)
    r4 = [r for r in load(ns, "route4.json") if r["dst"] != "default"]
    r4.insert(0, {"dst": "default", "gateway": tun_peer, "dev": "tun0.10", "flags": []})
    r4.append({"dst": local.rsplit(".", 1)[0] + ".0/24", "dev": vlan, "protocol": "kernel", "scope": "link",
               "prefsrc": local, "flags": []})
    r4.append({"dst": tun_addr.rsplit(".", 1)[0] + ".0/24", "dev": "tun0.10", "protocol": "kernel", "scope": "link",
               "prefsrc": tun_addr, "flags": []})
    save(ns, "route4.json", r4)
    r6 = load(ns, "route6.json")
    r6.insert(0, {"dst": "fee1:4::/64", "dev": vlan, "protocol": "kernel", "metric": 256, "flags": [], "pref": "medium"})
    save(ns, "route6.json", r6)
    sysctl = (snap / ns / "sysctl.txt").read_text()
    extra = "".join(f"net.ipv4.conf.{d}.forwarding = 1\nnet.ipv4.conf.{d}.rp_filter = 0\n" for d in (vlan.replace(".", "/"), "tun0/10"))
    (snap / ns / "sysctl.txt").write_text(sysctl + extra)
    if "nft" in topo["netns"][ns]:
        (snap / ns / "ruleset.nft").write_text(topo["netns"][ns]["nft"])
    (snap / ns / "errors.txt").write_text("")
