"""``flowsim conform --patch``: series parsing, Makefile objects, refusals and failing hunks (no qemu, no network).

The real runs (``slow``) build the patched modules of Debian sid's 7.2.13 in a cached build root and boot
them: the patch making ``nf_flow_offload_ipv6_hook`` accept every packet at once turns the cover-letter
scenario ip6ip6-rx from every fact agreeing into fast-path differences; a comment-only patch changes nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flowsim.conform.patch import (
    PatchError, PatchInfo, apply_series, check_touched, kbuild_for, modules_for, parse_makefile, read_series,
    series_digest, split_mbox, touched_files,
)
from tests.realkernel import patched_boot

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "tests" / "data" / "patches"

# The flowtable lines of net/netfilter/Makefile in Linux 7.2 (Debian's linux-source-7.2), and a built-in one.
MAKEFILE = """\
# SPDX-License-Identifier: GPL-2.0
netfilter-objs := core.o nf_log.o
obj-$(CONFIG_NETFILTER) = netfilter.o
obj-y += utils.o

# flow table infrastructure
obj-$(CONFIG_NF_FLOW_TABLE)\t+= nf_flow_table.o
nf_flow_table-objs\t\t:= nf_flow_table_core.o nf_flow_table_ip.o \\
\t\t\t\t   nf_flow_table_path.o \\
\t\t\t\t   nf_flow_table_offload.o nf_flow_table_xdp.o
nf_flow_table-$(CONFIG_NF_FLOW_TABLE_PROCFS) += nf_flow_table_procfs.o
ifeq ($(CONFIG_NF_FLOW_TABLE),m)
nf_flow_table-$(CONFIG_DEBUG_INFO_BTF_MODULES) += nf_flow_table_bpf.o
else ifeq ($(CONFIG_NF_FLOW_TABLE),y)
nf_flow_table-$(CONFIG_DEBUG_INFO_BTF) += nf_flow_table_bpf.o
endif

obj-$(CONFIG_NF_FLOW_TABLE_INET) += nf_flow_table_inet.o
obj-$(CONFIG_NFT_FLOW_OFFLOAD) += nft_flow_offload.o
obj-$(CONFIG_NFT_SYNPROXY) += nft_synproxy.o
"""
CONFIG = {"CONFIG_NETFILTER": "y", "CONFIG_NF_FLOW_TABLE": "m", "CONFIG_NF_FLOW_TABLE_INET": "m",
          "CONFIG_NFT_FLOW_OFFLOAD": "m", "CONFIG_DEBUG_INFO_BTF_MODULES": "y"}


def _diff(path: str, old: str = "a", new: str = "b") -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n")


def _message(sha: str, subject: str, body: str) -> str:
    return (f"From {sha} Mon Sep 17 00:00:00 2001\nFrom: A <a@example.invalid>\nDate: Tue, 1 Dec 2026 17:08:52 +0000\n"
            f"Subject: [PATCH] {subject}\n\nWhy.\n---\n{body}-- \n2.39.5\n\n")


# ---------------------------------------------------------------------- series

def test_single_format_patch_file():
    series = read_series([str(PATCHES / "ipv6-hook-accept.patch")])
    assert len(series) == 1
    p = series[0]
    assert p.name == "ipv6-hook-accept.patch"
    assert p.files == ("net/netfilter/nf_flow_table_ip.c",)
    assert p.subject.startswith("netfilter: flowtable: nf_flow_offload_ipv6_hook accepts every packet")


def test_mbox_of_several_patches_in_order(tmp_path):
    mbox = tmp_path / "series.mbox"
    mbox.write_text(_message("1" * 40, "one", _diff("net/netfilter/nf_flow_table_ip.c"))
                    + _message("2" * 40, "two", _diff("net/netfilter/nft_flow_offload.c")
                               + _diff("net/netfilter/nf_flow_table_core.c")))
    series = read_series([str(mbox)])
    assert [p.name for p in series] == ["series.mbox#1", "series.mbox#2"]
    assert [p.subject for p in series] == ["one", "two"]
    assert series[1].files == ("net/netfilter/nft_flow_offload.c", "net/netfilter/nf_flow_table_core.c")
    assert len(split_mbox(mbox.read_text())) == 2


def test_folder_of_patches_sorted_and_digest(tmp_path):
    (tmp_path / "0002-b.patch").write_text(_message("2" * 40, "b", _diff("net/x/b.c")))
    (tmp_path / "0001-a.patch").write_text(_message("1" * 40, "a", _diff("net/x/a.c")))
    (tmp_path / "notes.txt").write_text("not a patch")
    series = read_series([str(tmp_path)])
    assert [p.name for p in series] == ["0001-a.patch", "0002-b.patch"]
    assert series_digest(series, "kit") != series_digest(series[::-1], "kit")
    assert series_digest(series, "kit") != series_digest(series, "other-kit")


def test_series_errors(tmp_path):
    with pytest.raises(PatchError, match="no such file or folder"):
        read_series([str(tmp_path / "missing.patch")])
    with pytest.raises(PatchError, match="holds no .patch file"):
        read_series([str(tmp_path)])
    (tmp_path / "x.patch").write_text("just words\n")
    with pytest.raises(PatchError, match="no unified diff"):
        read_series([str(tmp_path / "x.patch")])
    with pytest.raises(PatchError, match="outside the kernel tree"):
        touched_files("--- a/../etc/passwd\n+++ b/../etc/passwd\n")


def test_deleted_file_named_by_its_old_path():
    text = "--- a/net/x/gone.c\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    assert touched_files(text) == ("net/x/gone.c",)


# ---------------------------------------------------------------------- Makefile objects

def test_makefile_objects_find_the_module():
    assert modules_for(["net/netfilter/nf_flow_table_ip.c", "net/netfilter/nf_flow_table_core.c"], MAKEFILE,
                       CONFIG) == ["nf_flow_table"]
    assert modules_for(["net/netfilter/nf_flow_table_inet.c", "net/netfilter/nft_flow_offload.c"], MAKEFILE,
                       CONFIG) == ["nf_flow_table_inet", "nft_flow_offload"]
    # a member under a CONFIG option Debian sets: still the composite module
    assert modules_for(["net/netfilter/nf_flow_table_bpf.c"], MAKEFILE, CONFIG) == ["nf_flow_table"]
    lines = parse_makefile(MAKEFILE)
    objs = next(ln for ln in lines if ln.name == "nf_flow_table" and ln.suffix == "objs")
    assert objs.objects == ("nf_flow_table_core.o", "nf_flow_table_ip.o", "nf_flow_table_path.o",
                            "nf_flow_table_offload.o", "nf_flow_table_xdp.o")
    assert objs.line == 8


def test_kbuild_copies_the_modules_lines_with_their_conditions():
    kbuild = kbuild_for(["nf_flow_table"], MAKEFILE)
    assert "nf_flow_table-objs\t\t:= nf_flow_table_core.o nf_flow_table_ip.o \\\n" in kbuild
    # procfs only under its option, bpf in its ifeq as in the Makefile
    assert "nf_flow_table-$(CONFIG_NF_FLOW_TABLE_PROCFS) += nf_flow_table_procfs.o" in kbuild
    assert "ifeq ($(CONFIG_NF_FLOW_TABLE),m)\nnf_flow_table-$(CONFIG_DEBUG_INFO_BTF_MODULES)" in kbuild
    assert kbuild.rstrip().endswith("obj-m += nf_flow_table.o")
    # nothing else of the directory is built
    for other in ("nf_flow_table_inet.o", "nft_synproxy.o", "netfilter.o", "utils.o"):
        assert other not in kbuild


def test_refuses_built_in_code():
    with pytest.raises(PatchError, match=r"Makefile:4: utils.o is built into the kernel \(obj-y\)"):
        modules_for(["net/netfilter/utils.c"], MAKEFILE, CONFIG)
    with pytest.raises(PatchError, match=r"Makefile:3: core.o \(part of netfilter.o\) is built into the kernel \(CONFIG_NETFILTER=y"):
        modules_for(["net/netfilter/core.c"], MAKEFILE, CONFIG)


def test_refuses_code_debian_does_not_build():
    with pytest.raises(PatchError, match="CONFIG_NF_FLOW_TABLE_PROCFS, which Debian's config does not set"):
        modules_for(["net/netfilter/nf_flow_table_procfs.c"], MAKEFILE, CONFIG)
    with pytest.raises(PatchError, match="CONFIG_NFT_SYNPROXY, which Debian's config does not set"):
        modules_for(["net/netfilter/nft_synproxy.c"], MAKEFILE, CONFIG)
    with pytest.raises(PatchError, match="no object line builds nf_conntrack_core.o"):
        modules_for(["net/netfilter/nf_conntrack_core.c"], MAKEFILE, CONFIG)


def test_refuses_a_header(tmp_path):
    p = tmp_path / "h.patch"
    p.write_text(_message("1" * 40, "h", _diff("net/netfilter/nf_flow_table_ip.c")
                          + _diff("include/net/netfilter/nf_flow_table.h")))
    with pytest.raises(PatchError, match=r"changes the header include/net/netfilter/nf_flow_table.h: .*out of scope"):
        check_touched(read_series([str(p)]))
    p.write_text(_message("1" * 40, "h", _diff("include/linux/netdevice.h")))
    with pytest.raises(PatchError, match="netdevice.h"):
        check_touched(read_series([str(p)]))


def test_documentation_and_selftests_are_ignored():
    series = read_series([str(PATCHES / "ipv6-hook-accept.patch")])
    use, ignored = check_touched(series)
    assert use == ["net/netfilter/nf_flow_table_ip.c"] and ignored == []


# ---------------------------------------------------------------------- applying

@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_series_applies_in_order(tmp_path):
    (tmp_path / "net/x").mkdir(parents=True)
    (tmp_path / "net/x/a.c").write_text("a\n")
    first = tmp_path / "1.patch"
    second = tmp_path / "2.patch"
    first.write_text(_message("1" * 40, "first", _diff("net/x/a.c", "a", "b")))
    second.write_text(_message("2" * 40, "second", _diff("net/x/a.c", "b", "c")))
    apply_series(read_series([str(first), str(second)]), tmp_path)
    assert (tmp_path / "net/x/a.c").read_text() == "c\n"


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_failing_hunk_names_patch_file_and_hunk(tmp_path):
    tree = tmp_path / "tree"
    (tree / "net/x").mkdir(parents=True)
    (tree / "net/x/a.c").write_text("one\ntwo\nthree\n")
    p = tmp_path / "0001-x.patch"
    p.write_text(_message("1" * 40, "net: x: change", _diff("net/x/a.c", "zzz", "yyy")))
    with pytest.raises(PatchError) as exc:
        apply_series(read_series([str(p)]), tree, "linux-source-7.2 7.2.13-1")
    msg = str(exc.value)
    assert "patch 0001-x.patch (net: x: change) does not apply to linux-source-7.2 7.2.13-1" in msg
    assert "net/x/a.c: hunk #1 FAILED at line 1" in msg
    assert (tree / "net/x/a.c").read_text() == "one\ntwo\nthree\n"   # the dry run left the tree alone
    assert not list(tree.rglob("*.rej"))
    missing = tmp_path / "0002-y.patch"
    missing.write_text(_message("2" * 40, "y", _diff("net/y/b.c")))
    with pytest.raises(PatchError, match="net/y/b.c: no such file in the kernel source"):
        apply_series(read_series([str(missing)]), tree)


def test_label_names_release_series_and_modules():
    info = PatchInfo(("tests/data/patches/ipv6-hook-accept.patch",), ("x",), "d", ("net/netfilter/nf_flow_table.ko",),
                     (), "7.2.13+deb14-amd64")
    assert info.label() == "7.2.13+deb14-amd64 + ipv6-hook-accept.patch (1 module rebuilt)"
    assert info.to_json()["label"] == info.label()


# ---------------------------------------------------------------------- real kernel (slow)

def _run_patched(patch: str):
    from flowsim.conform.harness import run_conformance

    return patched_boot(run_conformance, [str(ROOT / "topologies" / "ip6ip6-rx.toml")], "debian-sid",
                        max_packets=100, patches=[str(PATCHES / patch)])


@pytest.mark.slow
def test_patch_accepting_ipv6_at_once_makes_the_fast_path_differ():
    """nf_flow_offload_ipv6_hook returning NF_ACCEPT at once: no IPv6 packet is forwarded by the flowtable on
    the real kernel, while flowsim's linux-7.2 still offloads: the fast-path facts differ."""
    from flowsim.conform.compare import format_facts

    result = _run_patched("ipv6-hook-accept.patch")
    assert result.patch is not None and result.patch["modules"] == ["net/netfilter/nf_flow_table.ko"]
    assert result.kernel_label == "7.2.13+deb14-amd64 + ipv6-hook-accept.patch (1 module rebuilt)"
    differs = [f for f in result.facts if f.status == "differs"]
    assert differs, format_facts(result.facts)
    assert any(f.fact.startswith("fast path") for f in differs), format_facts(differs)
    fast = [f for f in result.facts if f.fact.startswith("fast path")]
    assert all(int(f.kernel) == 0 for f in fast), format_facts(fast)


@pytest.mark.slow
def test_comment_only_patch_changes_nothing():
    """A comment-only patch to nf_flow_table_ip.c: the rebuilt module behaves as the stock one."""
    from flowsim.conform.compare import format_facts

    result = _run_patched("comment-only.patch")
    problems = [f for f in result.facts if f.status not in ("agrees", "known")]
    notes = [n for s in result.scenarios for n in s.observation.notes if "timeout" in n]
    if problems and notes:  # the guest's wait_bytes gave up on a loaded host (TCG): one more boot
        result = _run_patched("comment-only.patch")
        problems = [f for f in result.facts if f.status not in ("agrees", "known")]
        notes = [n for s in result.scenarios for n in s.observation.notes if "timeout" in n]
    assert result.patch is not None and result.patch["modules"] == ["net/netfilter/nf_flow_table.ko"]
    assert not problems, format_facts(problems) + "\n".join(notes)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLOWSIM_CONFORM_HEAVY") != "1",
                    reason="a third patched boot: run by make conform (FLOWSIM_CONFORM_HEAVY=1)")
def test_nft_flow_offload_patch_is_built_and_changes_nothing():
    """A comment-only patch to nft_flow_offload.c (the `flow add` expression, nft_flow_offload_eval): the kernel's
    Makefile maps it to nft_flow_offload.ko, which is rebuilt and loaded; every fact agrees as without the patch
    (sid, 2026-12-01: 24 of 24)."""
    from flowsim.conform.compare import format_facts

    result = _run_patched("flow-offload-comment-only.patch")
    assert result.patch is not None and result.patch["modules"] == ["net/netfilter/nft_flow_offload.ko"]
    assert result.kernel_label.endswith("+ flow-offload-comment-only.patch (1 module rebuilt)")
    problems = [f for f in result.facts if f.status not in ("agrees", "known")]
    assert not problems, format_facts(problems)


def test_harness_refuses_patch_with_saved_results_and_bad_switch(tmp_path):
    from flowsim.conform.harness import run_conformance
    from flowsim.errors import FlowsimError

    topo = str(ROOT / "topologies" / "ip6ip6-rx.toml")
    with pytest.raises(PatchError, match="no such file or folder"):
        run_conformance([topo], "debian-sid", patches=[str(tmp_path / "missing.patch")])
    with pytest.raises(FlowsimError, match="--results replays a saved run"):
        run_conformance([topo], "debian-sid", results=str(tmp_path / "r.log"),
                        patches=[str(PATCHES / "comment-only.patch")])
    with pytest.raises(FlowsimError, match="unknown profile switch 'bogus'"):
        run_conformance([topo], "debian-sid", settings=["bogus=1"])


def test_cli_has_patch_profile_and_set():
    from flowsim.cli import build_parser

    args = build_parser().parse_args(["conform", "t.toml", "--patch", "a.patch", "--patch", "dir",
                                      "--profile", "linux-7.2", "--set", "tunnel_push_dst=this"])
    assert args.patch == ["a.patch", "dir"] and args.profile == "linux-7.2"
    assert args.settings == ["tunnel_push_dst=this"]


def test_patched_result_json_and_text_name_the_series():
    import jsonschema

    from flowsim.conform.harness import ConformResult
    from flowsim.schemas import load

    info = PatchInfo(("ipv6-hook-accept.patch",), ("ipv6-hook-accept.patch: x",), "d",
                     ("net/netfilter/nf_flow_table.ko",), (), "7.2.13+deb14-amd64")
    r = ConformResult("debian-sid", "linux-image-7.2.13+deb14-amd64", "7.2.13-1", "7.2.13+deb14-amd64",
                      "linux-7.2 --set tunnel_push_dst=this", "2026-12-01", {}, [], patch=info.to_json())
    data = r.to_json()
    jsonschema.Draft202012Validator(load("conform")).validate(data)
    assert data["kernel"]["label"] == "7.2.13+deb14-amd64 + ipv6-hook-accept.patch (1 module rebuilt)"
    assert r.kernel_label == data["kernel"]["label"]
