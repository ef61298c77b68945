package lance_partitioned;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/**
 * One planned scan: the Python source's scan (this scan's own instance and plan), described
 * for {@code EXPLAIN} with what was pushed and how many partition tables it reads.
 */
final class LanceScan implements Scan {
  private final Scan inner;
  private final String root;
  private final String summary;
  private final String pushed;
  private final String pruning;
  private final java.util.Map<String, String> options;

  LanceScan(Scan inner, String root, String summary, String pushed, String pruning, java.util.Map<String, String> options) {
    this.options = options;
    this.inner = inner;
    this.root = root;
    this.summary = summary;
    this.pushed = pushed;
    this.pruning = pruning;
  }

  @Override
  public StructType readSchema() {
    return inner.readSchema();
  }

  @Override
  public String description() {
    return describe(root, pushed, pruning, inner.readSchema(), summary);
  }

  static String describe(String root, String pushed, String pruning, StructType read, String summary) {
    return "LancePartitionedScan "
        + root
        + " [PushedPredicates: "
        + pushed
        + ", PruningPredicates: "
        + pruning
        + ", ReadSchema: "
        + read.simpleString()
        + "] "
        + summary;
  }

  @Override
  public Batch toBatch() {
    Bridge.refuseStreamOptions(options);
    return GuardedRead.batch(LanceSqlError.guarded(inner::toBatch)); // the Python reader is made in planInputPartitions
  }

  @Override
  public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return Bridge.stream(options, checkpointLocation);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return inner.supportedCustomMetrics();
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return inner.columnarSupportMode();
  }
}
