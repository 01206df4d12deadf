"""Conformance set-up: host tools, the Debian kernel package and the initramfs, cached.

Theory of operation
-------------------
The conformance harness (:mod:`flowsim.conform.harness`) boots a real Debian kernel
under ``qemu-system-x86_64 -accel tcg`` (KVM is not usable on the machines
this project runs on) with an initramfs that holds busybox, the real
user-space tools (``ip``, ``bridge``, ``nft``, ``conntrack``, ``socat``,
``ethtool``, ``kmod``) with the shared libraries ``ldd`` names, and the
kernel modules the scenarios need.  Everything here is preparation, done
once and cached under ``$XDG_CACHE_HOME/flowsim/conform`` (default
``~/.cache/flowsim/conform``):

1. :func:`ensure_tools` finds the host programs; missing ones are installed
   with ``apt-get install --no-install-recommends`` when running as root,
   otherwise one :class:`ConformSetupError` names the packages to install.
2. :func:`resolve_kernel` asks ``apt-cache`` which package a
   :class:`KernelSpec` means today (``linux-image-6.12-amd64`` depends on
   ``linux-image-6.12.N+debM-amd64``; ``linux-image-amd64`` on
   ``linux-image-6.1.0-N-amd64``) and its version.
3. :func:`fetch_kernel` runs ``apt-get download`` and ``dpkg-deb -x`` (the
   package is never installed, so no initramfs/grub triggers run), keeps
   ``vmlinuz`` and the module closure of :data:`MODULE_ROOTS` (``.ko.xz``
   and ``.ko.zst`` decompressed on the host, re-indexed with ``depmod``)
   and throws the extracted tree away.
4. :func:`build_base_initramfs` writes the base archive (newc cpio, gzip)
   from that kit and the host tools; :func:`cpio_newc` also writes the small
   per-run archive (``/init`` and the scenario scripts) that the harness
   appends — the kernel unpacks concatenated archives in order.

Cache keys are the kernel package's name and version and a digest of the
host tools (path, size, mtime), so a new Debian kernel or tool upgrade
rebuilds only what changed.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import attrs

from flowsim.conform.debian import PrivateApt, machine_debian_source, parse_depends
from flowsim.errors import FlowsimError
from flowsim.profiles import PROFILES

__all__ = ["ConformSetupError", "KernelSpec", "KernelKit", "KERNELS", "TOOLS", "cache_dir", "ensure_tools",
           "resolve_kernel", "fetch_kernel", "build_base_initramfs", "cpio_newc", "CpioEntry", "Timer"]


class ConformSetupError(FlowsimError, RuntimeError):
    """The harness cannot prepare or run the guest (missing tool, no mirror, qemu failure)."""


@attrs.frozen
class KernelSpec:
    """A kernel line the harness can boot: how to find today's package for it."""

    name: str          # --kernel value
    meta: str          # Debian meta package whose Depends names the image
    pattern: str       # regex an image package name of this line matches
    profile: str | None = None   # the flowsim profile modelling it; None: chosen from the package version
    suite: str | None = None     # a Debian suite reached through a private apt folder (None: the machine's)


KERNELS: dict[str, KernelSpec] = {
    s.name: s for s in (
        KernelSpec("debian-6.12", "linux-image-6.12-amd64", r"^linux-image-6\.12\.\d+\+deb\d+-amd64$", "linux-6.12"),
        KernelSpec("debian-6.1", "linux-image-amd64", r"^linux-image-6\.1\.0-\d+-amd64$", "linux-6.1"),
        # sid and experimental move (sid will carry 7.3 soon): the profile follows the package version.
        KernelSpec("debian-sid", "linux-image-amd64", r"^linux-image-\d+\.\d+(\.\d+\+deb\d+)?-amd64$", suite="sid"),
        KernelSpec("debian-experimental", "linux-image-amd64", r"^linux-image-\d+\.\d+(\.\d+\+deb\d+)?-amd64$",
                   suite="experimental"),
    )
}


def upstream_version(version: str) -> tuple[int, int] | None:
    """(major, minor) of a Debian package version or a kernel release: ``7.3~rc7-1~exp1`` -> (7, 3)."""
    m = re.match(r"(?:\d+:)?(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def profile_for_version(version: str) -> str | None:
    """The named profile that models the kernel line of *version* (its ``kernel`` has the same major.minor)."""
    want = upstream_version(version)
    names = [p.name for p in PROFILES.values() if want is not None and upstream_version(p.kernel) == want]
    return names[-1] if names else None


#: the package label of a results channel replayed without its kit.json (harness.KIT_FILE)
SAVED_RESULTS = "(saved results)"


def spec_profile(spec: KernelSpec, version: str, package: str = "") -> str:
    """*spec*'s profile for the package *version*; one clear error when no profile models that kernel."""
    if spec.profile:
        return spec.profile
    name = profile_for_version(version)
    if name is None:
        known = ", ".join(f"{p.name} ({p.kernel})" for p in PROFILES.values())
        raise ConformSetupError(f"{spec.name} now carries {package or 'a kernel'} {version}: no flowsim profile "
                                f"models that kernel line (profiles: {known})")
    return name


# program -> Debian package; "guest" tools are copied into the initramfs.
TOOLS: dict[str, tuple[str, bool]] = {
    "qemu-system-x86_64": ("qemu-system-x86", False),
    "busybox": ("busybox-static", True),
    "ip": ("iproute2", True),
    "bridge": ("iproute2", True),
    "nft": ("nftables", True),
    "conntrack": ("conntrack", True),
    "socat": ("socat", True),
    "tcpdump": ("tcpdump", True),
    "pppd": ("ppp", True),
    "bash": ("bash", True),
    "ss": ("iproute2", True),
    "readlink": ("coreutils", True),
    "du": ("coreutils", True),
    "timeout": ("coreutils", True),
    "mktemp": ("coreutils", True),
    "seq": ("coreutils", True),
    "date": ("coreutils", True),
    "stat": ("coreutils", True),
    "head": ("coreutils", True),
    "cmp": ("diffutils", True),
    "xargs": ("findutils", True),
    "ethtool": ("ethtool", True),
    "kmod": ("kmod", True),
    "depmod": ("kmod", False),
    "dpkg-deb": ("dpkg", False),
    "apt-get": ("apt", False),
}

# Module directories (below lib/modules/VER/kernel) shipped whole, so that
# nft's and iproute2's on-demand module loading (request_module -> modprobe)
# finds whatever expression or link kind a topology uses.  br_netfilter is
# left out on purpose: loaded, it would send bridged IP through the IP hooks.
MODULE_ROOTS = ("net/netfilter", "net/ipv4/netfilter", "net/ipv6/netfilter", "net/bridge", "net/8021q",
                "drivers/net/veth.ko", "drivers/net/dummy.ko", "drivers/net/macvlan.ko", "drivers/net/vxlan",
                "net/ipv4/ipip.ko", "net/ipv4/ip_gre.ko", "net/ipv4/gre.ko", "net/ipv4/ip_tunnel.ko",
                "net/ipv4/tunnel4.ko", "net/ipv6/ip6_tunnel.ko", "net/ipv6/tunnel6.ko", "net/ipv6/sit.ko",
                "net/ipv6/ip6_gre.ko", "drivers/net/ppp", "net/xfrm", "net/key", "net/ipv4/esp4.ko",
                "net/ipv6/esp6.ko", "net/ipv4/esp4_offload.ko", "net/ipv6/esp6_offload.ko", "crypto/gcm.ko",
                "crypto/ghash-generic.ko", "crypto/ctr.ko", "crypto/seqiv.ko", "crypto/echainiv.ko",
                "crypto/authenc.ko", "crypto/authencesn.ko", "crypto/cbc.ko", "crypto/geniv.ko",
                "crypto/aes_generic.ko", "arch/x86/crypto/aesni-intel.ko",
                # seqiv's IV generator asks for the default RNG ("stdrng": drbg, seeded by jitterentropy);
                # Debian 6.1 builds them as modules, later kernels in
                "crypto/drbg.ko", "crypto/jitterentropy_rng.ko",
                # textsearch algorithms the conntrack helpers ask for by name (nf_conntrack_amanda's
                # textsearch_prepare("kmp") -> request_module("ts_kmp")): no modules.dep edge leads there
                "lib/ts_kmp.ko", "lib/ts_bm.ko", "lib/ts_fsm.ko",
                # ss reads each sender's tcp_info (its retransmissions) through sock_diag: without them it
                # falls back to /proc/net/tcp, which has no such counter
                "net/ipv4/inet_diag.ko", "net/ipv4/tcp_diag.ko")
MODULE_EXCLUDE = ("br_netfilter",)

_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


def _roots_digest() -> str:
    """Which modules a kit holds: a kit staged with other roots is staged again from its cached .deb."""
    return hashlib.sha256(repr((MODULE_ROOTS, MODULE_EXCLUDE)).encode()).hexdigest()[:12]


class Timer:
    """Wall-clock timings of the set-up and run steps (seconds), for the report."""

    def __init__(self):
        self.steps: dict[str, float] = {}

    def step(self, name: str):
        timer = self

        class _Step:
            def __enter__(self):
                self.t0 = time.monotonic()

            def __exit__(self, *exc):
                timer.steps[name] = round(timer.steps.get(name, 0.0) + time.monotonic() - self.t0, 2)

        return _Step()


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/flowsim/conform`` (default ``~/.cache/flowsim/conform``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flowsim" / "conform"


# ---------------------------------------------------------------------- tools

def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def find_tool(name: str) -> str | None:
    """The tool's path: PATH first, then the sbin directories a non-root PATH lacks."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def _apt(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", *args], capture_output=True, text=True, env=env)


def ensure_tools(names: Iterable[str] = TOOLS, *, install: bool = True) -> dict[str, str]:
    """Paths of the host tools; install the missing ones' packages when root (else one clear error)."""
    missing = {n: TOOLS[n][0] for n in names if find_tool(n) is None}
    if missing and install and _is_root() and shutil.which("apt-get"):
        pkgs = sorted(set(missing.values()))
        res = _apt(["install", "-y", "-qq", "--no-install-recommends", *pkgs])
        if res.returncode != 0:  # stale or absent package lists: update once and retry
            _apt(["update", "-qq"])
            res = _apt(["install", "-y", "-qq", "--no-install-recommends", *pkgs])
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConformSetupError(f"apt-get install {' '.join(pkgs)} failed: {last}")
        missing = {n: p for n, p in missing.items() if find_tool(n) is None}
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        why = "not root, so they cannot be installed here" if not _is_root() else "apt-get could not install them"
        raise ConformSetupError(f"missing tools {', '.join(sorted(missing))} ({why}): "
                                f"apt-get install --no-install-recommends {pkgs}")
    return {n: find_tool(n) for n in names}


# ---------------------------------------------------------------------- kernel package

@attrs.frozen
class KernelKit:
    """A kernel ready to boot: bzImage, release string and the staged module tree."""

    spec: KernelSpec
    package: str
    version: str      # Debian package version
    release: str      # uname -r
    root: Path        # cache folder of this package version
    vmlinuz: Path
    modules: Path     # staged tree: modules/lib/modules/RELEASE/...

    @property
    def profile(self) -> str:
        """The flowsim profile that models this kernel (from the package version for sid/experimental)."""
        return spec_profile(self.spec, self.version, self.package)


def _run(cmd: list[str], what: str, **kw) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except OSError as exc:
        raise ConformSetupError(f"{what}: cannot run {cmd[0]}: {exc.strerror}") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no output"])[-1]
        raise ConformSetupError(f"{what} failed ({' '.join(cmd[:3])} ...): {last}")
    return res.stdout


def _version_key(name: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def source_package(kit: KernelKit) -> str:
    """``linux-source-MAJOR.MINOR``: Debian's source of exactly the kernel in *kit* (same version)."""
    line = upstream_version(kit.version)
    if line is None:
        raise ConformSetupError(f"{kit.package} {kit.version}: cannot tell the kernel line of this version")
    return f"linux-source-{line[0]}.{line[1]}"


def private_apt(spec: KernelSpec) -> PrivateApt | None:
    """The private apt folder of *spec*'s suite (None for the machine's own suites)."""
    if spec.suite is None:
        return None
    source = machine_debian_source()
    if source is None:
        raise ConformSetupError(f"{spec.name}: the machine's apt sources name no Debian archive to fetch the "
                                f"{spec.suite} suite from (looked in /etc/apt/sources.list and sources.list.d)")
    apt = PrivateApt(spec.suite, cache_dir() / f"apt-{spec.suite}", source)
    apt.prepare()
    return apt


def _apt_query(apt: PrivateApt | None, args: list[str]) -> subprocess.CompletedProcess:
    if apt is not None:
        return apt.run("apt-cache", args)
    return subprocess.run(["apt-cache", *args], capture_output=True, text=True)


def resolve_kernel(spec: KernelSpec, apt: PrivateApt | None = None) -> tuple[str, str]:
    """(package, version) apt offers today for *spec* (meta package first, then a name search)."""
    pkg = None
    res = _apt_query(apt, ["depends", spec.meta])
    for m in re.finditer(r"Depends:\s*(\S+)", res.stdout if res.returncode == 0 else ""):
        if re.match(spec.pattern, m.group(1)):
            pkg = m.group(1)
    if pkg is None:
        res = _apt_query(apt, ["search", "--names-only", spec.pattern.rstrip("$").lstrip("^")])
        names = [line.split(" - ")[0].strip() for line in res.stdout.splitlines()]
        names = sorted((n for n in names if re.match(spec.pattern, n)), key=_version_key)
        pkg = names[-1] if names else None
    if pkg is None:
        where = f"Debian's {spec.suite} suite" if spec.suite else "the machine's apt sources"
        raise ConformSetupError(f"no {spec.name} kernel package known to apt in {where} (meta package {spec.meta}); "
                                "run apt-get update, or check the Debian package mirror")
    show = _apt_query(apt, ["show", "--no-all-versions", pkg])
    m = re.search(r"^Version:\s*(\S+)", show.stdout, re.M)
    if not m:
        raise ConformSetupError(f"apt-cache show {pkg}: no version")
    return pkg, m.group(1)


def kernel_packages(package: str, apt: PrivateApt | None) -> list[str]:
    """The packages holding *package*'s kernel and modules.

    Up to 6.x ``linux-image-REL`` holds both.  Since 7.x it is a meta package that depends on
    ``linux-binary-REL`` (``usr/lib/modules/REL/vmlinuz``) and ``linux-modules-REL``.
    """
    rel = package[len("linux-image-"):]
    deps = package_depends(package, apt)
    parts = [d for d in deps if d in (f"linux-binary-{rel}", f"linux-modules-{rel}")]
    return parts if parts else [package]


def package_depends(package: str, apt: PrivateApt | None = None) -> list[str]:
    """*package*'s Depends as apt (the machine's, or a private suite's) knows it; [] when apt does not."""
    res = _apt_query(apt, ["show", "--no-all-versions", package])
    return parse_depends(res.stdout) if res.returncode == 0 else []


def _kit_suite(root: Path) -> str:
    """The suite a cached kit came from ("" for the machine's own sources; kits older than the marker too)."""
    marker = root / "suite"
    return marker.read_text().strip() if marker.exists() else ""


def _kit_roots(root: Path) -> str:
    marker = root / "roots"
    return marker.read_text().strip() if marker.exists() else ""


def _cached_kits(spec: KernelSpec) -> list[Path]:
    base = cache_dir() / "kernels"
    if not base.is_dir():
        return []
    kits = [p for p in base.iterdir() if re.match(spec.pattern, p.name.split("_")[0]) and (p / "kit.ok").exists()
            and _kit_suite(p) == (spec.suite or "")]
    return sorted(kits, key=lambda p: _version_key(p.name))


def _kit_from(spec: KernelSpec, root: Path) -> KernelKit:
    package, version = root.name.split("_", 1)
    release = (root / "release").read_text().strip()
    return KernelKit(spec, package, version.replace("%", ":"), release, root, root / "vmlinuz", root / "modules")


def _refresh(apt: PrivateApt | None) -> None:
    """Fetch a private suite's package lists when missing or older than a day."""
    if apt is None:
        return
    age = apt.lists_age()
    if age is None or age > 24 * 3600:
        res = apt.update()
        if res.returncode != 0 and age is None:
            last = (res.stderr.strip().splitlines() or ["no output"])[-1]
            raise ConformSetupError(f"apt-get update of Debian's {apt.suite} suite failed: {last}")


def fetch_kernel(spec: KernelSpec, timer: Timer | None = None) -> KernelKit:
    """Download, extract and stage *spec*'s kernel (cached; offline falls back to the newest cached kit)."""
    timer = timer or Timer()
    try:
        apt = private_apt(spec)
        _refresh(apt)
        package, version = resolve_kernel(spec, apt)
    except ConformSetupError:
        kits = _cached_kits(spec)
        if kits:  # no mirror now, but an earlier run left a kit: use it
            return _kit_from(spec, kits[-1])
        if spec.suite is not None or not (_is_root() and shutil.which("apt-get")):
            raise
        _apt(["update", "-qq"])  # a fresh machine may have no package lists yet
        apt = None
        package, version = resolve_kernel(spec)
    spec_profile(spec, version, package)  # refuse before downloading a kernel no profile models
    root = cache_dir() / "kernels" / f"{package}_{version.replace(':', '%')}"
    if (root / "kit.ok").exists() and _kit_roots(root) == _roots_digest():
        return _kit_from(spec, root)
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    files = []
    for part in kernel_packages(package, apt):
        files.append(_download(part, version, debs, apt, timer))
    with timer.step("extract"):
        _stage_kit(files, root, spec.suite or "")
    return _kit_from(spec, root)


def _deb_file(debs: Path, package: str, version: str) -> Path | None:
    # apt-get download names the file PACKAGE_VERSION_ARCH.deb with ':' escaped as %3a
    want = version.replace(":", "%3a")
    return next((p for p in sorted(debs.glob(f"{package}_*.deb")) if p.name.split("_")[1] == want), None)


def _download(package: str, version: str, debs: Path, apt: PrivateApt | None, timer: Timer) -> Path:
    deb = _deb_file(debs, package, version)
    if deb is not None:
        return deb
    with timer.step("download"):
        if apt is not None:
            res = apt.run("apt-get", ["download", f"{package}={version}"], cwd=debs)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["no output"])[-1]
                raise ConformSetupError(f"apt-get download {package} ({apt.suite}) failed: {last}")
        else:
            args = ["apt-get", "download", f"{package}={version}"]
            if _is_root():  # the _apt sandbox user may not write the cache folder
                args[1:1] = ["-o", "APT::Sandbox::User=root"]
            _run(args, f"apt-get download {package}", cwd=debs)
    deb = _deb_file(debs, package, version)
    if deb is None:
        raise ConformSetupError(f"apt-get download {package} left no .deb in {debs}")
    return deb


def _modules_dir(x: Path) -> Path:
    """``lib/modules`` of an extracted kernel package: the 6.x layout, or 7.x's ``usr/lib/modules``."""
    for cand in (x / "lib/modules", x / "usr/lib/modules"):
        if cand.is_dir() and not cand.is_symlink():
            return cand
    raise ConformSetupError("the kernel package has no lib/modules or usr/lib/modules folder")


def _stage_kit(debs: list[Path] | Path, root: Path, suite: str = "") -> None:
    """dpkg-deb -x into a scratch folder; keep vmlinuz and the module closure; depmod the result."""
    if isinstance(debs, Path):
        debs = [debs]
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        x = Path(tmp)
        for deb in debs:
            _run(["dpkg-deb", "-x", str(deb), str(x)], f"dpkg-deb -x {deb.name}")
        mods = _modules_dir(x)
        if mods != x / "lib/modules":  # depmod -b ROOT looks in ROOT/lib/modules
            (x / "lib").mkdir(exist_ok=True)
            (x / "lib/modules").symlink_to(mods)
        names = ", ".join(d.name for d in debs)
        releases = sorted(p.name for p in mods.iterdir())
        if len(releases) != 1:
            raise ConformSetupError(f"{names}: expected one lib/modules/RELEASE, found {releases}")
        release = releases[0]
        vmlinuz = next((p for p in (x / "boot" / f"vmlinuz-{release}", mods / release / "vmlinuz") if p.exists()), None)
        if vmlinuz is None:
            raise ConformSetupError(f"{names}: no boot/vmlinuz-{release} nor lib/modules/{release}/vmlinuz")
        shutil.copy2(vmlinuz, root / "vmlinuz")
        src = mods / release
        _run([find_tool("depmod") or "depmod", "-b", str(x), release], "depmod (extracted tree)")
        wanted = _module_closure(src)
        dst = root / "modules/lib/modules" / release
        (dst / "kernel").mkdir(parents=True)
        for name in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            if (src / name).exists():
                shutil.copy2(src / name, dst / name)
        for rel in sorted(wanted):
            out = dst / _plain_ko(rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(_decompress(src / rel))
        _run([find_tool("depmod") or "depmod", "-b", str(root / "modules"), release], "depmod (staged modules)")
        (root / "release").write_text(release + "\n")
        (root / "suite").write_text(suite + "\n")
        (root / "roots").write_text(_roots_digest() + "\n")
    (root / "kit.ok").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def _plain_ko(rel: str) -> str:
    for suffix in (".xz", ".zst", ".gz"):
        if rel.endswith(".ko" + suffix):
            return rel[: -len(suffix)]
    return rel


def _decompress(path: Path) -> bytes:
    """A module's bytes, decompressed on the host (busybox-free, and fast under TCG)."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        zstd = find_tool("zstd")
        if zstd is None:
            raise ConformSetupError(f"{path.name} is zstd-compressed: apt-get install zstd")
        return subprocess.run([zstd, "-dc", str(path)], capture_output=True, check=True).stdout
    return data


def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """modules.dep: module path -> the paths it depends on (the full closure, as depmod writes it)."""
    deps = {}
    for line in text.splitlines():
        if ":" in line:
            mod, _, rest = line.partition(":")
            deps[mod.strip()] = rest.split()
    return deps


def _module_closure(src: Path) -> set[str]:
    """The module paths of :data:`MODULE_ROOTS` with their hard and soft dependencies."""
    deps = parse_modules_dep((src / "modules.dep").read_text())
    by_name = {_mod_name(m): m for m in deps}
    aliases = _aliases(src / "modules.alias")
    softdeps = _softdeps(src / "modules.softdep")
    todo = []
    for mod in deps:
        plain = _plain_ko(mod)
        rel = plain[len("kernel/"):] if plain.startswith("kernel/") else plain
        in_roots = any(rel == r or rel.startswith(r.rstrip("/") + "/") for r in MODULE_ROOTS)
        if in_roots and _mod_name(mod) not in MODULE_EXCLUDE:
            todo.append(mod)
    closure: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in closure:
            continue
        closure.add(mod)
        todo.extend(deps.get(mod, []))
        for soft in softdeps.get(_mod_name(mod), []):  # e.g. libcrc32c needs crc32c (crc32c_generic)
            name = soft.replace("-", "_")
            for target in [by_name.get(name)] + [by_name.get(a) for a in aliases.get(soft, [])]:
                if target:
                    todo.append(target)
    return closure


def _mod_name(path: str) -> str:
    return Path(_plain_ko(path)).name[: -len(".ko")].replace("-", "_")


def _aliases(path: Path) -> dict[str, list[str]]:
    """modules.alias: alias -> every module offering it (crc32c: the generic and the SSE4.2 one)."""
    out: dict[str, list[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "alias":
                out.setdefault(parts[1], []).append(parts[2].replace("-", "_"))
    return out


def _softdeps(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[0] == "softdep":
                out[parts[1].replace("-", "_")] = [p for p in parts[2:] if not p.endswith(":")]
    return out


# ---------------------------------------------------------------------- initramfs

@attrs.frozen
class CpioEntry:
    """One newc archive member: a directory, a regular file, a symlink or a device node."""

    path: str                 # inside the archive, no leading slash
    mode: int                 # full st_mode (type bits included)
    data: bytes = b""         # file content or symlink target
    rdev: tuple[int, int] = (0, 0)


def cpio_newc(entries: Iterable[CpioEntry]) -> bytes:
    """The entries as a newc ("070701") archive with its trailer, as the kernel's initramfs unpacker reads."""
    out = io.BytesIO()

    def pad(n: int) -> None:
        out.write(b"\0" * (-n % 4))

    def member(ino: int, e: CpioEntry) -> None:
        name = e.path.encode() + b"\0"
        nlink = 2 if stat.S_ISDIR(e.mode) else 1
        fields = (ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.rdev[0], e.rdev[1], len(name), 0)
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        out.write(header + name)
        pad(len(header) + len(name))
        out.write(e.data)
        pad(len(e.data))

    for ino, entry in enumerate(entries, 1):
        member(ino, entry)
    member(0, CpioEntry("TRAILER!!!", 0))
    out.write(b"\0" * (-out.tell() % 512))  # cpio's block padding
    return out.getvalue()


def _ldd(binary: str) -> list[str]:
    """The shared libraries (and loader) a dynamic binary needs; none for a static one."""
    res = subprocess.run(["ldd", binary], capture_output=True, text=True)
    libs = []
    for line in res.stdout.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(m.group(1))
    return libs


class _Tree:
    """The initramfs being assembled: parents created on demand, first writer wins."""

    def __init__(self):
        self.entries: dict[str, CpioEntry] = {}

    def dir(self, path: str) -> None:
        path = path.strip("/")
        if not path or path in self.entries:
            return
        self.dir(os.path.dirname(path))
        self.entries[path] = CpioEntry(path, stat.S_IFDIR | 0o755)

    def file(self, path: str, data: bytes, mode: int = 0o755) -> None:
        path = path.strip("/")
        self.dir(os.path.dirname(path))
        self.entries.setdefault(path, CpioEntry(path, stat.S_IFREG | mode, data))

    def symlink(self, path: str, target: str) -> None:
        path = path.strip("/")
        self.dir(os.path.dirname(path))
        self.entries.setdefault(path, CpioEntry(path, stat.S_IFLNK | 0o777, target.encode()))

    def host_file(self, path: str) -> None:
        """Copy a host file to the same path (symlinks followed: the guest gets the real bytes)."""
        real = os.path.realpath(path)
        self.file(path, Path(real).read_bytes(), os.stat(real).st_mode & 0o777)


# Guest paths of the real tools (the generated scripts call them by these paths,
# because busybox ash would run its own applet of the same name instead).
GUEST_BIN = {"ip": "/usr/sbin/ip", "bridge": "/usr/sbin/bridge", "nft": "/usr/sbin/nft",
             "conntrack": "/usr/sbin/conntrack", "socat": "/usr/bin/socat", "ethtool": "/usr/sbin/ethtool",
             "kmod": "/usr/bin/kmod", "tcpdump": "/usr/bin/tcpdump", "pppd": "/usr/sbin/pppd",
             "bash": "/bin/bash", "ss": "/usr/bin/ss"}

# pppd's kernel-mode PPPoE plugin (``plugin …/rp-pppoe.so``, attached to a known session with
# ``rp_pppoe_sess ID:PEER``; see flowsim.conform.pppoe): a pty session through the user-space
# ``pppoe`` would have no ndo_fill_forward_path and so never be offloaded.  Debian's
# pppoe-server is not used: it is built without kernel mode.
PPPD_PLUGIN_GLOB = "/usr/lib/pppd/*/pppoe.so"
PPPD_PLUGIN_PATH = "etc/ppp/plugins/rp-pppoe.so"  # the path the guest's pppd options name

# GNU tools for the kernel's own selftest scripts (``readlink -e``, ``du -sb``, ``date +%s%3N``
# in tools/testing/selftests/net/lib.sh and netfilter/nft_flowtable.sh), kept out of the
# default PATH so the harness's own scripts keep busybox's applets: the selftest runner puts
# this folder first in its PATH.
GNU_DIR = "/usr/libexec/flowsim-gnu"
GNU_TOOLS = ("readlink", "du", "timeout", "mktemp", "seq", "date", "stat", "head", "cmp", "xargs")


def tools_digest(tools: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(tools):
        st = os.stat(tools[name])
        h.update(f"{name}={tools[name]}:{st.st_size}:{int(st.st_mtime)}\n".encode())
    for plugin in sorted(glob.glob(PPPD_PLUGIN_GLOB)):
        st = os.stat(plugin)
        h.update(f"{plugin}:{st.st_size}:{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:12]


def build_base_initramfs(kit: KernelKit, tools: dict[str, str], timer: Timer | None = None) -> Path:
    """The cached base archive for *kit* and the host tools (busybox, tools, libraries, modules)."""
    timer = timer or Timer()
    out = kit.root / f"base-{tools_digest(tools)}.cpio.gz"
    if out.exists():
        return out
    with timer.step("initramfs"):
        tree = _Tree()
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "run/netns",
                  "var/run", "lib64", "root", "conform"):
            tree.dir(d)
        tree.entries["dev/console"] = CpioEntry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
        tree.entries["dev/null"] = CpioEntry("dev/null", stat.S_IFCHR | 0o666, rdev=(1, 3))
        busybox = tools["busybox"]
        tree.file("bin/busybox", Path(busybox).read_bytes())
        for lib in _ldd(busybox):
            tree.host_file(lib)
        for name, guest in [*GUEST_BIN.items(), *((n, f"{GNU_DIR}/{n}") for n in GNU_TOOLS)]:
            tree.file(guest, Path(os.path.realpath(tools[name])).read_bytes())
            for lib in _ldd(tools[name]):
                tree.host_file(lib)
        for plugin in sorted(glob.glob(PPPD_PLUGIN_GLOB))[-1:]:  # pppd's own plugin folder, and a fixed path
            tree.host_file(plugin)
            tree.symlink(PPPD_PLUGIN_PATH, plugin)
            for lib in _ldd(plugin):
                tree.host_file(lib)
        for alias in ("modprobe", "insmod", "lsmod", "rmmod", "depmod", "modinfo"):
            tree.symlink(f"sbin/{alias}", "/usr/bin/kmod")
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True).stdout.split()
        real = {"ip", "bridge", "modprobe", "insmod", "lsmod", "rmmod", "depmod", "modinfo"}
        for applet in applets:
            if applet not in real:
                tree.symlink(f"bin/{applet}", "busybox")
        tree.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        tree.file("etc/group", b"root:x:0:\n", 0o644)
        tree.file("etc/hosts", b"127.0.0.1 localhost\n::1 localhost\n", 0o644)
        for f in ("/etc/protocols", "/etc/services", "/etc/ethertypes"):
            if os.path.exists(f):
                tree.host_file(f)
        base = kit.modules
        for path in sorted(base.rglob("*")):
            rel = str(path.relative_to(base))
            if path.is_dir():
                tree.dir(rel)
            else:
                tree.file(rel, path.read_bytes(), 0o644)
        data = cpio_newc(sorted(tree.entries.values(), key=lambda e: e.path))
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(data, compresslevel=6))
        tmp.replace(out)
    return out
