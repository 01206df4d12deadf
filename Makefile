# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates .venv and installs flowsim into it on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian packages some tests drive for real (tcpdump matches the xfrm captures).
system-deps:
	@command -v tcpdump >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >/dev/null; \
	  else echo "tcpdump is missing: install it (apt-get install tcpdump)" >&2; exit 1; fi; }

demo: $(STAMP)
	$(BIN)/flowsim tuple tests/data/corpus/suricata-verify/bug-4571-03__ipv6_over_ipv6.pcap
	$(BIN)/flowsim tuple tests/data/corpus/suricata-verify/bug-4571-01__ipv4_over_ipv4.pcap

test: $(STAMP) system-deps
	$(BIN)/python -m pytest -n 2

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_tuple.py

clean:
	rm -rf $(VENV) build *.egg-info
