"""Round trip through a real kernel: a topology built in the guest, saved by the snapshot script, imported, run.

Theory of operation
-------------------
``flowsim conform TOPOLOGY… --snapshot DIR`` (:func:`run_snapshots`) boots the
kernel once, as the conformance harness does, and for every topology

1. sets it up in fresh namespaces exactly as the harness does
   (:func:`flowsim.conform.guest.setup_lines`: the topology's commands and
   sysctls, then the harness settings) and loads each namespace's ruleset as
   the harness loads it (:func:`flowsim.conform.guest.guest_ruleset`) — no
   probe table, no neighbour warm-up, no traffic: the machine as the topology
   describes it;
2. runs the script of ``flowsim snapshot --script``
   (:func:`flowsim.config.snapshot.script`) under the guest's busybox ash with
   the real ``ip``, ``bridge``, ``nft`` and busybox's ``sysctl``, into
   ``/tmp/snap``;
3. sends every file of every namespace folder back gzip-compressed and base64-encoded on the
   results channel, one section ``@@ SCENARIO snapfile K FILE`` each (``K``:
   the folder's position — ``init`` first, then the topology's namespaces —
   so no name from the topology is parsed out of a section header; ``FILE``
   must be one of the script's file names);
4. on the host, writes the snapshot to ``DIR/NAME/`` (NAME: the topology
   file's stem), imports it with the topology's own ``[[traffic]]``
   (:func:`flowsim.config.importer.import_snapshot`, ``--traffic-from``) into
   ``DIR/NAME.toml``, runs both under the kernel's profile and compares the
   figures of ``flowsim run --json`` that must survive the round trip
   (:func:`figures`: flowtables, traffic, drops, packets, MAC addresses
   aside — the guest's are random, flowsim's derived from the names).

Whatever differs is a bug of the snapshot script or of import (or a kernel
fact a topology did not state, which import then states).  The result is a
:class:`SnapshotRun` whose :attr:`~SnapshotRun.status` is 0 when every round
trip agreed, 1 when one differs, 2 when the guest could not set a topology up
or the snapshot could not be imported.
"""

from __future__ import annotations

import base64
import datetime
import shlex
import shutil
from pathlib import Path

import attrs

from flowsim.config.importer import import_snapshot
from flowsim.config.snapshot import FILES, INIT, NFT_JSON, TEXT_FILES, script
from flowsim.config.topology import Topology, load_topology, load_topology_text
from flowsim.conform.guest import GUEST_BIN, ScenarioPlan, boot_guest, guest_ruleset, setup_lines
from flowsim.conform.harness import Skipped, _cache_lock, _kernel_release, load_scenarios
from flowsim.conform.kernel import (
    KERNELS, SAVED_RESULTS, Timer, build_base_initramfs, cache_dir, ensure_tools, fetch_kernel, spec_profile,
)
from flowsim.conform.parse import gunzip, results_text, split_sections
from flowsim.errors import ConfigError, FlowsimError

__all__ = ["SnapshotRun", "RoundTrip", "run_snapshots", "figures", "differences", "roundtrip",
           "render_snapshot_init", "SNAPSHOT_SCRIPT", "SNAPSHOT_FILES"]

SNAPSHOT_SCRIPT = "conform/snapshot.sh"   # the script of `flowsim snapshot --script`, in the guest
# the only file names a section may carry back (what the script writes)
SNAPSHOT_FILES = frozenset(FILES) | frozenset(TEXT_FILES) | {"errors.txt", NFT_JSON}
FIGURES = ("flowtables", "traffic", "drops", "packets")

# The guest's helper: every file of one namespace folder, base64, one section each.
_HELPERS = r"""
# snapdump SCENARIO K FOLDER: the files of snapshot folder K, one section each (gzip, base64: the serial
# port is slow, and sysctl.txt alone is 30 KB a namespace).
snapdump() {
  [ -d "$3" ] || { echo "no folder $3" | section "$1" snapmissing "$2" -; return; }
  for f in "$3"/*; do
    [ -f "$f" ] || continue
    gzip -c < "$f" | base64 | section "$1" snapfile "$2" "${f##*/}"
  done
}
"""


def figures(report: dict) -> dict:
    """What a topology and the import of its snapshot must agree on: the flowtables, traffic, drops and packets
    of the run report, without MAC addresses (a real machine's are random, flowsim's derived from names), each
    flowtable's devices sorted, the flowtables by namespace and name."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("h_source", "h_dest")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    out = {k: strip(report.get(k)) for k in FIGURES}
    if isinstance(out["flowtables"], list):   # listed in namespace order, which a topology file chooses
        out["flowtables"].sort(key=lambda ft: (str(ft.get("netns")), str(ft.get("name"))) if isinstance(ft, dict)
                               else ("", ""))
    for ft in out["flowtables"] or []:
        # nft lists a flowtable's devices in its own order (`devices = { tip, veth0, veth1 }` for the file's
        # veth0, veth1, tip): a set, the order has no meaning in the kernel
        if isinstance(ft, dict) and isinstance(ft.get("devices"), list):
            ft["devices"] = sorted(ft["devices"])
    return out


def differences(a, b, path: str = "") -> list[str]:
    """Where *a* (the topology's figures) and *b* (the import's) differ, as ``path: a != b`` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                out.append(f"{path}{k}: {_show(a, k)} != {_show(b, k)}")
            else:
                out += differences(a[k], b[k], f"{path}{k}.")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in differences(x, y, f"{path}{i}.")]
    return [] if a == b else [f"{path.rstrip('.')}: {a!r:.80} != {b!r:.80}"]


def _show(d: dict, k) -> str:
    return f"{d[k]!r:.80}" if k in d else "missing"


def _run_report(topo: Topology, profile: str) -> dict:
    from flowsim.profiles import get_profile
    from flowsim.sim.report import build_report
    from flowsim.sim.simulation import Simulation

    sim = Simulation(topo, get_profile(profile))
    sim.run()
    return build_report(sim)


@attrs.define
class RoundTrip:
    """One topology: where its snapshot and import went, the import's warnings, what differs."""

    name: str
    file: str
    snapshot: str | None = None
    imported: str | None = None
    namespaces: list[str] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)
    differences: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    skipped: str | None = None

    @property
    def status(self) -> str:
        return ("skipped" if self.skipped else "error" if self.errors else "differs" if self.differences
                else "agrees")


def roundtrip(topology: str | Path, snapshot: str | Path, out: str | Path, profile: str) -> RoundTrip:
    """Import *snapshot* with *topology*'s traffic into *out* and compare the run figures with *topology*'s."""
    topo = load_topology(topology)
    rt = RoundTrip(Path(topology).stem, str(topology), str(snapshot), str(out))
    try:
        result = import_snapshot(snapshot, traffic_from=topology)
        Path(out).write_text(result.text, encoding="utf-8")
        rt.warnings = list(result.warnings)
        imported = load_topology_text(result.text, file=str(out))
    except FlowsimError as exc:
        rt.errors.append(f"import: {exc}")
        return rt
    want = figures(_run_report(topo, profile))
    try:
        got = figures(_run_report(imported, profile))
    except FlowsimError as exc:   # e.g. a ruleset naming a device the import left out (with a warning)
        rt.errors.append(f"run of the import: {exc}")
        return rt
    rt.differences = differences(want, got)
    return rt


@attrs.define
class SnapshotRun:
    """``--snapshot``: one boot, every topology's round trip."""

    kernel: str
    package: str
    version: str
    release: str
    profile: str
    date: str
    timings: dict
    directory: str
    trips: list[RoundTrip]

    @property
    def status(self) -> int:
        states = {t.status for t in self.trips}
        return 2 if "error" in states else 1 if "differs" in states else 0

    def to_json(self) -> dict:
        return {"mode": "snapshot",
                "kernel": {"name": self.kernel, "package": self.package, "version": self.version,
                           "release": self.release},
                "profile": self.profile, "date": self.date, "timings": self.timings, "status": self.status,
                "directory": self.directory, "roundtrips": [attrs.asdict(t) | {"status": t.status}
                                                            for t in self.trips]}

    def text(self) -> str:
        out = [f"kernel {self.release} ({self.package} {self.version}): snapshot round trip, flowsim profile "
               f"{self.profile}",
               "timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())]
        for t in self.trips:
            if t.skipped:
                out.append(f"skipped: {t.name}: {t.skipped}")
                continue
            head = f"{t.name}: {t.status}"
            if t.snapshot:
                head += f" (snapshot {t.snapshot}: {len(t.namespaces)} namespaces"
                head += f"; import {t.imported}, {len(t.warnings)} warnings)" if t.imported else ")"
            out.append(head)
            out += [f"  error: {e}" for e in t.errors]
            out += [f"  warning: {w}" for w in t.warnings]
            out += [f"  differs: {d}" for d in t.differences]
        n = {s: sum(1 for t in self.trips if t.status == s) for s in ("agrees", "differs", "error", "skipped")}
        out.append(f"{n['agrees']} round trips agree, {n['differs']} differ, {n['error']} errors"
                   + (f", {n['skipped']} topologies skipped" if n["skipped"] else ""))
        return "\n".join(out) + "\n"


# ---------------------------------------------------------------------- guest

def _folders(plan: ScenarioPlan) -> list[str]:
    """The snapshot's folders of one scenario, in the order of the sections' K: ``init``, then the namespaces."""
    return [INIT, *plan.namespaces]


def render_snapshot_scenario(topo: Topology, plan: ScenarioPlan) -> str:
    """The guest's ``scenario_N``: set up, load the rulesets, run the snapshot script, send its files back."""
    q = shlex.quote
    s = plan.index
    out = [f"scenario_{s}() {{", f"  begin {s} {q(plan.name)}", *setup_lines(topo, plan)]
    for name, ns in topo.namespaces.items():
        if ns.nft is not None:
            out.append(f"  run {q(f'{ns.nft.file}:{ns.nft.line}')} NS {q(name)} {GUEST_BIN['nft']} -f "
                       f"{q(f'/conform/s{s}/{name}.nft')} || return")
    out.append("  rm -rf /tmp/snap")
    out.append(f"  /bin/sh /{SNAPSHOT_SCRIPT} /tmp/snap 2>/tmp/snap.err")
    out.append(f"  [ $? = 0 ] || section {s} stderr snapshot - < /tmp/snap.err")
    for k, folder in enumerate(_folders(plan)):
        out.append(f"  snapdump {s} {k} {q('/tmp/snap/' + folder)}")
    out.append("  rm -rf /tmp/snap /tmp/snap.err")
    out.append("}")
    return "\n".join(out) + "\n"


def render_snapshot_init(scenarios: list[tuple[Topology, ScenarioPlan]]) -> dict[str, bytes]:
    """``/init`` of a ``--snapshot`` boot, the snapshot script and the rulesets."""
    for topo, plan in scenarios:
        for name in topo.namespaces:
            if name == INIT:
                raise ConfigError(f"namespace {name!r} has the name of the snapshot's folder of the initial "
                                  "namespace", where=topo.file or plan.name, expected="another namespace name")
    template = (Path(__file__).parent / "data" / "init.sh").read_text()
    body = _HELPERS + "".join(render_snapshot_scenario(topo, plan) for topo, plan in scenarios)
    calls = "".join(f"scenario_{plan.index}; cleanup {plan.index}\n" for _, plan in scenarios)
    files = {"init": template.replace("@SCENARIOS@", body).replace("@RUN@", calls).encode(),
             SNAPSHOT_SCRIPT: script().encode()}
    for topo, plan in scenarios:
        for name, ns in topo.namespaces.items():
            if "/" in name or "\0" in name or name in ("", ".", ".."):  # the loader refuses these already
                raise ConfigError(f"namespace name {name!r} cannot name a file in the guest", where=topo.file)
            if ns.nft is not None:
                files[f"conform/s{plan.index}/{name}.nft"] = guest_ruleset(topo, name).encode()
    return files


def collect_snapshot(plan: ScenarioPlan, text_or_sections, dest: Path) -> tuple[list[str], list[str]]:
    """Write scenario *plan*'s snapshot files from the results channel into *dest*; (folders written, errors)."""
    sections = split_sections(text_or_sections) if isinstance(text_or_sections, str) else text_or_sections
    folders = _folders(plan)
    written: list[str] = []
    errors: list[str] = []
    for sec in sections:
        if sec.scenario != str(plan.index):
            continue
        if sec.kind == "error":
            errors.append("set-up failed: " + " | ".join(line for line in sec.text.split("\n") if line)[:400])
        elif sec.kind == "stderr":
            errors.append("the snapshot script failed: " + sec.text.strip()[:400])
        elif sec.kind == "snapmissing":
            errors.append(f"the snapshot script wrote no folder {sec.text.strip()!r}")
        elif sec.kind == "snapfile":
            try:
                k = int(sec.netns or "")
                folder = folders[k]
            except (ValueError, IndexError):
                errors.append(f"a snapshot section names folder {sec.netns!r}, not one of 0..{len(folders) - 1}")
                continue
            if sec.phase not in SNAPSHOT_FILES:
                errors.append(f"{folder}: unexpected file {sec.phase!r} (not a file of the snapshot script)")
                continue
            try:
                data = gunzip(base64.b64decode("".join(sec.text.split()), validate=True))
            except ValueError as exc:  # binascii.Error is one
                errors.append(f"{folder}/{sec.phase}: not gzip in base64 ({exc})")
                continue
            (dest / folder).mkdir(parents=True, exist_ok=True)
            (dest / folder / sec.phase).write_bytes(data)
            if folder not in written:
                written.append(folder)
    if not errors and not written:
        errors.append("no snapshot in the results channel")
    return written, errors


def _replaceable(path: Path) -> bool:
    """*path* is missing, or a snapshot an earlier run wrote (folders of the script's files only)."""
    if not path.exists():
        return True
    if not path.is_dir() or path.is_symlink():
        return False
    for child in path.iterdir():
        if not child.is_dir() or child.is_symlink():
            return False
        if any(not f.is_file() or f.name not in SNAPSHOT_FILES for f in child.iterdir()):
            return False
    return True


def _targets(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / name, directory / f"{name}.toml"


def check_destination(directory: str | Path, names: list[str]) -> None:
    """Before a boot: DIR is a directory (or can be one) and nothing but an earlier snapshot would be replaced."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise ConfigError(f"--snapshot {directory}: not a directory", value=str(directory),
                          expected="a directory for one snapshot folder and one imported topology per topology")
    for name in names:
        snap, toml = _targets(d, name)
        if not _replaceable(snap):
            raise ConfigError(f"--snapshot {directory}: {snap} exists and is not a snapshot flowsim wrote",
                              value=str(snap), expected="a new directory, or one of an earlier --snapshot run")
        if toml.exists() and not toml.is_file():
            raise ConfigError(f"--snapshot {directory}: {toml} exists and is not a file", value=str(toml))


def run_snapshots(paths: list[str], directory: str | Path, kernel: str = "debian-6.12", *, install: bool = True,
                  workdir: str | Path | None = None, results: str | None = None) -> SnapshotRun:
    """Boot *kernel* once with *paths*, snapshot each topology in the guest, import it, compare (module docstring).

    *results*: a saved results channel of an earlier ``--snapshot`` boot instead of booting (tests)."""
    if kernel not in KERNELS:
        raise ConfigError(f"unknown kernel {kernel!r}", value=kernel, expected="one of " + ", ".join(KERNELS))
    skipped: list[Skipped] = []
    scenarios = load_scenarios(paths, skipped=skipped, max_packets=None)
    directory = Path(directory)
    check_destination(directory, [plan.name for _, plan in scenarios])
    if len({plan.name for _, plan in scenarios}) != len(scenarios):
        raise ConfigError("two topologies of the same file name: their snapshots would share a folder",
                          value=" ".join(paths), expected="topology files with different names")
    timer = Timer()
    date = datetime.date.today().isoformat()
    trips = [RoundTrip(k.name, k.file, skipped=k.reason) for k in skipped]
    spec = KERNELS[kernel]
    if not scenarios:
        return SnapshotRun(kernel, "(not booted)", "", "", "", date, timer.steps, str(directory), trips)
    if results is not None:
        text = results_text(results)
        package, version, release = SAVED_RESULTS, "", _kernel_release(text)
        profile = spec_profile(spec, release)
    else:
        with timer.step("tools"):
            tools = ensure_tools(install=install)
        with _cache_lock():
            kit = fetch_kernel(spec, timer)
            base = build_base_initramfs(kit, tools, timer)
        profile = kit.profile
        work = Path(workdir) if workdir else cache_dir() / "snapshot-last" / kernel
        shutil.rmtree(work, ignore_errors=True)
        files = render_snapshot_init(scenarios)
        with timer.step("guest"):
            guest = boot_guest(kit, base, files, work, qemu=tools["qemu-system-x86_64"],
                               timeout=90 + 30 * len(scenarios))
        (work / "initrd.img").unlink(missing_ok=True)
        text = guest.results
        package, version, release = kit.package, kit.version, _kernel_release(text) or kit.release
    sections = split_sections(text)
    directory.mkdir(parents=True, exist_ok=True)
    with timer.step("import"):
        for topo, plan in scenarios:
            snap, toml = _targets(directory, plan.name)
            shutil.rmtree(snap, ignore_errors=True)   # checked above: an earlier run's snapshot
            snap.mkdir(parents=True)
            written, errors = collect_snapshot(plan, sections, snap)
            if errors:
                trips.append(RoundTrip(plan.name, topo.file or "", str(snap), None, written, errors=errors))
                continue
            rt = roundtrip(topo.file or "", snap, toml, profile)
            rt.namespaces = written
            trips.append(rt)
    order = {Path(p).stem: i for i, p in enumerate(paths)}
    trips.sort(key=lambda t: order.get(t.name, len(order)))
    return SnapshotRun(kernel, package, version, release, profile, date, timer.steps, str(directory), trips)
