"""A Structured Streaming query in a process of its own, to be killed with SIGKILL (issue 36).

``python tests/stream_worker.py INPUT ROOT CHECKPOINT`` streams the parquet files of INPUT
(``id long, country string, amount double``; two files a batch) into the namespace ROOT,
partitioned by ``country``, with ``trigger(availableNow=True)``, and prints ``done`` when
every file is in. Restarted with the same CHECKPOINT it goes on from there.

Every process it starts carries ``LP_STREAM_TOKEN`` in its environment, so a test can kill
all of them at once (:func:`kill_all`): the driver, its JVM and Spark's Python workers,
whatever process group they put themselves in. With ``LP_STREAM_KILL=before|after`` and
``LP_STREAM_KILL_BATCH=k`` (and ``PYTHONPATH`` holding the directory :func:`write_hook`
wrote), the process that makes batch k's ``__manifest`` commit kills them all right before
or right after it, once (``LP_STREAM_KILL_MARKER`` records that it did).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

TOKEN = "LP_STREAM_TOKEN"
SCHEMA = "id long, country string, amount double"

HOOK = """
import os
if os.environ.get("LP_STREAM_KILL"):
    import sys
    sys.path[:0] = [{repo!r}, {repo!r} + "/tests"]
    from partitioning.namespace import PartitionedNamespace
    from stream_worker import kill_all

    _real = PartitionedNamespace.commit_once

    def commit_once(self, *args, **kwargs):
        point = os.environ["LP_STREAM_KILL"]
        marker = os.environ["LP_STREAM_KILL_MARKER"]
        write_id = kwargs.get("write_id") or ""
        due = write_id.endswith("-" + os.environ["LP_STREAM_KILL_BATCH"]) and not os.path.exists(marker)
        if due and point == "before":
            open(marker, "w").close()
            kill_all(os.environ["LP_STREAM_TOKEN"])
        out = _real(self, *args, **kwargs)
        if due and point == "after":
            open(marker, "w").close()
            kill_all(os.environ["LP_STREAM_TOKEN"])
        return out

    PartitionedNamespace.commit_once = commit_once
"""


def write_hook(directory: Path) -> Path:
    """A ``sitecustomize.py`` in ``directory`` that installs the kill hook in every Python
    process started with ``LP_STREAM_KILL`` set (put ``directory`` on ``PYTHONPATH``)."""
    directory.mkdir(parents=True, exist_ok=True)
    repo = str(Path(__file__).resolve().parents[1])
    (directory / "sitecustomize.py").write_text(HOOK.format(repo=repo))
    return directory


def carriers(token: str) -> list[int]:
    """Every process whose environment holds ``LP_STREAM_TOKEN=token``."""
    needle = f"{TOKEN}={token}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def kill_all(token: str) -> None:
    """SIGKILL every process of the stream, this one last."""
    me = os.getpid()
    for pid in carriers(token):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if me in carriers(token):
        os.kill(me, signal.SIGKILL)


def main(argv: list[str]) -> int:
    source, root, checkpoint = argv[:3]
    from pipelines import build_session, register_data_source

    spark = build_session("stream worker", master="local[2]")
    register_data_source(spark)
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 2)
        .parquet(source)
        .writeStream.format("lance_partitioned")
        .option("checkpointLocation", checkpoint)
        .option("partition_by", "country")
        .option("auto_compact_after", "4")
        .trigger(availableNow=True)
        .start(root)
    )
    print("ready", flush=True)
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
