"""Running a topology: the virtual clock, traffic, the run and what it reports.

``simulation`` (:class:`~flowsim.sim.simulation.Simulation`: the event
queue, GC ticks, ``[[event]]`` lines), ``traffic`` (the endpoints: TCP and
UDP senders and receivers, GSO), ``report`` (JSON and text), ``explain``,
``compare``, ``sweep`` and ``progress`` (progress bars on stderr).

May import: ``flowsim.config``, ``flowsim.kernel``, ``flowsim.nft`` and the
shared vocabulary.  Never ``models``, ``conform`` or ``commands``.
"""
