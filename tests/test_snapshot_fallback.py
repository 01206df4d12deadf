"""The snapshot of a machine without ``ip -j`` (OpenWrt's ip-tiny) or without ``bridge`` (no ip-bridge package).

The script saves the text output then (``link.txt``, ``bridge-vlan.txt``, …); ``flowsim import`` does not
parse text: it stops with one error naming the file and exactly the package to install — ``ip-full`` for
``ip``, ``ip-bridge`` for ``bridge`` — or, where nothing depends on the missing output, warns.  The script
runs here under busybox ash with stand-ins for ip-tiny, a missing bridge, nft and sysctl in front of PATH
(inside ``unshare -m``, on a private /run: the host's namespaces are not seen).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.config.importer import import_snapshot
from flowsim.config.snapshot import TEXT_FILES, SnapshotError, script

BUSYBOX = Path("/bin/busybox")

# ip-tiny: no -j ("Option "-j" is unknown"), text output otherwise
IP_TINY = r"""#!/bin/sh
for a in "$@"; do
  if [ "$a" = -j ]; then echo 'Option "-j" is unknown, try "ip -help".' >&2; exit 255; fi
done
case "$*" in
  "-d link show") printf '1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: br-lan: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n    link/ether 02:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff\n    bridge vlan_filtering 1\n' ;;
  xfrm*) echo 'Object "xfrm" is unknown, try "ip help".' >&2; exit 255 ;;
  *) echo "ip $*" ;;
esac
"""
# no bridge at all: what a shell prints for a missing program
BRIDGE_MISSING = "#!/bin/sh\necho \"sh: bridge: not found\" >&2\nexit 127\n"
NFT = "#!/bin/sh\nprintf 'table inet fw4 {\\n}\\n'\n"
SYSCTL = "#!/bin/sh\necho 'net.ipv4.ip_forward = 1'\n"


def _unshare_ok() -> str | None:
    if not BUSYBOX.exists():
        return "busybox sh not installed (apt-get install busybox-static)"
    if shutil.which("unshare") is None:
        return "needs unshare"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs none /run"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a mount namespace here (root?): {probe.stderr.strip()}"
    return None


def test_script_on_ip_tiny_without_bridge(tmp_path):
    """busybox ash, ip-tiny, no bridge: the text files, the tools' complaints in errors.txt, and import's one error
    naming link.txt and ip-full."""
    why = _unshare_ok()
    if why is not None:
        pytest.skip(why)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ip", IP_TINY), ("bridge", BRIDGE_MISSING), ("nft", NFT), ("sysctl", SYSCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "snap.sh").write_text(script())
    snap = tmp_path / "snap"
    done = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /run && mkdir -p /run/netns && '
                           'PATH="$1:$PATH" exec "$2" sh "$3" "$4"', "sh", str(bin_dir), str(BUSYBOX),
                           str(tmp_path / "snap.sh"), str(snap)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in snap.iterdir()) == ["init"]
    saved = sorted(p.name for p in (snap / "init").iterdir())
    assert saved == sorted([*(n for n in TEXT_FILES if not n.startswith("bridge-")), "errors.txt", "ruleset.nft",
                            "sysctl.txt"])
    assert (snap / "init" / "link.txt").read_text().startswith("1: lo: <LOOPBACK")
    errors = (snap / "init" / "errors.txt").read_text()
    assert "bridge: not found" in errors and 'Object "xfrm" is unknown' in errors
    with pytest.raises(SnapshotError) as exc:
        import_snapshot(snap)
    assert str(exc.value).startswith(f"{snap / 'init' / 'link.txt'}: ip without -j (OpenWrt's ip-tiny)")
    assert "install ip-full (opkg install ip-full)" in str(exc.value)


LO = {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP"], "mtu": 65536, "link_type": "loopback",
      "address": "00:00:00:00:00:00"}
BR = {"ifindex": 2, "ifname": "br-lan", "flags": ["UP"], "mtu": 1500, "link_type": "ether",
      "address": "02:00:00:00:00:01", "linkinfo": {"info_kind": "bridge", "info_data": {"vlan_filtering": 1}}}


def _snap(tmp_path: Path, links: list, **files: str) -> Path:
    d = tmp_path / "snap" / "init"
    d.mkdir(parents=True)
    (d / "link.json").write_text(json.dumps(links))
    for name, text in files.items():
        (d / name).write_text(text)
    return tmp_path / "snap"


def _cli(*argv) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(argv))
    return status, err.getvalue()


def test_vlan_filtering_bridge_without_bridge_output_names_ip_bridge(tmp_path):
    """ip-full but no bridge: a VLAN-filtering bridge's VLANs are unknown — one error naming bridge-vlan.json and
    ip-bridge (flowsim import exit status 2, nothing written)."""
    snap = _snap(tmp_path, [LO, BR], **{"errors.txt": "sh: bridge: not found\n"})
    out = tmp_path / "o.toml"
    status, err = _cli("import", str(snap), "-o", str(out))
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"flowsim: error: {snap / 'init' / 'bridge-vlan.json'}: VLAN-filtering bridge br-lan: ")
    assert "opkg install ip-bridge" in err and not out.exists()


def test_vlan_filtering_bridge_with_bridge_text_names_the_text_file(tmp_path):
    snap = _snap(tmp_path, [LO, BR], **{"bridge-vlan.txt": "port              vlan-id\nbr-lan            1 PVID\n"})
    with pytest.raises(SnapshotError) as exc:
        import_snapshot(snap)
    assert str(exc.value).startswith(f"{snap / 'init' / 'bridge-vlan.txt'}: VLAN-filtering bridge br-lan: its "
                                     "VLANs are the text output of bridge without -j")
    assert "opkg install ip-bridge" in str(exc.value)


def test_bridge_without_vlan_filtering_and_no_bridge_warns(tmp_path):
    """A plain bridge needs no `bridge vlan`: the import goes on, and warns that static FDB entries are unknown,
    naming ip-bridge; a text bridge-fdb.txt is named with ip-bridge too, not ip-full."""
    plain = {**BR, "linkinfo": {"info_kind": "bridge", "info_data": {"vlan_filtering": 0}}}
    result = import_snapshot(_snap(tmp_path / "a", [LO, plain]))
    assert [w.split(": ", 1)[1] for w in result.warnings] == [
        "the static FDB entries of br-lan: missing (no `bridge` on the machine?): none imported; install iproute2's "
        "bridge (OpenWrt: opkg install ip-bridge) and run the snapshot script again"]
    result = import_snapshot(_snap(tmp_path / "b", [LO, plain], **{"bridge-fdb.txt": "33:33:00:00:00:01 dev br-lan"}))
    assert [w.split(": ", 2)[1:] for w in result.warnings] == [
        ["text output of bridge without -j",
         "not read: install ip-bridge (opkg install ip-bridge) and run the snapshot script again"]]
