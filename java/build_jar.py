"""Build the JVM layer's jar from java/: ``python java/build_jar.py <out.jar>``.

Compiles ``java/lance_partitioned/*.java`` with ``javac --release 17`` against the Spark jars of
the ``pyspark`` this interpreter imports (or ``$SPARK_HOME/jars``), and packs the classes with
``java/resources`` (the data source registration) and ``lance_partitioned/spark-version`` (the
version of those jars: the layer plans only on that Spark, ``Bridge.compatible``). ``make`` runs
it for a checkout (``build/lance-partitioned-udfs.jar``); ``setup.py`` runs it when a wheel is
built, so the wheel carries the jar (``pipelines/jars/lance-partitioned.jar``). Needs a JDK 17 (``javac``, ``jar``).
Standard library only: it runs in a build environment before the package exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JAVA = Path(__file__).resolve().parent


def spark_jars() -> Path:
    """The Spark jars to compile against."""
    try:
        import pyspark

        jars = Path(pyspark.__file__).resolve().parent / "jars"
    except ImportError:
        home = os.environ.get("SPARK_HOME")
        if not home:
            raise SystemExit("build_jar: needs pyspark (or SPARK_HOME) to compile the JVM layer against") from None
        jars = Path(home) / "jars"
    if not jars.is_dir():
        raise SystemExit(f"build_jar: no Spark jars at {jars}")
    return jars


def spark_version(jars: Path) -> str:
    """The version of the Spark in ``jars`` (from its ``spark-core_<scala>-<version>.jar``)."""
    for jar in sorted(jars.glob("spark-core_*.jar")):
        match = re.fullmatch(r"spark-core_[0-9.]+-(.+)\.jar", jar.name)
        if match:
            return match.group(1)
    raise SystemExit(f"build_jar: no spark-core jar in {jars}")


def tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / name) if home and (Path(home) / "bin" / name).is_file() else shutil.which(name)
    if not found:
        raise SystemExit(f"build_jar: {name} not found; the JVM layer needs a JDK 17 (openjdk-17-jdk-headless)")
    return found


def build(out: Path) -> Path:
    sources = sorted(str(p) for p in (JAVA / "lance_partitioned").glob("*.java"))
    out.parent.mkdir(parents=True, exist_ok=True)
    jars = spark_jars()
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(
            [
                tool("javac"),
                "--release",
                "17",
                "-Xlint:all,-path,-classfile",
                "-Werror",
                "-d",
                classes,
                "-cp",
                f"{jars}/*",
                *sources,
            ],
            check=True,
        )
        (Path(classes) / "lance_partitioned" / "spark-version").write_text(spark_version(jars) + "\n")
        subprocess.run(
            [tool("jar"), "--create", "--file", str(out), "-C", classes, ".", "-C", str(JAVA / "resources"), "."],
            check=True,
        )
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python java/build_jar.py <out.jar>")
    print(build(Path(sys.argv[1])))
