# brokerscope: the two commands of a fresh machine are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
LAKE   ?= lake
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test test-tools lint bench fuzz baselines clean java-check bytecode

java-check:
	@command -v java >/dev/null 2>&1 || { echo "brokerscope needs Java 17 or newer for Spark: install it (Debian: apt-get install -y openjdk-17-jre-headless) and retry."; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -n "$$v" ] && [ "$$v" -lt 17 ]; then echo "brokerscope needs Java 17 or newer for Spark; found Java $$v."; exit 1; fi

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e .
	@touch $@

$(TSTAMP): pyproject.toml | $(PY)
	$(PIP) install -q -e ".[test]"
	@touch $@ $(STAMP)

## bytecode: brokerscope's modules compiled to __pycache__ (the editable install leaves them as
## source; where PYTHONDONTWRITEBYTECODE is set every process, each Spark Python worker too,
## compiled them again at its start: 0.17 CPU s each); quick when they are up to date
bytecode: | $(PY)
	@$(PY) -m compileall -q src

## make demo: install, ingest sample_data/ into ./lake, print a summary and an example query
demo: java-check $(STAMP) bytecode
	$(VENV)/bin/brokerscope demo --lake $(LAKE)

## make test: install the test extras and run the whole suite
test: java-check test-tools $(TSTAMP) bytecode
	$(VENV)/bin/pytest -q

## make test-tools: best effort, never fails: the programs some tests drive, Debian's chromium
## (the report in a headless browser) and tshark (a second decoder to compare with), installed
## when missing if we are root with apt-get; without them those tests are skipped, saying why
TEST_TOOLS := chromium tshark
test-tools:
	@missing=""; for t in $(TEST_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "test tools missing:$$missing (install them as root with apt-get); their tests are skipped"; exit 0; fi; \
	echo "installing$$missing for the tests (apt-get, a minute or two)"; \
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections >/dev/null 2>&1; \
	{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } >/dev/null 2>&1 \
	  || echo "could not install$$missing: their tests are skipped"; \
	true

lint: $(TSTAMP)
	$(VENV)/bin/ruff check src tests bench jobs
	$(VENV)/bin/ruff format --check src tests bench jobs

bench: $(STAMP) bytecode
	$(PY) bench/read_bench.py --generate 120

## make fuzz: fuzz every target (tests/fuzz) for FUZZ_SECONDS each; failing inputs are printed
FUZZ_SECONDS ?= 600
fuzz: $(TSTAMP)
	$(PY) -m tests.fuzz.run --target all --seconds $(FUZZ_SECONDS)

## make baselines: rewrite tests/baselines/ from the current decoders; review the diff, then commit
baselines: $(TSTAMP)
	$(VENV)/bin/pytest -q tests/unit/test_baselines.py --update-baselines

clean:
	rm -rf $(LAKE) .pytest_cache build *.egg-info
