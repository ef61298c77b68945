package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("lance_partitioned")}: a namespace root as a table, read at the
 * {@code __manifest} version current when the DataFrame is created (or {@code versionAsOf} /
 * {@code timestampAsOf}), so every scan of one DataFrame reads one version. On a Spark this
 * jar was not compiled for, the Python data source itself (no per-scan pushdown).
 */
public final class LanceProvider implements TableProvider, DataSourceRegister {
  static final String SHORT_NAME = "lance_partitioned";
  /** Options of the Python source's own planning (read_partitioned, merges, vector search): with
   * one of them a read is the Python source's, which prunes by them and pushes nothing. */
  static final Set<String> PYTHON_PLANNED =
      new HashSet<>(Arrays.asList("nearest", "columns", "with_row_address", "object_ids", "filter", "prune_filter"));
  private JsonNode described; // this lookup's describe call, shared by inferSchema and getTable
  /**
   * Answers at a root's latest version, shared by every lookup in this JVM: Spark makes a new
   * provider for each load of a session catalog table and loads it twice a query (analysis,
   * then {@code QueryExecution.tableVersionsRefreshed}), which cost two Python calls a query.
   */
  private static final Descriptions LATEST = new Descriptions();

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  static boolean pythonPlanned(Map<String, String> options) {
    for (String key : options.keySet()) {
      if (PYTHON_PLANNED.contains(key.toLowerCase(Locale.ROOT))) {
        return true;
      }
    }
    return false;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    if (!Bridge.compatible() || pythonPlanned(options.asCaseSensitiveMap())) {
      return LanceSqlError.guarded(() -> Bridge.source().inferSchema(options));
    }
    return Described.of(describe(options.asCaseSensitiveMap(), false)).schema;
  }

  /** The describe call of this lookup (a missing namespace raises, unless {@code missingOk}). */
  private JsonNode describe(Map<String, String> options, boolean missingOk) {
    if (described == null || (!missingOk && described.has("error"))) {
      Map<String, String> lower = lowered(options);
      String path = rootOf(lower);
      if (path == null || path.isEmpty()) {
        if (lower.containsKey("provider")) {
          throw LanceSqlError.invalid(
              "lance_partitioned: CREATE TABLE ... USING lance_partitioned needs LOCATION '<namespace root>' "
                  + "(Spark's session catalog keeps no managed lance_partitioned tables); or use the project's "
                  + "catalog: spark.sql.catalog.lance=lance_partitioned.LanceCatalog, "
                  + "spark.sql.catalog.lance.warehouse=<root>, then CREATE TABLE lance.db.t ...");
        }
        throw LanceSqlError.invalid("lance_partitioned: load(path) is required: the namespace root");
      }
      Map<String, Object> args = new HashMap<>();
      args.put("root", path);
      args.put("missing_ok", missingOk);
      if (lower.containsKey("versionasof")) {
        args.put("version", lower.get("versionasof"));
        args.put("version_label", "option versionAsOf");
      }
      if (lower.containsKey("timestampasof")) {
        args.put("timestamp_text", lower.get("timestampasof"));
        args.put("time_zone", lower.getOrDefault("timezone", Bridge.sessionTimeZone()));
      }
      args.put("master", Bridge.master());
      args.put("connect", Bridge.connect());
      boolean latest = !args.containsKey("version") && !args.containsKey("timestamp_text");
      String key =
          latest ? Bridge.write(new TreeMap<>(args)) + Bridge.write(new TreeMap<>(Bridge.storageOptions(options))) : null;
      JsonNode seen = key != null ? LATEST.current(key) : null;
      if (seen != null) {
        described = seen;
        return described;
      }
      described = Bridge.call("describe", args, options);
      if (key != null) {
        LATEST.remember(key, described);
      }
    }
    return described;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    if (!Bridge.compatible() || pythonPlanned(properties)) {
      return GuardedRead.table(LanceSqlError.guarded(() -> Bridge.source().getTable(schema, partitioning, properties)));
    }
    JsonNode d = describe(properties, true);
    Described snapshot = d.has("error") ? null : Described.of(d);
    Map<String, String> lower = lowered(properties);
    String path = rootOf(lower);
    // a session catalog table (CREATE TABLE ... USING lance_partitioned) resolves SQL columns
    // as any table does; the DataFrame API hands the Python writer the rows as they are
    boolean catalogTable = lower.containsKey("provider");
    Map<String, String> options = new HashMap<>(properties);
    options.putAll(Bridge.sessionOptions());
    if (partitioning.length == 0) {
      return new LanceTable(path, snapshot, path, options, schema, !catalogTable);
    }
    // DataFrameWriter.partitionBy(...): Spark checks it against the table's partitioning
    if (snapshot != null) {
      if (!Arrays.equals(partitioning, snapshot.partitioning)) {
        throw LanceSqlError.invalid(
            "lance_partitioned: the namespace at " + path + " is partitioned as " + shown(snapshot.partitioning)
                + ", not " + shown(partitioning) + "; drop .partitionBy() to write with its spec "
                + "(change the spec with evolve_partition_spec or ALTER TABLE ... ADD PARTITION FIELD)");
      }
      return new LanceTable(path, snapshot, path, options, schema, !catalogTable);
    }
    String by = partitionBy(partitioning);
    String given = lower.get("partition_by");
    if (given != null && !given.replace(" ", "").equals(by.replace(" ", ""))) {
      throw LanceSqlError.invalid(
          "lance_partitioned: .partitionBy(" + by.replace("; ", ", ") + ") and option partition_by '" + given
              + "' disagree; give one of them");
    }
    options.put("partition_by", by);
    return new LanceTable(path, null, path, options, schema, !catalogTable, partitioning);
  }

  /** The columns of {@code .partitionBy(...)} as option {@code partition_by} ({@code "a; b"}). */
  private static String partitionBy(Transform[] partitioning) {
    StringBuilder out = new StringBuilder();
    for (Transform t : partitioning) {
      if (!"identity".equals(t.name()) || t.references().length != 1) {
        throw LanceSqlError.invalid(
            "lance_partitioned: .partitionBy() takes column names; for transforms use option partition_by, "
                + "e.g. .option('partition_by', 'day(ts); bucket[16](user_id)'), not " + t.describe());
      }
      if (out.length() > 0) {
        out.append("; ");
      }
      out.append(String.join(".", t.references()[0].fieldNames()));
    }
    return out.toString();
  }

  private static String shown(Transform[] partitioning) {
    StringBuilder out = new StringBuilder("(");
    for (Transform t : partitioning) {
      if (out.length() > 1) {
        out.append(", ");
      }
      out.append(t.describe());
    }
    return out.append(")").toString();
  }

  /** The namespace root: option {@code path}, else a session catalog table's {@code location}. */
  static String rootOf(Map<String, String> lower) {
    String path = lower.get("path");
    if ((path == null || path.isEmpty()) && lower.get("location") != null) {
      path = lower.get("location");
      if (path.startsWith("file:")) {
        path = java.net.URI.create(path).getPath();
      }
    }
    return path;
  }

  static Map<String, String> lowered(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      out.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
    }
    return out;
  }
}
