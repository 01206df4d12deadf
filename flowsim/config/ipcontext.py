"""The context of one ``ip`` command line: its topology, ``-4``/``-6`` family and ``-n`` namespace.

:mod:`flowsim.config.iproute` builds one :class:`IpContext` per ``ip`` line and
hands it to the object handlers, its own and :mod:`flowsim.config.iproute_xfrm`'s;
it lives apart so that both import it and neither imports the other back.
"""

from __future__ import annotations

from flowsim.config.network import Topology
from flowsim.kernel.devices.base import Command, NetDevice

__all__ = ["IpContext"]


class IpContext:
    """Global ``ip`` options: family and namespace (the command is re-homed to ``-n NS``)."""

    def __init__(self, topo: Topology, cmd: Command, family: int | None, netns: str):
        self.topo = topo
        self.family = family
        self.netns = netns
        self.cmd = cmd if netns == cmd.netns else Command(cmd.text, netns, cmd.file, cmd.line)

    def dev(self, name: str) -> NetDevice:
        return self.topo.require_device(self.netns, name, self.cmd)
