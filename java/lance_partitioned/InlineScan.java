package lance_partitioned;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A small plan's rows, read by the Python side while it planned (pipelines/jvm/source.py
 * {@code inline_rows}) and carried here as an Arrow IPC stream. One JVM task turns them into
 * rows: no Python worker reads a table, and {@code EXPLAIN} still shows the scan with its
 * pushed predicates and pruning.
 */
final class InlineScan implements Scan, Batch {
  private final StructType schema;
  private final byte[] rows;
  private final String description;
  private final java.util.Map<String, String> options;

  InlineScan(StructType schema, String base64, String description, java.util.Map<String, String> options) {
    this.options = options;
    this.schema = schema;
    this.rows = Base64.getDecoder().decode(base64);
    this.description = description;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return description;
  }

  @Override
  public Batch toBatch() {
    Bridge.refuseStreamOptions(options);
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return new InputPartition[] {new Rows(rows)};
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(schema);
  }

  /** The Arrow IPC stream of one scan's rows. */
  @Override
  public org.apache.spark.sql.connector.read.streaming.MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return Bridge.stream(options, checkpointLocation);
  }

  private static final class Rows implements InputPartition {
    private static final long serialVersionUID = 1L;
    final byte[] stream;

    Rows(byte[] stream) {
      this.stream = stream;
    }
  }

  private static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType schema;

    Factory(StructType schema) {
      this.schema = schema;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      InternalRow[] decoded = decode(schema, ((Rows) partition).stream);
      return new PartitionReader<InternalRow>() {
        private int next = -1;

        @Override
        public boolean next() {
          next++;
          return next < decoded.length;
        }

        @Override
        public InternalRow get() {
          return decoded[next];
        }

        @Override
        public void close() {}
      };
    }
  }

  static InternalRow[] decode(StructType schema, byte[] bytes) {
    UnsafeProjection project = UnsafeProjection.create(schema);
    List<InternalRow> out = new ArrayList<>();
    try (BufferAllocator allocator = new RootAllocator(Long.MAX_VALUE);
        ArrowStreamReader reader = new ArrowStreamReader(new ByteArrayInputStream(bytes), allocator)) {
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      if (root.getFieldVectors().size() != schema.fields().length) {
        throw new IllegalStateException(
            "lance_partitioned: the plan's rows have " + root.getFieldVectors().size() + " columns, the scan "
                + schema.fields().length);
      }
      while (reader.loadNextBatch()) {
        List<FieldVector> vectors = root.getFieldVectors();
        ColumnVector[] columns = new ColumnVector[vectors.size()];
        for (int i = 0; i < columns.length; i++) {
          columns[i] = new ArrowColumnVector(vectors.get(i));
        }
        ColumnarBatch batch = new ColumnarBatch(columns, root.getRowCount());
        Iterator<InternalRow> it = batch.rowIterator();
        while (it.hasNext()) {
          out.add(project.apply(it.next()).copy());
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("lance_partitioned: cannot read the plan's rows", e);
    }
    return out.toArray(new InternalRow[0]);
  }
}
