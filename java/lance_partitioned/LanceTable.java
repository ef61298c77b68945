package lance_partitioned;

import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.SupportsDeleteV2;
import org.apache.spark.sql.connector.catalog.SupportsMetadataColumns;
import org.apache.spark.sql.connector.catalog.SupportsPartitionManagement;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsRowLevelOperations;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A partitioned namespace as a Spark table, at one {@code __manifest} version (or, for a
 * DataFrame write to a new root, not yet created). Immutable: every scan, write and row-level
 * operation builds its own state from its own arguments.
 */
final class LanceTable
    implements SupportsRead,
        SupportsWrite,
        SupportsMetadataColumns,
        SupportsRowLevelOperations,
        SupportsDeleteV2,
        SupportsPartitionManagement {
  static final String ROW_TABLE = "_lance_table";
  static final String ROW_ADDRESS = "_lance_rowaddr";

  final String name;
  final Described described; // null: a root no namespace is at yet (a DataFrame write creates it)
  final String root;
  final Map<String, String> options; // path, storage.<key>, read and write options
  final StructType schema;
  final boolean acceptAnySchema; // the DataFrame API: the Python writer conforms the rows

  final Transform[] requested; // a DataFrame write's .partitionBy() for a root no namespace is at yet

  LanceTable(String name, Described described, String root, Map<String, String> options, StructType schema, boolean acceptAnySchema) {
    this(name, described, root, options, schema, acceptAnySchema, new Transform[0]);
  }

  LanceTable(
      String name,
      Described described,
      String root,
      Map<String, String> options,
      StructType schema,
      boolean acceptAnySchema,
      Transform[] requested) {
    this.requested = requested.clone();
    this.name = name;
    this.described = described;
    this.root = described != null ? described.root : root;
    Map<String, String> opts = new HashMap<>(options);
    opts.put("path", this.root);
    this.options = Collections.unmodifiableMap(opts);
    this.schema = described != null ? described.schema : schema;
    this.acceptAnySchema = acceptAnySchema;
  }

  Described require() {
    if (described == null) {
      throw LanceSqlError.invalid("lance_partitioned: no namespace at " + root + "; write to it first");
    }
    return described;
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
  public Column[] columns() {
    return v2Columns(schema);
  }

  /**
   * {@code CatalogV2Util.structTypeToV2Columns} without field ids: Spark 4.2+ has
   * {@code (StructType, boolean includeIds)}, Spark 4.0/4.1 only {@code (StructType)} (no ids).
   */
  private static final java.lang.reflect.Method TO_V2_COLUMNS = toV2ColumnsMethod();

  private static java.lang.reflect.Method toV2ColumnsMethod() {
    try {
      return CatalogV2Util.class.getMethod("structTypeToV2Columns", StructType.class, boolean.class);
    } catch (NoSuchMethodException e) {
      try {
        return CatalogV2Util.class.getMethod("structTypeToV2Columns", StructType.class);
      } catch (NoSuchMethodException inner) {
        throw new IllegalStateException("no CatalogV2Util.structTypeToV2Columns in this Spark", inner);
      }
    }
  }

  static Column[] v2Columns(StructType schema) {
    try {
      return (Column[]) (TO_V2_COLUMNS.getParameterCount() == 2
          ? TO_V2_COLUMNS.invoke(null, schema, false)
          : TO_V2_COLUMNS.invoke(null, schema));
    } catch (java.lang.reflect.InvocationTargetException e) {
      if (e.getCause() instanceof RuntimeException) {
        throw (RuntimeException) e.getCause();
      }
      throw new IllegalStateException(e.getCause());
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);
    }
  }

  // Table.version() is Spark 4.1+ (no @Override: Spark 4.0's Table has none)
  public String version() {
    return described != null ? Long.toString(described.version) : null;
  }

  @Override
  public Transform[] partitioning() {
    return described != null ? described.partitioning : requested.clone();
  }

  @Override
  public Map<String, String> properties() {
    return described != null ? described.properties : Collections.emptyMap();
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> caps =
        EnumSet.of(
            TableCapability.BATCH_READ,
            TableCapability.BATCH_WRITE,
            TableCapability.MICRO_BATCH_READ,
            TableCapability.STREAMING_WRITE,
            TableCapability.TRUNCATE,
            TableCapability.OVERWRITE_BY_FILTER,
            TableCapability.OVERWRITE_DYNAMIC);
    if (acceptAnySchema) {
      caps.add(TableCapability.ACCEPT_ANY_SCHEMA);
    }
    return caps;
  }

  Map<String, String> merged(CaseInsensitiveStringMap extra) {
    Map<String, String> out = new HashMap<>(options);
    out.putAll(extra.asCaseSensitiveMap());
    out.put("path", root);
    return out;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap extra) {
    Map<String, String> opts = merged(extra);
    if (LanceProvider.pythonPlanned(extra.asCaseSensitiveMap())) {
      // the statement's own planning options (WITH ('filter' = ...)): the Python source's scan
      // at this table's version, without the bridge's own keys
      opts.keySet().removeIf(k -> k.toLowerCase(java.util.Locale.ROOT).startsWith("lp."));
      Map<String, String> lower = LanceProvider.lowered(opts);
      if (described != null && !lower.containsKey("versionasof") && !lower.containsKey("timestampasof")) {
        opts.put("versionAsOf", Long.toString(described.version));
      }
      PythonDataSourceV2 python = Bridge.source();
      CaseInsensitiveStringMap o = new CaseInsensitiveStringMap(opts);
      Table t = python.getTable(LanceSqlError.guarded(() -> python.inferSchema(o)), new Transform[0], opts);
      return ((SupportsRead) GuardedRead.table(t)).newScanBuilder(o);
    }
    return new LanceScanBuilder(this, opts, null);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new LanceWriteBuilder(this, info);
  }

  @Override
  public MetadataColumn[] metadataColumns() {
    return new MetadataColumn[] {
      new Meta(ROW_TABLE, DataTypes.StringType), new Meta(ROW_ADDRESS, DataTypes.LongType)
    };
  }

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    require();
    return () -> new LanceDelta.Operation(this, info.command(), merged(info.options()));
  }

  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    if (described == null) {
      return false;
    }
    if (onIdentityOnly(predicates)) {
      return true;
    }
    // rows the Python engine selects exactly as Spark would, in tables of bounded size: it
    // deletes them itself (Lance scans and deletion vectors, no Spark job)
    Map<String, Object> args = new HashMap<>();
    args.put("root", root);
    args.put("version", described.version);
    args.put("predicates", Predicates.toJson(predicates).toString());
    return Bridge.call("exact_delete", args, Bridge.storageOptions(options)).path("exact").asBoolean(false);
  }

  private boolean onIdentityOnly(Predicate[] predicates) {
    for (Predicate p : predicates) {
      if (!Predicates.exact(p, described.identity)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public void deleteWhere(Predicate[] predicates) {
    Map<String, String> opts = new HashMap<>(options);
    String json = Predicates.toJson(predicates).toString();
    opts.put(onIdentityOnly(predicates) ? "lp.exact" : "lp.rows", json);
    LanceWriteBuilder.commitWithoutRows(this, opts);
  }

  @Override
  public boolean truncateTable() {
    Map<String, String> opts = new HashMap<>(options);
    opts.put("lp.truncate", "true");
    LanceWriteBuilder.commitWithoutRows(this, opts);
    return true;
  }

  // -- SHOW PARTITIONS (SupportsPartitionManagement): partitions are made and removed by writes ----------
  @Override
  public StructType partitionSchema() {
    return described != null ? described.partitionSchema : new StructType();
  }

  @Override
  public InternalRow[] listPartitionIdentifiers(String[] names, InternalRow ident) {
    Described d = require();
    Map<String, Object> args = new HashMap<>();
    args.put("root", root);
    args.put("version", d.version);
    String rows = Bridge.call("partition_values", args, Bridge.storageOptions(options)).get("rows").asText();
    StructType schema = d.partitionSchema;
    List<InternalRow> out = new ArrayList<>();
    for (InternalRow row : InlineScan.decode(schema, Base64.getDecoder().decode(rows))) {
      boolean matches = true;
      for (int i = 0; i < names.length && matches; i++) {
        int j = schema.fieldIndex(names[i]);
        DataType type = schema.fields()[j].dataType();
        matches = Objects.equals(row.isNullAt(j) ? null : row.get(j, type), ident.isNullAt(i) ? null : ident.get(i, type));
      }
      if (matches) {
        out.add(row);
      }
    }
    return out.toArray(new InternalRow[0]);
  }

  @Override
  public void createPartition(InternalRow ident, Map<String, String> properties) {
    throw LanceSqlError.unsupported(
        "lance_partitioned: ALTER TABLE ADD PARTITION is not supported; a partition exists once a write puts rows in it");
  }

  @Override
  public boolean dropPartition(InternalRow ident) {
    throw LanceSqlError.unsupported(
        "lance_partitioned: ALTER TABLE DROP PARTITION is not supported; DELETE FROM <table> WHERE <identity partition "
            + "columns> drops whole partitions from metadata");
  }

  @Override
  public void replacePartitionMetadata(InternalRow ident, Map<String, String> properties) {
    throw LanceSqlError.unsupported("lance_partitioned: partitions have no properties");
  }

  @Override
  public Map<String, String> loadPartitionMetadata(InternalRow ident) {
    return Collections.emptyMap();
  }

  /** A hidden column of every row: its partition table, or its Lance row address there. */
  private static final class Meta implements MetadataColumn {
    private final String name;
    private final DataType type;

    Meta(String name, DataType type) {
      this.name = name;
      this.type = type;
    }

    @Override
    public String name() {
      return name;
    }

    @Override
    public DataType dataType() {
      return type;
    }

    @Override
    public boolean isNullable() {
      return false;
    }
  }
}
