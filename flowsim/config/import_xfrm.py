"""``ip xfrm state`` / ``ip xfrm policy`` text of a snapshot, turned back into ``ip xfrm … add`` lines.

Theory of operation
-------------------
iproute2 prints each state and policy as a block: a first line at the left
margin (``src A dst B`` — the addresses of a state, the selector of a
policy) and indented lines below it, each starting with a keyword
(``proto esp spi 0x… reqid N mode tunnel``, ``replay-window N flag …``,
``aead NAME KEY ICV``, ``sel src P dst Q``; ``dir out priority N ptype
main``, ``tmpl src A dst B``, ``proto esp reqid N mode tunnel``).  Without
``-s`` it prints no counters; the ``anti-replay`` and ``lifetime`` lines
carry run-time state only.

:func:`xfrm_states` and :func:`xfrm_policies` read those blocks and write
the ``ip xfrm state add`` / ``ip xfrm policy add`` lines of
:mod:`flowsim.config.iproute_xfrm`, with what that parser models: ESP,
``rfc4106(gcm(aes))`` with its key and ICV length, mode, reqid, the state's
selector; a policy's selector, direction, priority, action and templates.
What it does not model and what would change which packets a state or policy
takes (``enc``/``auth`` algorithms, UDP encapsulation, marks, interface ids,
socket policies, a selector on ports or a device) is a :class:`Skip` with
the block's first line and the reason: the importer warns, located, and
leaves that block out.  A line the model's own parser refuses anyway (an
IPv6 state) is the importer's to find (it loads every line on its own).
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable

import attrs

__all__ = ["Skip", "xfrm_states", "xfrm_policies", "blocks"]

# lines of run-time state: nothing to rebuild
_RUNTIME = ("anti-replay", "lifetime", "current", "stats", "seq-hi", "replay_window", "bmp", "lastused",
            "add ", "use ", "expire", "soft", "hard", "crypto offload", "seq ", "oseq ")
_NOT_MODELLED_STATE = {"enc": "encryption without AEAD (enc/auth)", "auth": "encryption without AEAD (enc/auth)",
                       "auth-trunc": "encryption without AEAD (enc/auth)", "comp": "IPcomp",
                       "encap": "UDP encapsulation (NAT traversal)", "mark": "marks", "output-mark": "marks",
                       "if_id": "xfrm interface ids", "offload": "hardware offload", "tfcpad": "TFC padding",
                       "security-context": "security contexts"}


@attrs.frozen
class Skip:
    """A block left out: its first line (``src A dst B``), and why."""

    what: str
    why: str


def blocks(text: str) -> list[list[str]]:
    """The blocks of ``ip xfrm`` output: each a list of lines, the first at the left margin."""
    out: list[list[str]] = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        if not line[:1].isspace():
            out.append([line.strip()])
        elif out:
            out[-1].append(line.strip())
    return out


def _addr(word: str) -> str:
    return str(ipaddress.ip_address(word))


def _net(word: str) -> str:
    return str(ipaddress.ip_network(word, strict=False))


def _pairs(words: list[str], flags_until: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """``key value key value …`` of one line; ``flag`` takes every word up to the next known key."""
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        key = words[i]
        if key in ("flag", "extra_flag"):
            j = i + 1
            while j < len(words) and words[j] not in flags_until:
                j += 1
            out[key] = words[i + 1:j]
            i = j
            continue
        out[key] = words[i + 1:i + 2]
        i += 2
    return out


def _selector(words: list[str], what: str) -> tuple[list[str], Skip | None]:
    """``src P dst Q [proto X] [sport N] [dport N] [dev D]`` -> (words for the add line, a Skip)."""
    kv = _pairs(words)
    out = []
    for key in ("src", "dst"):
        if kv.get(key):
            out += [key, _net(kv[key][0])]
    extra = sorted(k for k in kv if k not in ("src", "dst", "proto"))
    if extra:
        return out, Skip(what, f"a selector on {', '.join(extra)} is not modelled")
    if kv.get("proto"):
        out += ["proto", kv["proto"][0]]
    return out, None


def xfrm_states(text: str) -> tuple[list[str], list[Skip]]:
    """The ``ip xfrm state add`` lines of ``ip xfrm state`` output, and the blocks left out."""
    return _commands(text, "state", _state)


def _commands(text: str, kind: str, command: Callable[[list[str], str], tuple[str | None, Skip | None]]
              ) -> tuple[list[str], list[Skip]]:
    """The ``ip xfrm KIND add`` lines of ``ip xfrm KIND`` output (each block read by *command*), and the blocks
    left out: those *command* skips, and those it cannot read."""
    lines, skips = [], []
    for block in blocks(text):
        what = f"xfrm {kind} {block[0]}"
        try:
            line, skip = command(block, what)
        except (ValueError, IndexError) as exc:
            skips.append(Skip(what, f"unreadable ({exc})"))
            continue
        if skip is not None:
            skips.append(skip)
        elif line is not None:
            lines.append(line)
    return lines, skips


def _state(block: list[str], what: str) -> tuple[str | None, Skip | None]:
    head = _pairs(block[0].split())
    if not head.get("src") or not head.get("dst"):
        return None, Skip(what, "no src and dst")
    words = ["ip", "xfrm", "state", "add", "src", _addr(head["src"][0]), "dst", _addr(head["dst"][0])]
    have_alg = False
    sel: list[str] = []
    for line in block[1:]:
        w = line.split()
        key = w[0]
        if line.startswith(_RUNTIME):
            continue
        if key in _NOT_MODELLED_STATE:
            return None, Skip(what, f"{_NOT_MODELLED_STATE[key]} is not modelled by flowsim")
        if key == "proto":
            kv = _pairs(w)
            if kv["proto"][0] != "esp":
                return None, Skip(what, f"xfrm proto {kv['proto'][0]} is not modelled (ESP only)")
            words += ["proto", "esp", "spi", hex(int(kv["spi"][0], 0))]
            if kv.get("reqid"):
                words += ["reqid", str(int(kv["reqid"][0], 0))]
            if kv.get("mode"):
                words += ["mode", kv["mode"][0]]
            unknown = sorted(k for k in kv if k not in ("proto", "spi", "reqid", "mode"))
            if unknown:
                return None, Skip(what, f"{', '.join(unknown)} is not modelled")
        elif key == "replay-window":
            kv = _pairs(w, frozenset({"replay-window"}))
            words += ["replay-window", str(int(kv["replay-window"][0]))]
        elif key == "aead":
            if len(w) != 4:
                return None, Skip(what, "aead without its key (print keys: run the snapshot script as root)")
            words += ["aead", w[1], w[2], w[3]]
            have_alg = True
        elif key == "sel":
            sel, skip = _selector(w[1:], what)
            if skip is not None:
                return None, skip
        elif key in ("flag", "extra_flag", "dir"):
            continue
        else:
            return None, Skip(what, f"{key!r} is not modelled by flowsim")
    if not have_alg:
        return None, Skip(what, "no aead algorithm (flowsim models aead rfc4106(gcm(aes)) only)")
    if sel and sel != ["src", "0.0.0.0/0", "dst", "0.0.0.0/0"]:
        words += ["sel", *sel]
    return shlex.join(words), None


def xfrm_policies(text: str) -> tuple[list[str], list[Skip]]:
    """The ``ip xfrm policy add`` lines of ``ip xfrm policy`` output, and the blocks left out."""
    return _commands(text, "policy", _policy)


_TMPL_KEYS = ("src", "dst", "proto", "spi", "reqid", "mode", "level")


def _policy(block: list[str], what: str) -> tuple[str | None, Skip | None]:
    sel, skip = _selector(block[0].split(), what)
    if skip is not None:
        return None, skip
    if len(sel) < 4:
        return None, Skip(what, "no src and dst selector")
    words = ["ip", "xfrm", "policy", "add", *sel]
    tmpl: list[str] | None = None
    have_dir = False
    for line in block[1:]:
        w = line.split()
        key = w[0]
        if line.startswith(_RUNTIME):
            continue
        if key == "socket":
            return None, Skip(what, "a socket policy belongs to a process (an IKE daemon's), not to the machine")
        if key == "dir":
            kv = _pairs(w)
            if kv["dir"][0] not in ("in", "out", "fwd"):
                return None, Skip(what, f"direction {kv['dir'][0]!r} is not modelled")
            words += ["dir", kv["dir"][0]]
            have_dir = True
            if kv.get("priority"):
                words += ["priority", str(int(kv["priority"][0]))]
            if kv.get("ptype") and kv["ptype"][0] != "main":
                return None, Skip(what, f"ptype {kv['ptype'][0]} (MIGRATE, sub policies) is not modelled")
            unknown = sorted(k for k in kv if k not in ("dir", "priority", "ptype", "flag", "share", "index"))
            if unknown:
                return None, Skip(what, f"{', '.join(unknown)} is not modelled")
        elif key == "action":
            words += ["action", w[1]]
        elif key in ("mark", "if_id"):
            return None, Skip(what, f"{key} is not modelled by flowsim")
        elif key == "tmpl":
            tmpl = _tmpl(words, w[1:], what)
        elif key in ("proto", "level") and tmpl is not None:
            tmpl = _tmpl(words, w, what)
        elif key in ("flag", "share", "index", "lifetime"):
            continue
        else:
            return None, Skip(what, f"{key!r} is not modelled by flowsim")
    if not have_dir:
        return None, Skip(what, "no direction")
    return shlex.join(words), None


def _tmpl(words: list[str], more: list[str], what: str) -> list[str]:
    """Append a template line's ``key value`` pairs to *words* (after a ``tmpl`` when it starts one)."""
    kv = _pairs(more)
    if "src" in kv or "dst" in kv:
        words.append("tmpl")
    for key in _TMPL_KEYS:
        if kv.get(key):
            value = kv[key][0]
            if key in ("src", "dst"):
                value = _addr(value)
            elif key in ("spi", "reqid"):
                value = str(int(value, 0))
                if key == "spi" and value == "0":
                    continue
            elif key == "proto" and value != "esp":
                raise ValueError(f"template proto {value} (ESP only)")
            words += [key, value]
    unknown = sorted(k for k in kv if k not in _TMPL_KEYS)
    if unknown:
        raise ValueError(f"template {', '.join(unknown)}")
    return words

