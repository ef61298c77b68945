package lance_partitioned;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.write.BatchWrite;
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
 * the rows; with a condition on identity partition columns: the partitions it selects) and
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

  @Override
  public boolean canOverwrite(Predicate[] predicates) {
    if (table.described == null) {
      return false;
    }
    for (Predicate p : predicates) {
      if (!Predicates.exact(p, table.described.identity)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public WriteBuilder overwrite(Predicate[] predicates) {
    mode = "replace";
    condition = predicates;
    return this;
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
      opts.put("lp.exact", Predicates.toJson(condition).toString());
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
    return builder.build().toBatch();
  }

  /** A commit of the Python writer with no rows and no Spark job: a metadata-only delete. */
  static void commitWithoutRows(LanceTable table, Map<String, String> opts) {
    Map<String, String> o = new HashMap<>(opts);
    o.put("path", table.root);
    o.put("lp.write", "delete_tables");
    o.put("lp.version", Long.toString(table.require().version));
    BatchWrite write = pythonWrite(UUID.randomUUID().toString(), table.schema, o, false);
    write.createBatchWriterFactory(() -> 0);
    write.commit(new WriterCommitMessage[0]);
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
