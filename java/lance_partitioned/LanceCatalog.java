package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NonEmptyNamespaceException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.ProcedureCatalog;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.StagingTableCatalog;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Spark catalog over a warehouse root: {@code spark.sql.catalog.lance=lance_partitioned.LanceCatalog},
 * {@code spark.sql.catalog.lance.warehouse=<root>} (and {@code .storage.<key>} for an object
 * store). A namespace is a directory, a table the partitioned namespace at
 * {@code <warehouse>/<namespace>/<table>}; every call is made by the Python side
 * (pipelines/jvm/catalog.py), and each load reads the latest {@code __manifest} version
 * (or {@code VERSION AS OF} / {@code TIMESTAMP AS OF}), so the schema is never stale: a
 * description is reused only while a local root's latest version file is the one it read.
 *
 * <p>{@code CREATE TABLE ... AS SELECT}, {@code REPLACE TABLE} and {@code CREATE OR REPLACE TABLE}
 * are staged ({@link StagingTableCatalog}, as Iceberg's {@code SparkCatalog}): the new table's
 * schema, spec and rows become visible in one {@code __manifest} commit, history before a
 * replace stays readable, and a failure anywhere leaves the table as it was ({@link
 * StagedLanceTable}).
 */
public final class LanceCatalog implements StagingTableCatalog, SupportsNamespaces, ProcedureCatalog {
  private String name;
  private String warehouse;
  private Map<String, String> storage = Collections.emptyMap();
  /** The last description of each table loaded at its latest version. */
  private final Descriptions described = new Descriptions();

  @Override
  public void initialize(String catalogName, CaseInsensitiveStringMap options) {
    name = catalogName;
    warehouse = options.get("warehouse");
    if (warehouse == null || warehouse.isEmpty()) {
      throw LanceSqlError.invalid(
          "lance_partitioned: catalog " + catalogName + " needs spark.sql.catalog." + catalogName + ".warehouse=<root>");
    }
    Map<String, String> opts = new HashMap<>();
    for (Map.Entry<String, String> e : options.asCaseSensitiveMap().entrySet()) {
      if (e.getKey().toLowerCase(java.util.Locale.ROOT).startsWith("storage.")) {
        opts.put(e.getKey(), e.getValue());
      }
    }
    storage = Collections.unmodifiableMap(opts);
    if (!Bridge.compatible()) {
      throw LanceSqlError.unsupported(
          "lance_partitioned: catalog " + catalogName + " needs Spark " + Bridge.COMPILED_FOR + " (this jar's)");
    }
  }

  @Override
  public String name() {
    return name;
  }

  private Map<String, Object> at(String[] namespace) {
    Map<String, Object> args = new HashMap<>();
    args.put("warehouse", warehouse);
    args.put("namespace", Arrays.asList(namespace));
    return args;
  }

  private Map<String, Object> at(Identifier ident) {
    Map<String, Object> args = at(ident.namespace());
    args.put("name", ident.name());
    return args;
  }

  private JsonNode call(String call, Map<String, Object> args) {
    return Bridge.call(call, args, storage);
  }

  // -- tables ------------------------------------------------------------------------------------
  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    List<Identifier> out = new ArrayList<>();
    for (JsonNode t : call("list_tables", at(namespace))) {
      out.add(Identifier.of(namespace, t.asText()));
    }
    return out.toArray(new Identifier[0]);
  }

  private Table load(Identifier ident, Map<String, Object> extra) throws NoSuchTableException {
    String key = extra.isEmpty() ? ident.toString() : null;
    JsonNode d = key != null ? described.current(key) : null;
    if (d == null) {
      Map<String, Object> args = at(ident);
      args.putAll(extra);
      args.put("missing_ok", true);
      d = call("describe", args);
      if (d.has("error")) {
        Table metadata = metadataTable(ident, extra);
        if (metadata != null) {
          return metadata;
        }
        throw new NoSuchTableException(ident);
      }
      if (key != null) {
        described.remember(key, d);
      }
    }
    Described described = Described.of(d);
    Map<String, String> options = new HashMap<>(storage);
    return new LanceTable(name + "." + ident, described, described.root, options, described.schema, false);
  }

  /** {@code <table>.history}, {@code .partitions} or {@code .files} of an existing table, else null. */
  private Table metadataTable(Identifier ident, Map<String, Object> extra) {
    String[] ns = ident.namespace();
    String kind = ident.name().toLowerCase(java.util.Locale.ROOT);
    if (ns.length == 0 || !MetadataTable.KINDS.contains(kind)) {
      return null;
    }
    Identifier parent = Identifier.of(Arrays.copyOf(ns, ns.length - 1), ns[ns.length - 1]);
    Map<String, Object> args = at(parent);
    args.putAll(extra);
    args.put("kind", kind);
    args.put("missing_ok", true);
    JsonNode m = call("metadata_table", args);
    if (m.has("error")) {
      return null;
    }
    StructType schema = (StructType) org.apache.spark.sql.types.DataType.fromJson(m.get("schema").asText());
    return new MetadataTable(name + "." + ident, schema, m.get("rows").asText());
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return load(ident, Collections.emptyMap());
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return load(ident, Collections.singletonMap("version", version));
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return load(ident, Collections.singletonMap("timestamp_micros", timestampMicros));
  }

  // The Column[] forms, not TableInfo's (Spark 4.1+): Spark 4.1+'s TableInfo defaults call them,
  // and Spark 4.0 has no TableInfo.
  @Override
  @Deprecated
  public Table createTable(Identifier ident, Column[] columns, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    return create(ident, CatalogV2Util.v2ColumnsToStructType(columns), partitions, properties);
  }

  private Table create(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException {
    described.forget(ident.toString());
    Map<String, Object> args = at(ident);
    args.put("schema", schema.json());
    args.put("partitioning", transforms(partitions));
    args.put("properties", properties);
    JsonNode d = call("create_table", args);
    if (d.has("error")) {
      throw new TableAlreadyExistsException(ident);
    }
    Described described = Described.of(d);
    return new LanceTable(name + "." + ident, described, described.root, new HashMap<>(storage), described.schema, false);
  }

  // -- staged creates and replaces ---------------------------------------------------------------
  @Override
  @Deprecated
  public StagedTable stageCreate(Identifier ident, Column[] columns, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException {
    return stagedCreate(ident, CatalogV2Util.v2ColumnsToStructType(columns), partitions, properties);
  }

  @Override
  @Deprecated
  public StagedTable stageCreate(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException {
    return stagedCreate(ident, schema, partitions, properties);
  }

  @Override
  @Deprecated
  public StagedTable stageReplace(Identifier ident, Column[] columns, Transform[] partitions, Map<String, String> properties)
      throws NoSuchTableException {
    return replace(ident, CatalogV2Util.v2ColumnsToStructType(columns), partitions, properties);
  }

  @Override
  @Deprecated
  public StagedTable stageReplace(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws NoSuchTableException {
    return replace(ident, schema, partitions, properties);
  }

  @Override
  @Deprecated
  public StagedTable stageCreateOrReplace(
      Identifier ident, Column[] columns, Transform[] partitions, Map<String, String> properties) {
    return createOrReplace(ident, CatalogV2Util.v2ColumnsToStructType(columns), partitions, properties);
  }

  @Override
  @Deprecated
  public StagedTable stageCreateOrReplace(
      Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    return createOrReplace(ident, schema, partitions, properties);
  }

  private StagedTable stagedCreate(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException {
    try {
      return stage(ident, schema, partitions, properties, "create");
    } catch (NoSuchTableException e) {
      throw new IllegalStateException(e); // a create never refuses a missing table
    }
  }

  private StagedTable replace(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws NoSuchTableException {
    try {
      return stage(ident, schema, partitions, properties, "replace");
    } catch (TableAlreadyExistsException e) {
      throw new IllegalStateException(e); // a replace never refuses an existing table
    }
  }

  private StagedTable createOrReplace(
      Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties) {
    try {
      return stage(ident, schema, partitions, properties, "create_or_replace");
    } catch (TableAlreadyExistsException | NoSuchTableException e) {
      throw new IllegalStateException(e); // neither is refused by a create-or-replace
    }
  }

  /**
   * Check the new table now (a refused spec or type fails before any row is written) and
   * return what Spark writes into; nothing changes until the staged table commits.
   */
  private StagedTable stage(
      Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties, String kind)
      throws TableAlreadyExistsException, NoSuchTableException {
    described.forget(ident.toString());
    Map<String, Object> args = at(ident);
    args.put("schema", schema.json());
    args.put("partitioning", transforms(partitions));
    args.put("properties", properties);
    args.put("kind", kind);
    args.put("missing_ok", true);
    JsonNode d = call("stage_table", args);
    if ("exists".equals(d.path("error").asText())) {
      throw new TableAlreadyExistsException(ident);
    }
    if (d.has("error")) {
      throw new NoSuchTableException(ident);
    }
    Map<String, String> options = new HashMap<>(storage);
    options.put("path", d.get("root").asText());
    options.put("lp.write", "stage");
    options.put("lp.stage", Bridge.write(args));
    return new StagedLanceTable(name + "." + ident, schema, partitions, options);
  }

  static List<Map<String, Object>> transforms(Transform[] partitions) {
    List<Map<String, Object>> out = new ArrayList<>();
    for (Transform t : partitions) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("name", t.name());
      List<Map<String, Object>> args = new ArrayList<>();
      for (Expression e : t.arguments()) {
        Map<String, Object> arg = new LinkedHashMap<>();
        if (e instanceof NamedReference) {
          arg.put("col", Arrays.asList(((NamedReference) e).fieldNames()));
        } else if (e instanceof Literal) {
          Object v = ((Literal<?>) e).value();
          arg.put("lit", v == null ? null : v.toString());
          arg.put("type", ((Literal<?>) e).dataType().typeName());
        } else {
          arg.put("other", e.toString());
        }
        args.add(arg);
      }
      m.put("args", args);
      out.add(m);
    }
    return out;
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    loadTable(ident);
    List<Map<String, Object>> list = new ArrayList<>();
    for (TableChange c : changes) {
      list.add(change(c));
    }
    Map<String, Object> args = at(ident);
    args.put("changes", list);
    described.forget(ident.toString());
    call("alter_table", args);
    return loadTable(ident);
  }

  private static Map<String, Object> change(TableChange c) {
    Map<String, Object> m = new LinkedHashMap<>();
    if (c instanceof TableChange.AddColumn) {
      TableChange.AddColumn a = (TableChange.AddColumn) c;
      m.put("kind", "add");
      m.put("path", Arrays.asList(a.fieldNames()));
      m.put("type", a.dataType().json());
      m.put("nullable", a.isNullable());
      m.put("position", a.position() == null ? null : a.position().toString());
    } else if (c instanceof TableChange.RenameColumn) {
      TableChange.RenameColumn r = (TableChange.RenameColumn) c;
      m.put("kind", "rename");
      m.put("path", Arrays.asList(r.fieldNames()));
      m.put("new", r.newName());
    } else if (c instanceof TableChange.DeleteColumn) {
      TableChange.DeleteColumn d = (TableChange.DeleteColumn) c;
      m.put("kind", "drop");
      m.put("path", Arrays.asList(d.fieldNames()));
      m.put("if_exists", d.ifExists());
    } else if (c instanceof TableChange.UpdateColumnType) {
      TableChange.UpdateColumnType u = (TableChange.UpdateColumnType) c;
      m.put("kind", "type");
      m.put("path", Arrays.asList(u.fieldNames()));
      m.put("type", u.newDataType().json());
    } else {
      m.put("kind", "other");
      m.put("what", c.getClass().getSimpleName());
    }
    return m;
  }

  @Override
  public boolean dropTable(Identifier ident) {
    return drop(ident, false);
  }

  @Override
  public boolean purgeTable(Identifier ident) {
    return drop(ident, true);
  }

  private boolean drop(Identifier ident, boolean purge) {
    described.forget(ident.toString());
    Map<String, Object> args = at(ident);
    args.put("purge", purge);
    return call("drop_table", args).path("dropped").asBoolean(false);
  }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw LanceSqlError.unsupported(
        "lance_partitioned: RENAME TABLE is not supported (a table is its directory under the warehouse)");
  }

  // -- namespaces --------------------------------------------------------------------------------
  @Override
  public String[][] listNamespaces() throws NoSuchNamespaceException {
    return listNamespaces(new String[0]);
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    if (namespace.length > 0 && !namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    List<String[]> out = new ArrayList<>();
    for (JsonNode n : call("list_namespaces", at(namespace))) {
      String[] child = Arrays.copyOf(namespace, namespace.length + 1);
      child[namespace.length] = n.asText();
      out.add(child);
    }
    return out.toArray(new String[0][]);
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    return call("namespace_exists", at(namespace)).asBoolean(false);
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return Collections.emptyMap();
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) throws NamespaceAlreadyExistsException {
    if (namespaceExists(namespace)) {
      throw new NamespaceAlreadyExistsException(namespace);
    }
    call("create_namespace", at(namespace));
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw LanceSqlError.unsupported("lance_partitioned: namespaces have no properties to alter");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade)
      throws NoSuchNamespaceException, NonEmptyNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    JsonNode r = call("drop_namespace", at(namespace));
    if (r.isObject() && r.has("error")) {
      throw new NonEmptyNamespaceException(namespace);
    }
    return true;
  }

  // -- procedures: system.lance_update, what an SQL UPDATE becomes with the session extension ---------
  @Override
  public UnboundProcedure loadProcedure(Identifier ident) {
    if (ident.namespace().length == 1 && ident.namespace()[0].equalsIgnoreCase(EngineProcedure.NAMESPACE)) {
      if (ident.name().equalsIgnoreCase(UpdateProcedure.NAME)) {
        return new UpdateProcedure(this);
      }
      if (ident.name().equalsIgnoreCase(MergeProcedure.NAME)) {
        return new MergeProcedure(this);
      }
    }
    throw LanceSqlError.invalid(
        "lance_partitioned: catalog " + name + " has no procedure " + ident + "; it has "
            + EngineProcedure.NAMESPACE + "." + UpdateProcedure.NAME + " and "
            + EngineProcedure.NAMESPACE + "." + MergeProcedure.NAME);
  }

  @Override
  public Identifier[] listProcedures(String[] namespace) {
    if (namespace.length == 1 && namespace[0].equalsIgnoreCase(EngineProcedure.NAMESPACE)) {
      return new Identifier[] {Identifier.of(namespace, UpdateProcedure.NAME), Identifier.of(namespace, MergeProcedure.NAME)};
    }
    return new Identifier[0];
  }
}
