package lance_partitioned;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsDynamicOverwrite;
import org.apache.spark.sql.connector.write.SupportsOverwriteV2;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;

/**
 * {@code INSERT INTO}, {@code INSERT OVERWRITE} (static: every partition; dynamic: those in
 * the rows; with a condition on identity partition columns: the partitions it selects; with
 * any other condition, {@code writeTo(t).overwrite(c)}: the rows it selects) and
 * DataFrame writes, all by the Python writer (pipelines/jvm/write.py), which the layer
 * builds only when Spark asks for the writer factory, from this write's own options.
 */
final class LanceWriteBuilder implements SupportsTruncate, SupportsOverwriteV2, SupportsDynamicOverwrite {
  private final LanceTable table;
  private final LogicalWriteInfo info;
  private String mode = "append";
  private Predicate[] condition;

  LanceWriteBuilder(LanceTable table, LogicalWriteInfo info) {
    this.table = table;
    this.info = info;
  }

  @Override
  public WriteBuilder truncate() {
    mode = "overwrite";
    return this;
  }

  /** Any condition: on identity partition columns it selects whole tables, on any other column rows. */
  @Override
  public boolean canOverwrite(Predicate[] predicates) {
    return table.described != null;
  }

  @Override
  public WriteBuilder overwrite(Predicate[] predicates) {
    mode = "replace";
    condition = predicates;
    return this;
  }

  /** Whether the overwrite's condition selects whole partition tables (identity partition columns only). */
  private boolean selectsTables() {
    for (Predicate p : condition) {
      if (!Predicates.exact(p, table.described.identity)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public WriteBuilder overwriteDynamicPartitions() {
    mode = "dynamic";
    return this;
  }

  @Override
  public Write build() {
    Map<String, String> opts = new HashMap<>(table.options);
    opts.putAll(info.options().asCaseSensitiveMap());
    opts.put("path", table.root);
    opts.put("lp.write", mode);
    if (condition != null) {
      opts.put(selectsTables() ? "lp.exact" : "lp.where", Predicates.toJson(condition).toString());
    }
    StructType schema = info.schema();
    String queryId = info.queryId();
    boolean overwrite = !mode.equals("append");
    return new Write() {
      @Override
      public String description() {
        return "LancePartitionedWrite(" + mode + ") " + table.root;
      }

      @Override
      public BatchWrite toBatch() {
        return new Deferred(queryId, schema, opts, overwrite);
      }

      @Override
      public StreamingWrite toStreaming() {
        Map<String, String> plain = Bridge.plain(opts);
        Table python = Bridge.source().getTable(schema, new Transform[0], plain);
        WriteBuilder builder = ((SupportsWrite) python).newWriteBuilder(new WriteInfo(queryId, schema, plain));
        if (overwrite) {
          builder = ((SupportsTruncate) builder).truncate(); // refused by the Python stream writer, in one line
        }
        return builder.build().toStreaming();
      }
    };
  }

  /** The Python source's batch write for these options, built now. */
  static BatchWrite pythonWrite(String queryId, StructType schema, Map<String, String> opts, boolean overwrite) {
    Table python = Bridge.source().getTable(schema, new Transform[0], opts);
    WriteBuilder builder = ((SupportsWrite) python).newWriteBuilder(new WriteInfo(queryId, schema, opts));
    if (overwrite) {
      builder = ((SupportsTruncate) builder).truncate();
    }
    WriteBuilder built = builder;
    return guarded(LanceSqlError.guarded(() -> built.build().toBatch()));
  }

  /** A commit of the Python writer with no rows and no Spark job: a metadata-only delete. */
  static void commitWithoutRows(LanceTable table, Map<String, String> opts) {
    Map<String, String> o = new HashMap<>(opts);
    o.put("path", table.root);
    o.put("lp.write", "delete_tables");
    o.put("lp.version", Long.toString(table.require().version));
    BatchWrite write = pythonWrite(UUID.randomUUID().toString(), table.schema, o, false);
    write.createBatchWriterFactory(() -> 0);
    write.commit(new WriterCommitMessage[0]); // guarded: one line
  }

  /**
   * A write under a write id committed before commits nothing (Delta's {@code txnAppId} rule,
   * whatever its rows): said in one INFO line naming the id and the version that committed it.
   */
  static void noteReusedWriteId(Map<String, String> opts) {
    String writeId = null;
    for (Map.Entry<String, String> e : opts.entrySet()) {
      if (e.getKey().equalsIgnoreCase("write_id")) {
        writeId = e.getValue();
      }
    }
    if (writeId == null || !opts.containsKey("path")) {
      return;
    }
    Map<String, Object> args = new HashMap<>();
    args.put("root", opts.get("path"));
    args.put("write_id", writeId);
    com.fasterxml.jackson.databind.JsonNode answer = Bridge.call("write_id_version", args, Bridge.storageOptions(opts));
    if (answer.path("committed").asBoolean(false)) {
      long version = answer.path("version").asLong(-1);
      Bridge.LOG.info(
          "write_id '{}' was committed {}; this write to {} commits nothing (rows under a committed id are dropped)",
          writeId,
          version >= 0 ? "at __manifest v" + version : "in an earlier __manifest version",
          opts.get("path"));
    }
  }

  /** A Python batch write whose driver-side failures (commit, abort) are one-line {@link LanceSqlError}s. */
  static BatchWrite guarded(BatchWrite python) {
    return new BatchWrite() {
      @Override
      public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
        return new GuardedFactory(LanceSqlError.guarded(() -> python.createBatchWriterFactory(physical)));
      }

      @Override
      public boolean useCommitCoordinator() {
        return python.useCommitCoordinator();
      }

      @Override
      public void commit(WriterCommitMessage[] messages) {
        LanceSqlError.guarded(() -> python.commit(messages));
      }

      @Override
      public void abort(WriterCommitMessage[] messages) {
        LanceSqlError.guarded(() -> python.abort(messages));
      }
    };
  }

  /**
   * The Python writer's tasks, whose project errors (a value the write refuses, raised in the
   * Python worker) fail the task as one-line {@link LanceSqlError}s, which Spark's job failure
   * then carries to the statement.
   */
  static final class GuardedFactory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final DataWriterFactory python;

    GuardedFactory(DataWriterFactory python) {
      this.python = python;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      DataWriter<InternalRow> writer = python.createWriter(partitionId, taskId);
      return new DataWriter<InternalRow>() {
        @Override
        public void write(InternalRow row) throws IOException {
          try {
            writer.write(row);
          } catch (IOException | RuntimeException e) {
            throw LanceSqlError.of(e);
          }
        }

        @Override
        public void write(InternalRow metadata, InternalRow row) throws IOException {
          try {
            writer.write(metadata, row);
          } catch (IOException | RuntimeException e) {
            throw LanceSqlError.of(e);
          }
        }

        @Override
        public void writeAll(java.util.Iterator<InternalRow> records) throws IOException {
          try {
            writer.writeAll(records); // the Python writer's own (its rows arrive whole, not one by one)
          } catch (IOException | RuntimeException e) {
            throw LanceSqlError.of(e);
          }
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
          try {
            return writer.commit();
          } catch (IOException | RuntimeException e) {
            throw LanceSqlError.of(e);
          }
        }

        @Override
        public void abort() throws IOException {
          writer.abort();
        }

        @Override
        public void close() throws IOException {
          writer.close();
        }

        @Override
        public org.apache.spark.sql.connector.metric.CustomTaskMetric[] currentMetricsValues() {
          return writer.currentMetricsValues();
        }
      };
    }
  }

  /** The Python write, built when Spark asks for the writer factory (then with its options). */
  static final class Deferred implements BatchWrite {
    private final String queryId;
    private final StructType schema;
    private final Map<String, String> opts;
    private final boolean overwrite;
    private BatchWrite python;

    Deferred(String queryId, StructType schema, Map<String, String> opts, boolean overwrite) {
      this.queryId = queryId;
      this.schema = schema;
      this.opts = opts;
      this.overwrite = overwrite;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
      python = pythonWrite(queryId, schema, opts, overwrite);
      return python.createBatchWriterFactory(physical);
    }

    @Override
    public boolean useCommitCoordinator() {
      return python == null || python.useCommitCoordinator();
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      noteReusedWriteId(opts);
      python.commit(messages);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      if (python != null) {
        python.abort(messages);
      }
    }
  }
}
