"""Snapshots of a live machine: the folder layout, the script that writes it, and reading its files.

Theory of operation
-------------------
A snapshot is a directory with one folder per network namespace (the initial
namespace as ``init``), each holding the unmodified output of ``ip``,
``bridge``, ``nft`` and ``sysctl`` under the fixed names of :data:`FILES`
(``docs/snapshot.md`` documents them).  :func:`script` is the POSIX sh
script that writes one (``flowsim snapshot --script``): it runs under
busybox ash and uses only ``ip``, ``bridge``, ``nft``, ``sysctl``, ``mkdir``
and ``cat`` besides shell builtins.  When ``ip`` has no ``-j`` (OpenWrt's
ip-tiny) it saves the text forms under the names of :data:`TEXT_FILES`.

:class:`Snapshot` reads a directory: its namespaces, each file as JSON or
text, a missing file meaning "nothing of that kind".  Every problem is one
:class:`SnapshotError` naming the file: a name the kernel or ``ip netns add``
would refuse (:mod:`flowsim.config.names`), malformed JSON, a value of the
wrong type.  :mod:`flowsim.config.importer` turns a snapshot into a topology.
"""

from __future__ import annotations

import json
from pathlib import Path

from flowsim.config.names import DEV_NAME_EXPECTED, NETNS_NAME_EXPECTED, dev_valid_name, netns_invalid_name
from flowsim.errors import ConfigError

__all__ = ["FILES", "TEXT_FILES", "INIT", "SnapshotError", "Snapshot", "NetnsSnapshot", "script",
           "check_dev_name", "check_netns_name"]

INIT = "init"  # the folder of the initial namespace

# file name -> the command whose unmodified output it holds (run inside the namespace)
FILES: dict[str, str] = {
    "link.json": "ip -j -d link show",
    "addr.json": "ip -j addr show",
    "route4.json": "ip -j -4 route show table all",
    "route6.json": "ip -j -6 route show table all",
    "neigh.json": "ip -j neigh show",
    "rule4.json": "ip -j -4 rule show",
    "rule6.json": "ip -j -6 rule show",
    "netnsid.json": "ip -j netns list-id",
    "bridge-vlan.json": "bridge -j vlan show",
    "bridge-fdb.json": "bridge -j fdb show",
    "ruleset.nft": "nft -s list ruleset",
    "xfrm-state.txt": "ip xfrm state",
    "xfrm-policy.txt": "ip xfrm policy",
    "sysctl.txt": "sysctl net.ipv4.ip_forward net.ipv4.conf net.ipv6.conf net.netfilter",
    # PPPoE sessions (id, peer MAC, device), only where the pppoe module is loaded; /proc/net/igmp tells import
    # the byte order /proc/net/pppoe prints the session id in (the host's: 224.0.0.1 reads 010000E0 or E0000001)
    "pppoe.txt": "cat /proc/net/pppoe",
    "igmp.txt": "cat /proc/net/igmp",
}

# what the script saves instead when `ip` has no -j (OpenWrt's ip-tiny)
TEXT_FILES: dict[str, str] = {
    "link.txt": "ip -d link show",
    "addr.txt": "ip addr show",
    "route4.txt": "ip -4 route show table all",
    "route6.txt": "ip -6 route show table all",
    "neigh.txt": "ip neigh show",
    "rule4.txt": "ip -4 rule show",
    "rule6.txt": "ip -6 rule show",
    "netnsid.txt": "ip netns list-id",
    "bridge-vlan.txt": "bridge vlan show",
    "bridge-fdb.txt": "bridge fdb show",
}

# also recognised (written by hand): `nft -j list ruleset`, which import refuses with a hint
NFT_JSON = "ruleset.json"


class SnapshotError(ConfigError):
    """A snapshot is unreadable or hostile: names the file and what is wrong."""

    def __init__(self, message: str, *, file: str | Path, expected: str | None = None):
        self.file = str(file)
        super().__init__(message, where=str(file), expected=expected)


def check_netns_name(name: str, file: str | Path) -> str:
    """*name* if ``ip netns add`` would take it and it fits on one command line, else a :class:`SnapshotError`."""
    why = netns_invalid_name(name)
    if why is None and any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        why = f"namespace name {name!r} contains a control character"
    if why is not None:
        raise SnapshotError(f"bad namespace name: {why}", file=file,
                            expected=NETNS_NAME_EXPECTED + ", no control characters")
    return name


def check_dev_name(name, file: str | Path) -> str:
    """*name* if the kernel's ``dev_valid_name`` takes it, else a :class:`SnapshotError`."""
    if not isinstance(name, str):
        raise SnapshotError(f"bad device name {name!r}", file=file, expected="a string")
    why = dev_valid_name(name)
    if why is not None:
        raise SnapshotError(f"bad device name {name!r}: {why}", file=file, expected=DEV_NAME_EXPECTED)
    return name


_JSON_COMMANDS = [f for f in FILES if f.endswith(".json") and not f.startswith("bridge-")]
_BRIDGE_JSON = [f for f in FILES if f.endswith(".json") and f.startswith("bridge-")]
_ALWAYS = ["ruleset.nft", "xfrm-state.txt", "xfrm-policy.txt"]
_TOOLS = {"ip": "$IP", "bridge": "$BRIDGE", "nft": "$NFT", "sysctl": "$SYSCTL"}


def _tool(command: str) -> str:
    """*command* with its program as the variable the script resolved it to (``ip -j …`` → ``"$IP" -j …``)."""
    program, _, rest = command.partition(" ")
    return f'"{_TOOLS[program]}" {rest}'


def script() -> str:
    """The POSIX sh script that writes a snapshot of every namespace (busybox ash runs it)."""
    json_lines = "\n".join(f"\t\tsave {name} {_tool(FILES[name])}" for name in _JSON_COMMANDS)
    text_lines = "\n".join(f"\t\tsave {name} {_tool(cmd)}" for name, cmd in TEXT_FILES.items()
                           if not name.startswith("bridge-"))
    bridge_json = "\n".join(f"\t\tsave {name} {_tool(FILES[name])}" for name in _BRIDGE_JSON)
    bridge_text = "\n".join(f"\t\tsave {name} {_tool(cmd)}" for name, cmd in TEXT_FILES.items()
                            if name.startswith("bridge-"))
    always = "\n".join(f"\tsave {name} {_tool(FILES[name])}" for name in _ALWAYS)
    return f"""#!/bin/sh
# flowsim snapshot: writes DIR (default ./flowsim-snapshot) with one folder per network
# namespace (the initial one as {INIT}/) holding the output of ip, bridge, nft and sysctl,
# for `flowsim import DIR -o TOPOLOGY.toml`.  The file names are in flowsim's docs/snapshot.md.
# Run as root: sh snapshot.sh [DIR].  Uses only ip, bridge, nft, sysctl, mkdir and cat (and shell
# builtins); busybox ash runs it.  Without `ip -j` (OpenWrt's ip-tiny) it saves the text
# output instead, which flowsim import does not read: install ip-full (opkg install ip-full),
# and ip-bridge (opkg install ip-bridge) where `bridge` is missing.
out=${{1:-flowsim-snapshot}}
NS=

# the program of PATH (a busybox shell would run its own ip applet for a bare `ip`)
tool() {{
	saved=$IFS
	IFS=:
	for d in $PATH /usr/sbin /sbin /usr/bin /bin; do
		if [ -x "$d/$1" ]; then
			IFS=$saved
			echo "$d/$1"
			return 0
		fi
	done
	IFS=$saved
	echo "$1"
}}
IP=$(tool ip)
BRIDGE=$(tool bridge)
NFT=$(tool nft)
SYSCTL=$(tool sysctl)
if "$IP" -j link show lo >/dev/null 2>&1; then JSON=1; else JSON=0; fi
if "$BRIDGE" -j vlan show >/dev/null 2>&1; then BJSON=1; else BJSON=0; fi

# run a command in namespace $NS (empty: the initial one)
inns() {{
	if [ -n "$NS" ]; then "$IP" netns exec "$NS" "$@"; else "$@"; fi
}}

# save FILE COMMAND...: FILE holds the command's output if it succeeded; errors go to errors.txt
save() {{
	f=$1
	shift
	if text=$(inns "$@" 2>>"$dir/errors.txt"); then
		printf '%s\\n' "$text" >"$dir/$f"
	fi
}}

# snap NETNS FOLDER: every file of one namespace
snap() {{
	NS=$1
	dir=$out/$2
	mkdir -p "$dir" || exit 1
	: >"$dir/errors.txt"
	if [ "$JSON" = 1 ]; then
{json_lines}
	else
{text_lines}
	fi
	if [ "$BJSON" = 1 ]; then
{bridge_json}
	else
{bridge_text}
	fi
{always}
	inns {_tool(FILES["sysctl.txt"])} >"$dir/sysctl.txt" 2>>"$dir/errors.txt"
	if [ -e /proc/net/pppoe ]; then
		save pppoe.txt {FILES["pppoe.txt"]}
		save igmp.txt {FILES["igmp.txt"]}
	fi
}}

mkdir -p "$out" || exit 1
snap "" {INIT}
# `ip netns` keeps its names in /run/netns or /var/run/netns, as it was built (usually the same folder)
nl='
'
seen=$nl
for path in /run/netns/* /var/run/netns/*; do
	[ -e "$path" ] || continue
	name=${{path##*/}}
	case $seen in *"$nl$name$nl"*) continue ;; esac
	seen=$seen$name$nl
	if [ "$name" = {INIT} ]; then
		echo "flowsim snapshot: a namespace is named {INIT}, the folder of the initial one; rename it" >&2
		exit 1
	fi
	snap "$name" "$name"
done
echo "flowsim snapshot: wrote $out" >&2
"""


class NetnsSnapshot:
    """One namespace's folder: its files, read on demand (a missing file is "nothing of that kind")."""

    def __init__(self, name: str, path: Path):
        self.name = name
        self.path = path

    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, name: str) -> bool:
        return self.file(name).is_file()

    def text(self, name: str) -> str | None:
        """The file's text, or None when it is missing."""
        path = self.file(name)
        if not path.is_file():
            return None
        try:
            return path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise SnapshotError(f"cannot read: {exc.strerror}", file=path) from None
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"not UTF-8 at byte {exc.start}", file=path,
                                expected="the unmodified text output of " + FILES.get(name, name)) from None

    def json(self, name: str) -> list:
        """The file's JSON array ([] when missing or empty); a :class:`SnapshotError` naming the file if malformed."""
        text = self.text(name)
        if text is None or not text.strip():
            return []
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                                file=self.file(name), expected="the unmodified output of " + FILES[name]) from None
        except RecursionError:
            raise SnapshotError("malformed JSON: nested too deeply", file=self.file(name),
                                expected="the unmodified output of " + FILES[name]) from None
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise SnapshotError("not a JSON array of objects", file=self.file(name),
                                expected="the unmodified output of " + FILES[name])
        return value


class Snapshot:
    """A snapshot directory: its namespaces, the initial one (``init``) first, then by name."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise SnapshotError("not a directory", file=self.path,
                                expected="a snapshot directory (flowsim snapshot --script writes one)")
        folders = sorted((p for p in self.path.iterdir() if p.is_dir()), key=lambda p: (p.name != INIT, p.name))
        if not folders:
            raise SnapshotError("no namespace folders", file=self.path,
                                expected=f"one folder per namespace ({INIT}/ for the initial one)")
        self.namespaces = [NetnsSnapshot(check_netns_name(p.name, p), p) for p in folders]
