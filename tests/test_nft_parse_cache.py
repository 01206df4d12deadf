"""The nft parser's cache file (issue 16): written whole under the key of what the tables depend on, loaded
back only under that key, and any cache that is missing, damaged, another grammar's or unwritable falls back
to computing the tables, silently, with the same parses.
"""

from __future__ import annotations

import tempfile

import lark
import pytest

from flowsim.nft import parse

# newlines inside a set brace are the postlex's work: a loaded parser must keep it
RULESET = """
define ports = { 22,
    80 }
table inet filter {
    flowtable ft { hook ingress priority filter; devices = { eth0,
        eth1 } }
    chain forward { type filter hook forward priority filter; policy accept;
        meta l4proto {
            tcp,
            udp } flow add @ft
        tcp dport $ports counter accept
    }
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache file under a fresh $XDG_CACHE_HOME, with the process's parser forgotten before and after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    parse._parser.cache_clear()
    yield tmp_path / "flowsim" / "nft-lalr.cache"
    parse._parser.cache_clear()


def _fresh_parser() -> lark.Lark:
    parse._parser.cache_clear()
    return parse._parser()


def test_written_whole_and_loaded_back_parsing_alike(cache, monkeypatch):
    computed = repr(parse.parse_ruleset(RULESET))
    key = cache.read_bytes().split(b"\n", 1)[0]
    assert len(key) == 64 and not list(cache.parent.glob(".nft-lalr-*"))  # no temporary file left
    with monkeypatch.context() as m:  # the second parser is loaded, never computed
        m.setattr(lark.Lark, "__init__", lambda *a, **k: pytest.fail("tables computed despite the cache"))
        _fresh_parser()
    assert repr(parse.parse_ruleset(RULESET)) == computed


@pytest.mark.parametrize("damage", [
    lambda data: data[: len(data) // 2],  # a truncated file
    lambda data: data.split(b"\n", 1)[0] + b"\nnot a pickle",  # the right key over garbage
    lambda data: b"0" * 64 + data[64:],  # another grammar's, lark's or Python's tables
    lambda data: b"",
])
def test_a_damaged_or_foreign_cache_is_computed_again_and_replaced(cache, damage):
    expected = repr(parse.parse_ruleset(RULESET))
    good = cache.read_bytes()
    cache.write_bytes(damage(good))
    _fresh_parser()
    assert repr(parse.parse_ruleset(RULESET)) == expected
    assert cache.read_bytes().split(b"\n", 1)[0] == good.split(b"\n", 1)[0]  # rewritten under the right key
    assert parse._load_tables(str(cache), good.split(b"\n", 1)[0].decode()) is not None


def test_an_unusable_cache_directory_still_parses(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # $XDG_CACHE_HOME/flowsim cannot be made
    parse._parser.cache_clear()
    try:
        assert parse._table_cache() is False
        assert parse.parse_ruleset(RULESET).flowtables[0].devices == ("eth0", "eth1")
    finally:
        parse._parser.cache_clear()


def test_a_cache_that_cannot_be_written_changes_nothing(cache, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", no_space)
    assert parse.parse_ruleset(RULESET).flowtables[0].devices == ("eth0", "eth1")
    assert not cache.exists()


def test_a_cache_that_fails_while_written_leaves_no_file(cache, monkeypatch):
    def full(self, f, exclude_options=()):
        f.write(b"part")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lark.Lark, "save", full)
    assert parse.parse_ruleset(RULESET).flowtables[0].devices == ("eth0", "eth1")
    assert list(cache.parent.iterdir()) == []
