package lance_partitioned;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table's metadata as a table, as Iceberg's {@code db.t.history} and {@code db.t.partitions}:
 * {@code SELECT * FROM lance.db.t.history} (one row per {@code __manifest} version: what made
 * it, when, its parameters and metrics), {@code .partitions} (one row per partition table)
 * and {@code .files} (one row per fragment). The Python side computes the rows from metadata
 * when the catalog loads it (pipelines/jvm/metadata.py); one JVM task turns them into rows.
 */
final class MetadataTable implements SupportsRead {
  static final Set<String> KINDS = Set.of("history", "partitions", "files");

  private final String name;
  private final StructType schema;
  private final String rows; // base64 Arrow IPC

  MetadataTable(String name, StructType schema, String rows) {
    this.name = name;
    this.schema = schema;
    this.rows = rows;
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
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new ScanBuilder() {
      @Override
      public Scan build() {
        return new InlineScan(schema, rows, "LancePartitionedMetadata " + name, Collections.emptyMap());
      }
    };
  }
}
