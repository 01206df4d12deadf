"""flowsim conform's guest script passes names and values as data: an injection attempt runs nothing.

The rendered ``scenario_N`` function runs here under ``sh`` in a temporary
directory, with the guest's ``ip`` replaced by a fake that logs its argv
(records end in RS, arguments in US: names may hold newlines) (and runs the sysctl writer against a temporary file instead of /proc) and
the harness helpers of ``init.sh`` stubbed.  A namespace name or a sysctl
value carrying ``;``, ``$(…)`` or a redirection must reach ``ip`` as one
argument and create no file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.conform.guest import IP, plan_scenario, render_init, render_scenario

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
UDP_IDLE = (TOPOLOGIES / "conform-udp-idle.toml").read_text()

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")

# ip netns exec NS sh -c SCRIPT sh VALUE PATH: run the writer on a file of the test, never /proc
FAKE_IP = """#!/bin/sh
for a in "$@"; do printf '%s\\037' "$a"; done >> "$LOG"
printf '\\036' >> "$LOG"
if [ "$1 $2 $4 $5" = "netns exec sh -c" ]; then
  sh -c "$6" "$7" "$8" "$OUT/$(printf %s "$9" | tr / _)"
fi
"""

# The helpers of flowsim/conform/data/init.sh the scenario calls, reduced to nothing or a log line.
PRELUDE = """
begin() { :; }; note() { :; }; warm_neigh() { :; }; pin_neigh() { :; }; wait_listen() { :; }; wait_bytes() { :; }
wait_gone() { :; }; files() { :; }; sleep() { :; }; touch() { :; }
harness_settings() { printf 'harness %s\\036' "$1" >> "$LOG"; }
snapshot() { shift 2; for ns in "$@"; do printf 'snapshot %s\\036' "$ns" >> "$LOG"; done; }
NS() { printf 'NS %s\\036' "$1" >> "$LOG"; }
run() { shift; "$@"; }
"""

ATTACKS = [
    # (what, namespace name, ip_forward value)
    ("a ';' in the namespace name", "r;echo>INJECTED", "1"),
    ("a command substitution in the namespace name", "r$(echo>INJECTED)", "1"),
    ("backquotes and a newline in the namespace name", "r`echo>INJECTED`\necho>INJECTED", "1"),
    ("a ';' in a sysctl value", "r", "1;echo>INJECTED"),
    ("a command substitution in a sysctl value", "r", "$(echo>INJECTED)"),
    ("quotes in both", "r'\"$(echo>INJECTED)", "1'\";echo>INJECTED"),
]


#: a sysctl flowsim keeps as text (it reads no number from it), so that any value reaches the guest's script
TEXT_SYSCTL = "net.core.somaxconn"


def attacked(name: str, value: str):
    """The scenario with *name* for r and *value* for :data:`TEXT_SYSCTL`.  (The sysctls flowsim reads, such as
    ``net.ipv4.ip_forward``, refuse such a value at load: tests/test_sysctls.py.)"""
    text = UDP_IDLE.replace("[netns.r]", f"[netns.{toml_string(name)}]").replace(
        '"net.ipv4.ip_forward" = 1', f'"net.ipv4.ip_forward" = 1, "{TEXT_SYSCTL}" = {toml_string(value)}')
    return load_topology_text(text, "attack.toml")


def toml_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def run_scenario(script: str, tmp: Path) -> tuple[list[list[str]], list[str]]:
    """Run *script* (a rendered scenario function) with the fakes; (ip argvs, helper log lines)."""
    fake = tmp / "bin" / "ip"
    fake.parent.mkdir()
    fake.write_text(FAKE_IP)
    fake.chmod(0o755)
    (tmp / "out").mkdir()
    work = tmp / "work"
    work.mkdir()
    script = script.replace("/tmp/", f"{work}/").replace(IP + " ", f"{fake} ")
    (tmp / "s.sh").write_text(PRELUDE + script + "\nscenario_0\n")
    env = dict(os.environ, LOG=str(tmp / "log"), OUT=str(tmp / "out"))
    subprocess.run(["sh", str(tmp / "s.sh")], cwd=work, env=env, check=True, timeout=30,
                   capture_output=True)
    lines = (tmp / "log").read_text().split("\036")
    argvs = [line.split("\037")[:-1] for line in lines if "\037" in line]
    return argvs, [line for line in lines if line and "\037" not in line]


@pytest.mark.parametrize("what,name,value", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_injection_attempts_run_nothing(tmp_path, what, name, value):
    """Names and sysctl values reach ip and the sysctl file verbatim; the injected command never runs."""
    topo = attacked(name, value)
    argvs, helpers = run_scenario(render_scenario(topo, plan_scenario(topo)), tmp_path)
    assert not list((tmp_path / "work").glob("INJECTED*")) and not list(tmp_path.glob("INJECTED*"))
    assert ["netns", "add", name] in argvs
    assert ["-n", name, "link", "set", "lo", "up"] in argvs
    assert f"harness {name}" in helpers and f"NS {name}" in helpers and f"snapshot {name}" in helpers
    assert (tmp_path / "out" / "_proc_sys_net_core_somaxconn").read_text() == value + "\n"


def test_the_harness_would_see_an_injection(tmp_path):
    """Control: the same harness catches a name written into the script unquoted."""
    script = "scenario_0() {\n  run - " + IP + " netns add r;echo>INJECTED\n}\n"
    run_scenario(script, tmp_path)
    assert (tmp_path / "work" / "INJECTED").exists()


@pytest.mark.parametrize("what,name,value", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_whole_init_parses(tmp_path, what, name, value):
    """sh -n accepts the whole rendered /init, whatever the names carry."""
    topo = attacked(name, value)
    init = render_init([(topo, plan_scenario(topo))])["init"]
    (tmp_path / "init").write_bytes(init)
    subprocess.run(["sh", "-n", str(tmp_path / "init")], check=True, timeout=30)
