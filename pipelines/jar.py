"""Where the JVM layer's jar is, for ``--jars`` / ``spark.jars``: ``python -m pipelines.jar`` prints it.

An installed wheel carries it in the package (``pipelines/jars/lance-partitioned.jar``, built
from java/ when the wheel is built); a checkout has the one ``make`` builds
(``build/lance-partitioned-udfs.jar``). So on any platform::

    spark-submit --jars "$(python -m pipelines.jar)" ...
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

_log = logging.getLogger("lance_partitioned")

__all__ = ["CHECKOUT_JAR", "PACKAGED_JAR", "PROBE_CLASS", "add_to_session", "jar_path", "main", "quiet_task_errors"]

PACKAGED_JAR = Path(__file__).resolve().parent / "jars" / "lance-partitioned.jar"
CHECKOUT_JAR = Path(__file__).resolve().parent.parent / "build" / "lance-partitioned-udfs.jar"


def jar_path() -> Path | None:
    """The jar of the JVM layer: the installed package's, else a checkout's; None when neither is built."""
    for jar in (PACKAGED_JAR, CHECKOUT_JAR):
        if jar.is_file():
            return jar
    return None


PROBE_CLASS = "lance_partitioned.Murmur3"  # a class of the jar, loadable once the jar is in the session
PROBE_FUNCTION = "lance_partitioned_murmur3"  # what pipelines.columns.murmur3 registers it as


def loadable(spark: Any) -> bool:
    """Whether the session loads the jar's classes (registering the Java murmur3 UDF, which
    the string buckets use anyway, unless the session has it already: Spark warns on every
    registration that replaces one)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql.types import IntegerType

    try:
        if spark.catalog.functionExists(PROBE_FUNCTION):
            return True
        spark.udf.registerJavaFunction(PROBE_FUNCTION, PROBE_CLASS, IntegerType())
    except (PySparkException, Py4JError):
        return False
    return True


def add_to_session(spark: Any, jar: Path | None = None) -> bool:
    """Make the JVM layer part of a running session that was started without it (a notebook's
    own ``spark``, a plain ``SparkSession.builder.getOrCreate()``): ``ADD JAR`` the jar
    (default: :func:`jar_path`) when its classes are not loadable yet, and install its log filter
    (:func:`quiet_task_errors`; once per log configuration). Whether they are loadable, after."""
    if not loadable(spark) and not _added(spark, jar if jar is not None else jar_path()):
        return False
    quiet_task_errors(spark)
    return True


def _added(spark: Any, jar: Path | None) -> bool:
    """``ADD JAR`` ``jar`` to the session; whether its classes load then."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    if jar is None or not jar.is_file() or "'" in str(jar):
        return False
    try:
        spark.sql(f"ADD JAR '{jar}'")
    except (PySparkException, Py4JError):
        return False
    return loadable(spark)


def quiet_task_errors(spark: Any) -> None:
    """Install the jar's log filter (:class:`QuietErrors`, what ``spark.plugins`` installs at
    start-up) in a classic driver that was started without the plugin (``spark-submit`` with
    ``--jars`` only, a notebook's session): a project error raised in a task is then one line,
    not also the executor's and scheduler's logs with their stacks. Classic sessions only (the
    callers check): a Spark Connect client reaches no driver."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        # through the session's jar class loader: a jar added by ADD JAR is not on Py4J's own
        gateway = spark.sparkContext._gateway  # classic-only (callers check is_connect)
        loader = spark._jsparkSession.sharedState().jarClassLoader()  # classic-only
        quiet = gateway.jvm.java.lang.Class.forName("lance_partitioned.QuietErrors", True, loader)
        install = quiet.getMethod("install", gateway.new_array(gateway.jvm.java.lang.Class, 0))
        install.invoke(None, gateway.new_array(gateway.jvm.java.lang.Object, 0))
    except (Py4JError, PySparkException, AttributeError, TypeError) as exc:  # no jar, or Connect: no filter
        _log.debug("no QuietErrors filter: %s", exc)


def main(argv: list[str] | None = None) -> int:
    jar = jar_path()
    if jar is None:
        print(
            f"error: the JVM layer's jar is not built: run `make` in a checkout ({CHECKOUT_JAR}), "
            "or install the project's wheel",
            file=sys.stderr,
        )
        return 1
    print(jar)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
