"""Conformance against a real kernel: the same topology in a qemu guest, compared with the simulation.

Theory of operation
-------------------
flowsim models the kernel; this module checks the model against the kernel
it models.  :func:`run_conformance` takes topology files and a Debian kernel
line (:data:`~flowsim.conform.kernel.KERNELS`: ``debian-6.12`` or
``debian-6.1``) and

1. plans each topology for the guest (:func:`flowsim.conform.guest.plan_scenario`:
   who listens where, pinned ports; what a real stack cannot do is refused
   with the file and line);
2. prepares the host (:mod:`flowsim.conform.kernel`: tools installed when
   missing and root, the kernel package downloaded and staged, the base
   initramfs built — all cached under ``~/.cache/flowsim/conform``);
3. boots the kernel once under ``qemu-system-x86_64 -accel tcg`` with every
   scenario batched into the guest's ``/init``, each in fresh namespaces
   (:mod:`flowsim.conform.guest`), and reads the results channel
   (:mod:`flowsim.conform.parse`, :mod:`flowsim.conform.observe`);
4. runs the simulator on the same topology under the matching profile
   (``linux-6.12`` / ``linux-6.1``) and compares fact by fact, within the
   tolerances documented in :mod:`flowsim.conform.compare`.

The result is a :class:`ConformResult`: rows of facts (agrees / differs /
known / n/a / error), timings, and :attr:`ConformResult.status` — 0 when
everything agreed (known differences included), 1 when something differs,
2 when the guest could not run a scenario.  Set-up failures (missing tools
without root, no package mirror, qemu failing) raise
:class:`~flowsim.conform.kernel.ConformSetupError` with one clear line.

``results`` replays a saved results channel (``results.log`` of an earlier
run) instead of booting, which is how the tests check parsing and
comparison against captured kernel output.  A boot leaves ``kit.json``
beside it (package, version, release), so a replay names the exact
package version that produced the channel.

``frames=True`` (``flowsim conform --frames``) is the frame-exact mode of
:mod:`flowsim.conform.frames`: the simulation runs first, its frames are
injected one by one into the guest's topology, every device is captured and
compared byte for byte, and the flowtable verdict of every received frame
with it.  The result has the same shape (facts with tolerance ``exact``).

Every shipped topology can be given.  One the guest cannot run at all (a
flowsim-only device kind such as ``ethernet`` or ``dsa``, ``pppoe`` until
the guest runs it, ``gso_size`` in socat mode, ``[[event]]``) is *skipped* with its
reason (:class:`~flowsim.conform.guest.ScenarioSkipped`) and does not change
the exit status.  A socket size too small for a payload is raised, and
``max_packets`` caps each traffic direction in both modes; without it a
table longer than :data:`DEFAULT_MAX_PACKETS` (per mode) or a paced one
lasting more than :data:`PACED_SECONDS` is capped by default.  Each such
change is an ``adjusted`` line of the scenario, and the simulation runs the
traffic as the guest plays it (:func:`plan_traffic`), never the file's.
Differences listed in :data:`flowsim.conform.known.KNOWN_DIFFERENCES` are
marked ``known`` in both modes (:func:`flowsim.conform.known.apply_known`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import attrs

from flowsim.config.topology import Topology, load_topology
from flowsim.conform.compare import Fact, compare, format_facts, simulate, summarize
from flowsim.conform.frames import (
    FramePlan, compare_frames, error_facts, kernel_frames, render_frames_init, scenario_id, simulate_frames,
)
from flowsim.conform.guest import ScenarioPlan, ScenarioSkipped, boot_guest, plan_scenario, render_init
from flowsim.conform.kernel import (
    KERNELS, SAVED_RESULTS, ConformSetupError, KernelKit, Timer, build_base_initramfs, cache_dir,
    ensure_tools, fetch_kernel, spec_profile,
)
from flowsim.conform.known import apply_known
from flowsim.conform.observe import ScenarioObservation, observe
from flowsim.conform.parse import results_text, split_sections
from flowsim.errors import ConfigError
from flowsim.profiles import Profile, profile_from_cli
from flowsim.schemas import schema_id
from flowsim.sim.traffic import TrafficSpec

__all__ = ["ConformResult", "ScenarioResult", "run_conformance", "load_scenarios", "DOC_BEGIN", "DOC_END",
           "update_doc", "markdown_table", "ConformSetupError", "KERNELS", "Skipped", "plan_traffic",
           "DEFAULT_MAX_PACKETS", "PACED_SECONDS", "default_cap"]

DOC_BEGIN = "<!-- conform-results:begin -->"
DOC_END = "<!-- conform-results:end -->"

# The default cap per traffic direction when --max-packets is not given, per mode.  Measured on Debian sid
# (Linux 7.2) under TCG on a 2-vCPU host shared with other guests: a 200-packet TCP table in each direction
# takes 8-19 s of guest time, but ip6ip6-rx's 1000 + 500 packets through an ip6ip6 tunnel took 146 s
# (wait_bytes gave up at 76 %) and 199 s for the encaplimit variant, long enough for an idle UDP entry of
# the same scenario to expire before the end snapshot; the frames mode injects ~12 frames a second (one
# socat and one `ip netns exec` per run of frames), and a frame crosses 2-4 captured devices.
DEFAULT_MAX_PACKETS = {"socat": 200, "frames": 50}
PACED_SECONDS = 20      # a paced table (rate > 0) is capped to what it sends in this many seconds


def default_cap(topo: Topology, frames: bool) -> int | None:
    """The cap the harness applies to *topo* when none is given: None when its traffic is short enough."""
    cap = DEFAULT_MAX_PACKETS["frames" if frames else "socat"]
    need = None
    for t in topo.traffic:
        limit = cap if not t.rate else min(cap, max(1, int(PACED_SECONDS * t.rate)))
        if max(t.packets, t.reply_packets) > limit:
            need = limit if need is None else min(need, limit)
    return need


@attrs.define
class ScenarioResult:
    """One topology: its plan, what the kernel showed, what flowsim predicted, the facts."""

    plan: ScenarioPlan
    observation: ScenarioObservation
    report: dict | None
    facts: list[Fact]

    def status(self) -> str:
        s = summarize(self.facts)
        return "error" if s["error"] else "differs" if s["differs"] else "agrees"


@attrs.frozen
class Skipped:
    """A topology the guest cannot run, and why (``file:line: reason``)."""

    name: str
    file: str
    reason: str


@attrs.define
class ConformResult:
    """A whole conformance run on one kernel."""

    kernel: str
    package: str
    version: str
    release: str
    profile: str
    date: str
    timings: dict
    scenarios: list[ScenarioResult]
    workdir: str | None = None
    frames: dict | None = None      # --frames: {"max_packets", "injected", "capped"}
    skipped: list[Skipped] = attrs.Factory(list)
    cap: dict | None = None         # {"max_packets": given or None, "default": per-mode default, "capped": names}
    patch: dict | None = None       # --patch: flowsim.conform.patch.PatchInfo.to_json()

    @property
    def kernel_label(self) -> str:
        """The release, with ``+ SERIES (N modules rebuilt)`` for a patched kernel."""
        return self.patch["label"] if self.patch else self.release

    @property
    def facts(self) -> list[Fact]:
        return [f for s in self.scenarios for f in s.facts]

    @property
    def status(self) -> int:
        s = summarize(self.facts)
        return 2 if s["error"] else 1 if s["differs"] else 0

    def to_json(self) -> dict:
        out = {
            "schema": schema_id("conform"),
            "kernel": {"name": self.kernel, "package": self.package, "version": self.version,
                       "release": self.release, **({"label": self.kernel_label, "patch": self.patch}
                                                   if self.patch else {})},
            "profile": self.profile, "date": self.date, "timings": self.timings, "status": self.status,
            "summary": summarize(self.facts), "workdir": self.workdir,
            "scenarios": [{"name": s.plan.name, "file": s.plan.file, "status": s.status(),
                           "seconds": s.observation.seconds, "errors": s.observation.errors,
                           "notes": s.observation.notes, "adjustments": list(s.plan.adjustments),
                           "facts": [attrs.asdict(f) for f in s.facts]} for s in self.scenarios]
            + [{"name": k.name, "file": k.file, "status": "skipped", "seconds": None, "errors": [], "notes": [],
                "adjustments": [], "skipped": k.reason, "facts": []} for k in self.skipped],
        }
        if self.cap is not None:
            out["cap"] = self.cap
        if self.frames is not None:
            out["frames"] = self.frames
        return out

    def text(self, *, all_facts: bool = True) -> str:
        if not self.scenarios:
            head = f"{self.kernel}: not booted, every topology skipped\n"
        else:
            head = (f"kernel {self.kernel_label} ({self.package} {self.version}) vs flowsim profile {self.profile}\n"
                    f"timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()) + "\n")
        if self.frames is not None:
            head += (f"frames: {self.frames['injected']} injected"
                     + (f", at most {self.frames['max_packets']} packets per traffic direction"
                        + (f" (shortened: {', '.join(self.frames['capped'])})" if self.frames["capped"] else "")
                        if self.frames["max_packets"] is not None else "") + "\n")
        for sc in self.scenarios:
            head += "".join(f"adjusted: {sc.plan.name}: {a}\n" for a in sc.plan.adjustments)
        head += "".join(f"skipped: {k.name}: {k.reason}\n" for k in self.skipped)
        body = format_facts(self.facts, only_problems=not all_facts) if self.facts else ""
        s = summarize(self.facts)
        tail = (f"{s['agrees']} agree, {s['differs']} differ, {s['known']} known differences, "
                f"{s['n/a']} not reported by flowsim, {s['error']} errors"
                + (f", {len(self.skipped)} topologies skipped" if self.skipped else "") + "\n")
        return head + body + tail


def load_scenarios(paths: list[str], *, frames: bool = False, max_packets: int | None = None,
                   skipped: list[Skipped] | None = None) -> list[tuple[Topology, ScenarioPlan]]:
    """Load and plan every topology (errors name the file and line).

    A topology the guest cannot run is appended to *skipped* when given (else its ScenarioSkipped is
    raised).  Each plan is capped at *max_packets*, or at :func:`default_cap` when that is None.
    """
    if not paths:
        raise ConfigError("no topology given", expected="one or more topology files")
    out = []
    for p in paths:
        topo = load_topology(p)
        cap = max_packets if max_packets is not None else default_cap(topo, frames)
        try:
            out.append((topo, plan_scenario(topo, len(out), frames=frames, max_packets=cap)))
        except ScenarioSkipped as exc:
            if skipped is None:
                raise
            skipped.append(Skipped(Path(topo.file or p).stem, topo.file or p, exc.reason))
    return out


def plan_traffic(topo: Topology, plan: ScenarioPlan) -> list[TrafficSpec]:
    """The traffic as the guest plays it, for the simulation: sizes raised, packets capped, Linux's ACKs, and
    the tables in the guest's order, each ``start`` its pause after the one before it delivered everything
    (run with ``Simulation(sequential=True)``: the guest plays one table after the other, so what an earlier
    connection left behind — a conntrack entry, a flow, a path MTU its host learned — meets the next)."""
    specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    out = []
    for tp in plan.traffic:
        s = specs[tp.file_index]
        out.append(attrs.evolve(s, packets=tp.packets, size=tp.size, reply_packets=tp.reply_packets,
                                reply_size=tp.reply_size, acks=tp.acks, rate=tp.sim_rate or s.rate,
                                reply_after=tp.reply_after, start=float(tp.pause)))
    return out


def run_conformance(paths: list[str], kernel: str = "debian-6.12", *, results: str | None = None,
                    install: bool = True, workdir: str | Path | None = None,
                    simulate_fn=simulate, frames: bool = False, max_packets: int | None = None,
                    patches: list[str] | None = None, profile_name: str | None = None,
                    settings: list[str] | None = None) -> ConformResult:
    """Boot *kernel* with the topologies in *paths* (or replay *results*) and compare with flowsim.

    *patches*: a series (files, mboxes, folders) built into the kit's modules (:mod:`flowsim.conform.patch`);
    *profile_name* / *settings* (``--profile`` / ``--set``): the simulation's profile instead of the kit's.
    """
    from flowsim.conform.patch import patched_kit, read_series

    if kernel not in KERNELS:
        raise ConfigError(f"unknown kernel {kernel!r}", value=kernel, expected="one of " + ", ".join(KERNELS))
    if patches and results is not None:
        raise ConfigError("--patch boots a patched kernel; --results replays a saved run", value=patches)
    series = read_series(patches) if patches else None   # a typo must not cost a boot
    if profile_name is not None or settings:
        profile_from_cli(profile_name or "linux-7.2", settings or ())   # a bad switch must not either
    patch_info = None
    spec = KERNELS[kernel]
    skipped: list[Skipped] = []
    scenarios = load_scenarios(paths, frames=frames, max_packets=max_packets, skipped=skipped)
    timer = Timer()
    fplans: list[FramePlan] = []

    def cap(topo: Topology) -> int | None:
        return max_packets if max_packets is not None else default_cap(topo, frames)

    cap_info = {"max_packets": max_packets, "default": DEFAULT_MAX_PACKETS["frames" if frames else "socat"],
                "capped": sorted(f"{plan.name}/{t.name}" for topo, plan in scenarios for t in plan.traffic
                                 if (t.packets, t.reply_packets) != (topo.traffic[t.file_index].packets,
                                                                     topo.traffic[t.file_index].reply_packets))}

    def sim_profile(name: str) -> str | Profile:
        """The simulation's profile: *name* with the --set switches (get_profile takes a Profile as is)."""
        return profile_from_cli(name, settings) if settings else name

    def profile_label(name: str) -> str:
        return name + "".join(f" --set {s}" for s in settings or ())

    def plan_frames(profile: str) -> list[FramePlan]:
        """--frames: the simulation first, under the kernel's profile: its frames are what the guest plays."""
        if not frames:
            return []
        with timer.step("flowsim"):
            return [simulate_frames(topo, plan, sim_profile(profile), cap(topo))  # type: ignore[arg-type]
                    for topo, plan in scenarios]

    date = datetime.date.today().isoformat()
    if not scenarios:  # everything skipped: nothing to boot
        return ConformResult(kernel, "(not booted)", "", "", "", date, timer.steps, [], None,
                             None, skipped, cap_info)
    if results is not None:
        text = results_text(results)
        package, version = _saved_kit(Path(results))
        kit_info = (package, version, _kernel_release(text), None)
        profile = profile_name or (spec_profile(spec, version, package) if version
                                   else spec_profile(spec, kit_info[2] or ""))
        fplans = plan_frames(profile)
        work = None
    else:
        with timer.step("tools"):
            tools = ensure_tools(install=install)
        with _cache_lock():  # two runs (make test -n 2, a second shell) must not stage the same kit at once
            kit: KernelKit = fetch_kernel(spec, timer)
            if series is not None:
                kit, pinfo = patched_kit(kit, patches or [], series, timer)
                patch_info = pinfo.to_json()
            base = build_base_initramfs(kit, tools, timer)
        profile = profile_name or kit.profile  # sid/experimental move: the profile follows the package version
        fplans = plan_frames(profile)
        work = Path(workdir) if workdir else cache_dir() / f"run-{kernel}-{os.getpid()}"
        if work.exists():
            shutil.rmtree(work)
        files = render_frames_init(scenarios, fplans) if frames else render_init(scenarios)
        # a scenario takes ~8 s under TCG, openwrt-fw4's six tables 40 s and more when a second guest shares the
        # machine: allow slow machines
        budget = 120 + 60 * len(scenarios)
        # the idle time a table waits before it starts (guest.start_pause: openwrt-fw4's 61 s), on top
        budget += sum(t.pause for _topo, plan in scenarios for t in plan.traffic)
        budget += sum(len(fp.inject) for fp in fplans)  # --frames: a socat per frame, well under 1 s each
        with timer.step("guest"):
            try:
                guest = boot_guest(kit, base, files, work, qemu=tools["qemu-system-x86_64"], timeout=budget)
            except ConformSetupError:  # a guest kernel crash under emulation: boot once more before giving up
                guest = boot_guest(kit, base, files, work, qemu=tools["qemu-system-x86_64"], timeout=budget)
        text = guest.results
        kit_info = (kit.package, kit.version, _kernel_release(text) or kit.release, None)
        # beside the results channel: which package booted, so that a replay of it names the exact version
        (work / KIT_FILE).write_text(json.dumps({"package": kit.package, "version": kit.version,
                                                 "release": kit_info[2]}) + "\n")
        if workdir is None:  # keep the logs of the last run as last-KERNEL, without the initrd
            (work / "initrd.img").unlink(missing_ok=True)
            last = cache_dir() / f"last-{kernel}"
            shutil.rmtree(last, ignore_errors=True)
            work.rename(last)
            work = last
    sections = split_sections(text)
    out = []
    if frames:
        for (_topo, plan), fp in zip(scenarios, fplans):
            obs = observe(plan, sections)
            kf = kernel_frames(fp, sections, scenario_id(plan, sections))
            facts = error_facts(plan.name, obs.errors) + compare_frames(plan.name, fp, kf)
            out.append(ScenarioResult(plan, obs, None, apply_known(facts, kernel)))
    for topo, plan in scenarios if not frames else ():
        obs = observe(plan, sections)
        t0 = time.monotonic()
        traffic = plan_traffic(topo, plan)
        prof = sim_profile(profile)
        report = simulate_fn(topo.file, prof, traffic, sequential=True)
        timer.steps["flowsim"] = round(timer.steps.get("flowsim", 0.0) + time.monotonic() - t0, 2)
        out.append(ScenarioResult(plan, obs, report, apply_known(compare(plan, obs, report), kernel)))
    for s in out:
        if s.observation.seconds is not None:
            timer.steps[f"scenario {s.plan.name}"] = s.observation.seconds
    info = None
    if frames:
        info = {"max_packets": max_packets, "injected": sum(len(fp.inject) for fp in fplans),
                "capped": sorted({name for fp in fplans for name in fp.capped})}
    return ConformResult(kernel, kit_info[0], kit_info[1], kit_info[2], profile_label(profile), date, timer.steps,
                         out, str(work) if work else None, info, skipped, cap_info, patch_info)


#: written beside a boot's results.log: {"package", "version", "release"} of the kernel package it booted
KIT_FILE = "kit.json"


def _saved_kit(results: Path) -> tuple[str, str]:
    """The package and version a saved results channel came from (its ``kit.json``), else a label saying it
    is a replay of unknown provenance."""
    try:
        meta = json.loads((results.parent / KIT_FILE).read_text())
        return str(meta["package"]), str(meta["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return SAVED_RESULTS, ""


@contextlib.contextmanager
def _cache_lock():
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _kernel_release(text: str) -> str:
    for s in split_sections(text):
        if s.kind == "kernel":
            return s.text.strip()
    return ""


# ---------------------------------------------------------------------- docs

def markdown_table(results: list[ConformResult]) -> str:
    """The per-scenario results of one or more kernels, for docs/conformance.md."""
    lines = []
    for r in results:
        s = summarize(r.facts)
        booted = " ".join(x for x in (r.package, r.version) if x)  # a replay without kit.json: "(saved results)"
        lines += [f"### {r.kernel_label} {booted if booted.startswith('(') else f'({booted})'}, profile "
                  f"`{r.profile}`, {r.date}", "",
                  f"{s['agrees']} facts agree, {s['differs']} differ, {s['known']} known differences, "
                  f"{s['error']} errors." + (f"  Guest time: {r.timings['guest']:.0f} s." if "guest" in r.timings
                                             else ""), "",
                  "| scenario | facts | agree | differ | known | status |", "|---|---|---|---|---|---|"]
        for sc in r.scenarios:
            c = summarize(sc.facts)
            lines.append(f"| {sc.plan.name} | {len(sc.facts)} | {c['agrees']} | {c['differs']} | {c['known']} "
                         f"| {sc.status()} |")
        for k in r.skipped:
            lines.append(f"| {k.name} | 0 | - | - | - | skipped: {k.reason} |")
        lines += ["", "Per connection, kernel value (flowsim's where it differs):", "",
                  "| scenario | connection | offloaded | slow path orig / reply | delivered orig / reply "
                  "| conntrack at end |", "|---|---|---|---|---|---|"]
        for sc in r.scenarios:
            for t in sc.plan.traffic:
                got = {f.fact.split(": ", 1)[-1]: f for f in sc.facts if f.subject == t.name}
                lines.append(f"| {sc.plan.name} | {t.name} | {_cell(got.get('offloaded (flow created)'))} "
                             f"| {_cell(got.get('slow path original'))} / {_cell(got.get('slow path reply'))} "
                             f"| {_cell(got.get('delivered original'))} / {_cell(got.get('delivered reply'))} "
                             f"| {_cell(got.get('conntrack shows at end'))} |")
        problems = [f for f in r.facts if f.status in ("differs", "known", "error")]
        if problems:
            lines += ["", "| scenario | subject | fact | kernel | flowsim | tolerance | status |",
                      "|---|---|---|---|---|---|---|"]
            for f in problems:
                lines.append(f"| {f.scenario} | {f.subject} | {f.fact} | {f.kernel} | {f.sim} | {f.tolerance} "
                             f"| {f.status}{': ' + f.note if f.note else ''} |".replace("\n", " "))
        lines.append("")
    return "\n".join(lines)


def _cell(f: Fact | None) -> str:
    if f is None:
        return "-"
    value = "yes" if f.kernel is True else "no" if f.kernel is False else str(f.kernel)
    return value if f.status in ("agrees", "n/a") else f"{value} ({f.sim}, {f.status})"


def update_doc(path: str | Path, results: list[ConformResult]) -> None:
    """Replace the generated part of *path* (between the conform-results markers) with fresh tables."""
    path = Path(path)
    text = path.read_text() if path.exists() else f"# Conformance\n\n{DOC_BEGIN}\n{DOC_END}\n"
    if DOC_BEGIN not in text or DOC_END not in text:
        text = text.rstrip("\n") + f"\n\n{DOC_BEGIN}\n{DOC_END}\n"
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    path.write_text(head + DOC_BEGIN + "\n" + markdown_table(results) + DOC_END + tail)
