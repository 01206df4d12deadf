"""The nft parser's LALR tables cached in the user's cache directory (issue 16: start-up of every run).

The tables computed from the grammar and the tables loaded from the cache parse alike; the cache is used
only from a directory private to the user.
"""

from __future__ import annotations

import os
import subprocess
import sys

from flowsim.nft import parse

RULESET = """
table inet filter {
    flowtable ft { hook ingress priority filter; devices = { eth0, eth1 } }
    chain forward { type filter hook forward priority filter; policy accept;
        meta l4proto { tcp, udp } flow add @ft
    }
}
"""

_SCRIPT = ("import sys; from flowsim.nft.parse import parse_ruleset; "
           "print(repr(parse_ruleset(sys.stdin.read())))")


def _parse_in_a_new_process(cache_home) -> str:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    return subprocess.run([sys.executable, "-c", _SCRIPT], input=RULESET, env=env, capture_output=True,
                          text=True, check=True).stdout


def test_tables_from_the_cache_parse_as_the_computed_ones(tmp_path):
    first = _parse_in_a_new_process(tmp_path)  # computes the tables, writes the cache
    cache = tmp_path / "flowsim" / "nft-lalr.cache"
    assert cache.is_file() and cache.stat().st_size > 0
    assert _parse_in_a_new_process(tmp_path) == first  # loads them


def test_a_cache_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    where = tmp_path / "flowsim"
    where.mkdir()
    where.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parse._table_cache() is False
    where.chmod(0o755)
    assert parse._table_cache() == str(where / "nft-lalr.cache")
