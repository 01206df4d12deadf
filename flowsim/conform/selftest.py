"""The kernel's own flowtable selftest, run in the conformance guest beside the shipped topologies.

``tools/testing/selftests/net/netfilter/nft_flowtable.sh`` (``selftests/netfilter/``
before 6.10) is what netfilter maintainers run on every flowtable patch.  This
module takes it from the Debian source package of exactly the booted kernel
(``linux-source-MAJOR.MINOR`` at the image's version — the source the kernel was
built from, Debian's patches included), boots the kit with the script and its
``lib.sh`` files in the initramfs, runs it with bash and reads its ``PASS:`` /
``FAIL:`` / ``SKIP:`` lines.  :data:`PAIRING` names, for each result line, the
shipped topology that models that scenario, so a run shows the kernel's verdict
next to the topology that flowsim checks the same way
(``tests/test_selftest_scenarios.py``).

The script ends by re-running itself with random MTUs and a file of up to 64 MB
when called without options; the guest calls it with the default MTUs given
explicitly (``-o 9000 -l 1500 -r 2000``) so that the run is the deterministic
part only, and with the file size of :data:`DEFAULT_FILESIZE` — the script's own
2 MB, which TCG moves in seconds per transfer.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tarfile
import time
from pathlib import Path, PurePosixPath

import attrs

from flowsim.conform.kernel import (
    GNU_DIR, SAVED_RESULTS, ConformSetupError, KernelKit, Timer, _download, cache_dir, private_apt,
    source_package,
)
from flowsim.conform.parse import results_text

__all__ = ["SelftestLine", "SelftestRun", "read_results", "PAIRING", "fetch_selftest", "selftest_files",
           "parse_selftest", "pair_rows", "pairing", "run_selftest", "DEFAULT_FILESIZE"]

SCRIPT = "nft_flowtable.sh"
# Where the script lives in the source tree (moved to net/netfilter in 6.10), and what it sources.
SELFTEST_DIRS = ("tools/testing/selftests/net/netfilter/", "tools/testing/selftests/netfilter/")
SELFTEST_LIBS = ("tools/testing/selftests/net/lib.sh", "tools/testing/selftests/net/lib/sh/")
GUEST_ROOT = "conform/selftests"
DEFAULT_MTUS = (9000, 1500, 2000)     # originator, link, responder: the script's defaults
DEFAULT_FILESIZE = 2 * 1024 * 1024    # the script's own filesize


@attrs.frozen
class SelftestLine:
    """One result line of the script: PASS / FAIL / SKIP and its message."""

    verdict: str
    message: str


# The script's result lines -> the shipped topology modelling that scenario, the script
# function that prints the line, and the scenario's row id in tests/test_selftest_scenarios.py
# (one per occurrence: the DSCP checks print the same text for the PMTU-off and the PMTU-on
# run).  Patterns, in order, on the message after "PASS: "/"FAIL: " (check_counters prints
# WHAT, check_dscp "WHAT: dscp packet counters match", failures "WHAT: original counter …"
# or "pmtu N: WHAT counters do not match …").
PAIRING: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (r"flow offloaded for ns1/ns2$|flow offload for ns1/ns2:", "selftest-base", "test_tcp_forwarding", ("base-v4",)),
    (r"IPv6 flow offload(ed)? for ns1/ns2", "selftest-base", "test_tcp_forwarding", ("base-v6",)),
    (r"(pmtu \d*: )?dscp_none\b", "selftest-base", "check_dscp", ("dscp-none",)),
    (r"(pmtu \d*: )?dscp_fwd\b", "selftest-dscp-fwd", "check_dscp", ("dscp-fwd-pmtu0", "dscp-fwd-pmtu1")),
    (r"(pmtu \d*: )?dscp_ingress\b", "selftest-dscp-ingress", "check_dscp",
     ("dscp-ingress-pmtu0", "dscp-ingress-pmtu1")),
    (r"(pmtu \d*: )?dscp_egress\b", "selftest-dscp-egress", "check_dscp", ("dscp-egress-pmtu0", "dscp-egress-pmtu1")),
    (r"flow offload for ns1/ns2 with masquerade +\(pmtu disabled\)", "selftest-nat-pmtu", "test_tcp_forwarding_nat",
     ("nat-masq-pmtu0",)),
    (r"flow offload for ns1/ns2 with dnat +\(pmtu disabled\)", "selftest-nat-pmtu", "test_tcp_forwarding_nat",
     ("nat-dnat-pmtu0",)),
    (r"flow offload for ns1/ns2 with masquerade ?($|:)", "selftest-nat-pmtu", "test_tcp_forwarding_nat",
     ("nat-masq-pmtu1",)),
    (r"flow offload for ns1/ns2 with dnat ?($|:)", "selftest-nat-pmtu", "test_tcp_forwarding_nat", ("nat-dnat-pmtu1",)),
    (r"flow offload for ns1/ns2 with masquerade IPIP tunnel over vlan", "selftest-ipip-vlan", "test_ipip",
     ("ipip-vlan-masq",)),
    (r"flow offload for ns1/ns2 with dnat IPIP tunnel over vlan", "selftest-ipip-vlan", "test_ipip", ("ipip-vlan-dnat",)),
    (r"flow offload for ns1/ns2 (with )?IP6IP6 tunnel over vlan", "selftest-ipip-vlan", "test_ipip", ("ipip-vlan6",)),
    (r"flow offload for ns1/ns2 with masquerade IPIP tunnel", "selftest-ipip", "test_ipip", ("ipip-masq",)),
    (r"flow offload for ns1/ns2 with dnat IPIP tunnel", "selftest-ipip", "test_ipip", ("ipip-dnat",)),
    (r"flow offload for ns1/ns2 (with )?IP6IP6 tunnel", "selftest-ipip", "test_ipip", ("ipip6",)),
    (r"flow offload for ns1/ns2 with masquerade on bridge", "selftest-bridge-nat", "test_bridge", ("bridge-masq",)),
    (r"flow offload for ns1/ns2 with dnat on bridge", "selftest-bridge-nat", "test_bridge", ("bridge-dnat",)),
    (r"flow offload for ns1/ns2 with masquerade bridge and VLAN", "selftest-bridge-vlan", "test_bridge",
     ("bridge-vlan-masq",)),
    (r"flow offload for ns1/ns2 with dnat bridge and VLAN", "selftest-bridge-vlan", "test_bridge",
     ("bridge-vlan-dnat",)),
    (r"(flow offload for ns1/ns2 with )?bridge \+ IPIP tunnel", "selftest-bridge-ipip", "test_bridge",
     ("bridge-ipip",)),
    (r"(flow offload for ns1/ns2 with )?bridge \+ IP6IP6 tunnel", "selftest-bridge-ipip", "test_bridge",
     ("bridge-ip6ip6",)),
    (r"ipsec tunnel mode for ns1/ns2", "selftest-ipsec", "do_esp", ("ipsec-v4",)),
    (r"IPv6 ipsec tunnel mode for ns1/ns2", "selftest-ipsec", "do_esp", ("ipsec-v6",)),
)

_RESULT = re.compile(r"^(PASS|FAIL|SKIP):\s?(.*)$")


def parse_selftest(output: str) -> list[SelftestLine]:
    """The script's result lines, in order (other output — nft listings, xfrm_stat — is context only)."""
    out = []
    for line in output.splitlines():
        m = _RESULT.match(line.rstrip("\r"))
        if m:
            out.append(SelftestLine(m.group(1), m.group(2)))
    return out


def pairing(line: SelftestLine) -> tuple[str, str] | None:
    """(topology, script function) of a result line; None for a line no shipped topology models."""
    for pattern, topology, function, _ in PAIRING:
        if re.match(pattern, line.message):
            return topology, function
    return None


def pair_rows(lines: list[SelftestLine] | tuple[SelftestLine, ...]) -> list[tuple[SelftestLine, str | None]]:
    """Each result line with its scenario row id (the n-th line of a pattern gets its n-th id)."""
    seen: dict[str, int] = {}
    out: list[tuple[SelftestLine, str | None]] = []
    for line in lines:
        row = None
        for pattern, _, _, ids in PAIRING:
            if re.match(pattern, line.message):
                n = seen.get(pattern, 0)
                seen[pattern] = n + 1
                row = ids[min(n, len(ids) - 1)]
                break
        out.append((line, row))
    return out


def _wanted(name: str) -> str | None:
    """The path below tools/testing/selftests/ of a member we keep (None: not needed)."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or any(p in ("..", "") for p in parts) or name.startswith("/"):
        return None
    rel = "/".join(parts[1:])          # drop linux-source-X.Y/
    if any(rel.startswith(d) for d in SELFTEST_DIRS) or any(rel == f or rel.startswith(f) for f in SELFTEST_LIBS):
        return rel[len("tools/testing/selftests/"):]
    return None


def fetch_selftest(kit: KernelKit, timer: Timer | None = None) -> Path:
    """The selftest files of *kit*'s kernel source, extracted once and cached."""
    timer = timer or Timer()
    pkg = source_package(kit)
    dest = cache_dir() / "selftests" / f"{pkg}_{kit.version.replace(':', '%')}"
    if (dest / "ok").exists():
        return dest
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    deb = _download(pkg, kit.version, debs, private_apt(kit.spec), timer)
    with timer.step("extract selftest"):
        _extract(deb, dest)
    return dest


def _extract(deb: Path, dest: Path) -> None:
    """Stream the source tarball out of the .deb and keep only the selftest files (names checked)."""
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    found = 0
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
            for member in outer:
                if not re.fullmatch(r"\./usr/src/linux-source-[\d.]+\.tar\.xz", member.name):
                    continue
                inner_fh = outer.extractfile(member)
                with tarfile.open(fileobj=inner_fh, mode="r|xz") as inner:
                    for m in inner:
                        rel = _wanted(m.name)
                        if rel is None or not m.isfile():
                            continue
                        data = inner.extractfile(m).read()
                        out = dest / rel
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(data)
                        out.chmod(0o755 if m.mode & 0o111 else 0o644)
                        found += 1
                break
    finally:
        proc.stdout.close()
        proc.wait()
    if not any(dest.rglob(SCRIPT)):
        raise ConformSetupError(f"{deb.name}: no {SCRIPT} under {' or '.join(SELFTEST_DIRS)} ({found} files kept)")
    (dest / "ok").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def script_dir(tree: Path) -> str:
    """The script's folder below the extracted tree (``net/netfilter`` since 6.10, ``netfilter`` before)."""
    hits = sorted(p.parent.relative_to(tree) for p in tree.rglob(SCRIPT))
    if not hits:
        raise ConformSetupError(f"{tree}: no {SCRIPT}")
    return str(hits[0])


def selftest_files(tree: Path, template: str, *, mtus: tuple[int, int, int] = DEFAULT_MTUS,
                   filesize: int = DEFAULT_FILESIZE) -> dict[str, bytes]:
    """The per-run archive: the selftest tree and an ``/init`` that runs the script and reports its output."""
    files = {f"{GUEST_ROOT}/{p.relative_to(tree)}": p.read_bytes()
             for p in sorted(tree.rglob("*")) if p.is_file() and p.name != "ok"}
    where = shlex.quote(f"/{GUEST_ROOT}/{script_dir(tree)}")
    o, l_, r = (int(x) for x in mtus)
    body = f"""
selftest() {{
  S=selftest
  echo "$(up)" | section selftest begin - -
  /sbin/modprobe -a nfnetlink_log nft_log xt_LOG nf_log_syslog sch_fq_codel 2>/dev/null
  ( cd {where} && PATH={GNU_DIR}:$PATH /bin/bash ./{SCRIPT} -o {o} -l {l_} -r {r} -s {int(filesize)} ) > /tmp/selftest.out 2>&1
  echo "$?" | section selftest status - -
  section selftest output - - < /tmp/selftest.out
  echo "$(up)" | section selftest finish - -
}}
"""
    files["init"] = template.replace("@SCENARIOS@", body).replace("@RUN@", "selftest\n").encode()
    return files


@attrs.frozen
class SelftestRun:
    """One boot of the script: the kernel, its result lines, exit status and full output."""

    kernel: str          # --kernel name
    package: str
    version: str
    release: str
    profile: str         # the flowsim profile modelling this kernel
    status: int | None   # the script's exit status (None: it did not finish)
    lines: tuple[SelftestLine, ...]
    output: str
    seconds: float

    def rows(self) -> list[dict]:
        """Each result line with the topology that models it (None: no shipped topology does)."""
        out = []
        for line, row in pair_rows(self.lines):
            pair = pairing(line)
            out.append({"verdict": line.verdict, "message": line.message, "row": row,
                        "topology": pair[0] if pair else None, "function": pair[1] if pair else None})
        return out


def read_results(kernel: str, text: str, *, package: str = SAVED_RESULTS, version: str = "",
                 seconds: float = 0.0, profile: str | None = None) -> SelftestRun:
    """A :class:`SelftestRun` from the guest's results channel (a boot now, or a saved ``results.log``)."""
    from flowsim.conform.kernel import KERNELS, spec_profile
    from flowsim.conform.parse import split_sections

    sections = {s.kind: s.text for s in split_sections(text) if s.scenario in ("selftest", None)}
    output = sections.get("output", "")
    status_text = sections.get("status", "").strip()
    release = sections.get("kernel", "").strip()
    if profile is None:
        profile = spec_profile(KERNELS[kernel], version or release, package)
    return SelftestRun(kernel, package, version, release, profile,
                       int(status_text) if status_text.isdigit() else None, tuple(parse_selftest(output)),
                       output, seconds)


def run_selftest(kernel: str, *, install: bool = True, workdir: Path | None = None, results: str | Path | None = None,
                 mtus: tuple[int, int, int] = DEFAULT_MTUS, filesize: int = DEFAULT_FILESIZE) -> SelftestRun:
    """Boot *kernel* and run its own nft_flowtable.sh once (the deterministic part, fixed MTUs); or read *results*."""
    from flowsim.conform.guest import boot_guest
    from flowsim.conform.kernel import KERNELS, build_base_initramfs, ensure_tools, fetch_kernel

    if kernel not in KERNELS:
        raise ConformSetupError(f"unknown kernel {kernel!r} (one of {', '.join(KERNELS)})")
    if results is not None:
        return read_results(kernel, results_text(results))
    timer = Timer()
    tools = ensure_tools(install=install)
    kit = fetch_kernel(KERNELS[kernel], timer)
    base = build_base_initramfs(kit, tools, timer)
    tree = fetch_selftest(kit, timer)
    template = (Path(__file__).parent / "data" / "init.sh").read_text()
    files = selftest_files(tree, template, mtus=mtus, filesize=filesize)
    work = workdir or cache_dir() / f"selftest-{kernel}"
    guest = boot_guest(kit, base, files, work, qemu=tools["qemu-system-x86_64"], timeout=3600)
    return read_results(kernel, guest.results, package=kit.package, version=kit.version, seconds=guest.seconds,
                        profile=kit.profile)
