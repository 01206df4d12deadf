# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs flowsim into it on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# `make demo` installs flowsim and its run-time dependencies only; `make test` (and the targets that
# need the test tools) the test extra too.  Separate stamps: `make test` after `make demo` adds the extra.
STAMP      := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test lint bench system-deps clean conform mutation

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(TEST_STAMP)

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(STAMP) $(BENCH_STAMP)

# Debian packages some tests drive for real (tcpdump matches the xfrm captures).
system-deps:
	@command -v tcpdump >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >/dev/null; \
	  else echo "tcpdump is missing: install it (apt-get install tcpdump)" >&2; exit 1; fi; }

# The IP6IP6 rx cover-letter setup under the default kernel (7.1.5), then why
# the same tunnel over PPPoE is not accelerated out of the tunnel.
demo: $(STAMP)
	$(BIN)/flowsim run topologies/ip6ip6-rx.toml
	$(BIN)/flowsim explain topologies/ip6ip6-over-pppoe.toml

# Lint, types and the import contracts first (seconds), then the tests.
test: $(TEST_STAMP) system-deps lint
	$(BIN)/python -m pytest -n 2

lint: $(TEST_STAMP)
	$(BIN)/ruff check flowsim tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/lint-imports

# Every benchmark: CPU time, sides interleaved, best of N with the spread, targets first, one JSON line last.
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench_cli.py
	$(BIN)/python benchmarks/bench_split.py
	$(BIN)/python benchmarks/bench_tuple.py
	$(BIN)/python benchmarks/bench_fastpath.py
	$(BIN)/python benchmarks/bench_slowpath.py
	$(BIN)/python benchmarks/bench_ovpn.py
	$(BIN)/python benchmarks/bench_load.py
	$(BIN)/python benchmarks/bench_scale.py

# The real-kernel matrix (qemu, TCG): every shipped topology on Debian's 6.1 and 6.12 and on
# sid's 7.2 and experimental's 7.3, in socat mode (updates docs/conformance.md) and frame by
# frame, then the kernel's own nft_flowtable.sh on 7.2 and 7.3, then the snapshot round trip of every
# conform-* topology on 6.12 (built in the guest, saved by `flowsim snapshot --script`, imported into
# build/conform-snapshots/, run figures compared). Runs every step, fails at the end if one of them did.
CONFORM_KERNELS = --kernel debian-6.1 --kernel debian-6.12 --kernel debian-sid --kernel debian-experimental
conform: $(STAMP)
	@rc=0; \
	$(BIN)/flowsim conform topologies/*.toml $(CONFORM_KERNELS) --problems --update-doc docs/conformance.md || rc=1; \
	$(BIN)/flowsim conform topologies/*.toml $(CONFORM_KERNELS) --frames --problems || rc=1; \
	$(BIN)/flowsim conform --selftest --kernel debian-sid --kernel debian-experimental || rc=1; \
	FLOWSIM_CONFORM_HEAVY=1 $(BIN)/python -m pytest -q -m slow tests/test_conform_ab.py || rc=1; \
	FLOWSIM_CONFORM_HEAVY=1 $(BIN)/python -m pytest -q -m slow tests/test_conform_patch.py -k nft_flow_offload || rc=1; \
	$(BIN)/flowsim conform topologies/conform-*.toml --kernel debian-6.12 --snapshot build/conform-snapshots || rc=1; \
	exit $$rc

# Every switch of every profile flipped in turn; fails if a flip leaves the focused tests green
# (tools/mutation.py; results cached in .mutation/, only survivors re-run).
mutation: $(TEST_STAMP)
	$(BIN)/python tools/mutation.py

clean:
	rm -rf $(VENV) build *.egg-info
