"""Golden outputs: the exact ``--json`` (and capture bytes) of every command.

Each case is one ``flowsim`` command line with its ``--profile`` named
explicitly, so that a change of the default profile never rewrites them.
``python -m tests.golden.cases`` (from the repository root) regenerates the
files; ``tests/test_golden.py`` checks that the current code prints exactly
what is stored.  Change them only on purpose, in a commit that says why.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import pathlib
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parent
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.toml"))
CORPUS = sorted((ROOT / "tests" / "data" / "corpus" / "suricata-verify").glob("*.pcap"))
PROFILES = ("linux-6.1", "linux-6.12", "linux-6.18", "linux-6.19", "linux-7.0", "linux-7.1.5", "linux-7.2", "linux-7.3")


def _router_and_flow(topology: pathlib.Path) -> tuple[str, str, str] | None:
    """The first namespace with a flowtable, and its first traffic's addresses (for ``path``): the source the
    loaded topology gives it (the table's ``src``, else the kernel's selection)."""
    from flowsim.config.topology import load_topology

    doc = tomllib.loads(topology.read_text())
    routers = [name for name, ns in doc.get("netns", {}).items() if "flowtable" in ns.get("nft", "")]
    if not routers or not doc.get("traffic"):
        return None
    first = load_topology(topology).traffic[0]
    return routers[0], str(first.src), str(first.dst)


def cases() -> dict[str, list[str]]:
    """Case id (the golden file's relative name, without suffix) → argv."""
    out: dict[str, list[str]] = {}
    for topo in TOPOLOGIES:
        rel = str(topo.relative_to(ROOT))
        for profile in PROFILES:
            out[f"run/{topo.stem}/{profile}"] = ["run", rel, "-q", "--json", "--profile", profile, "--pcap-dir", "{pcap}"]
            out[f"explain/{topo.stem}/{profile}"] = ["explain", rel, "--json", "--profile", profile]
        flow = _router_and_flow(topo)
        if flow:
            router, src, dst = flow
            out[f"path/{topo.stem}/linux-7.1.5"] = ["path", rel, "--netns", router, "--src", src, "--dst", dst,
                                                    "--json", "--profile", "linux-7.1.5"]
    for pcap in CORPUS:
        rel = str(pcap.relative_to(ROOT))
        for profile in PROFILES:
            out[f"tuple/{pcap.stem}/{profile}"] = ["tuple", rel, "--json", "--profile", profile]
    for variant in ("v0", "v1", "v2", "v3"):
        for inner in ("ipip", "ip6tnl", "vxlan", "geneve", "none"):
            for mode in ("transport", "tunnel"):
                out[f"xfrm/{variant}-{inner}-{mode}"] = ["xfrm", "--variant", variant, "--inner", inner, "--mode", mode,
                                                         "--esp-offload-module", "--json", "--pcap", "{pcap}/xfrm.pcap"]
        out[f"xfrm/{variant}-offload-dev"] = ["xfrm", "--variant", variant, "--offload-dev", "--no-hw-gso", "--json"]
    for mode in ("per-record", "udp-gso"):
        for crypto in ("sync", "async"):
            for cipher in ("aes-gcm", "chacha20-poly1305"):
                out[f"ovpn/{mode}-{crypto}-{cipher}"] = ["ovpn", "--mode", mode, "--crypto", crypto, "--cipher", cipher,
                                                         "--skbs", "2", "--json", "--pcap", "{pcap}/ovpn.pcap"]
        out[f"ovpn/{mode}-gso-by-frags"] = ["ovpn", "--mode", mode, "--gso-by-frags", "--json"]
        out[f"ovpn/{mode}-exhaustion"] = ["ovpn", "--mode", mode, "--first-packet-id", "0xfffffffd", "--json"]
    return out


def produce(argv: list[str]) -> dict:
    """Run one command in process; its exit status, output and the digest of every capture it wrote."""
    from flowsim.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.replace("{pcap}", tmp) for a in argv]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
        captures = {p.relative_to(tmp).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in sorted(pathlib.Path(tmp).rglob("*")) if p.is_file()}
    return {"argv": [a.replace(tmp, "{pcap}") for a in argv], "status": status,
            "stdout": out.getvalue().replace(tmp, "{pcap}"),
            "stderr": err.getvalue().replace(tmp, "{pcap}") if status else "", "captures": captures}


def path_of(case: str) -> pathlib.Path:
    return GOLDEN / f"{case}.json"


def main() -> int:
    """``python -m tests.golden.cases [--profile P]... [PREFIX]...``: (re)generate the cases whose id starts with
    a PREFIX (all without one); ``--profile P`` keeps only the cases of profile P (ids ending in ``/P``), so a new
    profile's files can be written without touching the others."""
    args = sys.argv[1:]
    profiles: list[str] = []
    while "--profile" in args:
        at = args.index("--profile")
        profiles.append(args[at + 1])
        del args[at:at + 2]
    wanted = args
    for case, argv in cases().items():
        if wanted and not any(case.startswith(w) for w in wanted):
            continue
        if profiles and not any(case.endswith("/" + p) for p in profiles):
            continue
        path = path_of(case)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(produce(argv), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
