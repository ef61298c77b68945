"""What every job shares: bad input and failures end as one ``error:`` line and exit status 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

from pyspark.errors import PySparkException

from partitioning import PartitioningError

EXIT_BAD_INPUT = 2


def run(body: Callable[[], None]) -> int:
    """Run a job body; report a PartitioningError or Spark error as one line, never a trace."""
    try:
        body()
    except PartitioningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PySparkException as exc:  # e.g. an input path that does not exist
        text = str(exc).strip()
        print(f"error: {text.splitlines()[0] if text else type(exc).__name__}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
