"""``ip xfrm state`` / ``ip xfrm policy``: the IPsec lines of a topology file, parsed into the namespace's XfrmDb.

Theory of operation
-------------------
:mod:`flowsim.config.iproute` dispatches ``ip xfrm state add|update`` to
:func:`_xfrm_state_add` and ``ip xfrm policy add|update`` to
:func:`_xfrm_policy_add` with its :class:`~flowsim.config.ipcontext.IpContext` (family, namespace,
command) and the remaining words as :class:`~flowsim.kernel.devices.base.Args`.
They fill the namespace's :class:`~flowsim.kernel.stack.xfrm.XfrmDb`
(``Namespace.xfrm``, created by the first ``ip xfrm`` line) with
:class:`~flowsim.kernel.stack.xfrm.XfrmSA` states and
:class:`~flowsim.kernel.stack.xfrm.XfrmPolicy` policies (with their
:class:`~flowsim.kernel.stack.xfrm.XfrmTmpl` templates)::

    ip xfrm state add src A dst B proto esp spi N [reqid N] [mode tunnel|transport]
             aead 'rfc4106(gcm(aes))' 0xKEY 128 [sel src P dst Q] [replay-window N] [flag F]
    ip xfrm policy add src P dst Q [proto P] dir out|in|fwd [tmpl src A dst B proto esp [reqid N]
             [mode tunnel|transport] [level required|use]] [priority N] [action allow|block]

Only what :mod:`flowsim.kernel.stack.xfrm` models is accepted: ESP (``proto esp``)
with ``rfc4106(gcm(aes))`` and a 128-bit ICV, IPv4 states; options that do
not change the model (``replay-window``, ``flag``, ``mark``, ``level`` …)
are skipped with their value.  Every refusal is one
:class:`~flowsim.errors.TopologyError` naming file, line and command, as
for the other ``ip`` objects.
"""

from __future__ import annotations

import ipaddress

from flowsim.config.ipcontext import IpContext
from flowsim.kernel.devices.base import Args
from flowsim.kernel.stack.xfrm import XfrmDb, XfrmPolicy, XfrmSA, XfrmTmpl

_XFRM_MODES = {"tunnel": "tunnel", "transport": "transport"}
_XFRM_DIRS = {"out": "out", "in": "in", "fwd": "fwd"}
_L4_NAMES = {"tcp": 6, "udp": 17, "icmp": 1, "gre": 47, "esp": 50, "sctp": 132, "any": 0}


def _xfrm_proto(args, ctx) -> None:
    """``proto esp``: the only xfrm protocol modelled."""
    proto = args.next("'esp'")
    if proto != "esp":
        raise ctx.cmd.error(f"xfrm proto {proto!r} is not modelled", value=proto, expected="esp")


def _xfrm_db(ctx: IpContext) -> XfrmDb:
    ns = ctx.topo.netns(ctx.netns)
    if ns.xfrm is None:
        ns.xfrm = XfrmDb()
    return ns.xfrm


def _xfrm_net(ctx: IpContext, args: Args, keyword: str):
    text = args.next(f"a prefix after {keyword!r}")
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ctx.cmd.error(f"bad prefix {text!r} for {keyword!r}", value=text, expected="ADDR[/LEN]") from None


def _xfrm_key(ctx: IpContext, text: str) -> bytes:
    hexpart = text[2:] if text.lower().startswith("0x") else None
    try:
        key = bytes.fromhex(hexpart) if hexpart is not None else text.encode()
    except ValueError:
        raise ctx.cmd.error(f"bad key {text!r}", value=text, expected="0xHEX or a string") from None
    if len(key) not in (20, 28, 36):
        raise ctx.cmd.error(f"rfc4106(gcm(aes)) key must be 16, 24 or 32 bytes plus a 4-byte salt, not {len(key)}",
                            value=text, expected="20, 28 or 36 bytes")
    return key


def _xfrm_sel(ctx: IpContext, args: Args) -> tuple:
    src = dst = None
    while args and args.peek() in ("src", "dst", "proto", "sport", "dport", "dev"):
        word = args.next("a selector option")
        if word == "src":
            src = _xfrm_net(ctx, args, "sel src")
        elif word == "dst":
            dst = _xfrm_net(ctx, args, "sel dst")
        else:
            args.next(f"a value after {word!r}")
    return src, dst


def _xfrm_state_add(ctx: IpContext, verb: str, args: Args) -> None:
    opts: dict = {"mode": "transport", "reqid": 0}
    key = None
    while args:
        word = args.next("an xfrm state option")
        if word in ("src", "dst"):
            opts[word] = args.addr(word, ctx.family)
        elif word == "proto":
            _xfrm_proto(args, ctx)
        elif word == "spi":
            opts["spi"] = args.int("spi", 1, 0xFFFFFFFF)
        elif word == "reqid":
            opts["reqid"] = args.int("reqid", 0, 0xFFFFFFFF)
        elif word == "mode":
            opts["mode"] = args.choice("mode", _XFRM_MODES)
        elif word == "aead":
            name = args.next("an AEAD algorithm name")
            if name != "rfc4106(gcm(aes))":
                raise ctx.cmd.error(f"AEAD {name!r} is not modelled", value=name, expected="rfc4106(gcm(aes))")
            key = _xfrm_key(ctx, args.next("the AEAD key"))
            opts["icv_bits"] = args.int("ICV length", 64, 128)
            if opts["icv_bits"] != 128:
                raise ctx.cmd.error("only a 128-bit ICV is modelled", value=opts["icv_bits"], expected="128")
        elif word in ("enc", "auth", "auth-trunc", "comp"):
            raise ctx.cmd.error(f"xfrm algorithm {word!r} is not modelled", value=word,
                                expected="aead 'rfc4106(gcm(aes))' 0xKEY 128")
        elif word == "sel":
            opts["sel_src"], opts["sel_dst"] = _xfrm_sel(ctx, args)
        elif word in ("replay-window", "flag", "if_id", "mark", "output-mark", "extra-flag"):
            args.next(f"a value after {word!r}")
        else:
            raise ctx.cmd.error(f"unknown xfrm state option {word!r}", value=word,
                                expected="src, dst, proto, spi, reqid, mode, aead, sel")
    for need in ("src", "dst", "spi"):
        if need not in opts:
            raise ctx.cmd.error(f"missing '{need}'", expected=f"'{need} …'")
    if opts["src"].version != opts["dst"].version or opts["src"].version != 4:
        raise ctx.cmd.error("only IPv4 xfrm states are modelled", value=str(opts["src"]), expected="IPv4 addresses")
    if key is None:
        raise ctx.cmd.error("missing algorithm", expected="aead 'rfc4106(gcm(aes))' 0xKEY 128")
    db = _xfrm_db(ctx)
    if any(sa.dst == opts["dst"] and sa.spi == opts["spi"] for sa in db.states):
        raise ctx.cmd.error(f"xfrm state dst {opts['dst']} spi {opts['spi']:#x} exists", value=opts["spi"],
                            expected="a new (dst, spi) (RTNETLINK answers: File exists)")
    db.states.append(XfrmSA(key=key, **opts))


def _xfrm_policy_add(ctx: IpContext, verb: str, args: Args) -> None:
    opts: dict = {}
    tmpls = []
    while args:
        word = args.next("an xfrm policy option")
        if word in ("src", "dst"):
            opts[word] = _xfrm_net(ctx, args, word)
        elif word == "proto":
            name = args.next("a protocol")
            opts["proto"] = _L4_NAMES.get(name) if not name.isdigit() else int(name)
            if opts["proto"] is None:
                raise ctx.cmd.error(f"unknown protocol {name!r}", value=name, expected=", ".join(_L4_NAMES))
        elif word == "dir":
            opts["dir"] = args.choice("dir", _XFRM_DIRS)
        elif word == "tmpl":
            tmpls.append(_xfrm_tmpl(ctx, args))
        elif word == "priority":
            opts["priority"] = args.int("priority", 0, 0xFFFFFFFF)
        elif word == "action":
            opts["action"] = args.choice("action", {"allow": "allow", "block": "block"})
        elif word in ("sport", "dport", "dev", "ptype", "index", "mark", "if_id", "flag"):
            args.next(f"a value after {word!r}")
        else:
            raise ctx.cmd.error(f"unknown xfrm policy option {word!r}", value=word,
                                expected="src, dst, proto, dir, tmpl, priority, action")
    for need in ("src", "dst", "dir"):
        if need not in opts:
            raise ctx.cmd.error(f"missing '{need}'", expected=f"'{need} …'")
    if opts["src"].version != opts["dst"].version:
        raise ctx.cmd.error("selector src and dst have different families", value=str(opts["dst"]))
    _xfrm_db(ctx).policies.append(XfrmPolicy(tmpls=tuple(tmpls), **opts))


def _xfrm_tmpl(ctx: IpContext, args: Args) -> XfrmTmpl:
    opts: dict = {}
    while args and args.peek() in ("src", "dst", "proto", "spi", "reqid", "mode", "level"):
        word = args.next("a template option")
        if word in ("src", "dst"):
            opts[word] = args.addr(f"tmpl {word}", ctx.family)
        elif word == "proto":
            _xfrm_proto(args, ctx)
        elif word == "reqid":
            opts["reqid"] = args.int("reqid", 0, 0xFFFFFFFF)
        elif word == "mode":
            opts["mode"] = args.choice("mode", _XFRM_MODES)
        else:
            args.next(f"a value after {word!r}")
    for need in ("src", "dst"):
        if need not in opts:
            raise ctx.cmd.error(f"template without '{need}'", expected="'tmpl src A dst B proto esp …'")
    return XfrmTmpl(**opts)
