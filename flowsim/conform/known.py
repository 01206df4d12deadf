"""Known differences between flowsim and a real kernel, each with its cause and the kernel source that explains it.

Theory of operation
-------------------
A conformance fact that differs (:class:`flowsim.conform.compare.Fact`,
status ``differs``) becomes ``known`` — reported with its cause, not
failing the run — only when an entry of :data:`KNOWN_DIFFERENCES` names it
exactly: the scenario, the subject, the fact and the Debian kernel line
(``debian-6.12`` …).  There are no patterns: an entry covers one fact of
one scenario on the kernel lines it lists, and a new scenario or kernel
line that shows the same difference must be looked at and listed again.

Two kinds of fact can never be known differences, because they are what
conformance is for: whether a connection was offloaded (a flow created)
and the fast/slow path split (``fast path …``, ``slow path …``,
``flowtable verdicts``).  :func:`check_entry` refuses such entries (and any
glob character), and the tests run it over the table.

:data:`KERNEL_RANDOM` is the other, narrower kind of known difference, used
by the frame-exact mode (:func:`flowsim.conform.frames.compare_frames`):
header fields the kernel fills from a per-boot random key, which no model
can predict byte for byte.  Only those bits of the outer header of a tunnel
frame (or of a router's ICMP error without DF) are masked, and only after
the exact comparison failed; the frames must then be equal, and every IPv4
header checksum valid on both sides.  :data:`KERNEL_DERIVED` holds the one
field the kernel derives where flowsim writes a finished value, a GSO skb's
TCP checksum seed: it is not masked but checked against the value the
kernel's function computes from flowsim's frame.
"""

from __future__ import annotations

import attrs

from flowsim.conform.compare import Fact

__all__ = ["KnownDifference", "KNOWN_DIFFERENCES", "KERNEL_RANDOM", "KERNEL_DERIVED", "TCP_SEED", "check_entry",
           "lookup", "apply_known"]


@attrs.frozen
class KnownDifference:
    """One fact of one scenario on some kernel lines that differs for a documented reason."""

    scenario: str           # the topology's name (file stem)
    subject: str            # Fact.subject, exactly
    fact: str               # Fact.fact, exactly
    kernels: tuple[str, ...]  # Debian kernel lines (flowsim.conform.kernel.KERNELS keys)
    cause: str              # why they differ
    source: str             # the kernel file/function (and commit) that decides it


# Empty until a difference is understood and explained; see docs/conformance.md.
KNOWN_DIFFERENCES: list[KnownDifference] = []

# Header fields the kernel fills from a per-boot random key (frames mode): field -> where it comes from.
KERNEL_RANDOM = {
    "ESP IV, ciphertext and ICV":
        "esp_output_tail (net/ipv4/esp4.c, net/ipv6/esp6.c) -> seqiv_aead_encrypt (crypto/seqiv.c): the IV is the "
        "sequence number XOR ctx->salt, which aead_init_geniv (crypto/geniv.c) draws with crypto_stdrng_get_bytes "
        "per SA; the ESP header and the plaintext, decrypted with the SA's key, are compared exactly",
    "ipip outer IPv4 ID and header checksum":
        "iptunnel_xmit (net/ipv4/ip_tunnel_core.c) -> __ip_select_ident (net/ipv4/route.c): the ID hashes "
        "the addresses with ip_idents_hashrnd, set by get_random_bytes once per boot",
    "ICMP error's IPv4 ID and header checksum":
        "icmp_send (net/ipv4/icmp.c; its socket has pmtudisc IP_PMTUDISC_DONT, so no DF) -> "
        "ip_push_pending_frames -> ip_select_ident -> __ip_select_ident (net/ipv4/route.c): keyed by "
        "ip_idents_hashrnd, once per boot",
    "ICMPv6 error's flow label":
        "icmp6_send (net/ipv6/icmp.c) -> ip6_push_pending_frames -> __ip6_make_skb -> ip6_make_flowlabel "
        "(include/net/ipv6.h; the ICMPv6 socket labels automatically, net.ipv6.auto_flowlabels=1) -> "
        "skb_get_hash_flowi6: keyed by hashrnd (net/core/flow_dissector.c), once per boot",
    "IPv6 fragment identification":
        "ip6_fragment (net/ipv6/ip6_output.c), cutting again what nf_ct_frag6_gather reassembled -> "
        "ipv6_select_ident -> __ipv6_select_ident (net/ipv6/output_core.c): get_random_u32_above(0), a new random "
        "number per datagram; the fragments must be equal but for it",
    "ip6tnl outer IPv6 flow label":
        "ip6_tnl_xmit (net/ipv6/ip6_tunnel.c) -> ip6_make_flowlabel (include/net/ipv6.h, "
        "net.ipv6.auto_flowlabels=1 by default) -> skb_get_hash_flowi6: the flow hash is keyed by "
        "hashrnd (net/core/flow_dissector.c, net_get_random_once), once per boot",
}

# A field the kernel derives from the frame where flowsim writes the finished value (frames mode): compared
# exactly, the kernel's value must be the one its function derives from flowsim's frame.
TCP_SEED = "GSO skb's TCP checksum (pseudo-header seed)"
KERNEL_DERIVED = {
    TCP_SEED:
        "validate_xmit_skb (net/core/dev.c) -> skb_gso_segment -> tcp4_gso_segment / tcp6_gso_segment "
        "(net/ipv4/tcp_offload.c, net/ipv6/tcpv6_offload.c): a GSO skb that is not CHECKSUM_PARTIAL gets "
        "th->check = the pseudo-header sum (__tcp_v4_send_check / __tcp_v6_send_check) and CHECKSUM_PARTIAL, "
        "and a device with NETIF_F_HW_CSUM (veth) sends it unsegmented: every capture of the GSO skb shows "
        "that seed where flowsim's frame carries the full checksum (its packets always do)",
}

_FORBIDDEN = ("offloaded", "fast path", "slow path", "flowtable verdicts")


def check_entry(e: KnownDifference) -> None:
    """Refuse an entry that is a pattern, has no cause or source, or excuses the flowtable's own behaviour."""
    for value in (e.scenario, e.subject, e.fact, *e.kernels):
        if not value or any(c in value for c in "*?["):
            raise ValueError(f"known difference {e!r}: exact names only, not {value!r}")
    if not e.kernels or not e.cause or not e.source:
        raise ValueError(f"known difference {e!r}: kernel lines, cause and source are required")
    if any(word in e.fact for word in _FORBIDDEN):
        raise ValueError(f"known difference {e!r}: offload and fast/slow path facts are never known differences")


def lookup(scenario: str, subject: str, fact: str, kernel: str) -> KnownDifference | None:
    """The entry naming this fact on *kernel*, if any."""
    for e in KNOWN_DIFFERENCES:
        if (e.scenario, e.subject, e.fact) == (scenario, subject, fact) and kernel in e.kernels:
            check_entry(e)
            return e
    return None


def apply_known(facts: list[Fact], kernel: str) -> list[Fact]:
    """*facts* with every listed difference marked ``known`` (cause and source in the note)."""
    out = []
    for f in facts:
        e = lookup(f.scenario, f.subject, f.fact, kernel) if f.status == "differs" else None
        out.append(attrs.evolve(f, status="known", note=f"{e.cause} ({e.source})") if e else f)
    return out
