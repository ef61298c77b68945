package lance_partitioned;

import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/**
 * A table {@code CREATE TABLE ... AS SELECT}, {@code REPLACE TABLE [AS SELECT]} or {@code
 * writeTo(t).create/replace/createOrReplace()} is making (Spark's {@code StagedTable}, as
 * Iceberg's {@code StagedSparkTable}). Nothing is visible until {@link #commitStagedChanges()}:
 * the rows Spark's tasks write are fragments nobody reads, and the Python writer's commit
 * (pipelines/jvm/stage.py), run here and not when Spark's write job ends, makes the new schema,
 * spec and rows visible at once; {@link #abortStagedChanges()} leaves the table as it was.
 */
final class StagedLanceTable implements StagedTable, SupportsWrite {
  private final String name;
  private final StructType schema;
  private final Transform[] partitions;
  private final Map<String, String> options; // path, storage.<key>, lp.write=stage, lp.stage
  private Staged write; // the write Spark ran into this table, if any

  StagedLanceTable(String name, StructType schema, Transform[] partitions, Map<String, String> options) {
    this.name = name;
    this.schema = schema;
    this.partitions = partitions.clone();
    this.options = Collections.unmodifiableMap(new HashMap<>(options));
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  @Deprecated
  public StructType schema() {
    return schema;
  }

  @Override
  public Transform[] partitioning() {
    return partitions.clone();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.TRUNCATE);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new Builder(info);
  }

  @Override
  public synchronized void commitStagedChanges() {
    Staged staged = write;
    if (staged == null) {
      // REPLACE TABLE / CREATE OR REPLACE TABLE without AS SELECT: the new table, no rows
      staged = new Staged(UUID.randomUUID().toString(), schema, options);
      staged.createBatchWriterFactory(() -> 0);
      staged.commit(new WriterCommitMessage[0]);
    }
    staged.commitStaged();
  }

  @Override
  public synchronized void abortStagedChanges() {
    if (write != null) {
      write.abortStaged();
    }
  }

  private synchronized void ran(Staged staged) {
    write = staged;
  }

  /** Spark writes a staged table as an overwrite of everything ({@code OverwriteByExpression(true)}). */
  private final class Builder implements SupportsTruncate {
    private final LogicalWriteInfo info;

    Builder(LogicalWriteInfo info) {
      this.info = info;
    }

    @Override
    public WriteBuilder truncate() {
      return this;
    }

    @Override
    public Write build() {
      Map<String, String> opts = new HashMap<>(options);
      opts.putAll(info.options().asCaseSensitiveMap());
      opts.putAll(options); // the stage's own keys win over the statement's options
      Staged staged = new Staged(info.queryId(), info.schema(), opts);
      ran(staged);
      return new Write() {
        @Override
        public String description() {
          return "LancePartitionedStagedWrite " + opts.get("path");
        }

        @Override
        public BatchWrite toBatch() {
          return staged;
        }
      };
    }
  }

  /**
   * The Python writer's batch write, whose commit waits for {@link #commitStagedChanges()}:
   * Spark's {@code commit} only keeps the tasks' messages.
   */
  private static final class Staged implements BatchWrite {
    private final String queryId;
    private final StructType schema;
    private final Map<String, String> opts;
    private BatchWrite python;
    private WriterCommitMessage[] messages;

    Staged(String queryId, StructType schema, Map<String, String> opts) {
      this.queryId = queryId;
      this.schema = schema;
      this.opts = opts;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
      python = LanceWriteBuilder.pythonWrite(queryId, schema, opts, false);
      return python.createBatchWriterFactory(physical);
    }

    @Override
    public boolean useCommitCoordinator() {
      return python == null || python.useCommitCoordinator();
    }

    @Override
    public void commit(WriterCommitMessage[] written) {
      messages = written.clone();
    }

    @Override
    public void abort(WriterCommitMessage[] written) {
      messages = written.clone();
    }

    void commitStaged() {
      if (python == null || messages == null) {
        throw new IllegalStateException("lance_partitioned: the staged table was committed before its write ran");
      }
      python.commit(messages);
    }

    void abortStaged() {
      if (python != null) {
        python.abort(messages != null ? messages : new WriterCommitMessage[0]);
      }
    }
  }
}
