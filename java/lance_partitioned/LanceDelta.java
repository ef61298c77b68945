package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.DeltaBatchWrite;
import org.apache.spark.sql.connector.write.DeltaWrite;
import org.apache.spark.sql.connector.write.DeltaWriteBuilder;
import org.apache.spark.sql.connector.write.DeltaWriter;
import org.apache.spark.sql.connector.write.DeltaWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperation;
import org.apache.spark.sql.connector.write.SupportsDelta;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code DELETE FROM}, {@code UPDATE} and {@code MERGE INTO} as Spark's delta writes: the
 * row id is {@code _lance_rowaddr}, the metadata {@code _lance_table}. Spark reads the target
 * through this operation's scan (which records the tables and versions it read), computes
 * the changes, and hands each task's rows to the bridge writer, which passes them, tagged
 * with their operation, to the Python writer (pipelines/jvm/write.py): new rows become
 * fragments, rows that go become deletion vectors, and the driver makes ONE
 * {@code __manifest} commit, refused if a table the statement read changed since.
 */
final class LanceDelta {
  private LanceDelta() {}

  static final class Operation implements SupportsDelta {
    private final LanceTable table;
    private final Command command;
    private final Map<String, String> options;
    private volatile String read = "{}";
    private volatile long version;
    private volatile String condition = "[]";

    Operation(LanceTable table, Command command, Map<String, String> options) {
      this.table = table;
      this.command = command;
      this.options = options;
      this.version = table.require().version;
    }

    void scanned(JsonNode readTables, long scannedVersion, Predicate[] exact, Predicate[] residual) {
      read = readTables == null ? "{}" : readTables.toString();
      version = scannedVersion;
      Predicate[] all = new Predicate[exact.length + residual.length];
      System.arraycopy(exact, 0, all, 0, exact.length);
      System.arraycopy(residual, 0, all, exact.length, residual.length);
      condition = Predicates.toJson(all).toString();
    }

    @Override
    public Command command() {
      return command;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap extra) {
      Map<String, String> opts = new HashMap<>(options);
      opts.putAll(extra.asCaseSensitiveMap());
      return new LanceScanBuilder(table, opts, this);
    }

    @Override
    public NamedReference[] rowId() {
      return new NamedReference[] {Expressions.column(LanceTable.ROW_ADDRESS)};
    }

    @Override
    public NamedReference[] requiredMetadataAttributes() {
      return new NamedReference[] {Expressions.column(LanceTable.ROW_TABLE)};
    }

    @Override
    public boolean representUpdateAsDeleteAndInsert() {
      return false;
    }

    @Override
    public DeltaWriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      StructType data = info.schema();
      StructType rowId = info.rowIdSchema().orElse(new StructType());
      StructType meta = info.metadataSchema().orElse(new StructType());
      String queryId = info.queryId();
      return new DeltaWriteBuilder() {
        @Override
        public DeltaWrite build() {
          return new DeltaWrite() {
            @Override
            public String description() {
              return "LancePartitionedDelta(" + command + ") " + table.root;
            }

            @Override
            public DeltaBatchWrite toBatch() {
              return new Batch(Operation.this, queryId, data, rowId, meta);
            }
          };
        }
      };
    }

    Map<String, String> writeOptions() {
      Map<String, String> opts = new HashMap<>(options);
      opts.put("path", table.root);
      opts.put("lp.write", "delta");
      opts.put("lp.command", command.name());
      opts.put("lp.version", Long.toString(version));
      opts.put("lp.read", read);
      opts.put("lp.filter", condition);
      return opts;
    }
  }

  /** The delta write: the Python write over the bridge rows, built when Spark asks for the factory. */
  static final class Batch implements DeltaBatchWrite {
    private final Operation operation;
    private final String queryId;
    private final StructType data;
    private final StructType rowId;
    private final StructType meta;
    private BatchWrite python;
    private boolean aborted;

    Batch(Operation operation, String queryId, StructType data, StructType rowId, StructType meta) {
      this.operation = operation;
      this.queryId = queryId;
      this.data = data;
      this.rowId = rowId;
      this.meta = meta;
    }

    @Override
    public DeltaWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
      StructType bridged = bridgeSchema(rowId, meta, data);
      python = LanceWriteBuilder.pythonWrite(queryId, bridged, operation.writeOptions(), false);
      return new BridgeFactory(python.createBatchWriterFactory(physical), rowId, meta, data);
    }

    /**
     * The one commit; when another writer changed rows the statement read, its rows are
     * dropped and the statement runs again ({@link Rerun}), unless this is such a run.
     */
    @Override
    public void commit(WriterCommitMessage[] messages) {
      try {
        python.commit(messages);
      } catch (RuntimeException failure) {
        Rerun.Statement statement = Rerun.conflict(failure) && !Rerun.inside() ? Rerun.statement() : null;
        if (statement == null) {
          throw failure;
        }
        abort(messages);
        statement.runAgain(operation.command.name(), operation.table.root, LanceSqlError.of(failure));
      }
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      if (python != null && !aborted) {
        aborted = true;
        python.abort(messages);
      }
    }
  }

  /** The columns the Python writer gets: the operation, the row id, the metadata, the new row. */
  static StructType bridgeSchema(StructType rowId, StructType meta, StructType data) {
    List<StructField> fields = new ArrayList<>();
    fields.add(new StructField("__op", DataTypes.StringType, false, org.apache.spark.sql.types.Metadata.empty()));
    for (StructType part : new StructType[] {rowId, meta}) {
      for (StructField f : part.fields()) {
        fields.add(f.copy(f.name(), f.dataType(), true, f.metadata()));
      }
    }
    for (StructField f : data.fields()) {
      if (!f.name().equals(LanceTable.ROW_ADDRESS) && !f.name().equals(LanceTable.ROW_TABLE)) {
        fields.add(f.copy(f.name(), f.dataType(), true, f.metadata()));
      }
    }
    return new StructType(fields.toArray(new StructField[0]));
  }

  /** Executor side: Spark's per-row calls as one tagged row stream for the Python writer. */
  static final class BridgeFactory implements DeltaWriterFactory {
    private static final long serialVersionUID = 1L;
    private final DataWriterFactory python;
    private final StructType rowId;
    private final StructType meta;
    private final StructType data;

    BridgeFactory(DataWriterFactory python, StructType rowId, StructType meta, StructType data) {
      this.python = python;
      this.rowId = rowId;
      this.meta = meta;
      this.data = data;
    }

    @Override
    public DeltaWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new BridgeWriter(python.createWriter(partitionId, taskId), rowId, meta, data);
    }
  }

  static final class BridgeWriter implements DeltaWriter<InternalRow> {
    private final DataWriter<InternalRow> python;
    private final StructType rowId;
    private final StructType meta;
    private final StructType data;
    private final int dataWidth;
    private final List<InternalRow> rows = new ArrayList<>();

    BridgeWriter(DataWriter<InternalRow> python, StructType rowId, StructType meta, StructType data) {
      this.python = python;
      this.rowId = rowId;
      this.meta = meta;
      this.data = data;
      int width = 0;
      for (StructField f : data.fields()) {
        if (!f.name().equals(LanceTable.ROW_ADDRESS) && !f.name().equals(LanceTable.ROW_TABLE)) {
          width++;
        }
      }
      this.dataWidth = width;
    }

    private void add(String op, InternalRow id, InternalRow metadata, InternalRow row) {
      Object[] values = new Object[1 + rowId.size() + meta.size() + dataWidth];
      values[0] = UTF8String.fromString(op);
      int at = copy(values, 1, id, rowId);
      at = copy(values, at, metadata, meta);
      if (row != null) {
        for (int i = 0; i < data.size(); i++) {
          String name = data.fields()[i].name();
          if (name.equals(LanceTable.ROW_ADDRESS) || name.equals(LanceTable.ROW_TABLE)) {
            continue;
          }
          values[at++] = row.isNullAt(i) ? null : copyValue(row.get(i, data.fields()[i].dataType()));
        }
      }
      rows.add(new GenericInternalRow(values));
    }

    private static int copy(Object[] values, int at, InternalRow r, StructType s) {
      for (int i = 0; i < s.size(); i++) {
        values[at + i] = r == null || r.isNullAt(i) ? null : copyValue(r.get(i, s.fields()[i].dataType()));
      }
      return at + s.size();
    }

    private static Object copyValue(Object v) {
      if (v instanceof UTF8String) {
        return ((UTF8String) v).clone();
      }
      if (v instanceof InternalRow) {
        return ((InternalRow) v).copy();
      }
      if (v instanceof org.apache.spark.sql.catalyst.util.ArrayData) {
        return ((org.apache.spark.sql.catalyst.util.ArrayData) v).copy();
      }
      if (v instanceof org.apache.spark.sql.catalyst.util.MapData) {
        return ((org.apache.spark.sql.catalyst.util.MapData) v).copy();
      }
      if (v instanceof byte[]) {
        return ((byte[]) v).clone();
      }
      return v;
    }

    @Override
    public void delete(InternalRow metadata, InternalRow id) {
      add("delete", id, metadata, null);
    }

    @Override
    public void update(InternalRow metadata, InternalRow id, InternalRow row) {
      add("update", id, metadata, row);
    }

    @Override
    public void reinsert(InternalRow metadata, InternalRow row) {
      add("reinsert", null, metadata, row);
    }

    @Override
    public void insert(InternalRow row) {
      add("insert", null, null, row);
    }

    @Override
    public void write(InternalRow row) {
      add("insert", null, null, row);
    }

    @Override
    public WriterCommitMessage commit() throws IOException {
      python.writeAll(rows.iterator());
      rows.clear();
      return python.commit();
    }

    @Override
    public void abort() throws IOException {
      python.abort();
    }

    @Override
    public void close() throws IOException {
      python.close();
    }
  }
}
