package lance_partitioned;

import java.io.IOException;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The Python source's reads with their project errors as one-line {@link LanceSqlError}s at
 * every step Spark takes: planning (the Python reader is made in {@code planInputPartitions})
 * and the tasks (a partition table that cannot be read, raised in the Python worker). Used for
 * reads the Python source plans itself (options {@code filter}, {@code nearest}, ...) and,
 * through {@link #batch}, by {@link LanceScan}.
 */
final class GuardedRead {
  private GuardedRead() {}

  /** The Python source's table, its reads guarded; its writes are the Python writer's own. */
  static Table table(Table python) {
    return new GuardedTable(python);
  }

  static Batch batch(Batch python) {
    return new Batch() {
      @Override
      public InputPartition[] planInputPartitions() {
        return LanceSqlError.guarded(python::planInputPartitions);
      }

      @Override
      public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(LanceSqlError.guarded(python::createReaderFactory));
      }
    };
  }

  private static final class GuardedTable implements Table, SupportsRead, SupportsWrite {
    private final Table python;

    GuardedTable(Table python) {
      this.python = python;
    }

    @Override
    public String name() {
      return python.name();
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return python.schema();
    }

    @Override
    public Transform[] partitioning() {
      return python.partitioning();
    }

    @Override
    public Map<String, String> properties() {
      return python.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return python.capabilities();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new Builder(LanceSqlError.guarded(() -> ((SupportsRead) python).newScanBuilder(options)));
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return ((SupportsWrite) python).newWriteBuilder(info);
    }
  }

  /** Spark's filters go to the Python source as they would without this wrapper. */
  private static final class Builder implements SupportsPushDownFilters {
    private final ScanBuilder python;

    Builder(ScanBuilder python) {
      this.python = python;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      if (python instanceof SupportsPushDownFilters) {
        return LanceSqlError.guarded(() -> ((SupportsPushDownFilters) python).pushFilters(filters));
      }
      return filters;
    }

    @Override
    public Filter[] pushedFilters() {
      return python instanceof SupportsPushDownFilters ? ((SupportsPushDownFilters) python).pushedFilters() : new Filter[0];
    }

    @Override
    public Scan build() {
      return new GuardedScan(LanceSqlError.guarded(python::build));
    }
  }

  private static final class GuardedScan implements Scan {
    private final Scan python;

    GuardedScan(Scan python) {
      this.python = python;
    }

    @Override
    public StructType readSchema() {
      return python.readSchema();
    }

    @Override
    public String description() {
      return python.description();
    }

    @Override
    public Batch toBatch() {
      return batch(LanceSqlError.guarded(python::toBatch));
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return python.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
      return python.reportDriverMetrics();
    }

    @Override
    public ColumnarSupportMode columnarSupportMode() {
      return python.columnarSupportMode();
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpoint) {
      return LanceSqlError.guarded(() -> python.toMicroBatchStream(checkpoint));
    }
  }

  /** The tasks' readers: a project error raised in the Python worker fails the task in one line. */
  private static final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final PartitionReaderFactory python;

    ReaderFactory(PartitionReaderFactory python) {
      this.python = python;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new Reader<>(LanceSqlError.guarded(() -> python.createReader(partition)));
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new Reader<>(LanceSqlError.guarded(() -> python.createColumnarReader(partition)));
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return python.supportColumnarReads(partition);
    }
  }

  private static final class Reader<T> implements PartitionReader<T> {
    private final PartitionReader<T> python;

    Reader(PartitionReader<T> python) {
      this.python = python;
    }

    @Override
    public boolean next() throws IOException {
      try {
        return python.next();
      } catch (IOException | RuntimeException e) {
        throw LanceSqlError.of(e);
      }
    }

    @Override
    public T get() {
      return LanceSqlError.guarded(python::get);
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return python.currentMetricsValues();
    }

    @Override
    public void close() throws IOException {
      python.close();
    }
  }
}
