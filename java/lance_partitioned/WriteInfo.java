package lance_partitioned;

import java.util.Map;
import java.util.Optional;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A write's logical info with this layer's options and the schema the Python writer gets. */
final class WriteInfo implements LogicalWriteInfo {
  private final String queryId;
  private final StructType schema;
  private final CaseInsensitiveStringMap options;

  WriteInfo(String queryId, StructType schema, Map<String, String> options) {
    this.queryId = queryId;
    this.schema = schema;
    this.options = new CaseInsensitiveStringMap(options);
  }

  @Override
  public CaseInsensitiveStringMap options() {
    return options;
  }

  @Override
  public String queryId() {
    return queryId;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Optional<StructType> rowIdSchema() {
    return Optional.empty();
  }

  @Override
  public Optional<StructType> metadataSchema() {
    return Optional.empty();
  }
}
