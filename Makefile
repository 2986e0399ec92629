# raftq — the one entry point for humans and CI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard proto/*.proto)

.PHONY: venv tools test test-slow bench lint proto run clean chaos fuzz

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,console]'
	touch $(STAMP)

venv: $(STAMP)

## Programs the tests run for real: Prometheus and promtool (Debian's prometheus package), and
## headless Chromium with its WebDriver for the console's test (chromium, chromium-driver).
tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && apt-get install -y -q --no-install-recommends prometheus; \
	  else \
	    echo "tests need Prometheus: sudo apt-get install prometheus"; exit 1; \
	  fi; }
	@test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && apt-get install -y -q --no-install-recommends chromium chromium-driver; \
	  else \
	    echo "tests need Chromium: sudo apt-get install chromium chromium-driver"; exit 1; \
	  fi; }

## Regenerate protobuf/gRPC code from proto/*.proto (committed; a test fails when stale).
proto: $(STAMP)
	$(PY) scripts/gen_proto.py

# Spark tests run in a pytest process of their own: py4j's callback server uses select(),
# which fails once a long-lived process holds more than 1024 file descriptors.
SPARK_TESTS := tests/process/test_spark.py

# The slowest tests are listed at the end of each run (--durations), to keep make test in budget.
test: $(STAMP) tools
	$(PY) -m pytest -q -m "not slow" --ignore=$(SPARK_TESTS) --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -q -m "not slow" $(SPARK_TESTS) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow --ignore=$(SPARK_TESTS) --durations=10 $(PYTEST_ARGS)
	$(PY) -m pytest -q -m slow $(SPARK_TESTS) $(PYTEST_ARGS)

## Chaos: 3 brokers under load with seeded faults, then the offline checker (tests/chaos/).
## RAFTQ_SEED=<seed> replays a fault schedule; CHAOS_ARGS="--root DIR" keeps the run directory.
DURATION ?= 600
chaos: $(STAMP)
	$(PY) -m tests.chaos run --duration $(DURATION) $(CHAOS_ARGS)

## Fuzz every RPC of proto/api.proto against 3 brokers (tests/rpc_fuzz.py); RAFTQ_SEED replays.
FUZZ_REQUESTS ?= 10000
fuzz: $(STAMP)
	$(PY) -m tests.rpc_fuzz --requests $(FUZZ_REQUESTS) $(FUZZ_ARGS)

## Benchmarks; bench vs_nats also needs Debian's nats-server and nats-py (the bench extra).
bench: $(STAMP)
	@command -v nats-server >/dev/null || [ "$$(id -u)" != 0 ] || \
	  { apt-get update -q && apt-get install -y -q --no-install-recommends nats-server; }
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench $(BENCH_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) scripts/typecheck_tree.py >/dev/null  # mypy sees broker/ as the raftq package
	MYPYPATH=.typecheck $(PY) -m mypy .typecheck/raftq bench tests scripts

run: $(STAMP)
	$(PY) -m raftq.cli dev up --brokers 3 --demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache data
