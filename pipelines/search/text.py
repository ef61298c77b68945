"""Full-text search on Spark: ``search_text_partitioned``, the global BM25 top-k.

The driver plans (:func:`partitioning.search.text.plan_text_search`: checks, the query's
tokens, pruning through ``__manifest``, every partition's INVERTED index and tokenizer).
Each partition's postings (its text tokenized by Lance's analyzer with its index's
options) are kept per pinned version in the driver; those not held yet are made in the
driver's threads, or, when they hold more than ``driver_max_rows`` rows in all, by one
Spark job with a task per partition. The driver then scores with the statistics of the
whole table (:func:`partitioning.search.text.search_text`), so the ranking and the
``_score`` are the ones one Lance dataset holding every row gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from partitioning.namespace import PartitionedNamespace
from partitioning.search import text_postings
from partitioning.search.pinned import open_task
from partitioning.search.text import TextPlan, partition_postings, plan_text_search, postings_key, search_text
from pipelines.columns.schema import from_arrow_schema
from pipelines.read_options import session_dialect
from pipelines.search.queries import to_spark_table
from pipelines.session_calls import describe_jobs
from pipelines.shared_roots import driver_root
from pipelines.spark_errors import spark_errors
from pipelines.tasks import run_tasks

__all__ = ["DRIVER_MAX_ROWS", "search_text_partitioned"]

# Tokenizing costs about 2 us a short row in the driver (rows are tokenized in batches);
# past a few million rows a Spark job tokenizing every partition at once is faster.
DRIVER_MAX_ROWS = 4_000_000


def _missing(plan: TextPlan) -> list[int]:
    """The pinned tables whose postings this process does not hold yet (indexes into ``plan.tables``)."""
    out = []
    for i in range(len(plan.tables)):
        key = postings_key(plan, i)
        if key is not None and not text_postings.is_held(key, plan.names[i], plan.options):
            out.append(i)
    return out


def _warm(spark: SparkSession, plan: TextPlan, driver_max_rows: int) -> None:
    """Make the missing postings in one Spark job when they are too many rows for the driver."""
    missing = _missing(plan)
    rows = sum(open_task(plan.tables[i], plan.storage_options).count_rows() for i in missing)
    if len(missing) < 2 or rows <= driver_max_rows:
        return
    label = plan.root.rstrip("/").rsplit("/", 1)[-1]
    what = f"tokenize {len(missing)} partitions"
    with spark_errors(f"{what} {plan.root}"), describe_jobs(spark, f"lance_partitioned: {what} ({label})"):
        made = run_tasks(spark, missing, lambda i: partition_postings(plan, i))
    for i, postings in zip(missing, made, strict=True):
        key = postings_key(plan, i)
        assert key is not None
        text_postings.hold(key, plan.names[i], plan.options, postings)


def search_text_partitioned(
    spark: SparkSession,
    root: str,
    query_text: str,
    *,
    k: int = 10,
    column: str | None = None,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    manifest_version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    driver_max_rows: int = DRIVER_MAX_ROWS,
) -> DataFrame:
    """The ``k`` rows that best match ``query_text`` by BM25: the selected columns plus
    ``_score`` (float), best first, exactly as one Lance dataset with every row of the
    table and the same INVERTED index ranks them (``to_table(full_text_query=...)``).

    ``column=None`` means the one column with an INVERTED index (built with
    ``create_scalar_index(root, column, "INVERTED")``). ``filter`` is Spark SQL in this
    session's dialect: it prunes partitions through ``__manifest`` and is applied before
    the top-k, so the result has ``min(k, matching rows)`` rows; the BM25 statistics stay
    those of the whole table, as with a filtered search of one dataset.
    """
    ns = PartitionedNamespace.load(driver_root(spark, root), storage_options, manifest_version=manifest_version)
    plan = plan_text_search(
        ns, query_text, k=k, column=column, filter=filter, columns=columns, dialect=session_dialect(spark)
    )
    if plan.tokens:
        _warm(spark, plan, driver_max_rows)
    result = to_spark_table(search_text(plan))
    schema = from_arrow_schema(to_spark_table(plan.output_schema.empty_table()).schema)
    if result.num_rows == 0:  # pyspark cannot take an Arrow table without chunks
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(result.combine_chunks(), schema=schema)
