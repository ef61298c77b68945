# A fresh clone needs only `make run` and `make test`; both set up .venv when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPARK_SUBMIT := $(VENV)/bin/spark-submit
# the JVM layer (java/: the reference murmur3 as a Java UDF, the DSv2 provider, catalog and
# row-level operations over the Python engine); pipelines.session adds it to spark.jars, and a
# wheel (`pip wheel .`, `python -m build`) carries its own copy, built by setup.py
JAR := build/lance-partitioned-udfs.jar
# JDK 17 prints this for Spark's --add-modules=jdk.incubator.vector and has no flag to stop it
QUIET_JVM := 2> >(grep -v --line-buffered '^WARNING: Using incubator modules: jdk.incubator.vector$$' >&2)
SUBMIT := SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(PY) PYSPARK_DRIVER_PYTHON=$(CURDIR)/$(PY) $(SPARK_SUBMIT) \
	--master local[2] --properties-file spark-conf/spark-defaults.conf --jars $(JAR)

.PHONY: setup run test test-slow test-matrix lint bench bench-slow docs clean java

setup: $(STAMP) $(JAR)

$(STAMP): setup.cfg pyproject.toml
	@$(MAKE) --no-print-directory java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --config-settings editable_mode=compat -e '.[dev,docs]'
	touch $(STAMP)

java:
	@if ! command -v javac >/dev/null 2>&1; then \
		echo "javac not found: installing openjdk-17-jdk-headless"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; \
	fi
	@java -version 2>&1 | head -1

# java/build_jar.py is also what setup.py runs to put the jar in a wheel (pipelines/jars/)
$(JAR): $(STAMP) $(wildcard java/lance_partitioned/*.java) $(wildcard java/resources/META-INF/services/*) java/build_jar.py
	@command -v javac >/dev/null 2>&1 || $(MAKE) --no-print-directory java
	$(PY) java/build_jar.py $@

run: $(STAMP) $(JAR)
	$(SUBMIT) jobs/demo.py --root warehouse/events $(QUIET_JVM)
	$(SUBMIT) jobs/query.py --root warehouse/events --columns event_id ts country amount --show 5 \
		--filter "country = 'US' AND ts >= TIMESTAMP '2025-12-11T00:00:00Z' AND ts < TIMESTAMP '2025-12-12T00:00:00Z'" \
		$(QUIET_JVM)

test: $(STAMP) $(JAR)
	$(PY) -m pytest -q --durations=15

test-slow: $(STAMP) $(JAR)
	$(PY) -m pytest -q -m slow

# each PySpark minor setup.cfg allows (its newest patch under build/matrix/), classic and Connect,
# with the one jar the wheel carries (also part of test-slow)
test-matrix: $(STAMP) $(JAR)
	$(PY) -m pytest -q -m slow tests/test_spark_versions.py

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check partitioning pipelines jobs tests benchmarks
	$(PY) -m mypy partitioning

bench: $(STAMP) $(JAR)
	$(PY) -m pytest -q -m "bench and not slow" benchmarks -s -p no:cacheprovider

bench-slow: $(STAMP) $(JAR)
	$(PY) -m pytest -q -m "bench and slow" benchmarks -s -p no:cacheprovider

# the documentation site (docs/, mkdocs.yml) into build/site; --strict fails on a broken link or reference
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site

clean:
	rm -rf warehouse build .pytest_cache .mypy_cache .ruff_cache
