"""The wheel carries the JVM layer: ``build_py`` builds the jar from java/ (java/build_jar.py) into
``pipelines/jars/`` and copies spark-conf/ into ``pipelines/spark_conf/``. The metadata is in setup.cfg."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithJar(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # a checkout: `make` builds build/lance-partitioned-udfs.jar, spark-conf/ is beside the code
        package = Path(self.build_lib) / "pipelines"
        spec = importlib.util.spec_from_file_location("build_jar", HERE / "java" / "build_jar.py")
        assert spec is not None and spec.loader is not None
        build_jar = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build_jar)
        build_jar.build(package / "jars" / "lance-partitioned.jar")
        conf = package / "spark_conf"
        conf.mkdir(parents=True, exist_ok=True)
        for name in ("spark-defaults.conf", "log4j2.properties", "log4j2-cli.properties"):
            shutil.copy2(HERE / "spark-conf" / name, conf / name)


setup(cmdclass={"build_py": BuildWithJar})
