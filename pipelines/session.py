"""The one way this project builds a SparkSession, and the confs it gives a new one.

:func:`build_session` fills in ``spark-conf/spark-defaults.conf`` only where the user set
nothing: a value from ``spark-submit --conf`` or ``--properties-file``, from
``PYSPARK_SUBMIT_ARGS`` or ``$SPARK_CONF_DIR/spark-defaults.conf``, ``PYSPARK_PYTHON``, or an
existing session always wins. ``SPARK_REMOTE`` (``local[2]`` or ``sc://host``) makes it a
Spark Connect session (:func:`is_connect`). Jobs run under ``spark-submit`` (which supplies
the master); tests pass ``master="local[2]"``.

What library code asks of a session it was given (job labels, task slots, data source
registration), alike on both kinds of session, is :mod:`pipelines.session_calls`; whether a
relative root can be used with the session's master is :mod:`pipelines.shared_roots`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sys
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from pipelines.jar import CHECKOUT_JAR, add_to_session, jar_path
from pipelines.spark_errors import quiet_query_context_logs

__all__ = [
    "active_session",
    "build_session",
    "conf_to_apply",
    "is_connect",
    "read_spark_defaults",
    "session_conf",
    "user_conf",
]

# spark-conf/ of a checkout, or the copy an installed wheel carries (setup.py)
_PACKAGED_CONF = Path(__file__).resolve().parent / "spark_conf"
CONF_DIR = _PACKAGED_CONF if _PACKAGED_CONF.is_dir() else Path(__file__).resolve().parent.parent / "spark-conf"
DEFAULTS_FILE = CONF_DIR / "spark-defaults.conf"
# The JVM layer (pipelines.jar): the DSv2 provider, the catalog, the Java murmur3, QuietErrors.
UDF_JAR = jar_path() or CHECKOUT_JAR
QUIET_ERRORS_PLUGIN = "lance_partitioned.QuietErrors"
SESSION_EXTENSIONS = "lance_partitioned.LanceSessionExtensions"  # SQL UPDATE through update_rows' engine
QUIET_DAEMON = "lance_partitioned_daemon"
# A conf key and the environment variable that sets the same interpreter.
_PYTHON_KEYS = {"spark.pyspark.python": "PYSPARK_PYTHON", "spark.pyspark.driver.python": "PYSPARK_DRIVER_PYTHON"}
_SUBMIT_FLAGS = {
    "--driver-memory": "spark.driver.memory",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--master": "spark.master",
    "--name": "spark.app.name",
}
# The JVM prints this for the --add-modules=jdk.incubator.vector that Spark's launcher always
# passes; no JVM flag turns it off (JDK 17 ModuleBootstrap.checkIncubatingStatus), so the
# stderr of a JVM this process starts goes through this filter.
_STDERR_FILTER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
inp, out = sys.stdin.buffer, sys.stderr.buffer
for _ in range(16):
    line = inp.readline()
    if not line:
        sys.exit(0)
    if line.startswith(b"WARNING: Using incubator modules:"):
        break
    out.write(line)
    out.flush()
while chunk := inp.read1(65536):
    out.write(chunk)
    out.flush()
"""


def read_spark_defaults(path: Path = DEFAULTS_FILE) -> dict[str, str]:
    """Parse a Spark properties file (``key value``, ``key=value`` or ``key: value``; ``#``/``!`` comments)."""
    conf: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^\s=:]+)\s*[=:]?\s*(.*)$", line)
        if match:
            conf[match.group(1)] = match.group(2).strip()
    return conf


def _jar_has(jar: Path, class_name: str) -> bool:
    """Whether ``jar`` holds ``class_name`` (a jar built before the class was added does not)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            return class_name.replace(".", "/") + ".class" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def session_conf(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """spark-defaults.conf with the interpreter and log4j paths made absolute, and the JVM
    layer's jar (:mod:`pipelines.jar`: the installed wheel's, or the one `make` built in a
    checkout); an installed wheel carries its own copy of ``spark-conf/``."""
    conf = read_spark_defaults() if DEFAULTS_FILE.is_file() else {}
    conf["spark.pyspark.python"] = sys.executable
    conf["spark.pyspark.driver.python"] = sys.executable
    if importlib.util.find_spec(QUIET_DAEMON) is not None:
        # .show(n) / LIMIT end workers early: no BrokenPipeError tracebacks for that
        conf["spark.python.daemon.module"] = QUIET_DAEMON
    if (CONF_DIR / "log4j2.properties").is_file():
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={CONF_DIR / 'log4j2.properties'}"
    if UDF_JAR.is_file():
        conf["spark.jars"] = str(UDF_JAR)
        if _jar_has(UDF_JAR, QUIET_ERRORS_PLUGIN):
            # a project error raised in a task is one line from the driver, not executor stacks too
            conf["spark.plugins"] = QUIET_ERRORS_PLUGIN
        if _jar_has(UDF_JAR, SESSION_EXTENSIONS):
            conf["spark.sql.extensions"] = SESSION_EXTENSIONS
    conf.update(extra or {})
    return conf


def conf_to_apply(
    user: Mapping[str, str], env: Mapping[str, str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This project's defaults for every key the user did not set, then ``extra`` (the caller's own choice).

    ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` in ``env`` count as setting the
    interpreter: Spark prefers the conf keys, so setting them would override the user.
    """
    conf = {k: v for k, v in session_conf().items() if k not in user}
    for key, var in _PYTHON_KEYS.items():
        if env.get(var):
            conf.pop(key, None)
    conf.update(extra or {})
    return conf


def _submit_args_conf(text: str) -> dict[str, str]:
    """The settings in ``PYSPARK_SUBMIT_ARGS`` (``--conf k=v``, ``--properties-file f``, ``--driver-memory m``...)."""
    args = shlex.split(text)
    files: dict[str, str] = {}
    conf: dict[str, str] = {}
    for i, arg in enumerate(args):
        flag, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        value = inline or (args[i + 1] if i + 1 < len(args) else "")
        if flag in ("--conf", "-c"):
            key, sep, val = value.partition("=")
            if sep:
                conf[key] = val
        elif flag == "--properties-file" and Path(value).is_file():
            files.update(read_spark_defaults(Path(value)))
        elif flag in _SUBMIT_FLAGS:
            conf[_SUBMIT_FLAGS[flag]] = value
    return {**files, **conf}


def _default_properties() -> dict[str, str]:
    """``spark-defaults.conf`` in ``$SPARK_CONF_DIR`` (or Spark's ``conf/``), which spark-submit reads by itself."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        from pyspark.find_spark_home import _find_spark_home

        conf_dir = os.path.join(_find_spark_home(), "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    return read_spark_defaults(path) if path.is_file() else {}


def user_conf() -> dict[str, str]:
    """What the user configured for the session about to be built, before this project adds anything.

    Under ``spark-submit`` (its JVM is already running) that is the JVM's ``spark.*``
    properties: ``--conf``, ``--properties-file`` and Spark's defaults file. Otherwise it is
    what the JVM this process starts will read by itself: the defaults file and
    ``PYSPARK_SUBMIT_ARGS``.
    """
    from pyspark import SparkConf, SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        return dict(sc.getConf().getAll())
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        SparkContext._ensure_initialized()
        return dict(SparkConf().getAll())
    return {**_default_properties(), **_submit_args_conf(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))}


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (it has no driver-side context object)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def active_session() -> SparkSession | None:
    """The session this process already runs (classic or Connect), if any; never starts one."""
    if is_remote():
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        remote = RemoteSparkSession.getActiveSession() or RemoteSparkSession._get_default_session()
        return remote  # type: ignore[return-value]
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None:
        return None
    session = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if session is None or session._sc._jsc is None:  # classic-only (Connect returned above)
        return None
    return session


def _quiet_stderr() -> int | None:
    """The write end of a pipe into the incubator-warning filter (a process of its own that
    copies everything else to this process's stderr and ends when the JVM does)."""
    if not hasattr(os, "posix_spawn"):
        return None
    read_end, write_end = os.pipe()
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _STDERR_FILTER],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0)],
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return write_end


def _launch_jvm(options: Mapping[str, str]) -> bool:
    """Start the driver JVM with ``options`` (as PySpark would), its stderr without the
    incubator-module warning; False if a JVM is already there (spark-submit's, or an earlier one)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    sink = _quiet_stderr()
    remote = os.environ.pop("SPARK_REMOTE", None)  # a local Connect server runs on a classic JVM
    try:
        conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
        gateway = launch_gateway(conf, popen_kwargs=None if sink is None else {"stderr": sink})
    finally:
        if remote is not None:
            os.environ["SPARK_REMOTE"] = remote
        if sink is not None:
            os.close(sink)
    SparkContext._ensure_initialized(gateway=gateway)
    return True


def _jar_given(user: Mapping[str, str]) -> bool:
    """Whether the user put the project's jar on ``spark.jars`` (``--jars``), so the driver JVM
    spark-submit started has its classes."""
    return any(Path(j).name == UDF_JAR.name for j in user.get("spark.jars", "").split(",") if j)


def _own_log_config(user: Mapping[str, str]) -> bool:
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    return "log4j" in user.get("spark.driver.extraJavaOptions", "") or bool(
        conf_dir and (Path(conf_dir) / "log4j2.properties").is_file()
    )


def build_session(
    app_name: str, *, master: str | None = None, extra_conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The session for a job or test run: an existing one as it is, else a new one.

    A new session gets ``spark-conf/spark-defaults.conf`` for every key the user did not
    set (:func:`user_conf`), and ``extra_conf`` on top. ``master`` is only for callers
    outside ``spark-submit`` (tests, benchmarks); under ``spark-submit`` it comes from the
    command line. With ``SPARK_REMOTE=sc://...`` the Connect server's settings are left
    alone; ``SPARK_REMOTE=local[N]`` starts a local Connect server configured as above.
    """
    quiet_query_context_logs()
    existing = active_session()
    if existing is not None:
        for key, value in (extra_conf or {}).items():
            existing.conf.set(key, value)
        return existing
    remote = os.environ.get("SPARK_REMOTE", "")
    if remote.startswith("sc://"):
        builder = SparkSession.builder
        for key, value in (extra_conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    user = user_conf()
    options = conf_to_apply(user, os.environ, extra_conf)
    for key, var in _PYTHON_KEYS.items():
        if not os.environ.get(var):
            os.environ[var] = user.get(key) or sys.executable
    if "spark.app.name" not in user:
        options.setdefault("spark.app.name", app_name)
    if master is not None and not remote:  # SPARK_REMOTE=local[N] names the master itself
        options["spark.master"] = master
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    with warnings.catch_warnings():
        # Launching the JVM forks and immediately execs; pylance's fork warning does not apply.
        warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
        launched = _launch_jvm(options)
        if not launched and options.get("spark.plugins") == QUIET_ERRORS_PLUGIN and not _jar_given(user):
            options.pop("spark.plugins")  # spark-submit without --jars: the driver cannot load it
        if not launched and options.get("spark.sql.extensions") == SESSION_EXTENSIONS and not _jar_given(user):
            options.pop("spark.sql.extensions")
        if not (remote and launched):
            # A local Connect server reads them from the JVM started here; given to the Connect
            # builder as well, each setting it cannot change at runtime would be one warning.
            for key, value in options.items():
                builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if not is_connect(spark) and not _own_log_config(user):
        spark.sparkContext.setLogLevel("WARN")  # classic-only (guarded by is_connect)
    if not is_connect(spark) and options.get("spark.plugins") != QUIET_ERRORS_PLUGIN:
        # spark-submit started the driver without the plugin: the jar (spark.jars set now reaches
        # only the executors; the driver's classes come from ADD JAR) and its log filter, now
        add_to_session(spark)
    return spark
