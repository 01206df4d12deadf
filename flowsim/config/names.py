"""Names a topology gives: devices as the kernel checks them, namespaces as ``ip netns`` does.

Theory of operation
-------------------
Device and namespace names end up in file names (``--pcap-dir`` captures,
conform's guest scripts), so they are checked where the file is read, with
the rules of the tools the file imitates:

* :func:`dev_valid_name` is ``dev_valid_name`` of ``net/core/dev.c``: not
  empty, shorter than ``IFNAMSIZ`` (16) bytes, not ``.`` or ``..``, and no
  ``/``, ``:`` or whitespace (the kernel's ``isspace``, byte by byte);
* :func:`netns_invalid_name` is ``invalid_name`` of iproute2's
  ``ip/ipnetns.c`` (the check of ``ip netns add``): a file name under
  ``/run/netns``, so not empty, at most ``NAME_MAX`` (255) bytes, no ``/``,
  not ``.`` or ``..``.

Both also refuse a NUL byte: a C string ends there, so the name the kernel or
``ip`` would see is not the one written.  Each returns ``None`` for a good
name, else what is wrong with it, for the caller's located
:class:`~flowsim.errors.TopologyError`.

``dev_valid_name`` is a kernel function: it lives with the devices
(:mod:`flowsim.kernel.devices.base`), which check every name a command
gives; this module re-exports it.  It imports nothing from :mod:`flowsim.config`.
"""

from __future__ import annotations

from flowsim.kernel.devices.base import DEV_NAME_EXPECTED, IFNAMSIZ, dev_valid_name

__all__ = ["IFNAMSIZ", "NAME_MAX", "DEV_NAME_EXPECTED", "NETNS_NAME_EXPECTED", "dev_valid_name",
           "netns_invalid_name"]

NAME_MAX = 255  # include/uapi/linux/limits.h

NETNS_NAME_EXPECTED = f"1 to {NAME_MAX} bytes without '/', not '.' or '..' (ip netns add)"


def netns_invalid_name(name: str) -> str | None:
    """iproute2's ``invalid_name`` (ip/ipnetns.c): None if ``ip netns add`` accepts *name*, else why not."""
    raw = name.encode("utf-8", "surrogateescape")
    if not raw:
        return "empty namespace name"
    if len(raw) > NAME_MAX:
        return f"namespace name of {len(raw)} bytes is too long"
    if name in (".", ".."):
        return f"namespace name {name!r} is reserved"
    for byte in b"/\0":
        if byte in raw:
            return f"namespace name {name!r} contains {chr(byte)!r}"
    return None
