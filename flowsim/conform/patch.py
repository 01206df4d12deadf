"""``flowsim conform --patch SERIES``: boot the kernel with a patch series applied to its modules.

Theory of operation
-------------------
A reviewer holds a patch series (``git format-patch`` files, an mbox of
several, or a folder of ``.patch`` files) and wants to see what it changes
on a real kernel, next to what flowsim is believed to do.  Everything is
done against the exact Debian kernel of a conformance kit and cached by
(kit, series digest), so a second run costs only the guest:

1. :func:`read_series` splits the series into patches, in order, and reads
   the files each one touches.  A header (``*.h``, ``include/…``) is refused
   at once: a changed header means rebuilding every module — and the
   built-in kernel — that includes it, which is out of scope.
2. :func:`kernel_source` streams the touched directories out of Debian's
   ``linux-source-X.Y`` package of exactly the kit's version (the one
   :mod:`flowsim.conform.selftest` reads), and :func:`debian_config` reads
   Debian's ``.config`` from the ``linux-headers-REL`` package.
3. :func:`apply_series` copies those directories and runs ``patch -p1`` per
   patch (a dry run first): a hunk that fails is one error naming the patch,
   the file and the hunk.
4. :func:`modules_for` finds the module of every touched ``.c`` file from the
   kernel's own Makefile of its directory (``nf_flow_table-objs := …``,
   ``obj-$(CONFIG_NF_FLOW_TABLE) += nf_flow_table.o``) and Debian's config
   (``=m``); built-in code (``obj-y`` or ``=y``) and code Debian does not
   build are refused with that reason.  :func:`kbuild_for` writes a
   ``Kbuild`` that keeps the Makefile's object lines of those modules (and
   its conditionals and flags, so ``nf_flow_table_procfs.o`` is built only
   under ``CONFIG_NF_FLOW_TABLE_PROCFS``, as in the kernel).
5. :func:`build_root` debootstraps a minimal Debian of the kernel's suite
   under the conformance cache (``buildroot-SUITE``) with the kernel's own
   compiler (the ``gcc-NN-for-host`` dependency of ``linux-headers-REL``) and
   installs ``linux-headers-REL`` in it; :func:`build_modules` runs
   ``make -C /usr/src/linux-headers-REL M=DIR modules`` in a chroot and
   checks each module's vermagic against the stock module's.
6. :func:`patched_kit` copies the stock kit under ``kernels-patched/KIT+DIGEST``
   with the rebuilt ``.ko`` files in place of the stock ones and reruns
   ``depmod``; :func:`~flowsim.conform.kernel.build_base_initramfs` then
   builds that kit's own initramfs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path, PurePosixPath

import attrs

from flowsim.conform.debian import APT_ETC, machine_debian_source
from flowsim.conform.kernel import (
    ConformSetupError, KernelKit, Timer, _apt, _download, _is_root, _run, cache_dir, find_tool, package_depends,
    private_apt, source_package,
)
from flowsim.errors import ConfigError

__all__ = ["Patch", "PatchError", "PatchInfo", "read_series", "split_mbox", "touched_files", "series_digest",
           "parse_makefile", "MakeLine", "modules_for", "kbuild_for", "apply_series", "check_touched",
           "patched_kit", "build_root", "BUILD_PACKAGES"]

BUILD_PACKAGES = ("make", "libc6-dev", "bc", "bison", "flex", "libelf-dev", "libssl-dev", "xz-utils", "kmod")
IGNORED_PREFIXES = ("Documentation/", "tools/", "MAINTAINERS")   # no effect on a module of the booted kernel


class PatchError(ConfigError):
    """The series cannot be applied or built as given (a failing hunk, a header, built-in code)."""


@attrs.frozen
class Patch:
    """One patch of a series: where it came from, its subject, its text and the files it touches."""

    name: str            # file name, with #N for the N-th patch of an mbox
    subject: str
    text: str
    files: tuple[str, ...]


@attrs.frozen
class PatchInfo:
    """What the patched kit is: the series, its digest and the modules rebuilt (for the report)."""

    series: tuple[str, ...]      # the --patch arguments as given
    patches: tuple[str, ...]     # each patch's name and subject
    digest: str
    modules: tuple[str, ...]     # DIR/NAME.ko below kernel/
    ignored: tuple[str, ...] = ()
    release: str = ""

    def label(self, release: str | None = None) -> str:
        names = ", ".join(os.path.basename(s.rstrip("/")) for s in self.series)
        n = len(self.modules)
        return f"{release or self.release} + {names} ({n} module{'s' if n != 1 else ''} rebuilt)"

    def to_json(self) -> dict:
        return {"series": list(self.series), "patches": list(self.patches), "digest": self.digest,
                "modules": list(self.modules), "ignored": list(self.ignored), "label": self.label()}


# ---------------------------------------------------------------------- series

_MBOX_FROM = re.compile(r"^From \S+ (Mon|Tue|Wed|Thu|Fri|Sat|Sun) ", re.M)


def split_mbox(text: str) -> list[str]:
    """The messages of an mbox (``git format-patch --stdout``); a plain patch is one message."""
    starts = [m.start() for m in _MBOX_FROM.finditer(text)]
    if len(starts) <= 1:
        return [text]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _strip1(path: str) -> str:
    path = path.split("\t")[0].strip()
    parts = PurePosixPath(path).parts
    return "/".join(parts[1:]) if len(parts) > 1 else path


def touched_files(text: str) -> tuple[str, ...]:
    """The files a unified diff changes, as ``patch -p1`` names them (deleted files by their old name)."""
    out: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("+++ ") or i == 0 or not lines[i - 1].startswith("--- "):
            continue
        new = line[4:].split("\t")[0].strip()
        old = lines[i - 1][4:].split("\t")[0].strip()
        path = _strip1(old if new == "/dev/null" else new)
        for bad in (path.startswith("/"), ".." in PurePosixPath(path).parts):
            if bad:
                raise PatchError(f"the patch names the file {path!r}, outside the kernel tree",
                                 value=path, expected="paths relative to the tree (git format-patch a/ b/)")
        if path not in out:
            out.append(path)
    return tuple(out)


def _subject(message: str) -> str:
    m = re.search(r"^Subject:\s*(.*(?:\n[ \t].*)*)", message, re.M)
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(m.group(1).split())) if m else ""


def read_series(paths: list[str] | tuple[str, ...]) -> list[Patch]:
    """Every patch of the series, in order: each path a patch, an mbox of several, or a folder of ``.patch``."""
    out: list[Patch] = []
    for arg in paths:
        p = Path(arg)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".patch", ".diff"))
            if not files:
                raise PatchError(f"--patch {arg}: the folder holds no .patch file", value=arg,
                                 expected="a git format-patch file, an mbox, or a folder of .patch files")
        elif p.is_file():
            files = [p]
        else:
            raise PatchError(f"--patch {arg}: no such file or folder", value=arg,
                             expected="a git format-patch file, an mbox, or a folder of .patch files")
        for f in files:
            try:
                text = f.read_text()
            except (OSError, UnicodeError) as exc:
                raise PatchError(f"--patch {f}: cannot read: {exc}", value=str(f)) from None
            messages = split_mbox(text)
            for n, message in enumerate(messages, 1):
                name = f.name if len(messages) == 1 else f"{f.name}#{n}"
                files_ = touched_files(message)
                if not files_:
                    raise PatchError(f"--patch {name}: no unified diff in it", value=str(f),
                                     expected="git format-patch output (diff --git a/… b/…)")
                out.append(Patch(name, _subject(message), message, files_))
    return out


def series_digest(patches: list[Patch], kit_name: str = "") -> str:
    h = hashlib.sha256(kit_name.encode() + b"\0")
    for p in patches:
        h.update(p.text.encode() + b"\0")
    return h.hexdigest()[:16]


def check_touched(patches: list[Patch]) -> tuple[list[str], list[str]]:
    """(the .c/Makefile files to build from, the ignored ones); a header or other file is refused."""
    use: list[str] = []
    ignored: list[str] = []
    for p in patches:
        for f in p.files:
            if f.startswith(IGNORED_PREFIXES):
                ignored.append(f)
            elif f.endswith(".h") or f.startswith("include/"):
                raise PatchError(
                    f"patch {p.name} changes the header {f}: a changed header needs every module that includes "
                    "it, and the built-in kernel, rebuilt — out of scope for --patch, which rebuilds the modules "
                    "of changed .c files only", value=f, expected="a series changing .c files of modules")
            elif f.endswith(".c") or PurePosixPath(f).name in ("Makefile", "Kbuild"):
                use.append(f)
            else:
                raise PatchError(f"patch {p.name} changes {f}, neither a module's .c file nor its Makefile: "
                                 "--patch cannot rebuild that", value=f,
                                 expected="a series changing .c files of modules")
    return list(dict.fromkeys(use)), list(dict.fromkeys(ignored))


# ---------------------------------------------------------------------- Makefiles

@attrs.frozen
class MakeLine:
    """One logical line of a kbuild Makefile (continuations joined): an assignment, a conditional, or other."""

    kind: str                   # "assign", "cond", "other"
    text: str                   # as written, continuations kept
    name: str = ""              # "obj", a composite's name, "ccflags" …
    suffix: str = ""            # "y", "m", "objs" or "$(CONFIG_X)"
    config: str | None = None   # CONFIG_X of -$(CONFIG_X)
    objects: tuple[str, ...] = ()
    line: int = 0


_ASSIGN = re.compile(r"^(?P<name>[\w.-]+?)-(?P<suf>objs|y|m|\$\((?P<cfg>CONFIG_\w+)\))\s*(?::=|\+=|\?=|=)\s*(?P<rhs>.*)$",
                     re.S)
_COND = re.compile(r"^\s*(ifeq|ifneq|ifdef|ifndef|else|endif)\b")
_FLAGS = re.compile(r"^\s*(ccflags-|asflags-|ldflags-|subdir-ccflags-|CFLAGS_|CFLAGS_REMOVE_|AFLAGS_)")


def parse_makefile(text: str) -> list[MakeLine]:
    out: list[MakeLine] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        raw = [lines[i]]
        while raw[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            raw.append(lines[i])
        i += 1
        text_ = "\n".join(raw)
        joined = " ".join(r.rstrip("\\").strip() for r in raw).split("#", 1)[0].strip()
        if _COND.match(joined):
            out.append(MakeLine("cond", text_, line=start + 1))
            continue
        m = _ASSIGN.match(joined)
        if m:
            objs = tuple(w for w in m.group("rhs").split() if w.endswith(".o"))
            out.append(MakeLine("assign", text_, m.group("name"), m.group("suf"), m.group("cfg"), objs, start + 1))
        else:
            out.append(MakeLine("other", text_, line=start + 1))
    return out


def parse_config(text: str) -> dict[str, str]:
    """``CONFIG_X=value`` lines of a kernel .config (``# … is not set`` lines are absent keys)."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.startswith("CONFIG_"):
            out[k.strip()] = v.strip()
    return out


def _module_of(obj: str, lines: list[MakeLine], config: dict[str, str], where: str, seen: tuple[str, ...] = ()
               ) -> str:
    """The module (composite name) *obj* ends up in; PatchError when built in or not built."""
    if obj in seen:
        raise PatchError(f"{where}: {obj} is part of itself")
    what = f"{seen[0]} (part of {obj})" if seen else obj
    refusal = None
    for ml in lines:
        if ml.kind != "assign" or obj not in ml.objects or ml.name == "obj" or _FLAGS.match(ml.text):
            continue
        if ml.config and config.get(ml.config) not in ("y", "m"):
            refusal = (f"{where}:{ml.line}: {obj} is built only with {ml.config}, which Debian's config does "
                       "not set: the patched code is not in this kernel")
            continue
        return _module_of(ml.name + ".o", lines, config, where, (*seen, obj))
    for ml in lines:
        if ml.kind != "assign" or ml.name != "obj" or obj not in ml.objects:
            continue
        value = "y" if ml.suffix == "y" else "m" if ml.suffix == "m" else config.get(ml.config or "")
        if value == "m":
            return obj[: -len(".o")]
        if value == "y":
            why = "obj-y" if ml.suffix == "y" else f"{ml.config}=y in Debian's config"
            raise PatchError(f"{where}:{ml.line}: {what} is built into the kernel ({why}): --patch rebuilds "
                             "modules only, built-in code needs a new vmlinuz", value=obj,
                             expected="a series changing .c files of modules (CONFIG_…=m)")
        refusal = (f"{where}:{ml.line}: {what} is built only with {ml.config}, which Debian's config does not "
                   "set: the patched code is not in this kernel")
    raise PatchError(refusal or f"{where}: no object line builds {obj}", value=obj,
                     expected="a series changing .c files of modules (CONFIG_…=m)")


def modules_for(c_files: list[str], makefile: str, config: dict[str, str], where: str = "Makefile") -> list[str]:
    """The modules (names) the touched .c files of one directory belong to, from its Makefile and config."""
    lines = parse_makefile(makefile)
    out = []
    for f in c_files:
        name = _module_of(PurePosixPath(f).stem + ".o", lines, config, where)
        if name not in out:
            out.append(name)
    return out


def kbuild_for(modules: list[str], makefile: str) -> str:
    """A Kbuild building *modules*: their object lines, the conditionals and flags, as the Makefile has them."""
    lines = parse_makefile(makefile)
    composites = {ml.name for ml in lines if ml.kind == "assign" and ml.name != "obj"}
    names = set(modules)
    grew = True
    while grew:  # composites inside composites
        grew = False
        for ml in lines:
            if ml.kind == "assign" and ml.name in names:
                for o in ml.objects:
                    if o[:-2] in composites and o[:-2] not in names:
                        names.add(o[:-2])
                        grew = True
    keep = ["# generated by flowsim conform --patch from the directory's Makefile"]
    for ml in lines:
        if ml.kind == "cond" or _FLAGS.match(ml.text) or (ml.kind == "assign" and ml.name in names):
            keep.append(ml.text)
    keep += [f"obj-m += {m}.o" for m in modules]
    return "\n".join(keep) + "\n"


# ---------------------------------------------------------------------- applying

def _patch_failures(output: str) -> list[str]:
    """``file: Hunk #N FAILED at L`` (and files patch could not find) from GNU patch's output."""
    out, cur = [], "?"
    for line in output.splitlines():
        m = re.match(r"(?:checking|patching) file '?([^']+?)'?$", line.strip()) or re.match(r"\|\+\+\+ (\S+)", line)
        if m:
            cur = m.group(1) if not line.startswith("|") else _strip1(m.group(1))
            continue
        m = re.match(r"Hunk #(\d+) FAILED at (\d+)", line.strip())
        if m:
            out.append(f"{cur}: hunk #{m.group(1)} FAILED at line {m.group(2)}")
        elif "No file to patch" in line:
            out.append(f"{cur}: no such file in the kernel source")
        elif "Reversed (or previously applied) patch detected" in line:
            out.append(f"{cur}: already applied (a reversed patch)")
    return out


def apply_series(patches: list[Patch], tree: Path, what: str = "the kernel source") -> None:
    """``patch -p1`` each patch into *tree* in order; a failing hunk is one error naming patch, file and hunk."""
    prog = find_tool("patch")
    if prog is None:
        raise ConformSetupError("--patch needs the patch program: apt-get install patch")
    for p in patches:
        args = [prog, "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-d", str(tree)]
        dry = subprocess.run([*args, "--dry-run"], input=p.text, capture_output=True, text=True)
        if dry.returncode != 0:
            fails = _patch_failures(dry.stdout + dry.stderr) or [
                (dry.stderr.strip() or dry.stdout.strip() or "patch failed").splitlines()[-1]]
            raise PatchError(f"patch {p.name} ({p.subject or 'no subject'}) does not apply to {what}: "
                             + "; ".join(fails), value=p.name, expected="a series made against this kernel")
        res = subprocess.run(args, input=p.text, capture_output=True, text=True)
        if res.returncode != 0:
            raise PatchError(f"patch {p.name}: {(res.stdout + res.stderr).strip().splitlines()[-1]}")


# ---------------------------------------------------------------------- sources and config

def kernel_source(kit: KernelKit, dirs: list[str], timer: Timer) -> Path:
    """A tree holding *dirs* (recursively) of Debian's source of exactly *kit*'s kernel, cached."""
    pkg = source_package(kit)
    dest = cache_dir() / "sources" / f"{pkg}_{kit.version.replace(':', '%')}"
    have = set((dest / "dirs").read_text().split()) if (dest / "dirs").exists() else set()
    missing = sorted(d for d in dirs if d not in have)
    if not missing:
        return dest / "tree"
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    deb = _download(pkg, kit.version, debs, private_apt(kit.spec), timer)
    top = f"{pkg}"
    tree = dest / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    with timer.step("extract source"):
        # dpkg-deb | tar (the inner linux-source-X.Y.tar.xz to stdout) | tar -xJ of the wanted folders only
        outer = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        mid = subprocess.Popen(["tar", "-xO", "--wildcards", "./usr/src/linux-source-*.tar.xz"], stdin=outer.stdout,
                               stdout=subprocess.PIPE)
        assert outer.stdout is not None and mid.stdout is not None
        outer.stdout.close()
        inner = subprocess.run(["tar", "-xJ", "-C", str(tree), "--strip-components=1", "--no-same-owner",
                                *(f"{top}/{d}" for d in missing)], stdin=mid.stdout, capture_output=True, text=True)
        mid.stdout.close()
        mid.wait()
        outer.wait()
        if inner.returncode != 0 or mid.returncode != 0:
            raise ConformSetupError(f"{deb.name}: cannot extract {', '.join(missing)}: "
                                    f"{(inner.stderr.strip().splitlines() or ['tar failed'])[-1]}")
    if not all((tree / d).is_dir() for d in missing):
        raise ConformSetupError(f"{deb.name}: no folder {', '.join(d for d in missing if not (tree / d).is_dir())}")
    (dest / "dirs").write_text("\n".join(sorted(have | set(missing))) + "\n")
    return tree


def _headers_package(kit: KernelKit) -> str:
    return f"linux-headers-{kit.release}"


def debian_config(kit: KernelKit, timer: Timer) -> dict[str, str]:
    """Debian's ``.config`` of *kit*'s kernel, read from its ``linux-headers-REL`` package (cached)."""
    cached = cache_dir() / "sources" / f"config-{kit.release}_{kit.version.replace(':', '%')}"
    if not cached.exists():
        debs = cache_dir() / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        deb = _download(_headers_package(kit), kit.version, debs, private_apt(kit.spec), timer)
        want = f"./usr/src/{_headers_package(kit)}/.config"
        proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        data = None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tf:
                for member in tf:
                    if member.name == want and member.isfile():
                        fh = tf.extractfile(member)
                        data = fh.read() if fh else None
                        break
        finally:
            assert proc.stdout is not None
            proc.stdout.close()
            proc.wait()
        if data is None:
            raise ConformSetupError(f"{deb.name}: no {want[1:]}")
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
    return parse_config(cached.read_text(errors="replace"))


# ---------------------------------------------------------------------- build root

def _build_suite(kit: KernelKit) -> tuple[str, str | None]:
    """(suite to debootstrap, extra suite for the headers): experimental is a partial suite on top of sid."""
    if kit.spec.suite == "experimental":
        base, extra = "sid", "experimental"   # experimental holds only the packages newer than sid's
        return base, extra
    if kit.spec.suite:
        return kit.spec.suite, None
    src = machine_debian_source()
    return (src.suites[0] if src and src.suites else "stable"), None


def _compiler(kit: KernelKit) -> str:
    """``gcc-NN``, the kernel's own compiler: ``linux-headers-REL`` depends on ``gcc-NN-for-host``."""
    deps = package_depends(_headers_package(kit), private_apt(kit.spec))
    for d in deps:
        m = re.fullmatch(r"(gcc-\d+)(-for-host)?", d)
        if m:
            return m.group(1)
    raise ConformSetupError(f"{_headers_package(kit)} names no gcc-NN-for-host dependency (Depends: {deps})")


@contextlib.contextmanager
def _mounted_proc(root: Path):
    target = root / "proc"
    target.mkdir(exist_ok=True)
    _run(["mount", "--bind", "/proc", str(target)], "mount --bind /proc")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _chroot(root: Path, args: list[str], what: str) -> str:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C",
           "HOME": "/root"}
    return _run(["chroot", str(root), *args], what, env=env)


def _need_root() -> None:
    if not _is_root():
        raise ConformSetupError("--patch builds the modules in a Debian build root (debootstrap, chroot, mount): "
                                "run as root")


def build_root(kit: KernelKit, timer: Timer) -> Path:
    """The cached build root of *kit*'s suite with the kernel's compiler and ``linux-headers-REL`` installed."""
    _need_root()
    suite, extra = _build_suite(kit)
    gcc = _compiler(kit)
    root = cache_dir() / f"buildroot-{suite}"
    ok = root / ".flowsim-ok"
    src = machine_debian_source()
    if src is None:
        raise ConformSetupError("--patch: the machine's apt sources name no Debian archive to debootstrap from")
    if not ok.exists():
        debootstrap = find_tool("debootstrap")
        if debootstrap is None:
            res = _apt(["install", "-y", "-qq", "--no-install-recommends", "debootstrap"])
            debootstrap = find_tool("debootstrap")
            if debootstrap is None:
                raise ConformSetupError("--patch needs debootstrap and apt-get install debootstrap failed: "
                                        + (res.stderr.strip().splitlines() or ["no output"])[-1])
        if root.exists():
            subprocess.run(["umount", "-l", str(root / "proc")], capture_output=True)
            shutil.rmtree(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        with timer.step("build root"):
            cmd = [debootstrap, "--variant=minbase", f"--include={','.join((gcc, *BUILD_PACKAGES))}"]
            if src.signed_by:
                cmd.append(f"--keyring={src.signed_by}")
            _run([*cmd, suite, str(root), src.uri], f"debootstrap {suite}")
        ok.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    marker = root / f".flowsim-headers-{kit.release}_{kit.version.replace(':', '%')}"
    if not marker.exists():
        with timer.step("headers"):
            if extra:
                (root / "etc/apt/sources.list.d/flowsim-extra.list").write_text(f"deb {src.uri} {extra} main\n")
            if kit.spec.suite is None:  # the machine's own suites: its -updates/-security pockets hold the headers
                _copy_machine_sources(root)
            if Path("/etc/resolv.conf").exists():
                (root / "etc/resolv.conf").unlink(missing_ok=True)
                shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
            opts = ["-o", "Acquire::Check-Valid-Until=false"]
            with _mounted_proc(root):
                _chroot(root, ["apt-get", *opts, "update", "-qq"], f"apt-get update in the {suite} build root")
                _chroot(root, ["apt-get", *opts, "install", "-y", "-qq", "--no-install-recommends", gcc,
                               f"{_headers_package(kit)}={kit.version}"],
                        f"apt-get install {_headers_package(kit)} in the {suite} build root")
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return root


def _copy_machine_sources(root: Path) -> None:
    """The machine's apt source files, copied into the build root (read, never changed on the machine)."""
    files = [APT_ETC / "sources.list", *sorted((APT_ETC / "sources.list.d").glob("*.sources")),
             *sorted((APT_ETC / "sources.list.d").glob("*.list"))]
    for f in files:
        if f.is_file():
            name = "machine-sources.list" if f.name == "sources.list" else f"machine-{f.name}"
            shutil.copyfile(f, root / "etc/apt/sources.list.d" / name)


def _vermagic(ko: Path) -> str:
    out = _run([find_tool("modinfo") or "modinfo", "-F", "vermagic", str(ko)], f"modinfo {ko.name}")
    return out.strip()


def build_modules(kit: KernelKit, root: Path, tree: Path, plan: dict[str, list[str]], digest: str,
                  timer: Timer) -> dict[str, Path]:
    """Build each directory's modules out of tree in the chroot; DIR/NAME.ko -> the built file."""
    work = root / "build" / digest
    if work.exists():
        shutil.rmtree(work)
    out: dict[str, Path] = {}
    with timer.step("build modules"), _mounted_proc(root):   # objtool reads /proc/self/limits
        for d, modules in plan.items():
            dst = work / d
            shutil.copytree(tree / d, dst, symlinks=True)
            (dst / "Kbuild").write_text(kbuild_for(modules, (tree / d / "Makefile").read_text()))
            res = subprocess.run(
                ["chroot", str(root), "make", "-C", f"/usr/src/{_headers_package(kit)}",
                 f"M=/build/{digest}/{d}", f"-j{os.cpu_count() or 1}", "modules"],
                capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
            if res.returncode != 0:
                errors = [ln for ln in (res.stdout + res.stderr).splitlines() if "error" in ln.lower()][:8]
                raise PatchError(f"building {', '.join(m + '.ko' for m in modules)} of {d} for {kit.release} "
                                 "failed:\n  " + "\n  ".join(errors or (res.stderr.strip().splitlines()[-8:])),
                                 value=d)
            for m in modules:
                ko = dst / f"{m}.ko"
                if not ko.exists():
                    raise PatchError(f"make {d} left no {m}.ko", value=d)
                out[f"{d}/{m}.ko"] = ko
    return out


# ---------------------------------------------------------------------- the patched kit

def _patched_root(kit: KernelKit, digest: str) -> Path:
    return cache_dir() / "kernels-patched" / f"{kit.root.name}+{digest}"


def patched_kit(kit: KernelKit, series: list[str] | tuple[str, ...], patches: list[Patch] | None = None,
                timer: Timer | None = None) -> tuple[KernelKit, PatchInfo]:
    """*kit* with the series applied to its modules: cached by (kit, series digest)."""
    timer = timer or Timer()
    patches = patches if patches is not None else read_series(series)
    digest = series_digest(patches, kit.root.name)
    dest = _patched_root(kit, digest)
    info_file = dest / "patch.json"
    if (dest / "kit.ok").exists() and info_file.exists():
        data = json.loads(info_file.read_text())
        info = PatchInfo(tuple(series), tuple(data["patches"]), digest, tuple(data["modules"]),
                         tuple(data.get("ignored", ())), kit.release)
        return attrs.evolve(kit, root=dest, vmlinuz=dest / "vmlinuz", modules=dest / "modules"), info
    use, ignored = check_touched(patches)  # headers refused before anything is downloaded
    if not use:
        raise PatchError("the series changes no .c file of a module (only " + ", ".join(ignored) + ")")
    dirs = sorted({str(PurePosixPath(f).parent) for f in use})
    config = debian_config(kit, timer)
    src = kernel_source(kit, dirs, timer)
    _need_root()
    root = build_root(kit, timer)
    tree = root / "build" / f"{digest}.src"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for d in dirs:
        shutil.copytree(src / d, tree / d, symlinks=True)
    with timer.step("patch"):
        apply_series(patches, tree, f"{source_package(kit)} {kit.version}")
    plan: dict[str, list[str]] = {}
    for d in dirs:
        c_files = [f for f in use if str(PurePosixPath(f).parent) == d and f.endswith(".c")]
        if c_files:
            plan[d] = modules_for(c_files, (tree / d / "Makefile").read_text(), config, f"{d}/Makefile")
    built = build_modules(kit, root, tree, plan, digest, timer)
    stock_dir = kit.modules / "lib/modules" / kit.release / "kernel"
    stock = [stock_dir / rel for rel in built if (stock_dir / rel).exists()] or sorted(stock_dir.rglob("*.ko"))[:1]
    want = _vermagic(stock[0]) if stock else None
    for rel, ko in built.items():
        got = _vermagic(ko)
        if want is not None and got != want:
            raise PatchError(f"{rel} was built with vermagic {got!r}, the kit's modules have {want!r}", value=rel)
    with timer.step("stage patched kit"):
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in ("vmlinuz", "release", "suite", "roots"):
            if (kit.root / name).exists():
                shutil.copy2(kit.root / name, dest / name)
        shutil.copytree(kit.modules, dest / "modules", symlinks=True)
        for rel, ko in built.items():
            target = dest / "modules/lib/modules" / kit.release / "kernel" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ko, target)
        _run([find_tool("depmod") or "depmod", "-b", str(dest / "modules"), kit.release], "depmod (patched kit)")
        info = PatchInfo(tuple(series), tuple(f"{p.name}: {p.subject}" if p.subject else p.name for p in patches),
                         digest, tuple(sorted(built)), tuple(ignored), kit.release)
        info_file.write_text(json.dumps(info.to_json(), indent=2) + "\n")
        (dest / "kit.ok").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    shutil.rmtree(tree, ignore_errors=True)
    shutil.rmtree(root / "build" / digest, ignore_errors=True)
    return attrs.evolve(kit, root=dest, vmlinuz=dest / "vmlinuz", modules=dest / "modules"), info
