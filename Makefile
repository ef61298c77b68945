# A fresh clone needs only `make run` and `make test`; both set up .venv when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPARK_SUBMIT := $(VENV)/bin/spark-submit
# JDK 17 prints this for Spark's --add-modules=jdk.incubator.vector and has no flag to stop it
QUIET_JVM := 2> >(grep -v --line-buffered '^WARNING: Using incubator modules: jdk.incubator.vector$$' >&2)
SUBMIT := SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(PY) PYSPARK_DRIVER_PYTHON=$(CURDIR)/$(PY) $(SPARK_SUBMIT) \
	--master local[2] --properties-file spark-conf/spark-defaults.conf

.PHONY: setup run test test-slow lint bench bench-slow clean java

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@$(MAKE) --no-print-directory java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

java:
	@if ! command -v java >/dev/null 2>&1; then \
		echo "java not found: installing openjdk-17-jre-headless"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
	fi
	@java -version 2>&1 | head -1

run: $(STAMP)
	$(SUBMIT) jobs/demo.py --root warehouse/events $(QUIET_JVM)
	$(SUBMIT) jobs/query.py --root warehouse/events --columns event_id ts country amount --show 5 \
		--filter "country = 'US' AND ts >= TIMESTAMP '2025-12-11T00:00:00Z' AND ts < TIMESTAMP '2025-12-12T00:00:00Z'" \
		$(QUIET_JVM)

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check partitioning pipelines jobs tests benchmarks
	$(PY) -m mypy partitioning

bench: $(STAMP)
	$(PY) -m pytest -q -m "bench and not slow" benchmarks -s -p no:cacheprovider

bench-slow: $(STAMP)
	$(PY) -m pytest -q -m "bench and slow" benchmarks -s -p no:cacheprovider

clean:
	rm -rf warehouse .pytest_cache .mypy_cache .ruff_cache
