"""The raw text of a topology file: line numbers of its TOML keys, and shell words of its command lines.

Theory of operation
-------------------
``tomllib`` gives values without line numbers, yet every
:class:`~flowsim.errors.TopologyError` names the absolute line of what it
refuses.  :class:`RawToml` indexes the TOML text once — table headers and
keys outside multi-line strings, with the line each is on, and dictionaries
from a table's name and a key to them, so that each lookup costs the same
however many tables the file has (loading stays linear) — so the readers
(:mod:`flowsim.config.topology`, :mod:`flowsim.config.traffic`,
:mod:`flowsim.config.events`) can point at a key, at a table of an array, or
at the first line of a multi-line string.  :func:`shell_split` splits one
command line into words as a shell would.

This module is the bottom of :mod:`flowsim.config`: it imports nothing else
from the package.
"""

from __future__ import annotations

import re
import reprlib
import shlex
import tomllib

from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import Command

__all__ = ["RawToml", "shell_split", "short"]


class RawToml:
    """Line numbers for a TOML text (tomllib gives none): headers and keys outside strings."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    # a key, or a dotted key (``sysctls."net.ipv4.ip_forward" = 1``: indexed as a whole and as its first part)
    _KEY = re.compile(r"^\s*((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)"
                      r"\s*=\s*(.*)$")

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.headers: list[tuple[int, str, bool]] = []  # (line, dotted name, is array)
        self.keys: list[tuple[int, int, str, str]] = []  # (line, header index, key, value text)
        ml: str | None = None
        for no, raw in enumerate(self.lines, 1):
            if ml is not None:
                if raw.count(ml) % 2 == 1:
                    ml = None
                continue
            m = self._HEADER.match(raw)
            if m:
                name = _dotted(m.group(2))
                self.headers.append((no, name, m.group(1) == "[["))
                continue
            m = self._KEY.match(raw)
            if m:
                value = m.group(2)
                parts = _KEY_PART.findall(m.group(1))
                self.keys.append((no, len(self.headers) - 1, _dotted(m.group(1)), value))
                if len(parts) > 1:  # a dotted key also names the table it writes into
                    self.keys.append((no, len(self.headers) - 1, _dotted(parts[0]), value))
                for delim in ("'''", '"""'):
                    if value.count(delim) % 2 == 1:
                        ml = delim
                        break
        # indexes, so that each lookup is O(1) and loading N tables stays linear
        self._by_name: dict[str, list[int]] = {}  # dotted name -> indexes into headers, in file order
        self._by_prefix: dict[str, int] = {}  # dotted prefix -> line of the first header under it
        for idx, (no, name, _array) in enumerate(self.headers):
            self._by_name.setdefault(name, []).append(idx)
            parts = name.split(".")
            for n in range(1, min(len(parts), 3)):  # [netns.r.x] is under netns and netns.r
                self._by_prefix.setdefault(".".join(parts[:n]), no)
        self._by_key: dict[tuple[int, str], tuple[int, str]] = {}  # (header index, key) -> first (line, value)
        for line, hidx, k, value in self.keys:
            self._by_key.setdefault((hidx, k), (line, value))

    def tables(self, items, name: str, file: str, allowed: set[str], required: tuple[str, ...]):
        """The ``[[name]]`` array of tables: (index, header line, table, bad) for each, once its keys are
        checked (no unknown key, every *required* one present).

        ``bad(message, value, expected, key)`` builds the TopologyError of that
        table, at the line of *key* (of the header without one).
        """
        if not isinstance(items, list):
            raise TopologyError(f"{name} must be an array of tables", file=file, line=self.line_of(name),
                                value=type(items).__name__, expected=f"[[{name}]] tables")
        for i, item in enumerate(items):
            line = self.line_of(name, occurrence=i)

            def bad(message: str, value=None, expected: str | None = None, key: str | None = None, i=i, line=line):
                found = self.key(name, key, i) if key else None
                return TopologyError(message, file=file, line=found[0] if found else line, command=f"[[{name}]]",
                                     value=value, expected=expected)

            if not isinstance(item, dict):
                raise bad(f"{name} entries must be tables", type(item).__name__, f"[[{name}]] tables")
            for key in item:
                if key not in allowed:
                    raise bad(f"unknown key {key!r}", key, "one of " + ", ".join(sorted(allowed)), key)
            for key in required:
                if key not in item:
                    raise bad(f"{name} needs {key!r}", expected=", ".join(required[:-1]) + f" and {required[-1]}")
            yield i, line, item, bad

    def header_line(self, name: str, occurrence: int = 0) -> int | None:
        found = self._by_name.get(name, ())
        return self.headers[found[occurrence]][0] if occurrence < len(found) else None

    def key(self, header: str | None, key: str, occurrence: int = 0) -> tuple[int, str] | None:
        """(line, raw value text) of *key* in the *occurrence*-th table named *header* (None: top level)."""
        want = -1
        if header is not None:
            found = self._by_name.get(header, ())
            if occurrence >= len(found):
                return None
            want = found[occurrence]
        return self._by_key.get((want, key))

    def line_of(self, header: str | None, key: str | None = None, occurrence: int = 0) -> int | None:
        """The best line to blame for a value: of *key* in that table, else of the table's header (or of the
        first header under it), else of the ``name = …`` that wrote the table inline, else the same for the
        enclosing table (None: a top-level *key* that is nowhere)."""
        found = self.key(header, key, occurrence) if key is not None else None
        if found is not None:
            return found[0]
        if header is None:  # a top-level table: [key] or [key.sub]
            header, occurrence = key, 0
        while header:
            line = self.header_line(header, occurrence)
            if line is None and occurrence == 0:
                line = self._by_prefix.get(header)
            if line is not None:
                return line
            head, _, last = header.rpartition(".")
            top = self.key(head or None, last)
            if top is not None:
                return top[0]
            header, occurrence = head, 0
        return None

    def table_end(self, header: str) -> int | None:
        """The line of the first header after the first table *header* (None: it runs to the end)."""
        found = self._by_name.get(header)
        if not found or found[0] + 1 >= len(self.headers):
            return None
        return self.headers[found[0] + 1][0]

    def value_start(self, header: str | None, key: str) -> int | None:
        """The line where a (multi-line) string value's text starts."""
        found = self.key(header, key)
        if found is None:
            return None
        line, value = found
        value = value.strip()
        for delim in ("'''", '"""'):
            if value.startswith(delim) and value[3:].strip() == "":
                return line + 1
        return line

    def find(self, text: str, start: int, end: int | None = None) -> int | None:
        """First line at or after *start* (and before *end*) containing *text*."""
        for no in range(max(start, 1), min(end or len(self.lines) + 1, len(self.lines) + 1)):
            if text in self.lines[no - 1]:
                return no
        return None


_KEY_PART = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[^.\s]+')


def _dotted(text: str) -> str:
    """A header's dotted key as tomllib reads it (quoted parts may hold dots and escapes), parts joined by '.'."""
    parts = []
    for part in _KEY_PART.findall(text):
        if part.startswith('"') and "\\" in part:
            try:
                part = tomllib.loads(f"k = {part}")["k"]
            except tomllib.TOMLDecodeError:
                part = part[1:-1]
        elif part[:1] in "\"'":
            part = part[1:-1]
        parts.append(part)
    return ".".join(parts)


def shell_split(cmd: Command) -> list[str]:
    """Split a command line like a shell would (quotes allowed)."""
    try:
        return shlex.split(cmd.text)
    except ValueError as exc:
        raise cmd.error(f"cannot split command line: {exc}", expected="balanced quotes") from None


def short(value, limit: int = 60) -> str:
    """repr of *value* for a message, cut to *limit* characters (a bad value may be huge or nested deep)."""
    cut = reprlib.Repr()
    cut.maxlevel, cut.maxstring, cut.maxother, cut.maxlong = 3, limit, limit, limit
    text = cut.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
