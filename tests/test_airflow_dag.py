"""examples/airflow_dag.py: ingest -> compact -> vacuum with SparkSubmitOperator.

Airflow is not a dependency of this project (apache-airflow 3 with the Spark provider is
about 660 MB and needs pandas 3), so the DAG is read with ``ast``: its configuration
statements (everything but the airflow imports and the ``with DAG(...)`` block) are
executed as they are, and each operator's keyword arguments are evaluated in that scope.
What is checked is what would break a run: task ids and order, application paths that
exist, arguments each job's own ``parse_args`` accepts and that mean what they should.
"""

from __future__ import annotations

import ast
import datetime as dt
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jobs import compact, ingest, vacuum
from partitioning import PartitionedNamespace, parse_partition_by
from partitioning.spec.partition_by import time_hierarchy_gaps
from partitioning.spec.schema import NamespaceSchema
from partitioning.sql.filters import Dialect, columns_of, is_exactly_understood

REPO = Path(__file__).resolve().parents[1]
DAG_FILE = REPO / "examples" / "airflow_dag.py"
PARSERS = {"ingest": ingest.parse_args, "compact": compact.parse_args, "vacuum": vacuum.parse_args}
# SparkSubmitOperator's keyword parameters (apache-airflow-providers-apache-spark 6.3.4), and
# the BaseOperator ones the DAG uses.
OPERATOR_PARAMS = {
    "application", "conf", "conn_id", "files", "py_files", "archives", "driver_class_path", "jars", "java_class",
    "packages", "exclude_packages", "repositories", "total_executor_cores", "executor_cores", "executor_memory",
    "driver_memory", "keytab", "principal", "proxy_user", "name", "num_executors", "status_poll_interval",
    "application_args", "env_vars", "verbose", "spark_binary", "properties_file", "yarn_queue", "deploy_mode",
    "use_krb5ccache", "post_submit_commands", "track_driver_via_k8s_api", "yarn_track_via_rm_api", "yarn_rm_auth",
    "task_id", "retries", "retry_delay",
}  # fmt: skip
EVENTS = pa.schema(
    [
        ("event_id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("country", pa.string()),
        ("user_id", pa.int64()),
        ("amount", pa.decimal128(10, 2)),
    ]
)


@dataclass(frozen=True)
class Task:
    variable: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Dag:
    config: dict[str, Any]
    dag_kwargs: dict[str, Any]
    tasks: list[Task]
    edges: list[tuple[str, str]]


def _is_airflow_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "airflow"
    if isinstance(node, ast.Import):
        return all(alias.name.split(".")[0] == "airflow" for alias in node.names)
    if isinstance(node, ast.Try):
        return all(_is_airflow_import(n) for n in node.body) and all(
            _is_airflow_import(n) for h in node.handlers for n in h.body
        )
    return False


def _call_kwargs(call: ast.Call, scope: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kw in call.keywords:
        value = eval(compile(ast.Expression(kw.value), str(DAG_FILE), "eval"), scope)
        if kw.arg is None:
            out.update(value)
        else:
            out[kw.arg] = value
    assert not call.args, "operators take keyword arguments only"
    return out


def _chain(node: ast.expr) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.RShift):
        return _chain(node.left) + _chain(node.right)
    assert isinstance(node, ast.Name), ast.dump(node)
    return [node.id]


def load_dag() -> Dag:
    tree = ast.parse(DAG_FILE.read_text())
    withs = [n for n in tree.body if isinstance(n, ast.With)]
    assert len(withs) == 1
    config_nodes = [n for n in tree.body if not _is_airflow_import(n) and not isinstance(n, ast.With)]
    scope: dict[str, Any] = {"__file__": str(DAG_FILE), "__name__": "airflow_dag"}
    exec(compile(ast.Module(body=config_nodes, type_ignores=[]), str(DAG_FILE), "exec"), scope)
    (item,) = withs[0].items
    dag_call = item.context_expr
    assert isinstance(dag_call, ast.Call) and isinstance(dag_call.func, ast.Name) and dag_call.func.id == "DAG"
    tasks, edges = [], []
    for stmt in withs[0].body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            assert isinstance(func, ast.Name) and func.id == "SparkSubmitOperator", ast.dump(func)
            (target,) = stmt.targets
            assert isinstance(target, ast.Name)
            tasks.append(Task(target.id, _call_kwargs(stmt.value, scope)))
        elif isinstance(stmt, ast.Expr):
            names = _chain(stmt.value)
            edges.extend(itertools.pairwise(names))
        else:
            raise AssertionError(f"unexpected statement in the DAG block: {ast.dump(stmt)[:200]}")
    return Dag(scope, _call_kwargs(dag_call, scope), tasks, edges)


def render(value: str, ds: str = "2025-12-10") -> str:
    """Airflow's rendering of the one template the DAG uses."""
    return value.replace("{{ ds }}", ds)


def test_three_tasks_in_order() -> None:
    dag = load_dag()
    assert (
        [t.variable for t in dag.tasks] == [t.kwargs["task_id"] for t in dag.tasks] == ["ingest", "compact", "vacuum"]
    )
    assert dag.edges == [("ingest", "compact"), ("compact", "vacuum")]
    assert dag.dag_kwargs["dag_id"] == "lance_partitioned_events"
    assert dag.dag_kwargs["schedule"] == "@daily"
    assert dag.dag_kwargs["catchup"] is False
    assert dag.dag_kwargs["max_active_runs"] == 1  # two runs would compact and vacuum under each other
    assert dag.dag_kwargs["start_date"] == dt.datetime(2025, 12, 1)


def test_every_operator_argument_is_a_spark_submit_parameter() -> None:
    for task in load_dag().tasks:
        assert set(task.kwargs) <= OPERATOR_PARAMS, set(task.kwargs) - OPERATOR_PARAMS


def test_the_applications_are_the_repositorys_jobs() -> None:
    for task in load_dag().tasks:
        application = Path(task.kwargs["application"])
        assert application == REPO / "jobs" / f"{task.kwargs['task_id']}.py"
        assert application.is_file()


def test_the_python_of_the_archive_is_used_on_every_node() -> None:
    for task in load_dag().tasks:
        archive, _, alias = task.kwargs["archives"].partition("#")
        assert archive.endswith(".tar.gz") and alias == "environment"
        conf = task.kwargs["conf"]
        assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == f"./{alias}/bin/python"
        assert task.kwargs["deploy_mode"] == "cluster"


def test_the_arguments_parse_with_each_jobs_own_parser(tmp_path: Path) -> None:
    dag = load_dag()
    parsed = {
        t.kwargs["task_id"]: PARSERS[t.kwargs["task_id"]]([render(a) for a in t.kwargs["application_args"]])
        for t in dag.tasks
    }
    root = dag.config["ROOT"]
    assert {args.root for args in parsed.values()} == {root}
    assert root.startswith("s3://")  # executors on other hosts need a shared root

    args = parsed["ingest"]
    assert (args.format, args.mode, args.write_id) == ("parquet", "append", "ingest-2025-12-10")
    assert args.input == ["s3://my-bucket/landing/events/2025-12-10/"]
    spec = parse_partition_by(args.partition_by, NamespaceSchema.from_arrow(EVENTS))
    assert time_hierarchy_gaps(spec.fields, NamespaceSchema.from_arrow(EVENTS)) == []

    ns = PartitionedNamespace.create(str(tmp_path / "events"), EVENTS, args.partition_by)
    plan = ns.plan_scan(parsed["compact"].filter, dialect=Dialect())  # Spark SQL, as the compact job reads it
    assert is_exactly_understood(plan.filter) and columns_of(plan.filter) == {"ts"}

    args = parsed["vacuum"]
    assert args.retain_hours >= 24 and not args.allow_short_retention and not args.dry_run


def test_the_environment_configures_the_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANCE_PARTITIONED_ROOT", "s3://other/warehouse/orders")
    monkeypatch.setenv("LANCE_PARTITIONED_JOBS", "/opt/lance/jobs")
    dag = load_dag()
    for task in dag.tasks:
        assert task.kwargs["application"] == f"/opt/lance/jobs/{task.kwargs['task_id']}.py"
        assert PARSERS[task.kwargs["task_id"]](task.kwargs["application_args"]).root == "s3://other/warehouse/orders"
