"""Kernel kits for the conformance guest: Debian suites through a private apt folder, both package layouts.

These run without network or qemu: apt sources are parsed from strings, the
packages are built here with ``dpkg-deb --build``, and the staging is the
same :func:`flowsim.conform.kernel._stage_kit` a real run uses.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.conform import kernel as kk
from flowsim.conform.debian import PrivateApt, machine_debian_source, parse_sources
from flowsim.profiles import PROFILES

DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

ONE_LINE = """\
# deb http://old.invalid/debian bookworm main
deb [arch=amd64 signed-by=/etc/apt/keyrings/k.gpg] http://other.invalid/debian trixie main contrib
deb http://security.invalid/debian-security trixie-security main
"""


def test_parse_deb822_keeps_uri_suites_and_keyring():
    srcs = parse_sources(DEB822, "debian.sources", deb822=True)
    assert [s.uri for s in srcs] == ["http://mirror.invalid/debian", "http://mirror.invalid/debian-security"]
    assert srcs[0].suites == ("bookworm", "bookworm-updates")
    assert srcs[0].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_parse_one_line_with_options():
    srcs = parse_sources(ONE_LINE, "sources.list", deb822=False)
    assert srcs[0].uri == "http://other.invalid/debian" and srcs[0].suites == ("trixie",)
    assert srcs[0].signed_by == "/etc/apt/keyrings/k.gpg"
    assert srcs[0].components == ("main", "contrib")


def test_machine_source_is_the_main_archive_not_security_nor_third_party(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.invalid/node_20.x\nSuites: nodistro\nComponents: main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    src = machine_debian_source(tmp_path)
    assert src is not None and src.uri == "http://mirror.invalid/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(ONE_LINE)
    assert machine_debian_source(tmp_path).uri == "http://other.invalid/debian"
    (tmp_path / "sources.list").write_text("")
    assert machine_debian_source(tmp_path) is None


def test_private_apt_sees_only_its_suite_and_keeps_signature_checks(tmp_path):
    src = parse_sources(DEB822, "debian.sources", deb822=True)[0]
    apt = PrivateApt("sid", tmp_path / "apt-sid", src)
    apt.prepare()
    text = (tmp_path / "apt-sid" / "sources" / "flowsim.sources").read_text()
    assert "Suites: sid\n" in text and "URIs: http://mirror.invalid/debian\n" in text
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in text
    opts = " ".join(apt.options())
    assert "Dir::Etc::SourceList=/dev/null" in opts and f"Dir::State::Lists={tmp_path / 'apt-sid' / 'lists'}" in opts
    assert "trusted" not in text + opts and "AllowInsecure" not in opts
    assert apt.lists_age() is None


@pytest.mark.parametrize("version, line", [("7.2.13-1", (7, 2)), ("7.3~rc7-1~exp1", (7, 3)),
                                           ("6.12.57-1", (6, 12)), ("1:6.1.158-1", (6, 1)),
                                           ("7.2.13+deb14-amd64", (7, 2))])
def test_upstream_version(version, line):
    assert kk.upstream_version(version) == line


def test_profile_follows_the_package_version_and_refuses_an_unmodelled_line():
    sid = kk.KERNELS["debian-sid"]
    for profile in PROFILES.values():
        major, minor = kk.upstream_version(profile.kernel)
        assert kk.profile_for_version(f"{major}.{minor}.1-1") is not None
    with pytest.raises(kk.ConformSetupError, match="no flowsim profile models that kernel line"):
        kk.spec_profile(sid, "9.9.1-1", "linux-image-9.9.1+deb99-amd64")
    assert kk.spec_profile(kk.KERNELS["debian-6.12"], "9.9.1-1") == "linux-6.12"   # fixed lines keep theirs


def test_sid_pattern_matches_both_image_names():
    pat = kk.KERNELS["debian-sid"].pattern
    import re
    assert re.match(pat, "linux-image-7.2.13+deb14-amd64") and re.match(pat, "linux-image-7.3-amd64")
    assert not re.match(pat, "linux-image-7.3-rt-amd64") and not re.match(pat, "linux-image-7.3-amd64-dbg")


def _deb(tmp: Path, name: str, files: dict[str, bytes]) -> Path:
    root = tmp / f"{name}-root"
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 9.9.9-1\nArchitecture: amd64\n"
                                             "Maintainer: t <t@example.org>\nDescription: test\n")
    out = tmp / f"{name}_9.9.9-1_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zxz", str(root), str(out)], check=True, capture_output=True)
    return out


needs_dpkg = pytest.mark.skipif(not (shutil.which("dpkg-deb") and kk.find_tool("depmod")),
                                reason="dpkg-deb and depmod (kmod) are needed to build and stage test packages")


@needs_dpkg
def test_stage_7x_layout_binary_and_modules_packages(tmp_path):
    """7.x: vmlinuz in linux-binary-REL under usr/lib/modules/REL, modules in linux-modules-REL."""
    rel = "9.9.9-test"
    ko = lzma.compress(b"not an ELF: depmod only indexes it")
    binary = _deb(tmp_path, "linux-binary-9.9.9-test", {f"usr/lib/modules/{rel}/vmlinuz": b"bzImage"})
    modules = _deb(tmp_path, "linux-modules-9.9.9-test", {f"usr/lib/modules/{rel}/kernel/net/ipv4/ipip.ko.xz": ko,
                                                         f"usr/lib/modules/{rel}/kernel/fs/unrelated.ko.xz": ko})
    root = tmp_path / "kernels" / "linux-image-9.9.9-test_9.9.9-1"
    root.parent.mkdir()
    kk._stage_kit([binary, modules], root, "sid")
    assert (root / "vmlinuz").read_bytes() == b"bzImage"
    assert (root / "release").read_text() == rel + "\n" and (root / "suite").read_text() == "sid\n"
    staged = root / "modules/lib/modules" / rel / "kernel"
    assert (staged / "net/ipv4/ipip.ko").read_bytes() == b"not an ELF: depmod only indexes it"
    assert not (staged / "fs/unrelated.ko").exists()   # only the module closure the scenarios need
    assert (root / "kit.ok").exists()


@needs_dpkg
def test_stage_6x_layout_single_image_package(tmp_path):
    rel = "9.9.9-old"
    image = _deb(tmp_path, "linux-image-9.9.9-old", {f"boot/vmlinuz-{rel}": b"old bzImage",
                                                     f"lib/modules/{rel}/kernel/net/8021q/8021q.ko": b"ko"})
    root = tmp_path / "k" / "linux-image-9.9.9-old_9.9.9-1"
    root.parent.mkdir()
    kk._stage_kit(image, root)
    assert (root / "vmlinuz").read_bytes() == b"old bzImage"
    assert (root / "modules/lib/modules" / rel / "kernel/net/8021q/8021q.ko").read_bytes() == b"ko"
    assert (root / "suite").read_text() == "\n"


@needs_dpkg
def test_stage_refuses_a_package_without_a_kernel(tmp_path):
    modules = _deb(tmp_path, "linux-modules-9.9.9-x", {"usr/lib/modules/9.9.9-x/kernel/net/ipv4/ipip.ko": b"ko"})
    root = tmp_path / "k" / "linux-image-9.9.9-x_9.9.9-1"
    root.parent.mkdir()
    with pytest.raises(kk.ConformSetupError, match="no boot/vmlinuz-9.9.9-x nor lib/modules/9.9.9-x/vmlinuz"):
        kk._stage_kit([modules], root)


def test_cached_kits_do_not_mix_suites(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = kk.cache_dir() / "kernels"
    for name, suite in (("linux-image-6.12.57+deb13-amd64_6.12.57-1", None), ("linux-image-7.2.13+deb14-amd64_7.2.13-1",
                                                                                "sid")):
        (base / name).mkdir(parents=True)
        (base / name / "kit.ok").write_text("x")
        if suite:
            (base / name / "suite").write_text(suite + "\n")
    assert [p.name.split("_")[0] for p in kk._cached_kits(kk.KERNELS["debian-sid"])] == ["linux-image-7.2.13+deb14-amd64"]
    assert [p.name.split("_")[0] for p in kk._cached_kits(kk.KERNELS["debian-6.12"])] == ["linux-image-6.12.57+deb13-amd64"]
    assert kk._cached_kits(kk.KERNELS["debian-experimental"]) == []


def test_parse_depends_keeps_the_first_alternative_without_versions():
    from flowsim.conform.debian import parse_depends

    show = ("Package: linux-image-7.2.13+deb14-amd64\nVersion: 7.2.13-1\nDepends: dracut | initramfs-tools (>= 0.120), "
            "linux-binary-7.2.13+deb14-amd64 (= 7.2.13-1), linux-modules-7.2.13+deb14-amd64 (= 7.2.13-1)\n")
    assert parse_depends(show) == ["dracut", "linux-binary-7.2.13+deb14-amd64", "linux-modules-7.2.13+deb14-amd64"]
    assert parse_depends("Package: x\n") == []
