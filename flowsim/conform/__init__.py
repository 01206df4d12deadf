"""Conformance against real kernels booted in qemu.

``kernel`` (kernel kits from Debian's packages, cached), ``guest`` (the
initramfs and the guest's plan of a scenario; ``data/init.sh`` is its
``/init``), ``parse`` (what the guest prints), ``observe`` (facts from it),
``compare`` (kernel facts against the simulation's) and ``harness``
(``flowsim conform``: the whole run).

May import: ``flowsim.sim``, ``flowsim.config``, ``flowsim.kernel`` and the
shared vocabulary.  Never ``commands``.
"""
