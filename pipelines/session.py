"""The one way this project builds a SparkSession, and the few session calls that differ
between classic Spark and Spark Connect.

:func:`build_session` fills in ``spark-conf/spark-defaults.conf`` only where the user set
nothing: a value from ``spark-submit --conf`` or ``--properties-file``, from
``PYSPARK_SUBMIT_ARGS`` or ``$SPARK_CONF_DIR/spark-defaults.conf``, ``PYSPARK_PYTHON``, or an
existing session always wins. ``SPARK_REMOTE`` (``local[2]`` or ``sc://host``) makes it a
Spark Connect session. Jobs run under ``spark-submit`` (which supplies the master); tests
pass ``master="local[2]"``.

Spark Connect has no driver-side context object: library code calls :func:`describe_jobs`,
:func:`default_parallelism` and :func:`register_once`, whose classic-only branches are the
only places that touch it.

A relative root only means one place when the executors share the driver's working
directory (``local``, ``local-cluster``); with any other master :func:`driver_root` refuses it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import sys
import urllib.parse
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.utils import is_remote

from partitioning.errors import InvalidInput
from partitioning.storage.roots import is_uri, resolve_root

__all__ = [
    "active_session",
    "active_session_kept",
    "build_session",
    "check_root_for_master",
    "check_source_root",
    "conf_to_apply",
    "default_parallelism",
    "describe_jobs",
    "driver_root",
    "is_connect",
    "is_relative_path",
    "read_spark_defaults",
    "register_bound",
    "register_once",
    "session_bound",
    "session_conf",
    "session_master",
    "user_conf",
]

CONF_DIR = Path(__file__).resolve().parent.parent / "spark-conf"
DEFAULTS_FILE = CONF_DIR / "spark-defaults.conf"
# Built by `make` from java/: the reference murmur3 as a Java UDF (pipelines.columns.murmur3).
UDF_JAR = Path(__file__).resolve().parent.parent / "build" / "lance-partitioned-udfs.jar"
QUIET_ERRORS_PLUGIN = "lance_partitioned.QuietErrors"
QUIET_DAEMON = "lance_partitioned_daemon"
# A conf key and the environment variable that sets the same interpreter.
_PYTHON_KEYS = {"spark.pyspark.python": "PYSPARK_PYTHON", "spark.pyspark.driver.python": "PYSPARK_DRIVER_PYTHON"}
_SUBMIT_FLAGS = {
    "--driver-memory": "spark.driver.memory",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--master": "spark.master",
    "--name": "spark.app.name",
}
_MARKER = "spark.lance_partitioned.dataSource."
_S = TypeVar("_S", bound=type)
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
    """spark-defaults.conf with the interpreter and log4j paths made absolute, and the UDF
    jar where `make` built it. Installed from a wheel (EMR, Databricks) there is no
    ``spark-conf/`` and no jar: only the interpreter is set."""
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
        if not (remote and launched):
            # A local Connect server reads them from the JVM started here; given to the Connect
            # builder as well, each setting it cannot change at runtime would be one warning.
            for key, value in options.items():
                builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if not is_connect(spark) and not _own_log_config(user):
        spark.sparkContext.setLogLevel("WARN")  # classic-only (guarded by is_connect)
    return spark


def _tag(description: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:/-]+", "_", description).strip("_")


@contextmanager
def describe_jobs(spark: SparkSession, description: str) -> Iterator[None]:
    """Label the Spark jobs started inside: a job tag on both kinds of session (made of
    ``description``), and on classic Spark also the UI's job description."""
    tag = _tag(description)
    spark.addTag(tag)
    sc = None if is_connect(spark) else spark.sparkContext  # classic-only (guarded by is_connect)
    previous = sc.getLocalProperty("spark.job.description") if sc is not None else None
    if sc is not None:
        sc.setJobDescription(description)
    try:
        yield
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]
        spark.removeTag(tag)


def default_parallelism(spark: SparkSession) -> int | None:
    """The cluster's task slots: ``defaultParallelism`` on classic Spark; on Connect
    ``spark.default.parallelism`` or what a ``local``/``local-cluster`` master says (None if unknown)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)  # classic-only (guarded by is_connect)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    master = str(spark.conf.get("spark.master", "") or "")
    cluster = re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master)
    if cluster:
        return int(cluster.group(1)) * int(cluster.group(2))
    local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master)
    if local:
        threads = local.group(1) or "1"
        return os.cpu_count() or 1 if threads == "*" else int(threads)
    return None


def register_once(spark: SparkSession, source: type) -> None:
    """``spark.dataSource.register(source)`` unless this session already has it (Spark
    warns on every re-registration). The marker is a session conf, so a new session
    registers again and a cloned one does not."""
    key = _MARKER + source.name()  # type: ignore[attr-defined]
    value = f"{source.__module__}.{source.__qualname__}"
    if spark.conf.get(key, None) == value:
        return
    if is_connect(spark):
        spark.dataSource.register(source)
    else:
        _register_classic(spark, source)
    spark.conf.set(key, value)


def _register_classic(spark: SparkSession, source: type) -> None:
    """Register ``source`` with ``spark`` as the JVM's active session (classic only).

    Spark 4.3 checks a new name against the data sources the *active* session has
    (``DataSourceRegistration.checkDataSourceExists``), so a second session
    (``spark.newSession()``) could not register a format its parent already has:
    DATA_SOURCE_ALREADY_EXISTS. Made active, it is checked against its own.
    """
    with active_session_kept(spark):
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[attr-defined]  # classic-only (guarded by is_connect)
        spark.dataSource.register(source)


@contextmanager
def active_session_kept(spark: SparkSession) -> Iterator[None]:
    """Whatever runs inside leaves the active session (the JVM's and PySpark's) as it was:
    ``spark.createDataFrame`` makes ``spark`` active, which a library call must not do to
    its caller (``build_session`` and ``getActiveSession`` would return another session)."""
    if is_connect(spark):
        yield
        return
    jvm_session = spark._jvm.org.apache.spark.sql.SparkSession  # type: ignore[attr-defined]  # classic-only (guarded by is_connect)
    previous, python_active = jvm_session.getActiveSession(), SparkSession._activeSession
    try:
        yield
    finally:
        SparkSession._activeSession = python_active
        if previous.isDefined():
            jvm_session.setActiveSession(previous.get())
        else:
            jvm_session.clearActiveSession()


# Masters whose executors run on this machine, in processes that see the driver's file system.
_SAME_MACHINE_MASTER = re.compile(r"local(\[[^\]]*\])?|local-cluster\[[^\]]*\]")


def session_master(spark: SparkSession) -> str | None:
    """The session's master (``spark.master``), on classic Spark and Spark Connect; None if not known."""
    value = spark.conf.get("spark.master", None)
    return str(value) if value else None


def is_relative_path(root: str) -> bool:
    """Whether ``root`` is a local path relative to a working directory (not a URI, not absolute, not ``~``)."""
    if not isinstance(root, str) or is_uri(root):
        return False
    path = urllib.parse.unquote(urllib.parse.urlsplit(root).path) if root.startswith("file:") else root
    return not os.path.isabs(os.path.expanduser(path))


def check_root_for_master(root: str, master: str | None) -> None:
    """Refuse a relative ``root`` when ``master``'s executors cannot see the driver's file system.

    ``local`` and ``local-cluster`` executors run on the driver's machine, where the
    absolute path the driver makes of ``root`` names the same place; on any other cluster
    manager (``yarn``, ``spark://``, ``k8s://``, ...) it names a directory of the driver's
    machine that the executors do not have. An unknown master (None) is not refused.
    """
    if master is None or not is_relative_path(root) or _SAME_MACHINE_MASTER.fullmatch(master.strip()):
        return
    raise InvalidInput(
        f"relative root {root!r} cannot be used with master {master!r}, whose executors do not see this "
        "machine's files; use a shared URI (s3://, gs://, az://) or an absolute path that every "
        "executor mounts"
    )


def check_source_root(root: str, master: str | None, connect: bool) -> None:
    """:func:`check_root_for_master`, and on Spark Connect refuse any relative ``root``: a
    data source resolves its path on the server, in a per-session directory the client
    never sees (only :func:`driver_root`, called on the client, can resolve it there)."""
    if connect and is_relative_path(root):
        raise InvalidInput(
            f"relative path {root!r} cannot be used with a data source on Spark Connect: the server would "
            "resolve it in its own session directory, not the client's; pass an absolute path or URI, or use "
            "read_partitioned/write_partitioned, which resolve it on the client"
        )
    check_root_for_master(root, master)


@functools.cache
def session_bound(source: type[_S], master: str | None, connect: bool = False) -> type[_S]:
    """``source`` knowing the session's master and whether the session is Spark Connect.
    A data source runs in Spark's planner worker, which cannot ask the session; this
    subclass (pickled by value when registered, as it is not importable by name) carries
    both there as ``session_master`` and ``session_connect``."""
    attrs = {
        "__module__": source.__module__,
        "__qualname__": source.__qualname__,
        "session_master": master,
        "session_connect": connect,
    }
    return type(source.__name__, (source,), attrs)


def register_bound(spark: SparkSession, source: type) -> None:
    """:func:`register_once` of ``source`` bound to ``spark`` (:func:`session_bound`)."""
    register_once(spark, session_bound(source, session_master(spark), is_connect(spark)))


def driver_root(spark: SparkSession, root: str) -> str:
    """``root`` as tasks receive it (:func:`partitioning.storage.roots.resolve_root`), after
    :func:`check_root_for_master` with the session's master."""
    check_root_for_master(root, session_master(spark))
    return resolve_root(root)
