# statekeeper: developer and CI entry points. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# The Quix Streams peer of make bench-throughput, in a venv of its own (its pins differ).
QUIX_VENV := .venv-quix
QUIX_VERSION ?= 3.28.1
# The interpreter the venv is built from; the project supports Python 3.11 only.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# The uv that compiled requirements.lock and requirements-dev.lock (`make lock`).
UV_VERSION ?= 0.13.8
# pyspark and pyspark-client both ship pyspark/; reinstalling pyspark last makes its files win.
PYSPARK_VERSION := $(shell sed -n 's/^pyspark==//p' requirements.lock 2>/dev/null)

# Spark must bind to loopback and run workers with the venv's interpreter.
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)

.PHONY: help venv install browser screenshot test test-unit test-chaos lint demo up down status bench-restore bench-snapshot-restore bench-throughput bench-failover bench-upgrade bench-stores lock clean distclean

help:
	@echo "make venv|install  create .venv and install requirements-dev.lock (runtime + test/dev tools)"
	@echo "                   + statekeeper (editable)"
	@echo "make test          ruff, then the whole pytest suite (tests start their own servers;"
	@echo "                   the kill -9 e2e kills patient_monitoring 2 times at random, the upgrade e2e kills"
	@echo "                   word_count's cut-over once and v2 once, the cluster series kill a worker once"
	@echo "                   and freeze a host once; 3 xdist workers)"
	@echo "make test-unit     the fast tier: pytest tests/unit only (no ruff; 2 xdist workers)"
	@echo "make browser       install Debian chromium + chromium-driver if missing (make test runs it)"
	@echo "make screenshot    the State stores page's browser test, saving docs/img/state_stores.png"
	@echo "make test-chaos    the e2e tests with 20 random kill -9s per app (seeds printed) and the chaos series"
	@echo "                   (10 worker kills and 5 host freezes per app on the 2-worker cluster;"
	@echo "                   the stateless-then-snapshot redeploy series 5 times in a row; both apps' upgrade"
	@echo "                   series with 12 kill -9s over the cut-over and v2; the backfill killed 6 times;"
	@echo "                   a shadow run diffed and cut over; redeploys with upgrade_mode=migrate|backfill)"
	@echo "make lint          ruff only"
	@echo "make demo          patient_monitoring on Spark: kill -9, lost task state, exact recovery;"
	@echo "                   then word_count on a 2-worker cluster: standbys, queries, worker kill -9"
	@echo "make up            the embedded platform on 127.0.0.1 (broker + Airflow, DAGs unpaused,"
	@echo "                   apps launched) under var/platform; prints the UI address, login and"
	@echo "                   each app's condition (exit 3 if an app is FAILED or down)"
	@echo "make down          stop everything make up started (by PID files)"
	@echo "make status        services (pid, port, uptime) and apps (condition, pid, uptime, restarts);"
	@echo "                   exit 3 if a service is down or an app is FAILED or down"
	@echo "make bench-restore run the restore benchmark (prints JSON)"
	@echo "make bench-snapshot-restore  snapshot + 10k tail vs full replay, 5M records/1M keys (JSON)"
	@echo "make bench-throughput  statekeeper vs Spark stateful peers and Quix Streams (its own venv,"
	@echo "                   .venv-quix) on 1M records (JSON, ~12 min)"
	@echo "make bench-failover  kill -9 and a frozen host on a 2-worker cluster, 1M-key store, with vs"
	@echo "                   without a standby; point gets vs processing rate (JSON, ~15 min;"
	@echo "                   ARGS='--scenarios frozen' runs one)"
	@echo "make bench-upgrade  migration (--local, Spark) vs a full restore vs reprocessing, 1M keys;"
	@echo "                   cut-over downtime (stop-then-migrate, blue/green); backfill of 5M"
	@echo "                   records vs raw consume (JSON, also under benchmarks/results/; ~12 min;"
	@echo "                   a smaller one: ARGS='--keys 100000 --backfill-records 200000"
	@echo "                   --cutover-keys 20000')"
	@echo "make bench-stores  the example SQLite store engine beside RocksDB and the in-memory store:"
	@echo "                   puts, gets, scans, restore, reopen, bytes on disk; 200k keys (JSON,"
	@echo "                   ~1.5 min; ARGS='--stack' adds both through build_store's layers)"
	@echo "make lock          recompile requirements.lock (runtime: the image) from requirements.in,"
	@echo "                   then requirements-dev.lock (runtime + dev tools) from requirements-dev.in"
	@echo "make clean         stop the embedded broker and the platform, remove caches and var/"
	@echo "make distclean     clean + remove .venv"

venv install: $(STAMP)

$(UV):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "statekeeper needs Python 3.11, got " + sys.executable + " " + sys.version.split()[0])'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)

# Re-runs only when a lock or the package metadata changes. The dev lock holds the runtime
# lock's pins plus the test, lint and docs tools.
$(STAMP): requirements.lock requirements-dev.lock pyproject.toml | $(UV)
	$(UV) pip install --python $(PY) -r requirements-dev.lock
	$(UV) pip install --python $(PY) --no-deps -e .
	@# Uninstall + install reuses uv's cached pyspark wheel; --reinstall would rebuild the sdist.
	$(UV) pip uninstall --python $(PY) pyspark
	$(UV) pip install --python $(PY) --no-deps pyspark==$(PYSPARK_VERSION)
	$(PY) -c 'import pyspark; from pyspark.sql import SparkSession; print("pyspark", pyspark.__version__, "ok")'
	@# pyspark ships only an sdist, and a fresh venv made uv unpack and build it again each
	@# time (0.5-1.4 GB kept per install, 58 GB after ~70 fresh clones here): drop the old builds.
	$(UV) cache prune
	touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The State stores page's browser test drives Debian's Chromium through chromium-driver
# (selenium, offline: no driver download). CI runs as root on a clean machine.
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver; \
	fi

# Only the browser test, its screenshot kept for the docs (a plain test run writes it to a
# temporary file, leaving the tree clean).
screenshot: $(STAMP) browser
	STATEKEEPER_SCREENSHOT=docs/img/state_stores.png $(VENV)/bin/pytest -q \
		tests/airflow/test_state_stores_page.py -k test_the_page_in_the_airflow_ui

# Three pytest workers on two cores. The suite's JVMs (Spark drivers, executors, the
# cluster's master and workers) live seconds to minutes, so they JIT with C1 only and use the
# serial collector: less of the two cores goes to compiling and GC threads. make test-chaos
# runs them as deployed.
TEST_JVM_OPTS = -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
test: $(STAMP) browser
	$(VENV)/bin/ruff check .
	JAVA_TOOL_OPTIONS="$(TEST_JVM_OPTS)" \
	STATEKEEPER_E2E_KILLS=2 STATEKEEPER_CLUSTER_KILLS=1 STATEKEEPER_CLUSTER_FREEZES=1 STATEKEEPER_UPGRADE_KILLS=2 \
		$(VENV)/bin/pytest -q -n 3 --dist loadgroup -m 'not chaos' --durations=40

# The fast tier: the unit tests only, no ruff, no browser.
test-unit: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup tests/unit

# A failing run prints its seed and kill count: rerun with STATEKEEPER_E2E_SEED=<seed>.
test-chaos: $(STAMP)
	STATEKEEPER_E2E_KILLS=20 STATEKEEPER_CLUSTER_KILLS=10 STATEKEEPER_CLUSTER_FREEZES=5 STATEKEEPER_REDEPLOY_REPEATS=5 STATEKEEPER_UPGRADE_KILLS=12 \
		$(VENV)/bin/pytest -q -m 'e2e or chaos' -rA

demo: $(STAMP)
	$(PY) -m spark_apps.patient_monitoring.demo
	$(PY) -m spark_apps.word_count.cluster_demo

# Ports: AIRFLOW_PORT / BROKER_PORT (default: the last ones used, else 8080 / 9092).
up: $(STAMP)
	$(VENV)/bin/statekeeper platform up $(if $(AIRFLOW_PORT),--airflow-port $(AIRFLOW_PORT)) \
		$(if $(BROKER_PORT),--broker-port $(BROKER_PORT))

down:
	@if [ -x $(VENV)/bin/statekeeper ]; then $(VENV)/bin/statekeeper platform down; fi

status:
	@$(VENV)/bin/statekeeper platform status

bench-restore: $(STAMP)
	$(PY) benchmarks/restore_bench.py

bench-snapshot-restore: $(STAMP)
	@$(PY) benchmarks/snapshot_restore_bench.py

bench-throughput: $(STAMP) $(QUIX_VENV)/.installed
	@$(PY) benchmarks/throughput_bench.py --quix-python $(QUIX_VENV)/bin/python $(ARGS)

$(QUIX_VENV)/.installed: | $(UV)
	test -x $(QUIX_VENV)/bin/python || $(PYTHON) -m venv $(QUIX_VENV)
	$(UV) pip install --python $(QUIX_VENV)/bin/python quixstreams==$(QUIX_VERSION)
	touch $@

bench-failover: $(STAMP)
	@$(PY) benchmarks/failover_bench.py $(ARGS)

bench-upgrade: $(STAMP)
	@$(PY) benchmarks/upgrade_bench.py $(ARGS)

bench-stores: $(STAMP)
	@$(PY) benchmarks/store_engines.py $(ARGS)

# The runtime lock first: requirements-dev.in constrains itself to it (-c requirements.lock).
lock: | $(UV)
	$(UV) pip compile requirements.in --python-version 3.11 --no-header -o requirements.lock
	$(UV) pip compile requirements-dev.in --python-version 3.11 --no-header -o requirements-dev.lock

clean:
	@if [ -x $(VENV)/bin/statekeeper ]; then $(VENV)/bin/statekeeper broker stop || true; fi
	@if [ -x $(VENV)/bin/statekeeper ]; then $(VENV)/bin/statekeeper platform down || true; fi
	rm -rf build .pytest_cache .ruff_cache var spark-warehouse benchmarks/results
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name '*.egg-info' \) \
		-prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(QUIX_VENV)
