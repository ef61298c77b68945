package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/** One {@code __manifest} version of a table as the Python side describes it. Immutable. */
final class Described {
  final String root;
  final long version;
  final StructType schema;
  final Transform[] partitioning;
  final Set<String> identity;
  final String cheap;
  final Map<String, String> properties;
  final StructType partitionSchema; // one field per partition field of every spec version (SHOW PARTITIONS)

  private Described(
      String root,
      long version,
      StructType schema,
      Transform[] partitioning,
      Set<String> identity,
      String cheap,
      Map<String, String> properties,
      StructType partitionSchema) {
    this.root = root;
    this.version = version;
    this.schema = schema;
    this.partitioning = partitioning;
    this.identity = identity;
    this.cheap = cheap;
    this.properties = properties;
    this.partitionSchema = partitionSchema;
  }

  static Described of(JsonNode n) {
    StructType schema = (StructType) DataType.fromJson(n.get("schema").asText());
    List<Transform> transforms = new ArrayList<>();
    for (JsonNode t : n.get("partitioning")) {
      transforms.add(transform(t));
    }
    Set<String> identity = new HashSet<>();
    for (JsonNode c : n.get("identity")) {
      identity.add(c.asText());
    }
    Map<String, String> props = new HashMap<>();
    for (Map.Entry<String, JsonNode> e : n.get("properties").properties()) {
      props.put(e.getKey(), e.getValue().asText());
    }
    JsonNode cheap = n.get("cheap");
    return new Described(
        n.get("root").asText(),
        n.get("version").asLong(),
        schema,
        transforms.toArray(new Transform[0]),
        Collections.unmodifiableSet(identity),
        cheap == null || cheap.isNull() ? null : cheap.asText(),
        Collections.unmodifiableMap(props),
        (StructType) DataType.fromJson(n.get("partition_schema").asText()));
  }

  private static Transform transform(JsonNode t) {
    String name = t.get("name").asText();
    List<String> columns = new ArrayList<>();
    for (JsonNode c : t.get("columns")) {
      columns.add(c.asText());
    }
    JsonNode param = t.get("param");
    if (name.equals("identity") && columns.size() == 1) {
      return Expressions.identity(columns.get(0));
    }
    if (name.equals("bucket") && param != null && !param.isNull()) {
      return Expressions.bucket(param.asInt(), columns.toArray(new String[0]));
    }
    List<Expression> args = new ArrayList<>();
    if (param != null && !param.isNull()) {
      args.add(Expressions.literal(param.asInt()));
    }
    JsonNode text = t.get("text");
    if (text != null && !text.isNull()) {
      args.add(Expressions.literal(text.asText()));
    }
    for (String c : columns) {
      args.add(Expressions.column(c));
    }
    return Expressions.apply(name, args.toArray(new Expression[0]));
  }
}
