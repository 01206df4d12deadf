"""Debian suites the machine does not use (sid, experimental) through a private apt configuration.

Linux 7.2 and 7.3 — the first Debian kernels with the IPIP/IP6IP6 flowtable
acceleration (``ipip_fill_forward_path``, ``ip6_tnl_fill_forward_path``) —
are in Debian's ``sid`` and ``experimental`` suites, which a stable machine's
apt does not list.  This module reaches them without touching the machine's
configuration:

* :func:`machine_debian_source` reads the machine's own apt sources (deb822
  ``*.sources`` files in ``sources.list.d`` and one-line ``sources.list``
  entries) and takes the URI and ``Signed-By`` keyring of its Debian main
  archive entry.  No mirror host is written anywhere in flowsim: the suite is
  fetched from wherever the machine already fetches Debian.
* :class:`PrivateApt` keeps, per suite, a folder under the conformance cache
  with one ``.sources`` file and apt's lists, cache and an empty dpkg status,
  and runs ``apt-get``/``apt-cache`` with ``-o Dir::Etc::SourceList=/dev/null
  -o Dir::Etc::SourceParts=…`` so that only that suite is seen.  Signatures
  are checked as usual (the keyring is the machine's); only
  ``Acquire::Check-Valid-Until=false`` is set, because a snapshot of the
  suite may be past its Release file's Valid-Until date.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import time
from pathlib import Path

import attrs

__all__ = ["AptSource", "PrivateApt", "machine_debian_source", "parse_sources", "parse_depends", "APT_ETC"]

APT_ETC = Path("/etc/apt")

# Debian's release names and aliases: an entry whose suite is one of these (without a
# -security/-updates/-backports pocket) is the machine's main Debian archive.
_DEBIAN_SUITES = {"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid", "stable", "testing",
                  "unstable", "oldstable", "oldoldstable", "experimental"}
_DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LISTS_MAX_AGE = 24 * 3600   # seconds before a suite's package lists are refreshed


@attrs.frozen
class AptSource:
    """One apt source entry: where packages come from and which keyring signs them."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None
    origin: str          # the file it was read from (for error messages)


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
        elif line[0] in " \t" and key is not None:
            cur[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            cur[key] = value.strip()
    if cur:
        stanzas.append(cur)
    return stanzas


def parse_sources(text: str, origin: str, *, deb822: bool) -> list[AptSource]:
    """The ``deb`` entries of a sources file (deb822 ``.sources`` or one-line ``.list``)."""
    out = []
    if deb822:
        for st in _deb822_stanzas(text):
            if "deb" not in st.get("types", "").split() or st.get("enabled", "yes").lower() == "no":
                continue
            signed = st.get("signed-by", "").strip() or None
            if signed and "\n" in signed:  # an inline key block, not a path: apt needs it as written
                signed = None
            for uri in st.get("uris", "").split():
                out.append(AptSource(uri, tuple(st.get("suites", "").split()),
                                     tuple(st.get("components", "").split()), signed, origin))
        return out
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        opts: dict[str, str] = {}
        if words and words[0].startswith("["):
            opt_words = []
            while words:
                w = words.pop(0)
                opt_words.append(w.strip("[]"))
                if w.endswith("]"):
                    break
            for w in opt_words:
                k, _, v = w.partition("=")
                opts[k] = v
        if len(words) >= 2:
            out.append(AptSource(words[0], (words[1],), tuple(words[2:]), opts.get("signed-by") or None, origin))
    return out


def _is_main_archive(src: AptSource) -> bool:
    return ("security" not in src.uri and "main" in src.components
            and any(s in _DEBIAN_SUITES for s in src.suites))


def machine_debian_source(etc: Path = APT_ETC) -> AptSource | None:
    """The machine's Debian main-archive source (URI and keyring), or None when it has none."""
    files = [(p, True) for p in sorted(glob.glob(str(etc / "sources.list.d" / "*.sources")))]
    files += [(str(etc / "sources.list"), False)]
    files += [(p, False) for p in sorted(glob.glob(str(etc / "sources.list.d" / "*.list")))]
    for path, deb822 in files:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        for src in parse_sources(text, path, deb822=deb822):
            if _is_main_archive(src):
                return src
    return None


def _sources_text(src: AptSource, suite: str) -> str:
    keyring = src.signed_by or (_DEFAULT_KEYRING if os.path.exists(_DEFAULT_KEYRING) else None)
    lines = ["Types: deb", f"URIs: {src.uri}", f"Suites: {suite}", "Components: main"]
    if keyring:
        lines.append(f"Signed-By: {keyring}")
    return "\n".join(lines) + "\n"


class PrivateApt:
    """apt-get / apt-cache seeing only *suite* of the machine's Debian archive, state kept in *root*."""

    def __init__(self, suite: str, root: Path, source: AptSource):
        self.suite, self.root, self.source = suite, root, source

    def options(self) -> list[str]:
        r = self.root
        return ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={r / 'sources'}",
                "-o", "Dir::Etc::Preferences=/dev/null", "-o", f"Dir::Etc::PreferencesParts={r / 'preferences'}",
                "-o", f"Dir::State::Lists={r / 'lists'}", "-o", f"Dir::State::Status={r / 'status'}",
                "-o", f"Dir::Cache={r / 'cache'}", "-o", "Acquire::Check-Valid-Until=false",
                "-o", "Acquire::Languages=none", "-o", "APT::Sandbox::User=root"]

    def prepare(self) -> None:
        """Write the folder (sources file, empty status) if missing or if the machine's source moved."""
        for d in ("sources", "preferences", "lists/partial", "cache/archives/partial"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        text = _sources_text(self.source, self.suite)
        sources = self.root / "sources" / "flowsim.sources"
        if not sources.exists() or sources.read_text() != text:
            sources.write_text(text)
            for old in (self.root / "lists").glob("*_*"):
                old.unlink()
        (self.root / "status").touch()

    def lists_age(self) -> float | None:
        """Seconds since the suite's Release file was fetched (None: never)."""
        stamps = [p.stat().st_mtime for p in (self.root / "lists").glob("*Release")]
        return time.time() - max(stamps) if stamps else None

    def update(self) -> subprocess.CompletedProcess:
        return self.run("apt-get", ["update", "-qq"])

    def run(self, program: str, args: list[str], **kw) -> subprocess.CompletedProcess:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        return subprocess.run([program, *self.options(), *args], capture_output=True, text=True, env=env, **kw)

    def depends(self, package: str) -> list[str]:
        """The package names of *package*'s Depends (first alternative of each)."""
        res = self.run("apt-cache", ["show", "--no-all-versions", package])
        return parse_depends(res.stdout) if res.returncode == 0 else []


def parse_depends(show: str) -> list[str]:
    """The package names of the ``Depends:`` field in ``apt-cache show`` output (first alternative of each)."""
    m = re.search(r"^Depends:\s*(.+)$", show, re.M)
    return [alt.split("|")[0].split("(")[0].strip() for alt in m.group(1).split(",")] if m else []
