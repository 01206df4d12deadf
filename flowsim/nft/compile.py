"""Compile nft rules: type each expression, then validate as the kernel does.

Part of :mod:`flowsim.nft.parse`'s builder (a mixin, :class:`RuleCompiler`):
rules are compiled once every chain, set and counter of their table exists.
Each expression becomes a :mod:`flowsim.nft.model` value; right-hand sides
are typed by the selector (:mod:`flowsim.nft.types`).  Validation follows
``nft_chain_validate``: jump/goto targets exist and are regular chains, no
loops (ELOOP), no chain reached through :data:`NFT_JUMP_STACK_SIZE` jumps or
gotos (EMLINK), ``flow add``/``flow offload`` only under a forward hook
(``nft_flow_offload_validate``), NAT only in nat chains at their hooks
(``nft_nat_validate``), a device in at most one flowtable (EBUSY).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import lark

from flowsim.errors import RulesetError
from flowsim.nft.model import (
    CT_DIR_KEYS, FAMILIES, DATA_UNITS, FIB_DEVICE_FLAGS, FIB_KEYS, FIB_RESULT_DTYPE, fib_key, LIMIT_TIME_UNITS,
    NFPROTO_IPV4, NFT_LIMIT_PKT_BURST_DEFAULT, S64_MAX,
    U32_MAX, U64_MAX, NFPROTO_IPV6, SELECTORS, BaseHook, Chain, ConcatMatch, CounterStmt, FlowAdd,
    Flowtable, LimitStmt, Loc, LogStmt, QuotaStmt,
    TcpOptStmt, Match, NamedSet, NatStmt, RejectStmt, Rule, Ruleset, Selector, SetStmt, Table,
    Verdict, VerdictMap,
)
from flowsim.nft.types import (
    BITMASK_DTYPES, SYMBOLS, TOKEN_KIND, RawAtom, RawRange, RawSet, RawSlash, coerce, coerce_atom, nft_number,
)

__all__ = ["RuleCompiler"]

_TCP = SYMBOLS["inet_proto"]["tcp"]
#: the hooks a reject may sit at, per table family (nft_reject_validate, nft_reject_inet_validate,
#: nft_reject_netdev_validate): elsewhere the kernel refuses the rule (-EOPNOTSUPP)
_REJECT_HOOKS = {"ip": ("prerouting", "input", "forward", "output"), "ip6": ("prerouting", "input", "forward", "output"),
                 "inet": ("prerouting", "input", "forward", "output", "ingress"), "netdev": ("ingress",)}
_NAT_HOOKS = {"dnat": ("prerouting", "output"), "redirect": ("prerouting", "output"),
              "snat": ("postrouting", "input"), "masquerade": ("postrouting",)}
_NAT_FLAGS = frozenset({"random", "fully-random", "persistent"})
#: include/net/netfilter/nf_tables.h: nft_chain_validate refuses a chain reached at this level (-EMLINK)
NFT_JUMP_STACK_SIZE = 16
#: statements after which nothing more may follow in a rule (STMT_F_TERMINAL in nft)
_TERMINAL = (Verdict, NatStmt, RejectStmt, VerdictMap)


class _NamedChain(Protocol):
    name: str


_Table = TypeVar("_Table")  # the builder's table under construction (flowsim.nft.parse._TableB)


class RuleCompiler(Generic[_Table]):
    """Mixin of the ruleset builder: raw values, rule expressions, validation.

    Expects ``err``, ``loc``, ``tokens``, ``trees``, ``set_element``,
    ``anonymous_chain`` and ``devices`` from the builder
    (``flowsim.nft.parse._Builder``); they are declared below for mypy only.
    """

    if TYPE_CHECKING:
        devices: list[tuple[str, Loc]]

        def loc(self, x: lark.Token | lark.Tree) -> Loc: ...

        def err(self, message: str, where: object, value: object = None, expected: object = None) -> RulesetError: ...

        @staticmethod
        def tokens(node: lark.Tree, *types: str) -> list[lark.Token]: ...

        @staticmethod
        def trees(node: lark.Tree, *names: str) -> list[lark.Tree]: ...

        def set_element(self, dtype: str, e: object, is_map: bool, map_dtype: str | None) -> object: ...

        def anonymous_chain(self, tb: _Table, body: lark.Tree, defines: object) -> _NamedChain: ...

    # --- raw values (variables substituted)
    def var(self, tok, defines, flatten=False):
        name = tok.value[1:]
        if name not in defines:
            raise self.err(f"undefined variable ${name}", tok, tok.value, "a name set with 'define'")
        v = defines[name]
        if flatten:
            return list(v.elems) if isinstance(v, RawSet) else list(v)
        return v

    def raw_atom(self, node, defines):
        tok = node.children[0]
        if tok.type == "VAR":
            return self.var(tok, defines)
        text = tok.value[1:-1] if tok.type == "STRING" else tok.value
        return RawAtom(TOKEN_KIND[tok.type], text, self.loc(tok))

    def raw_value(self, node, defines):
        """value -> list of raw values (a $variable may expand to several)."""
        if node.data == "value":
            a = self.raw_atom(node.children[0], defines)
            if isinstance(a, RawSet):
                return list(a.elems)
            return list(a) if isinstance(a, tuple) else [a]
        lo, hi = (self.raw_atom(c, defines) for c in self.trees(node, "atom"))
        for x in (lo, hi):
            if not isinstance(x, RawAtom):
                raise self.err("a variable holding a list cannot be a range bound", node, None, "a value")
        cls = RawRange if node.data == "range" else RawSlash
        return [cls(lo, hi, self.loc(node))]

    def raw_list(self, node, defines) -> tuple:
        out = []
        for v in node.children:
            out += self.raw_value(v, defines)
        return tuple(out)

    def raw_set(self, node, defines) -> RawSet:
        elems = []
        for el in node.children:
            if el.data == "map_elem":
                key = self.raw_value(el.children[0], defines)
                valnode = el.children[1]
                if valnode.data == "value":
                    val = self.raw_value(valnode, defines)[0]
                else:
                    val = self.verdict(None, valnode, defines)
                elems.append((key[0], val))
            elif el.data == "concat_elem":  # `130 . 0`: one tuple of raw values
                elems.append(tuple(self.raw_value(v, defines)[0] for v in el.children))
            else:
                elems += self.raw_value(el.children[0], defines)
        return RawSet(tuple(elems), self.loc(node))

    # --- selectors and rules
    def selector(self, node) -> Selector:
        if node.data == "sel_fib":
            return self.fib_selector(node.children[0])
        if node.data == "sel_meta_short":
            tok = node.children[0].children[0]
            return Selector("meta", tok.value)
        if node.data == "sel_ct_dir":
            d = self.tokens(self.trees(node, "ct_dir")[0])[0]
            key = self.tokens(node, "IDENT")[0]
            if key.value not in CT_DIR_KEYS:
                raise self.err(f"unknown ct {d.value} key {key.value!r}", key, key.value, ", ".join(sorted(CT_DIR_KEYS)))
            return Selector("ct", key.value, 0 if d.value == "original" else 1)
        if node.data == "sel_payload":
            kind = node.children[0].children[0].value
            key = node.children[1]
        else:
            kind = {"sel_meta": "meta", "sel_ct": "ct"}[node.data]
            key = self.tokens(node, "IDENT")[0]
        if (kind, key.value) not in SELECTORS:
            keys = sorted(k for (kd, k) in SELECTORS if kd == kind)
            raise self.err(f"unknown {kind} key {key.value!r}", key, key.value, ", ".join(keys))
        if kind == "ct" and key.value in CT_DIR_KEYS:
            raise self.err(f"ct {key.value} needs a direction", key, key.value, "ct original|reply " + key.value)
        return Selector(kind, key.value)

    def fib_selector(self, tok) -> Selector:
        """``fib ADDR [. FLAG]… RESULT`` as nft sends it, with ``nft_fib_init``'s refusals (-EINVAL): one of saddr and
        daddr, not both iif and oif, no oif flag with an oif or oifname result."""
        words = tok.value.replace(".", " . ").split()[1:]
        result, parts = words[-1], [w for w in words[:-1] if w != "."]
        addr, flags = parts[0], parts[1:]
        bad = [w for w in parts if w not in ("saddr", "daddr", *FIB_DEVICE_FLAGS, "mark")] + \
            ([result] if result not in FIB_RESULT_DTYPE else [])
        if bad:
            raise self.err(f"unknown fib word {bad[0]!r}", tok, bad[0],
                           "fib saddr|daddr [. iif|oif] [. mark] oif|oifname|type")
        device = [f for f in flags if f in FIB_DEVICE_FLAGS]
        if addr not in ("saddr", "daddr") or any(f in ("saddr", "daddr") for f in flags) or len(device) > 1 \
                or len(flags) != len(set(flags)):
            raise self.err(f"Could not process rule: Invalid argument (nft_fib_init: {tok.value!r})", tok, tok.value,
                           "one of saddr or daddr first, then at most one of iif or oif, and mark")
        key = fib_key(addr, device[0] if device else None, "mark" in flags, result)
        if key not in FIB_KEYS:  # an oif flag with an oif or oifname result
            raise self.err(f"Could not process rule: Invalid argument (nft_fib_init: {tok.value!r}: the oif flag "
                           f"with result {result})", tok, tok.value, "fib … . iif oif, or fib … . oif type")
        return Selector("fib", key)

    def compile_rule(self, tb, entry) -> Rule:
        node, text, loc, defines = entry
        exprs: list[object] = []
        comment = None
        for el in node.children:
            if el.data == "rule_comment":
                comment = el.children[0].value[1:-1]
                continue
            if exprs and isinstance(exprs[-1], _TERMINAL):
                raise self.err("statement after terminal statement has no effect", el, None,
                               "the verdict at the end of the rule")
            exprs.append(getattr(self, "x_" + el.data)(tb, el, defines))
        for e in exprs:
            if isinstance(e, RejectStmt) and e.kind == "tcp-reset" and _not_tcp(exprs):
                raise self.err("you cannot use tcp reset with this protocol", e.loc, e.with_,
                               "a rule that matches TCP (reject with tcp reset adds meta l4proto tcp)")
            if isinstance(e, NatStmt) and e.port_min is not None and not _has_l4_match(exprs):
                raise self.err("transport protocol mapping is only valid after a transport protocol match",
                               e.loc, None, "e.g. 'tcp dport …' or 'meta l4proto tcp' before it")
        return Rule(tuple(exprs), text, loc, comment=comment)

    def x_match(self, tb, node, defines) -> Match:
        sel = self.selector(node.children[0])
        dtype = sel.spec.dtype
        mask = None
        op = "implicit"
        rhs = node.children[-1]
        for c in node.children[1:-1]:
            if isinstance(c, lark.Token):
                op = c.value
            else:  # mask
                bits = 0
                for a in self.trees(c, "atom"):
                    raw = self.raw_atom(a, defines)
                    bits |= coerce_atom(dtype if dtype in BITMASK_DTYPES else "integer", raw, self.err)
                mask = bits
        first = rhs.children[0]
        mloc = self.loc(node)
        if isinstance(first, lark.Token):  # @set
            nset = self.lookup_set(tb, first, dtype)
            return Match(sel, self._set_op(op, first), nset.elements, True, nset.name, False, mask, mloc)
        if first.data == "set_expr":
            raw = self.raw_set(first, defines)
            vals = tuple(self.set_element(dtype, e, False, None) for e in raw.elems)
            return Match(sel, self._set_op(op, first), vals, True, None, False, mask, mloc)
        whole = self.whole_var(first, defines)
        if isinstance(whole, RawSet):  # `iifname $lan_ifs` with `define lan_ifs = { … }`
            vals = tuple(self.set_element(dtype, e, False, None) for e in whole.elems)
            return Match(sel, self._set_op(op, first), vals, True, None, False, mask, mloc)
        raw = self.raw_list(first, defines)
        if sel.key in ("iif", "oif", "iifname", "oifname"):
            self.devices += [(a.text, a.loc) for a in raw if isinstance(a, RawAtom) and "*" not in a.text]
        if dtype in BITMASK_DTYPES:
            return self._flag_match(sel, op, raw, mask, mloc)
        if len(raw) > 1:
            raise self.err("a comma-separated list is only valid for flag types (ct state, ct status, tcp flags)",
                           raw[1].loc, None, "a set in braces: { a, b }")
        if op not in ("implicit", "==", "!=") and (dtype in ("ifname",) or isinstance(raw[0], (RawRange, RawSlash))):
            raise self.err(f"operator {op} needs a single number", raw[0].loc, op, "== or !=")
        return Match(sel, op, (coerce(dtype, raw[0], self.err),), False, None, False, mask, mloc)

    def whole_var(self, value_list, defines):
        """The value of a rhs that is exactly one ``$variable``, else None."""
        if len(value_list.children) != 1 or value_list.children[0].data != "value":
            return None
        tok = value_list.children[0].children[0].children[0]
        return self.var(tok, defines) if tok.type == "VAR" else None

    def _set_op(self, op, where):
        if op not in ("implicit", "==", "!="):
            raise self.err(f"operator {op} with a set", where, op, "== or !=")
        return op

    def _flag_match(self, sel, op, raw, mask, mloc) -> Match:
        dtype = sel.spec.dtype
        slash = [i for i, v in enumerate(raw) if isinstance(v, RawSlash)]
        if slash:  # `tcp flags syn / fin,syn,rst,ack`: value list / mask list
            i = slash[0]
            left = list(raw[:i]) + [raw[i].left]
            right = [raw[i].right] + list(raw[i + 1:])
            value = 0
            for a in left:
                value |= coerce(dtype, a, self.err)
            m = 0
            for a in right:
                m |= coerce(dtype, a, self.err)
            return Match(sel, "!=" if op == "!=" else "==", (value,), False, None, False, m, mloc)
        bits = 0
        for a in raw:
            bits |= coerce(dtype, a, self.err)
        if op in ("implicit", "!=") and mask is None:
            return Match(sel, op, (bits,), False, None, True, None, mloc)
        return Match(sel, op, (bits,), False, None, False, mask, mloc)

    def lookup_set(self, tb, tok, dtype, want_map=False) -> NamedSet:
        name = tok.value[1:]
        nset = tb.sets.get(name)
        if nset is None:
            raise self.err(f"no set {name!r} in table {tb.family} {tb.name}", tok, tok.value, "a defined set")
        if nset.dtype != dtype:
            raise self.err(f"set {name!r} holds {nset.dtype}, not {dtype}", tok, tok.value, f"a set of {dtype}")
        if nset.is_map != want_map:
            raise self.err(f"@{name} is a {'map' if nset.is_map else 'set'}", tok, tok.value,
                           "a map" if want_map else "a set")
        return nset

    def x_concat_match(self, tb, node, defines) -> ConcatMatch:
        sels = tuple(self.selector(c) for c in self.trees(node, "sel_meta", "sel_meta_short", "sel_payload",
                                                                 "sel_ct", "sel_ct_dir"))
        ops = self.tokens(node, "RELOP")
        op = self._set_op(ops[0].value if ops else "implicit", node)
        raw = self.raw_set(self.trees(node, "set_expr")[0], defines)
        values = []
        for e in raw.elems:
            if not isinstance(e, tuple) or len(e) != len(sels):
                where = e[0].loc if isinstance(e, tuple) else e.loc
                raise self.err(f"a set element of {len(e) if isinstance(e, tuple) else 1} values for a "
                               f"concatenation of {len(sels)}", where, None, " . ".join(["value"] * len(sels)))
            values.append(tuple(coerce(s.spec.dtype, a, self.err) for s, a in zip(sels, e)))
        return ConcatMatch(sels, op, tuple(values), self.loc(node))

    def x_limit_stmt(self, tb, node, defines) -> LimitStmt:
        """nft's ``limit_stmt`` (src/parser_bison.y: ``limit_rate_pkts`` / ``limit_rate_bytes``, their burst),
        then the refusals of the kernel's ``nft_limit_init``."""
        (rate_node,) = self.trees(node, "limit_pkts", "limit_bytes")
        is_bytes = rate_node.data == "limit_bytes"
        (number,), words = self.tokens(rate_node, "NUMBER"), self.tokens(rate_node, "IDENT")
        rate = self._bounded(number, U64_MAX, "limit rate")
        if is_bytes:
            rate *= self._data_unit(words.pop(0))
        unit = LIMIT_TIME_UNITS.get(words[0].value)
        if unit is None:
            raise self.err(f"unknown limit unit {words[0].value!r}", words[0], words[0].value,
                           "second, minute, hour, day or week")
        burst = 0 if is_bytes else NFT_LIMIT_PKT_BURST_DEFAULT  # limit_burst_bytes / limit_burst_pkts when empty
        for b in self.trees(node, "limit_burst"):
            (amount,), (word,) = self.tokens(b, "NUMBER"), self.tokens(b, "IDENT")
            burst = self._bounded(amount, U64_MAX, "limit burst")
            if is_bytes:
                burst *= self._data_unit(word)
            elif word.value != "packets":
                raise self.err(f"a packet rate's burst is counted in packets, not {word.value!r}", word, word.value,
                               "packets")
            elif burst == 0:
                raise self.err("packet limit burst must be > 0", amount, 0, "a burst of 1 or more packets")
        if burst > U32_MAX:  # NFTA_LIMIT_BURST: 32 bits, which nft (1.0.6) fills with the low bits, silently
            raise self.err(f"limit burst {burst} does not fit in NFTA_LIMIT_BURST's 32 bits (nft would send "
                           f"{burst & U32_MAX})", node, burst, f"at most {U32_MAX}")
        stmt = LimitStmt(rate, unit, burst, bool(self.tokens(node, "LIMIT_OVER")), is_bytes, self.loc(node))
        # nft_limit_init: -EINVAL for a zero rate, -EOVERFLOW when the bucket does not fit in 64 bits
        if rate == 0:
            raise self.err("Could not process rule: Invalid argument (nft_limit_init: a zero rate)", number, 0,
                           "a rate of 1 or more")
        if rate + burst > U64_MAX or (stmt.nsecs * (rate + burst) if is_bytes else stmt.tokens_max) > U64_MAX:
            raise self.err("Could not process rule: Value too large for defined data type (nft_limit_init: the "
                           "token bucket in nanoseconds overflows 64 bits)", node, f"{rate}/{words[0].value}",
                           "a shorter time unit or a smaller burst")
        return stmt

    def _bounded(self, token, most: int, what: str) -> int:
        value = nft_number(token.value)
        if value > most:
            raise self.err(f"{what} {value} is too large", token, value, f"at most {most}")
        return value

    def _data_unit(self, word) -> int:
        """nft's ``data_unit_parse`` (a limit's or a quota's bytes): bytes, kbytes, mbytes."""
        scale = DATA_UNITS.get(word.value)
        if scale is None:
            raise self.err(f"unknown byte unit {word.value!r}", word, word.value, "bytes, kbytes or mbytes")
        return scale

    def quota_spec(self, node, loc: Loc) -> QuotaStmt:
        """nft's quota: ``[over|until] N UNIT [used M UNIT]`` (data_unit_parse), then ``nft_quota_do_init``'s
        refusals: a quota past S64_MAX (-EOVERFLOW), more used than the quota (-EINVAL)."""
        mode = self.tokens(node, "QUOTA_MODE")
        numbers, units = self.tokens(node, "NUMBER"), self.tokens(node, "IDENT")
        quota = self._bounded(numbers[0], U64_MAX, "quota") * self._data_unit(units[0])
        used = self._bounded(numbers[1], U64_MAX, "quota used") * self._data_unit(units[1]) if len(numbers) > 1 else 0
        if quota > S64_MAX:
            raise self.err("Could not process rule: Value too large for defined data type (nft_quota_do_init: "
                           "a quota past S64_MAX)", numbers[0], quota, f"at most {S64_MAX} bytes")
        if used > quota:
            raise self.err("Could not process rule: Invalid argument (nft_quota_do_init: more used than the "
                           "quota)", numbers[1], used, f"at most the quota, {quota} bytes")
        return QuotaStmt(quota, bool(mode) and mode[0].value == "over", used, loc=loc)

    def x_quota_anon(self, tb, node, defines) -> QuotaStmt:
        return self.quota_spec(self.trees(node, "quota_spec")[0], self.loc(node))

    def x_quota_named(self, tb, node, defines) -> QuotaStmt:
        tok = self.tokens(node)[-1]
        name = tok.value[1:-1] if tok.type == "STRING" else tok.value
        if name not in tb.quotas:
            raise self.err(f"no quota {name!r} in table {tb.family} {tb.name}", tok, name, "a named quota")
        return QuotaStmt(name=name, loc=self.loc(node))

    def x_tcpopt_stmt(self, tb, node, defines) -> TcpOptStmt:
        option, field = (t.value for t in self.tokens(node, "IDENT"))
        if (option, field) != ("maxseg", "size"):
            raise self.err(f"tcp option {option} {field} cannot be set", node, f"{option} {field}",
                           "tcp option maxseg size set rt mtu")
        return TcpOptStmt(option, field, self.loc(node))

    def x_vmap(self, tb, node, defines) -> VerdictMap:
        sel = self.selector(node.children[0])
        dtype = sel.spec.dtype
        src = node.children[1]
        if isinstance(src, lark.Token):
            nset = self.lookup_set(tb, src, dtype, want_map=True)
            if nset.map_dtype != "verdict":
                raise self.err(f"@{nset.name} is not a verdict map", src, src.value, "type … : verdict")
            return VerdictMap(sel, nset.elements, nset.name, self.loc(node))
        raw = self.raw_set(src, defines)
        return VerdictMap(sel, tuple(self.set_element(dtype, e, True, "verdict") for e in raw.elems), None,
                          self.loc(node))

    def verdict(self, tb, node, defines) -> Verdict:
        kw = node.children[0].children[0]
        if node.data == "verdict_plain":
            return Verdict(kw.value, None, self.loc(kw))
        if node.data == "verdict_jump":
            target = node.children[1]
            name = target.value[1:-1] if target.type == "STRING" else target.value
            return Verdict(kw.value, name, self.loc(target))
        if tb is None:
            raise self.err("anonymous chain not allowed here", kw, kw.value, "jump CHAIN")
        ch = self.anonymous_chain(tb, node.children[1], defines)
        return Verdict(kw.value, ch.name, self.loc(kw))

    def x_verdict_plain(self, tb, node, defines):
        return self.verdict(tb, node, defines)

    x_verdict_jump = x_verdict_anon = x_verdict_plain

    def x_counter_anon(self, tb, node, defines):
        return CounterStmt(loc=self.loc(node))

    def x_counter_anon_init(self, tb, node, defines):
        p, b = (nft_number(t.value) for t in self.tokens(node, "NUMBER"))
        return CounterStmt(packets=p, bytes=b, loc=self.loc(node))

    def x_counter_named(self, tb, node, defines):
        tok = self.tokens(node)[-1]
        if tok.type == "VAR":
            v = self.var(tok, defines)
            if not isinstance(v, tuple) or len(v) != 1:
                raise self.err("counter name variable must hold one name", tok, tok.value, "a name")
            name = v[0].text
        else:
            name = tok.value[1:-1] if tok.type == "STRING" else tok.value
        if name not in tb.counters:
            raise self.err(f"no counter {name!r} in table {tb.family} {tb.name}", tok, name, "a named counter")
        return CounterStmt(name=name, loc=self.loc(node))

    def x_counter_map(self, tb, node, defines):
        sel = self.selector(self.trees(node, "sel_meta", "sel_meta_short", "sel_payload", "sel_ct",
                                       "sel_ct_dir")[0])
        src = node.children[-1]
        if isinstance(src, lark.Token):
            raise self.err("named maps of counters are not supported", src, src.value, "an anonymous map")
        entries = []
        for e in self.raw_set(src, defines).elems:
            if not isinstance(e, tuple) or not isinstance(e[1], RawAtom):
                loc = e[0].loc if isinstance(e, tuple) else e.loc
                raise self.err("counter map element needs 'key : counter'", loc, None, "KEY : COUNTER")
            key, val = e
            if val.text not in tb.counters:
                raise self.err(f"no counter {val.text!r} in table {tb.family} {tb.name}", val.loc, val.text,
                               "a named counter")
            entries.append((coerce(sel.spec.dtype, key, self.err), val.text))
        return CounterStmt(map_selector=sel, map_entries=tuple(entries), loc=self.loc(node))

    def x_flow_stmt(self, tb, node, defines):
        op = node.children[0].children[0].value
        ref = node.children[1]
        return FlowAdd(ref.value[1:], op, self.loc(node))

    def x_set_stmt(self, tb, node, defines):
        sel = self.selector(node.children[0])
        if not sel.spec.settable:
            raise self.err(f"{sel} cannot be set", node.children[0], str(sel),
                           "meta mark, ct mark, ip dscp, ip6 dscp or meta nftrace")
        src = node.children[1]
        if src.data == "atom":
            raw = self.raw_atom(src, defines)
            if isinstance(raw, tuple):
                raw = raw[0]
            value = coerce(sel.spec.dtype, raw, self.err)
            if sel.spec.dtype == "ct_helper" and value not in tb.helpers:
                raise self.err(f"no ct helper object {value!r} in table {tb.name}", src, value,
                               "a `ct helper NAME { type … protocol …; }` of this table")
        else:
            value = self.selector(src)
            if value.spec.dtype != sel.spec.dtype:
                raise self.err(f"cannot set {sel} from {value}", src, str(value), f"a {sel.spec.dtype} value")
        return SetStmt(sel, value, self.loc(node))

    def x_nat_stmt(self, tb, node, defines):
        kind = node.children[0].children[0].value
        fam_nodes = self.trees(node, "ip_family")
        family = None
        if fam_nodes:
            family = NFPROTO_IPV4 if fam_nodes[0].children[0].value == "ip" else NFPROTO_IPV6
        target = self.trees(node, "nat_target")[0]
        amin = amax = None
        for an in self.trees(target, "nat_addr"):
            toks = self.tokens(an)
            if toks[0].type == "VAR":
                v = self.var(toks[0], defines, flatten=True)
                if len(v) != 1 or not isinstance(v[0], (RawAtom, RawRange)):
                    raise self.err("NAT address variable must hold one address", toks[0], toks[0].value, "an address")
                v = v[0]
                addrs = [v.lo, v.hi] if isinstance(v, RawRange) else [v]
            else:
                addrs = [RawAtom(TOKEN_KIND[t.type], t.value, self.loc(t)) for t in toks]
            typed = [coerce_atom("ct_addr", a, self.err) for a in addrs]
            afam = NFPROTO_IPV4 if typed[0].version == 4 else NFPROTO_IPV6
            if family is None:
                family = afam
            elif family != afam or any(t.version != typed[0].version for t in typed):
                raise self.err("address family does not match the NAT family", addrs[0].loc, addrs[0].text,
                               "an IPv4 address after 'ip', IPv6 after 'ip6'")
            amin, amax = typed[0], typed[-1]
            if amin > amax:
                raise self.err("bad address range", addrs[0].loc, None, "LOW-HIGH with LOW <= HIGH")
        pmin, pmax = self.nat_ports(self.trees(target, "nat_ports"))
        return NatStmt(kind, self.table_nat_family(tb, family, node), amin, amax, pmin, pmax,
                       self.nat_flags(node), self.loc(node))

    def table_nat_family(self, tb, family, node):
        tfam = FAMILIES[tb.family]
        if tfam in (NFPROTO_IPV4, NFPROTO_IPV6) and family not in (None, tfam):
            raise self.err(f"NAT family does not match the {tb.family} table", node, None,
                           f"an {'IPv4' if tfam == NFPROTO_IPV4 else 'IPv6'} address")
        return family if family is not None else (tfam if tfam in (NFPROTO_IPV4, NFPROTO_IPV6) else None)

    def nat_ports(self, nodes):
        if not nodes:
            return None, None
        toks = self.tokens(nodes[0], "NUMBER")
        lo, hi = nft_number(toks[0].value), nft_number(toks[-1].value)
        if not 0 < lo <= hi <= 65535:
            raise self.err("bad port range", toks[0], toks[0].value, "ports 1..65535, LOW <= HIGH")
        return lo, hi

    def nat_flags(self, node) -> frozenset:
        flags = set()
        for fl in self.trees(node, "nat_flags"):
            for t in self.tokens(fl, "IDENT"):
                if t.value not in _NAT_FLAGS:
                    raise self.err(f"unknown NAT flag {t.value!r}", t, t.value, ", ".join(sorted(_NAT_FLAGS)))
                flags.add(t.value)
        return frozenset(flags)

    def x_masq_stmt(self, tb, node, defines):
        pmin, pmax = self.nat_ports(self.trees(node, "nat_ports"))
        return NatStmt("masquerade", self.table_nat_family(tb, None, node), None, None, pmin, pmax,
                       self.nat_flags(node), self.loc(node))

    def x_redirect_stmt(self, tb, node, defines):
        pmin, pmax = self.nat_ports(self.trees(node, "nat_ports"))
        return NatStmt("redirect", self.table_nat_family(tb, None, node), None, None, pmin, pmax,
                       self.nat_flags(node), self.loc(node))

    def x_log_stmt(self, tb, node, defines):
        opts = []
        for o in self.trees(node, "log_opt"):
            k, v = o.children
            if k.value not in ("prefix", "level", "group", "snaplen", "queue-threshold", "flags"):
                raise self.err(f"unknown log option {k.value!r}", k, k.value, "prefix, level, group, flags")
            opts.append((k.value, v.value[1:-1] if v.type == "STRING" else v.value))
        return LogStmt(tuple(opts), self.loc(node))

    def x_reject_stmt(self, tb, node, defines):
        """nft's ``stmt_evaluate_reject``: the reply as NFTA_REJECT_TYPE and _ICMP_CODE.  Without ``with``, port
        unreachable of the table's family (icmpx in inet, bridge and netdev tables)."""
        toks = self.tokens(node, "IDENT")
        words = [t.value for t in toks]
        loc = self.loc(node)
        fam = FAMILIES.get(tb.family)
        if not words:
            if fam == NFPROTO_IPV4:
                return RejectStmt(None, loc, "icmp", SYMBOLS["icmp_code"]["port-unreachable"], NFPROTO_IPV4)
            if fam == NFPROTO_IPV6:
                return RejectStmt(None, loc, "icmp", SYMBOLS["icmpv6_code"]["port-unreachable"], NFPROTO_IPV6)
            return RejectStmt(None, loc, "icmpx", SYMBOLS["icmpx_code"]["port-unreachable"])
        text = " ".join(words)
        if words == ["tcp", "reset"]:
            return RejectStmt(text, loc, "tcp-reset", 0)
        kind = words[0]
        if kind not in ("icmp", "icmpv6", "icmpx") or len(words) != 2:
            raise self.err(f"unknown reject {text!r}", toks[0], text,
                           "reject with icmp|icmpv6|icmpx [type] CODE, or reject with tcp reset")
        code = SYMBOLS[f"{kind}_code"].get(words[1])
        if code is None:
            raise self.err(f"Could not parse {kind} code {words[1]!r}", toks[1], words[1],
                           "one of " + ", ".join(SYMBOLS[f"{kind}_code"]))
        if kind == "icmpx":
            return RejectStmt(text, loc, "icmpx", code)
        family = NFPROTO_IPV4 if kind == "icmp" else NFPROTO_IPV6
        if fam in (NFPROTO_IPV4, NFPROTO_IPV6) and fam != family:
            raise self.err(f"conflicting protocols specified: {tb.family} vs {'ip' if kind == 'icmp' else 'ip6'}",
                           toks[1], text, f"reject with {'icmp' if fam == NFPROTO_IPV4 else 'icmpv6'} in a table "
                           f"{tb.family}")
        return RejectStmt(text, loc, "icmp", code, family)

    def validate(self, rs: Ruleset):
        seen_dev: dict[str, Flowtable] = {}
        for ft in rs.flowtables:
            for d in ft.devices:
                if d in seen_dev:
                    raise self.err(f"device {d!r} is already in flowtable {seen_dev[d].name!r}", ft.loc, d,
                                   "each device in at most one flowtable (EBUSY)")
                seen_dev[d] = ft
        for t in rs.tables:
            for ch in t.chains.values():
                for rule in ch.rules:
                    for e in rule.exprs:
                        self.check_expr(t, e)
            for ch in t.chains.values():
                if ch.hook is not None:  # a base chain
                    self.walk(t, ch, ch.hook, ch, [], {})

    def check_expr(self, t: Table, e):
        verdicts = [e] if isinstance(e, Verdict) else [v for _, v in e.entries] if isinstance(e, VerdictMap) else []
        for v in verdicts:
            if v.chain is None:
                continue
            target = t.chains.get(v.chain)
            if target is None:
                raise self.err(f"{v.kind} to undefined chain {v.chain!r}", v.loc, v.chain,
                               f"a chain of table {t.family} {t.name}")
            if target.is_base:
                raise self.err(f"cannot {v.kind} to base chain {v.chain!r}", v.loc, v.chain, "a regular chain")
        if isinstance(e, FlowAdd) and e.flowtable not in t.flowtables:
            raise self.err(f"flow {e.spelling} to undefined flowtable {e.flowtable!r}", e.loc, e.flowtable,
                           f"a flowtable of table {t.family} {t.name}")

    def walk(self, t: Table, base: Chain, hook: BaseHook, ch: Chain, path: list[str],
             done: dict[str, int], via: Verdict | None = None) -> None:
        """``nft_chain_validate`` depth-first from a base chain: loops, depth, statements valid only at some hooks.

        The level is ``len(path)``: ``nft_immediate_validate`` (and ``nft_lookup_validate``
        for verdict maps) raise it by one for a ``jump`` and for a ``goto`` alike, and a
        chain reached at level :data:`NFT_JUMP_STACK_SIZE` is refused with -EMLINK
        (nft: "Could not process rule: Too many links").  *done* maps each chain explored
        from this base chain to the deepest level it was explored at: as the kernel's
        ``chain->depth >= ctx->level`` shortcut, a chain is explored again only deeper.
        """
        level = len(path)
        if ch.name in path:
            raise self.err(f"jump loop: {' -> '.join(path + [ch.name])}", ch.loc, ch.name, "no loops (ELOOP)")
        if level >= NFT_JUMP_STACK_SIZE:
            where = via.loc if via is not None else ch.loc
            raise self.err(f"{via.kind if via else 'jump'} to {ch.name!r} nests chains {level} deep: "
                           f"{' -> '.join(path + [ch.name])} (Too many links, EMLINK)", where, ch.name,
                           f"at most {NFT_JUMP_STACK_SIZE - 1} nested jumps or gotos from a base chain "
                           f"(NFT_JUMP_STACK_SIZE {NFT_JUMP_STACK_SIZE})")
        if done.get(ch.name, -1) >= level:
            return  # already explored from this base chain at this depth or deeper (diamond-shaped jumps)
        for rule in ch.rules:
            for e in rule.exprs:
                if isinstance(e, FlowAdd) and hook.hook != "forward":
                    raise self.err(f"flow {e.spelling} is only valid in chains hooked at forward "
                                   f"(reached from {base.name}, hook {hook.hook})", e.loc, e.flowtable,
                                   "a chain of hook forward")
                for sel in _fib_selectors(e):
                    allowed = nft_fib_hooks(sel.key)
                    if t.family not in ("ip", "ip6", "inet") or hook.hook not in allowed:
                        raise self.err(f"fib {sel.key} is not valid at hook {hook.hook} of table {t.family} {t.name} "
                                       f"(reached from {base.name}; nft_fib_validate: Operation not supported)",
                                       getattr(e, "loc", None) or rule.loc, sel.key,
                                       f"a chain of an ip, ip6 or inet table at {', '.join(allowed)}")
                if isinstance(e, RejectStmt) and hook.hook not in _REJECT_HOOKS.get(t.family, ()):
                    allowed = _REJECT_HOOKS.get(t.family, ())
                    raise self.err(f"reject is not valid at hook {hook.hook} of table {t.family} {t.name} (reached from "
                                   f"{base.name}; nft_reject_validate: Operation not supported)", e.loc, hook.hook,
                                   f"a chain at {', '.join(allowed)}" if allowed else "a table of another family")
                if isinstance(e, NatStmt) and (hook.type != "nat" or hook.hook not in _NAT_HOOKS[e.kind]):
                    raise self.err(f"{e.kind} is only valid in nat chains at "
                                   f"{' or '.join(_NAT_HOOKS[e.kind])} (reached from {base.name}: "
                                   f"type {hook.type} hook {hook.hook})", e.loc, e.kind,
                                   f"type nat hook {_NAT_HOOKS[e.kind][0]}")
                verdicts = [e] if isinstance(e, Verdict) else \
                    [v for _, v in e.entries] if isinstance(e, VerdictMap) else []
                for v in verdicts:
                    if v.chain is not None:
                        self.walk(t, base, hook, t.chains[v.chain], path + [ch.name], done, v)
        done[ch.name] = level


def _fib_selectors(e) -> list[Selector]:
    """The fib selectors an expression reads (a match, a concatenation, a verdict map's key)."""
    sels = [e.selector] if isinstance(e, (Match, VerdictMap)) else list(e.selectors) if isinstance(e, ConcatMatch) \
        else []
    return [s for s in sels if s.kind == "fib"]


def nft_fib_hooks(key: str) -> tuple[str, ...]:
    """``nft_fib_validate``: the hooks a fib expression may run at.  An oif or oifname result, or an address type
    with the iif flag: prerouting, input, forward; an address type with the oif flag: output, postrouting,
    forward; a bare address type: all five."""
    words = key.split()
    result, flags = words[-1], set(words[:-1])
    if result != "type" or "iif" in flags:
        return ("prerouting", "input", "forward")
    if "oif" in flags:
        return ("output", "postrouting", "forward")
    return ("prerouting", "input", "forward", "output", "postrouting")


def _not_tcp(exprs) -> bool:
    """A match of the rule sets a transport protocol other than TCP (``udp dport``, ``meta l4proto udp``)."""
    for e in exprs:
        if not isinstance(e, Match):
            continue
        l4 = e.selector.spec.l4proto
        if l4 and _TCP not in l4:
            return True
        if e.selector.key in ("l4proto", "protocol", "nexthdr") and e.op == "==" and not e.is_set and \
                e.values and _TCP not in e.values:
            return True
    return False


def _has_l4_match(exprs) -> bool:
    for e in exprs:
        if isinstance(e, Match) and (e.selector.spec.l4proto or e.selector.key in ("l4proto", "protocol", "nexthdr")):
            return True
    return False
