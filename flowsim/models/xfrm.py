"""The GSO decision of ``xfrm_output`` in four kernel variants, and what it puts on the wire.

Theory of operation (net/xfrm/xfrm_output.c, xfrm_device.c, net/ipv4/esp4_offload.c)
-------------------------------------------------------------------------------------
``xfrm_output`` (net/xfrm/xfrm_output.c) has three branches for an ESP SA:

1. **packet offload** (``XFRM_DEV_OFFLOAD_PACKET``): the NIC does everything;
2. **offload-ok** (``xfrm_dev_offload_ok`` true): a sec_path with
   ``xfrm_offload(skb)`` is attached; for a GSO skb a *version-dependent
   test* (:data:`VARIANTS`) sends it to ``xfrm_output_gso`` (software GSO now, then ESP per
   segment) or marks it ``SKB_GSO_ESP`` and lets it reach the device
   unsegmented; there the NIC segments it (*HW*) or ``esp{4,6}_gso_segment``
   does it in software (*ESPSW-T/X/B* by SA mode);
3. **else**: a GSO skb always goes to ``xfrm_output_gso``.

``xfrm_dev_offload_ok`` needs ``x->type_offload``, which a software SA has
when ``esp4_offload``/``esp6_offload`` was loaded before the SA was made
(``xfrm_get_type_offload`` in ``xfrm_init_state``).  The test of step 2 is the only thing the four variants change; it
is held as data in :data:`VARIANTS` (a disjunction of :class:`Clause`).
The resulting outcomes are :data:`OUTCOMES`: ``SWGSO``, ``HW``,
``ESPSW-T``, ``ESPSW-X``, ``ESPSW-B`` (plus ``PACKET-HW``).

Whether an outcome's bytes are right depends on the inner packet (:func:`esp_layout`):
software ESP GSO in transport mode (*ESPSW-X*) places ESP relative to the
segment's transport header, which an IP-in-IP inner packet leaves at the
innermost TCP header: ESP ends up at outer + inner IP header length, the
first four inner IPv4 bytes in clear — the bug the Oct-2026 fix avoids for
SAs without an offload device by taking software GSO first again.

:func:`xfrm_output` returns the :class:`Decision`; :func:`esp_layout`
classifies its bytes; :func:`simulate` builds the GSO skb, runs the path the
decision chose with real AES-GCM (:mod:`flowsim.kernel.esp`), feeds the frames to
a receiver and returns an :class:`XfrmRun`::

    >>> d = xfrm_output("v2", XfrmInputs(inner_protocol=True, mode="transport",
    ...                                  offload_dev=False, type_offload=True))
    >>> d.outcome, d.row
    ('ESPSW-X', 8)
"""

from __future__ import annotations

from pathlib import Path

import attrs

from flowsim.errors import ConfigError
from flowsim.kernel.capture import write_pcap
from flowsim.kernel.esp import (
    DEFAULT_KEY, ESP_HEADER_LEN, INNER_KINDS, EspFrame, XfrmReceiver, XfrmState, build_gso_skb,
    esp_output_segmented, esp_output_skb_gso_esp, outer_header_len,
)

__all__ = [
    "Clause", "Variant", "VARIANTS", "XfrmInputs", "Decision", "Layout", "XfrmRun", "OUTCOMES", "MODES",
    "get_variant", "xfrm_dev_offload_ok", "xfrm_output_gso_test", "xfrm_output", "decision_table_row",
    "esp_layout", "inner_class", "simulate", "malformed_filter",
]

MODES = ("tunnel", "transport", "beet")

OUTCOMES = {
    "SWGSO": "xfrm_output_gso → skb_gso_segment(skb, 0): software GSO by the inner chain, ESP per segment",
    "HW": "SKB_GSO_ESP; the NIC segments and encrypts (layout is the hardware's job)",
    "ESPSW-T": "SKB_GSO_ESP, then software esp{4,6}_gso_segment in tunnel mode",
    "ESPSW-X": "SKB_GSO_ESP, then software esp{4,6}_gso_segment in transport mode",
    "ESPSW-B": "SKB_GSO_ESP, then software esp{4,6}_gso_segment in BEET mode",
    "PACKET-HW": "packet offload: the skb goes to the NIC as it is",
}
"""The outcomes of ``xfrm_output`` for a GSO skb (``PACKET-HW`` is row 13 of :func:`decision_table_row`)."""


# --- the four variants, as data ---------------------------------------------------

@attrs.frozen
class Clause:
    """One conjunction of a variant's software-GSO test; ``None`` means "any value"."""

    inner_protocol: bool | None = None
    mode: str | None = None
    dev: bool | None = None

    def holds(self, inp: XfrmInputs) -> bool:
        return ((self.inner_protocol is None or self.inner_protocol == inp.inner_protocol)
                and (self.mode is None or self.mode == inp.mode)
                and (self.dev is None or self.dev == inp.offload_dev))


@attrs.frozen
class Variant:
    """One kernel variant of the GSO test in ``xfrm_output``'s offload-ok branch."""

    name: str
    title: str
    commit: str
    condition: str  # the C condition that sends a GSO skb to xfrm_output_gso
    swgso_if: tuple[Clause, ...]  # disjunction; empty = never
    transport_prep: str  # "fixed" (before 06a0afcfe2f5) or "transport-header"
    packet_offload: bool  # the kernel has XFRM_DEV_OFFLOAD_PACKET (v6.2+)


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("v0", "before a204aef9fd77", "7862b4058b9f (2017) .. a204aef9fd77^",
            "never (SKB_GSO_ESP, xfrm_output2)", (), "fixed", False),
    Variant("v1", "after a204aef9fd77", "a204aef9fd77 \"xfrm: call xfrm_output_gso when inner_protocol "
            "is set in xfrm_output\"", "skb->inner_protocol",
            (Clause(inner_protocol=True),), "transport-header", True),
    Variant("v2", "after 0aae2867aa60", "0aae2867aa60 \"xfrm_output: Force software GSO only in tunnel mode\"",
            "skb->inner_protocol && x->props.mode == XFRM_MODE_TUNNEL",
            (Clause(inner_protocol=True, mode="tunnel"),), "transport-header", True),
    Variant("v3", "with the Oct-2026 fix", "\"xfrm: use software GSO for inner tunnels without crypto "
            "offload\" (Oct 2026)", "skb->inner_protocol && (x->props.mode == XFRM_MODE_TUNNEL || !x->xso.dev)",
            (Clause(inner_protocol=True, mode="tunnel"), Clause(inner_protocol=True, dev=False)),
            "transport-header", True),
)}
"""The software-GSO test of ``xfrm_output``, one entry per variant (the commits that changed it).
V0 predates 06a0afcfe2f5 (same 2020 pull as a204aef9fd77),
so its transport prep pulls a fixed offset; V0 also predates packet offload (v6.2)."""

_ALIASES = {"pre-a204aef9fd77": "v0", "a204aef9fd77": "v1", "0aae2867aa60": "v2",
            "oct-2026-fix": "v3", "oct-2026": "v3", "fix": "v3"}


def get_variant(name: str) -> Variant:
    """A variant by name (``v0``..``v3``, case-insensitive, or a commit alias)."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    try:
        return VARIANTS[key]
    except KeyError:
        raise ConfigError(f"unknown xfrm variant: {name!r}", value=name,
                          expected="v0, v1, v2, v3 (or " + ", ".join(_ALIASES) + ")") from None


# --- inputs and decision ------------------------------------------------------------

@attrs.frozen
class XfrmInputs:
    """What the decision of ``xfrm_output`` reads for one GSO skb and SA.

    ``inner_protocol``: ``skb->inner_protocol`` set by a tunnel driver;
    ``offload_dev``: a crypto-offload device is bound (``x->xso.dev``);
    ``type_offload``: ``x->type_offload`` set (ESP offload module present
    when the SA was made, or an offload SA); ``hw_gso``: the egress device
    can segment this skb in hardware (needs ``offload_dev``).  The rest
    reach rows 1 and 13: ``packet_offload`` (``XFRM_DEV_OFFLOAD_PACKET``),
    ``encap`` (NAT-T on a software SA) and ``sw_sa_offload_ok`` (false on
    v6.15/v6.16 mainline before 234d1eff5d49, where ``xfrm_dev_offload_ok``
    refuses every software SA).
    """

    inner_protocol: bool
    mode: str = attrs.field()
    offload_dev: bool
    type_offload: bool
    hw_gso: bool = False
    packet_offload: bool = False
    encap: bool = False
    sw_sa_offload_ok: bool = True

    @mode.validator
    def _check_mode(self, _attr, value):
        if value not in MODES:
            raise ConfigError(f"unknown SA mode: {value!r}", value=value, expected=", ".join(MODES))

    def __attrs_post_init__(self):
        if self.hw_gso and not self.offload_dev:
            raise ConfigError("hardware ESP GSO needs a crypto-offload device (xso.dev == skb->dev)",
                              value="hw_gso without offload_dev")


@attrs.frozen
class Decision:
    """What ``xfrm_output`` does with one GSO skb in one variant."""

    variant: str
    inputs: XfrmInputs
    branch: str  # "packet-offload", "offload-ok" or "else"
    outcome: str  # a key of OUTCOMES
    segmenter: str  # the function that segments
    encrypter: str  # the function that encrypts
    row: int | None  # the row of decision_table_row, when the inputs have one
    why: str


def xfrm_dev_offload_ok(inp: XfrmInputs) -> tuple[bool, str]:
    """Mirror the parts of ``xfrm_dev_offload_ok`` (net/xfrm/xfrm_device.c) the decision depends on."""
    if not inp.type_offload:
        return False, "x->type_offload is NULL (no ESP offload module when the SA was made)"
    if not inp.offload_dev and inp.encap:
        return False, "software SA with UDP encapsulation"
    if not inp.offload_dev and not inp.sw_sa_offload_ok:
        return False, "this kernel refuses XFRM_DEV_OFFLOAD_UNSPECIFIED SAs (v6.15/v6.16 before 234d1eff5d49)"
    if not inp.offload_dev:
        return True, "software SA with type_offload: `if (!dev) return true` (234d1eff5d49, or <= v6.14)"
    return True, "crypto-offload SA on the path device"


def xfrm_output_gso_test(variant: Variant, inp: XfrmInputs) -> bool:
    """The variant's test in the offload-ok branch: does it call ``xfrm_output_gso``?"""
    return any(clause.holds(inp) for clause in variant.swgso_if)


_ESPSW = {"tunnel": "ESPSW-T", "transport": "ESPSW-X", "beet": "ESPSW-B"}


def xfrm_output(variant: str | Variant, inp: XfrmInputs) -> Decision:
    """Mirror the GSO handling of ``xfrm_output`` for *variant*; return the :class:`Decision`."""
    v = variant if isinstance(variant, Variant) else get_variant(variant)
    row = decision_table_row(inp)
    if inp.packet_offload:
        if not v.packet_offload:
            raise ConfigError(f"packet offload (v6.2) does not exist in variant {v.name} ({v.title})",
                              value="packet_offload")
        return Decision(v.name, inp, "packet-offload", "PACKET-HW", "the NIC (packet offload)",
                        "the NIC (packet offload)", row, "XFRM_DEV_OFFLOAD_PACKET: handed to the NIC as it is")
    ok, why_ok = xfrm_dev_offload_ok(inp)
    if not ok:
        return Decision(v.name, inp, "else", "SWGSO", _segmenter("SWGSO", inp.mode), "esp_output",
                        row, f"xfrm_dev_offload_ok false ({why_ok}): a GSO skb always takes xfrm_output_gso")
    encrypter = ("the NIC per segment (esp_xmit with hw_offload)" if inp.offload_dev
                 else "esp_xmit at validate_xmit_xfrm (software fallback: esp_output_head/esp_output_tail)")
    if xfrm_output_gso_test(v, inp):
        return Decision(v.name, inp, "offload-ok", "SWGSO", _segmenter("SWGSO", inp.mode), encrypter, row,
                        f"{why_ok}; `{v.condition}` holds: xfrm_output_gso")
    outcome = "HW" if inp.offload_dev and inp.hw_gso else _ESPSW[inp.mode]
    if outcome == "HW":
        encrypter = "the NIC"
    why = (f"{why_ok}; `{v.condition}` does not hold: SKB_GSO_ESP" if v.swgso_if
           else f"{why_ok}; this variant has no software-GSO test: SKB_GSO_ESP")
    if outcome != "HW":
        why += (", and the device cannot segment it" if inp.offload_dev
                else ", and software crypto is always segmented in software (validate_xmit_xfrm)")
    return Decision(v.name, inp, "offload-ok", outcome, _segmenter(outcome, inp.mode), encrypter, row, why)


def _segmenter(outcome: str, mode: str) -> str:
    if outcome == "SWGSO":
        return "xfrm_output_gso → skb_gso_segment(skb, 0)"
    if outcome in ("HW", "PACKET-HW"):
        return "the NIC (NETIF_F_GSO_ESP)"
    return f"validate_xmit_skb → esp{{4,6}}_gso_segment → xfrm{{4,6}}_{mode}_gso_segment"


def decision_table_row(inp: XfrmInputs) -> int | None:
    """The row of the decision table these inputs fall in (``None`` if the table has none).

    ====  ==================================================================
    row   inputs
    ====  ==================================================================
    1     ``xfrm_dev_offload_ok`` false (no ``type_offload``, NAT-T, v6.15/16)
    2, 3  no ``inner_protocol``, software SA; tunnel, transport
    4, 5  no ``inner_protocol``, offload device; with, without hardware GSO
    6     ``inner_protocol``, tunnel mode, software SA
    7     ``inner_protocol``, tunnel mode, offload device with hardware GSO
    8     ``inner_protocol``, transport mode, software SA
    9, 10 ``inner_protocol``, transport mode, offload device; with, without hardware GSO
    11    ``inner_protocol``, BEET mode, software SA
    12    ``inner_protocol``, BEET mode, offload device
    13    packet offload (``XFRM_DEV_OFFLOAD_PACKET``)
    ====  ==================================================================
    """
    if inp.packet_offload:
        return 13
    if not xfrm_dev_offload_ok(inp)[0]:
        return 1
    dev, mode = inp.offload_dev, inp.mode
    if not inp.inner_protocol:
        if dev:
            return 4 if inp.hw_gso else 5
        return {"tunnel": 2, "transport": 3}.get(mode)
    if mode == "tunnel":
        return (7 if inp.hw_gso else None) if dev else 6
    if mode == "transport":
        return (9 if inp.hw_gso else 10) if dev else 8
    return 12 if dev else 11


# --- the bytes each outcome produces --------------------------------------------------

@attrs.frozen
class Layout:
    """How the frames of an outcome look: ``correct``, ``malformed``, ``hardware`` or ``kernel-bug``."""

    kind: str
    note: str


_INNER_CLASS = {"none": "plain", "ipip": "ip-in-ip", "ip6tnl": "ip-in-ip", "vxlan": "udp-tunnel",
                "geneve": "udp-tunnel"}

_LAYOUTS: dict[tuple[str, str], Layout] = {
    **{("SWGSO", c): Layout("correct", "ESP right after the outer header of every segment (xfrm_output_gso)")
       for c in ("plain", "ip-in-ip", "udp-tunnel")},
    **{(o, c): Layout("hardware", "the NIC's layout, assumed correct (NETIF_F_GSO_ESP)")
       for o in ("HW", "PACKET-HW") for c in ("plain", "ip-in-ip", "udp-tunnel")},
    ("ESPSW-T", "plain"): Layout("correct", "tunnel prep: ESP at network header + outer header (__xfrm_mode_tunnel_prep)"),
    ("ESPSW-T", "ip-in-ip"): Layout("correct", "tunnel prep: ESP at network header + outer header (__xfrm_mode_tunnel_prep)"),
    ("ESPSW-T", "udp-tunnel"): Layout(
        "kernel-bug", "xfrm{4,6}_tunnel_encap_add overwrote the UDP tunnel's inner_network_header; "
        "__skb_udp_tunnel_segment then reads the wrong header (KASAN use-after-free in "
        "ipv6_gso_pull_exthdrs, the a204aef9fd77 report; decision table row 6)"),
    **{("ESPSW-B", c): Layout("correct", "BEET prep is a fixed offset (__xfrm_mode_beet_prep) [derived; not studied end to end]")
       for c in ("plain", "ip-in-ip", "udp-tunnel")},
    ("ESPSW-X", "plain"): Layout("correct", "the transport header is the TCP header right after ESP+IV"),
    ("ESPSW-X", "udp-tunnel"): Layout(
        "correct", "__skb_udp_tunnel_segment resets the transport header to the tunnel's UDP header"),
    ("ESPSW-X", "ip-in-ip"): Layout(
        "malformed", "__xfrm_transport_prep puts ESP at the inner TCP header - header_len = outer + inner IP "
        "header length; the first 4 inner IPv4 bytes stay in clear (since 06a0afcfe2f5)"),
}
"""(outcome, inner class) → layout, for the transport prep of 06a0afcfe2f5 (V1..V3)."""


def inner_class(inner: str) -> str:
    """``plain``, ``ip-in-ip`` or ``udp-tunnel`` for an inner kind of :data:`flowsim.kernel.esp.INNER_KINDS`."""
    try:
        return _INNER_CLASS[inner]
    except KeyError:
        raise ConfigError(f"unknown inner packet kind: {inner!r}", value=inner,
                          expected=", ".join(INNER_KINDS)) from None


def esp_layout(decision: Decision, inner: str) -> Layout:
    """Classify the bytes *decision* produces for an *inner* packet kind (where each prep puts ESP)."""
    key = (decision.outcome, inner_class(inner))
    if key == ("ESPSW-X", "ip-in-ip") and get_variant(decision.variant).transport_prep == "fixed":
        return Layout("correct", "the old transport prep pulled a fixed mac_len + hsize + header_len, so ESP "
                                 "sits right after the outer header (before 06a0afcfe2f5, decision table row 8 in V0)")
    return _LAYOUTS[key]


def malformed_filter(family: int, spi: int) -> str:
    """The tcpdump filter of the Oct-2026 patch, matching exactly the misplaced-ESP frames."""
    if family == 4:
        return f"ip proto 50 and ip[36:2] = 0x4500 and ip[40:4] = 0x{spi:x}"
    return f"ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x{spi:x}"


# --- the simulation -------------------------------------------------------------------

@attrs.frozen
class XfrmRun:
    """One simulated GSO skb through ``xfrm_output``: decision, frames, and what the receiver made of them."""

    decision: Decision
    layout: Layout
    inner: str
    family: int
    state: XfrmState
    segments: int
    mss: int
    seq_first: int
    chain: tuple[str, ...]
    frames: tuple[EspFrame, ...]
    rx_counters: dict
    rx_intact: int
    pcap: str | None

    @property
    def malformed(self) -> int:
        """Frames whose ESP header is not right after the outer IP header."""
        return sum(f.esp_offset != outer_header_len(f.packet) for f in self.frames)

    def clear_inner_bytes(self, frame: EspFrame) -> bytes:
        """Inner bytes sent in clear between the ESP slot and a misplaced ESP header."""
        start = outer_header_len(frame.packet) + ESP_HEADER_LEN
        return frame.packet[start:frame.esp_offset] if frame.esp_offset > start else b""

    def to_dict(self) -> dict:
        d, v = self.decision, get_variant(self.decision.variant)
        return {
            "variant": {"name": v.name, "title": v.title, "commit": v.commit, "condition": v.condition},
            "inputs": attrs.asdict(d.inputs),
            "decision": {"branch": d.branch, "outcome": d.outcome, "outcome_text": OUTCOMES[d.outcome],
                         "row": d.row, "segmenter": d.segmenter, "encrypter": d.encrypter, "why": d.why},
            "layout": {"kind": self.layout.kind, "note": self.layout.note},
            "gso_skb": {"inner": self.inner, "family": self.family, "segments": self.segments, "mss": self.mss},
            "sa": {"spi": f"0x{self.state.spi:x}", "mode": self.state.mode, "aead": "rfc4106(gcm(aes))",
                   "key_bits": (len(self.state.key) - 4) * 8, "seq_first": self.seq_first},
            "segmentation_chain": list(self.chain),
            "frames": [{"bytes": len(f.frame), "esp_offset": f.esp_offset, "seq": f.seq,
                        "clear_inner_bytes": self.clear_inner_bytes(f).hex()} for f in self.frames],
            "malformed": self.malformed,
            "receiver": {**self.rx_counters, "intact": self.rx_intact},
            "tcpdump_filter": malformed_filter(self.family, self.state.spi) if self.inner in ("ipip", "ip6tnl")
            else None,
            "pcap": self.pcap,
        }


def simulate(variant: str, inner: str, mode: str, *, offload_dev: bool = False, esp_offload_module: bool = False,
             hw_gso: bool | None = None, segments: int = 8, mss: int = 1368, family: int = 4,
             spi: int = 0x1001, key: bytes = DEFAULT_KEY, seq_first: int = 1,
             pcap: str | Path | None = None) -> XfrmRun:
    """Decide, segment, encrypt and receive one GSO skb of bulk TCP (the CLI's ``flowsim xfrm``).

    ``type_offload`` is set when the ESP offload module is loaded or the SA
    is an offload SA (``xfrm_dev_state_add`` sets it); ``hw_gso`` defaults
    to true with an offload device.
    """
    v = get_variant(variant)
    if mode not in ("transport", "tunnel"):
        raise ConfigError(f"ESP packets are modelled for transport and tunnel mode: {mode!r}", value=mode,
                          expected="transport or tunnel")
    if not 1 <= seq_first <= 0xFFFFFFFF - segments:
        raise ConfigError(f"the batch's sequence numbers must stay within 1..2^32-1: {seq_first!r}", value=seq_first)
    skb = build_gso_skb(inner, family, segments, mss)
    fam = skb.family
    inp = XfrmInputs(inner_protocol=bool(skb.inner_protocol), mode=mode, offload_dev=offload_dev,
                     type_offload=esp_offload_module or offload_dev,
                     hw_gso=offload_dev if hw_gso is None else hw_gso)
    decision = xfrm_output(v, inp)
    layout = esp_layout(decision, inner)
    state = XfrmState(spi=spi, key=key, mode=mode)
    chain: list[str] = []
    frames: list[EspFrame] = []
    if layout.kind != "kernel-bug":
        if decision.outcome in ("SWGSO", "HW", "PACKET-HW"):
            chain = ["xfrm_output_gso", "skb_gso_segment"] if decision.outcome == "SWGSO" else [
                "the NIC: hardware ESP GSO, bytes as software GSO would make them"]
            frames = esp_output_segmented(state, skb, seq_first, fam, chain)
        else:
            chain = ["validate_xmit_skb", "skb_gso_segment"]
            frames = esp_output_skb_gso_esp(state, skb, seq_first, fam, v.transport_prep, chain)
    rx = XfrmReceiver({spi: state})
    intact = sum(rx.xfrm_input(f.frame).plain == f.plain for f in frames)
    written = None
    if pcap is not None:
        write_pcap(pcap, [f.frame for f in frames])
        written = str(pcap)
    return XfrmRun(decision, layout, inner, fam, state, segments, mss, seq_first, tuple(chain), tuple(frames),
                   dict(rx.counters), intact, written)
