"""Parse nft's own ruleset syntax into a :class:`~flowsim.nft.model.Ruleset`.

Theory of operation
-------------------
1. **Grammar** (``flowsim/nft.lark``, LALR with lark's contextual lexer).
   :class:`_BracePostLex` sits between lexer and parser: a newline separates
   statements like ``;`` except inside a *set* brace (``{ tcp, udp }``,
   ``devices = { … }``), where it is dropped.  Whether a ``{`` opens a block
   (table, chain, flowtable, counter, quota, set, anonymous chain) or a set is read
   off the tokens before it, the way nft's own scanner keeps a scope stack.
2. **Commands in order** (:class:`_Builder`): tables, ``add``/``insert``
   rule, ``flush``, ``delete`` and ``define`` are applied to mutable
   builders exactly as ``nft -f`` applies its batch; variables are
   substituted when their command is reached.
3. **Rules are typed last**, once every set and chain of their table exists
   (nft expands a table's sets before its rules): each right-hand side is
   coerced to the selector's data type (:mod:`flowsim.nft.types`,
   rule compilation in :mod:`flowsim.nft.compile`).
4. **Validation** mirrors the kernel's chain validation: jump targets exist
   and are regular chains, no loops, ``flow add`` only in chains reachable
   from a ``forward`` hook (nft_flow_offload_validate), NAT only in ``type
   nat`` chains at the right hooks (nft_nat_validate), named counters and
   flowtables defined, and what ``nft_limit_init`` and ``nft_quota_do_init`` refuse
   (a zero rate, a token bucket or a quota past 64 bits, more used than the quota).

Every error is a :class:`~flowsim.errors.RulesetError` naming file, line,
column and what was expected; nothing unsupported is skipped silently.
``line_offset`` shifts reported lines when the ruleset is embedded in another
file (a TOML topology).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from importlib import resources
from types import MappingProxyType

import attrs
import lark
from lark.lark import PostLex

from flowsim.errors import RulesetError
from flowsim.nft.compile import RuleCompiler
from flowsim.nft.model import (
    CHAIN_PRIORITIES, FAMILIES, HOOKS_BY_FAMILY, BaseHook, Chain, CounterDef, Flowtable, Loc, NamedSet, QuotaDef,
    Ruleset, Table, Verdict,
)
from flowsim.nft.types import BITMASK_DTYPES, DTYPES, SET_TYPES, SYMBOLS, coerce, nft_number

__all__ = ["parse_ruleset", "DTYPES", "SYMBOLS", "BITMASK_DTYPES"]

# ----------------------------------------------------------------- lexer/parser


class _BracePostLex(PostLex):
    """Drop newlines inside set braces; keep them as separators elsewhere.

    A ``{`` opens a *block* when it follows a block keyword (``table``,
    ``chain``, ``flowtable``, ``counter``, ``quota``, ``set``, ``map``) and the object's
    name, or ``jump``/``goto`` (anonymous chain); any other ``{`` is a set.
    """

    always_accept = ("_NL",)
    _BLOCK_KW = frozenset({"TABLE", "CHAIN", "FLOWTABLE", "COUNTER", "QUOTA", "SET", "MAP", "JUMP", "GOTO",
                           "HELPER"})
    _NAMEISH = frozenset({"IDENT", "STRING", "VAR", "IP", "IP6", "INET", "NETDEV", "BRIDGE", "ARP"})

    def process(self, stream: Iterator[lark.Token]) -> Iterator[lark.Token]:
        stack: list[str] = []
        header: str | None = None  # block keyword seen, waiting for its "{"
        names = 0
        for tok in stream:
            t = tok.type
            if t == "_NL" and stack and stack[-1] == "set":
                continue
            if t == "LBRACE":
                block = header is not None and (names > 0 or header in ("JUMP", "GOTO"))
                stack.append("block" if block else "set")
                header = None
            elif t == "RBRACE":
                if stack:
                    stack.pop()
                header = None
            elif t in self._BLOCK_KW:
                header, names = t, 0
            elif t in self._NAMEISH and header is not None:
                names += 1
            else:
                header = None
            yield tok


_LARK_OPTIONS = {"parser": "lalr", "lexer": "contextual", "propagate_positions": True, "maybe_placeholders": False}


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    """The parser of ``nft.lark``, loaded from the cache (:func:`_table_cache`) when it holds this grammar's."""
    grammar = resources.files("flowsim.nft").joinpath("nft.lark").read_text()
    cache = _table_cache()
    if not isinstance(cache, str):
        return lark.Lark(grammar, postlex=_BracePostLex(), **_LARK_OPTIONS)
    key = hashlib.sha256(repr((lark.__version__, sys.version_info[:2], _LARK_OPTIONS, grammar)).encode()).hexdigest()
    parser = _load_tables(cache, key)
    if parser is None:
        parser = lark.Lark(grammar, postlex=_BracePostLex(), **_LARK_OPTIONS)
        _save_tables(parser, cache, key)
    return parser


def _load_tables(cache: str, key: str) -> lark.Lark | None:
    """The parser saved in *cache* under *key*; None when the file is missing, holds another key (another
    grammar, lark, Python or options) or cannot be loaded (truncated, corrupt): the tables are computed again."""
    try:
        with open(cache, "rb") as f:
            if f.readline().rstrip(b"\n") != key.encode():
                return None
            parser = lark.Lark.load(f)
    except Exception:  # noqa: BLE001 - whatever a damaged pickle raises, the cache only saves time
        return None
    return parser if isinstance(parser, lark.Lark) else None


def _save_tables(parser: lark.Lark, cache: str, key: str) -> None:
    """Write *key* and *parser* (``Lark.save``: its LALR tables, options and the stateless postlex, pickled
    by class) to *cache*: into a temporary file renamed over it, so that a concurrent run reads the old file
    or the new one, never half of one.  A cache that cannot be written is left as it is."""
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), prefix=".nft-lalr-", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key.encode() + b"\n")
            parser.save(f)
        os.replace(tmp, cache)
    except Exception:  # noqa: BLE001 - a full disk or a parser lark cannot save: no cache, same parser
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _table_cache() -> str | bool:
    """Where the LALR tables computed from the grammar are kept (computing them was most of a small run's
    start-up): a file in the user's own cache directory (``$XDG_CACHE_HOME/flowsim``, else
    ``~/.cache/flowsim``), or False (no cache) when that directory cannot be made private to the user.

    The file starts with the hash of what the tables depend on (grammar, lark version, Python version,
    parser options) and is rebuilt when that differs, so it never serves another grammar; a missing,
    unreadable or corrupt file is rebuilt too, and it is replaced whole (:func:`_save_tables`).  The rest
    is a pickle: it is only read from a directory that the user owns and nobody else can write to.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = os.path.join(base, "flowsim")
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        st = os.stat(where)
    except OSError:
        return False
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return False
    return os.path.join(where, "nft-lalr.cache")


_TERMINAL_TEXT = {"IDENT": "a name", "NUMBER": "a number", "STRING": "a quoted string",
                  "IPV4_ADDR": "an IPv4 address", "IPV6_ADDR": "an IPv6 address", "VAR": "$variable",
                  "SETREF": "@set", "_NL": "newline", "RELOP": "a comparison", "$END": "end of input"}


def _expected_text(names) -> str:
    p = _parser()
    out = set()
    for n in names:
        if n in _TERMINAL_TEXT:
            out.add(_TERMINAL_TEXT[n])
            continue
        try:
            pat = p.get_terminal(n).pattern
        except KeyError:
            out.add(n)
            continue
        out.add(f"'{pat.value}'" if pat.type == "str" else n)
    items = sorted(out)
    if len(items) > 14:
        items = items[:14] + ["…"]
    return ", ".join(items)


def _unclosed_brace(text: str):
    """(line, column) of the innermost '{' with no matching '}', ignoring strings and comments."""
    stack = []
    line, col, i, n = 1, 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == '"':
            i += 1
            col += 1
            while i < n and text[i] not in '"\n':
                i += 2 if text[i] == "\\" else 1
                col += 1
        elif c == "{":
            stack.append((line, col))
        elif c == "}" and stack:
            stack.pop()
        if i < n and text[i] == "\n":
            line, col = line + 1, 1
        else:
            col += 1
        i += 1
    return stack[-1] if stack else None


_BLOCK_TOKENS = frozenset({"TABLE", "CHAIN", "FLOWTABLE", "SET", "MAP"})
#: nft keywords a reader may expect to work: named in the error rather than "unexpected"
_UNSUPPORTED = frozenset({
    "limit", "queue", "notrack", "meter", "ether", "vlan", "arp", "sctp", "dccp", "dup",
    "fwd", "synproxy", "tproxy", "osf", "socket", "numgen", "jhash", "symhash", "rt", "exthdr", "ipsec",
    "connlimit", "ah", "esp", "comp", "gre", "igmp", "update", "secmark", "tunnel", "xfrm", "hbh",
    "frag", "dst", "mh", "srh", "inner", "last",
})


def _lark_error(e: lark.exceptions.LarkError, text: str, file, line_offset: int) -> RulesetError:
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            where = _unclosed_brace(text)
            if where:
                return RulesetError("missing '}': this '{' is never closed", file=file,
                                    line=where[0] + line_offset, column=where[1], value="{", expected="'}'")
            lines = text.splitlines() or [""]
            return RulesetError("unexpected end of input", file=file, line=len(lines) + line_offset,
                                column=len(lines[-1]) + 1, expected=_expected_text(e.expected))
        line, col = tok.line + line_offset, tok.column
        if tok.type in _BLOCK_TOKENS and text[:tok.start_pos].rstrip(" \t").endswith("}"):
            return RulesetError(f"missing ';' or newline before {str(tok)!r}", file=file, line=line, column=col,
                                value=str(tok), expected="';' or a newline")
        if tok.type in _BLOCK_TOKENS and "RBRACE" in e.expected:
            opened = _unclosed_brace(text[:tok.start_pos])
            at = f" (the '{{' at line {opened[0] + line_offset} is not closed)" if opened else ""
            return RulesetError(f"missing '}}' before {str(tok)!r}{at}", file=file, line=line, column=col,
                                value=str(tok), expected="'}'")
        if tok.type == "IDENT" and tok.value in _UNSUPPORTED:
            return RulesetError(f"{tok.value!r} is nft syntax flowsim does not support", file=file, line=line,
                                column=col, value=str(tok), expected=_expected_text(e.expected))
        what = "newline" if tok.type == "_NL" else repr(str(tok))
        kind = "keyword or statement" if tok.type == "IDENT" else "token"
        return RulesetError(f"unexpected {kind} {what}", file=file, line=line, column=col, value=str(tok),
                            expected=_expected_text(e.expected))
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return RulesetError(f"unexpected character {e.char!r}", file=file, line=e.line + line_offset,
                            column=e.column, value=e.char, expected=_expected_text(e.allowed or ()))
    return RulesetError(str(e), file=file)


def parse_ruleset(text: str, *, file: str | None = None, line_offset: int = 0) -> Ruleset:
    """Parse *text* (what ``nft -f`` reads) into a :class:`Ruleset`.

    *file* and *line_offset* only change what errors report: a ruleset that
    starts on line 12 of ``topo.toml`` is parsed with ``file="topo.toml",
    line_offset=11``.

    >>> rs = parse_ruleset('table inet t { flowtable ft { hook ingress priority 0; devices = { "eth0" }; } }')
    >>> rs.flowtables[0].devices
    ('eth0',)
    """
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise _lark_error(e, text, file, line_offset) from None
    return _Builder(text, file, line_offset).build(tree)


# ----------------------------------------------------------------- builder

@attrs.define
class _ChainB:
    name: str
    loc: Loc
    order: int
    hook: BaseHook | None = None
    rules: list = attrs.Factory(list)  # (tree, text, loc, defines)
    anonymous: bool = False


@attrs.define
class _TableB:
    family: str
    name: str
    loc: Loc
    chains: dict = attrs.Factory(dict)
    flowtables: dict = attrs.Factory(dict)
    counters: dict = attrs.Factory(dict)
    sets: dict = attrs.Factory(dict)
    helpers: dict = attrs.Factory(dict)
    quotas: dict = attrs.Factory(dict)
    anon: int = 0


class _Builder(RuleCompiler[_TableB]):
    """Applies the parsed commands in order, then types rules and validates."""

    def __init__(self, text: str, file: str | None, line_offset: int):
        self.text = text
        self.file = file
        self.off = line_offset
        self.tables: dict[tuple[str, str], _TableB] = {}
        self.defines: dict[str, object] = {}
        self.order = 0
        self.devices: list[tuple[str, Loc]] = []

    # --- helpers
    def loc(self, x) -> Loc:
        if isinstance(x, lark.Token):
            return Loc(self.file, (x.line or 0) + self.off, x.column or 0)  # parsed tokens always have both
        return Loc(self.file, x.meta.line + self.off, x.meta.column)

    def err(self, message, where, value=None, expected=None) -> RulesetError:
        loc = where if isinstance(where, Loc) else self.loc(where)
        return RulesetError(message, file=self.file, line=loc.line, column=loc.column, value=value,
                            expected=expected)

    def _next_order(self) -> int:
        self.order += 1
        return self.order

    def text_of(self, node) -> str:
        return " ".join(self.text[node.meta.start_pos:node.meta.end_pos].split())

    @staticmethod
    def tokens(node, *types):
        return [c for c in node.children if isinstance(c, lark.Token) and (not types or c.type in types)]

    @staticmethod
    def trees(node, *names):
        return [c for c in node.children if isinstance(c, lark.Tree) and (not names or c.data in names)]

    # --- entry
    def build(self, tree) -> Ruleset:
        for cmd in tree.children:
            getattr(self, "cmd_" + cmd.data)(cmd)
        tables = tuple(self.freeze_table(tb) for tb in self.tables.values())
        rs = Ruleset(tables=tables, file=self.file, devices_referenced=tuple(self.devices))
        self.validate(rs)
        return rs

    # --- commands
    def family_of(self, node) -> tuple[str, lark.Token | None]:
        fam = self.trees(node, "family")
        if not fam:
            return "ip", None  # nft's default family
        tok = fam[0].children[0]
        if tok.value not in FAMILIES:
            raise self.err(f"the {tok.value} family is not supported", tok, tok.value,
                           "ip, ip6, inet or netdev (flowsim models routed flowtables)")
        return tok.value, tok

    def get_table(self, node, create: bool) -> _TableB:
        family, _ = self.family_of(node)
        name_tok = self.tokens(node, "IDENT")[0]
        key = (family, name_tok.value)
        if key not in self.tables:
            if not create:
                raise self.err(f"no table {family} {name_tok.value}", name_tok, name_tok.value,
                               "an existing table")
            self.tables[key] = _TableB(family, name_tok.value, self.loc(name_tok))
        return self.tables[key]

    def cmd_table(self, node):
        tb = self.get_table(node, create=True)
        for body in self.trees(node, "table_body"):
            self.table_body(tb, body)

    cmd_add_table = cmd_table

    def cmd_flush_ruleset(self, node):
        self.tables.clear()

    def cmd_flush_table(self, node):
        tb = self.get_table(node, create=False)
        for ch in tb.chains.values():
            ch.rules.clear()

    def cmd_delete_table(self, node):
        tb = self.get_table(node, create=False)
        del self.tables[(tb.family, tb.name)]

    def cmd_add_chain(self, node):
        tb = self.get_table(node, create=False)
        name = self.tokens(node, "IDENT")[1]
        ch = self.get_chain(tb, name)
        for body in self.trees(node, "chain_body"):
            self.chain_body(tb, ch, body)

    def cmd_add_rule(self, node, insert=False):
        tb = self.get_table(node, create=False)
        name = self.tokens(node, "IDENT")[1]
        if name.value not in tb.chains:
            raise self.err(f"no chain {name.value!r} in table {tb.family} {tb.name}", name, name.value,
                           "an existing chain")
        rule = self.trees(node, "rule")[0]
        entry = (rule, self.text_of(rule), self.loc(rule), dict(self.defines))
        chain = tb.chains[name.value]
        chain.rules.insert(0, entry) if insert else chain.rules.append(entry)

    def cmd_insert_rule(self, node):
        self.cmd_add_rule(node, insert=True)

    def cmd_define(self, node):
        name = self.tokens(node, "IDENT")[0].value
        rhs = node.children[-1]
        self.defines[name] = self.raw_set(rhs, self.defines) if rhs.data == "set_expr" else \
            self.raw_list(rhs, self.defines)

    # --- table contents
    def table_body(self, tb: _TableB, body):
        items = body.children
        # nft expands a table's chains before its flowtables (nft_cmd_expand): registration order
        for item in sorted(items, key=lambda t: t.data == "flowtable"):
            if item.data == "chain":
                name = self.tokens(item, "IDENT")[0]
                ch = self.get_chain(tb, name)
                self.chain_body(tb, ch, self.trees(item, "chain_body")[0])
            elif item.data == "flowtable":
                self.flowtable(tb, item)
            elif item.data == "counter_obj":
                self.counter_obj(tb, item)
            elif item.data == "quota_obj":
                self.quota_obj(tb, item)
            elif item.data in ("set_obj", "map_obj"):
                self.set_obj(tb, item, is_map=item.data == "map_obj")
            elif item.data == "define":  # a define inside the table (firewall4 writes them there)
                self.cmd_define(item)
            elif item.data == "ct_helper_obj":
                self.ct_helper_obj(tb, item)
            elif item.data == "table_flags":
                flags = self.tokens(item, "IDENT")
                raise self.err("table flags are not supported", flags[0], flags[0].value, "no flags")
            # table_comment: nothing to keep

    def ct_helper_obj(self, tb: _TableB, node):
        """``ct helper NAME { type "T" protocol P; }`` (nft_ct_helper_obj_init): the helper a rule's
        ``ct helper set "NAME"`` attaches; ``protocol`` is the layer-4 protocol it applies to."""
        name = self.tokens(node, "IDENT")[0]
        types = self.trees(node, "cth_type")
        if not types:
            raise self.err(f"ct helper {name.value} has no type", name, None, 'type "NAME" protocol tcp|udp')
        proto = self.tokens(types[0], "IDENT")[0]
        if proto.value not in ("tcp", "udp"):
            raise self.err(f"ct helper protocol {proto.value!r}", proto, proto.value, "tcp or udp")
        tb.helpers[name.value] = (self.tokens(types[0], "STRING")[0].value[1:-1], 6 if proto.value == "tcp" else 17)

    def get_chain(self, tb: _TableB, name_tok) -> _ChainB:
        name = name_tok.value
        if name not in tb.chains:
            tb.chains[name] = _ChainB(name, self.loc(name_tok), self._next_order())
        return tb.chains[name]

    def anonymous_chain(self, tb: _TableB, body, defines) -> _ChainB:
        """``jump { … }`` / ``goto { … }``: a chain named like nft's ``__chainN``."""
        tb.anon += 1
        ch = _ChainB(f"__chain{tb.anon}", self.loc(body), self._next_order(), anonymous=True)
        tb.chains[ch.name] = ch
        self.chain_body(tb, ch, body, defines)
        if ch.hook is not None:
            raise self.err("an anonymous chain cannot have a hook", body, None, "rules only")
        return ch

    def chain_body(self, tb: _TableB, ch: _ChainB, body, defines=None):
        for item in body.children:
            if item.data == "base_spec":
                self.base_spec(tb, ch, item)
            elif item.data == "policy":
                tok = self.tokens(item, "IDENT")[0]
                if ch.hook is None:
                    raise self.err("policy on a chain without a hook", tok, tok.value,
                                   "'type … hook … priority …;' first")
                if tok.value not in ("accept", "drop"):
                    raise self.err(f"bad policy {tok.value!r}", tok, tok.value, "accept or drop")
                ch.hook = attrs.evolve(ch.hook, policy=tok.value)
            elif item.data == "rule":
                ch.rules.append((item, self.text_of(item), self.loc(item),
                                 dict(self.defines) if defines is None else defines))

    def prio(self, node) -> tuple[int, str]:
        toks = self.tokens(node)
        if node.data == "prio_num":
            return nft_number(toks[0].value), toks[0].value
        if node.data == "prio_neg":
            return -nft_number(toks[0].value), "-" + toks[0].value
        name = toks[0]
        m = re.fullmatch(r"([a-z]+)(?:-(\d+))?", name.value)  # `filter-10` lexes as one name
        if not m or m.group(1) not in CHAIN_PRIORITIES:
            raise self.err(f"unknown priority {name.value!r}", name, name.value,
                           "a number or one of " + ", ".join(CHAIN_PRIORITIES))
        base = CHAIN_PRIORITIES[m.group(1)] - int(m.group(2) or 0)
        if node.data == "prio_plus":
            return base + nft_number(toks[1].value), f"{name.value} + {toks[1].value}"
        if node.data == "prio_minus":
            return base - nft_number(toks[1].value), f"{name.value} - {toks[1].value}"
        return base, name.value

    def devset(self, node, defines, locs: list[Loc] | None = None) -> list[str]:
        """The device names of a ``devices = { … }`` or ``device`` spec; *locs* collects where each was written."""
        out = []
        for dn in node.children:
            tok = dn.children[0]
            if tok.type == "VAR":
                for v in self.var(tok, defines, flatten=True):
                    out.append(v.text)
                    if locs is not None:
                        locs.append(self.loc(tok))
            else:
                if locs is not None:
                    locs.append(self.loc(tok))
                out.append(tok.value[1:-1] if tok.type == "STRING" else tok.value)
                self.devices.append((out[-1], self.loc(tok)))
        return out

    def base_spec(self, tb: _TableB, ch: _ChainB, node):
        type_tok, hook_tok = self.tokens(node, "IDENT")[:2]
        if ch.hook is not None:
            raise self.err(f"chain {ch.name!r} already has a hook", type_tok, type_tok.value, "one hook per chain")
        ctype, hook = type_tok.value, hook_tok.value
        if ctype not in ("filter", "nat", "route"):
            raise self.err(f"unknown chain type {ctype!r}", type_tok, ctype, "filter, nat or route")
        if hook not in HOOKS_BY_FAMILY[tb.family]:
            raise self.err(f"hook {hook!r} is not available in the {tb.family} family", hook_tok, hook,
                           ", ".join(HOOKS_BY_FAMILY[tb.family]))
        if ctype == "nat" and hook not in ("prerouting", "input", "output", "postrouting"):
            raise self.err(f"nat chains cannot use hook {hook!r}", hook_tok, hook,
                           "prerouting, input, output or postrouting")
        if ctype == "route" and hook != "output":
            raise self.err("route chains only hook output", hook_tok, hook, "output")
        devices: list[str] = []
        for ds in self.trees(node, "dev_spec"):
            sub = self.trees(ds, "devset")
            devices = self.devset(sub[0], self.defines) if sub else self.devset(ds, self.defines)
        if hook in ("ingress", "egress") and not devices:
            raise self.err(f"a {hook} chain needs a device", hook_tok, hook, "device \"NAME\"")
        if hook not in ("ingress", "egress") and devices:
            raise self.err(f"hook {hook!r} takes no device", hook_tok, hook, "no device")
        prio, ptext = self.prio(self.trees(node, "prio_num", "prio_neg", "prio_name", "prio_plus",
                                           "prio_minus")[0])
        ch.hook = BaseHook(type=ctype, hook=hook, priority=prio, devices=tuple(devices), priority_text=ptext)

    def flowtable(self, tb: _TableB, node):
        name = self.tokens(node, "IDENT")[0]
        if tb.family == "netdev":
            raise self.err("flowtables belong to ip, ip6 or inet tables", name, name.value, "an ip/ip6/inet table")
        hook = prio = None
        devices: list[str] = []
        device_locs: list[Loc] = []
        flags: set[str] = set()
        counter = False
        for item in node.children[1:]:
            if item.data == "ft_hook":
                hook = self.tokens(item, "IDENT")[0]
                if hook.value != "ingress":
                    raise self.err(f"flowtable hook {hook.value!r}", hook, hook.value, "ingress")
                prio = self.prio(item.children[-1])[0]
            elif item.data == "ft_devices":
                devices += self.devset(item.children[0], self.defines, device_locs)
            elif item.data == "ft_flags":
                for f in self.tokens(item, "IDENT"):
                    if f.value != "offload":
                        raise self.err(f"unknown flowtable flag {f.value!r}", f, f.value, "offload")
                    flags.add(f.value)
            elif item.data == "ft_counter":
                counter = True
        if hook is None or prio is None:  # set together by ft_hook
            raise self.err(f"flowtable {name.value!r} has no hook", name, name.value,
                           "'hook ingress priority N'")
        tb.flowtables[name.value] = Flowtable(
            family=tb.family, table=tb.name, name=name.value, hook="ingress", priority=prio,
            devices=tuple(devices), flags=frozenset(flags), counter=counter, loc=self.loc(name),
            order=self._next_order(), device_locs=tuple(device_locs))

    def quota_obj(self, tb: _TableB, node):
        """``quota NAME { [over|until] N UNIT [used M UNIT] }``, a comment before or after (as nft lists it)."""
        name = self.tokens(node, "IDENT")[0]
        specs = self.trees(node, "quota_spec")
        if len(specs) != 1:
            raise self.err(f"quota {name.value} has {len(specs)} amounts", specs[1] if specs else name,
                           name.value, "one [over|until] N BYTES [used M BYTES]")
        q = self.quota_spec(specs[0], self.loc(name))
        tb.quotas[name.value] = QuotaDef(name.value, q.quota, q.over, q.used, self.loc(name))

    def counter_obj(self, tb: _TableB, node):
        name = self.tokens(node, "IDENT")[0]
        packets = nbytes = 0
        for body in self.trees(node, "counter_body"):
            for item in body.children:
                nums = [nft_number(t.value) for t in self.tokens(item, "NUMBER")]
                if item.data == "counter_packets":
                    packets = nums[0]
                    nbytes = nums[1] if len(nums) > 1 else nbytes
                elif item.data == "counter_bytes":
                    nbytes = nums[0]
        tb.counters[name.value] = CounterDef(name.value, packets, nbytes, self.loc(name))

    def set_obj(self, tb: _TableB, node, is_map: bool):
        name = self.tokens(node, "IDENT")[0]
        dtype = map_dtype = None
        flags: set[str] = set()
        raw = None
        for item in node.children[1:]:
            if item.data == "set_type":
                toks = self.tokens(item, "IDENT")
                if toks[0].value not in SET_TYPES:
                    raise self.err(f"unsupported set type {toks[0].value!r}", toks[0], toks[0].value,
                                   ", ".join(SET_TYPES))
                dtype = SET_TYPES[toks[0].value]
                if len(toks) > 1:
                    if not is_map:
                        raise self.err("':' in a set type", toks[1], toks[1].value, "a map")
                    map_dtype = SET_TYPES.get(toks[1].value)
                    if map_dtype is None:
                        raise self.err(f"unsupported map value type {toks[1].value!r}", toks[1],
                                       toks[1].value, ", ".join(SET_TYPES))
            elif item.data == "set_typeof":
                sels = [self.selector(s) for s in self.trees(item)]
                dtype = sels[0].spec.dtype
                map_dtype = sels[1].spec.dtype if len(sels) > 1 else None
            elif item.data == "set_flags":
                flags.update(t.value for t in self.tokens(item, "IDENT"))
            elif item.data == "set_elements":
                raw = self.raw_set(item.children[0], self.defines)
        if dtype is None:
            raise self.err(f"set {name.value!r} has no type", name, name.value, "'type …' or 'typeof …'")
        if is_map and map_dtype is None:
            raise self.err(f"map {name.value!r} needs 'type KEY : VALUE'", name, name.value, "KEY : VALUE")
        elements = ()
        if raw is not None:
            elements = tuple(self.set_element(dtype, e, is_map, map_dtype) for e in raw.elems)
        tb.sets[name.value] = NamedSet(name.value, dtype, elements, frozenset(flags), is_map, map_dtype,
                                       self.loc(name))

    def set_element(self, dtype, e, is_map, map_dtype):
        if is_map:
            if not isinstance(e, tuple):
                raise self.err("map element needs 'key : value'", e.loc, None, "KEY : VALUE")
            key, val = e
            if map_dtype == "verdict":
                if not isinstance(val, Verdict):
                    raise self.err("map value must be a verdict", val.loc, None, "accept, drop, jump …")
                return (coerce(dtype, key, self.err), val)
            return (coerce(dtype, key, self.err), coerce(map_dtype, val, self.err))
        if isinstance(e, tuple):
            raise self.err("'key : value' in a set", e[0].loc, None, "a value")
        return coerce(dtype, e, self.err)

    # --- freeze and validate
    def freeze_table(self, tb: _TableB) -> Table:
        frozen: dict[str, Chain] = {}
        while len(frozen) < len(tb.chains):  # compiling may add anonymous chains
            for name in [n for n in tb.chains if n not in frozen]:
                ch = tb.chains[name]
                rules = tuple(attrs.evolve(self.compile_rule(tb, e), index=i) for i, e in enumerate(ch.rules))
                frozen[name] = Chain(tb.family, tb.name, name, rules, ch.hook, ch.loc, ch.order, ch.anonymous)
        chains = {n: frozen[n] for n in tb.chains}
        ro = MappingProxyType  # the ruleset is a value: its tables cannot be changed behind the evaluator's back
        return Table(tb.family, tb.name, ro(chains), ro(dict(tb.flowtables)), ro(dict(tb.counters)),
                     ro(dict(tb.sets)), tb.loc, ro(dict(tb.helpers)), ro(dict(tb.quotas)))

