package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * One scan's pushdown: predicates on identity partition columns the scan applies itself
 * (exactly, so {@code COUNT(*)} can be answered from metadata); every other predicate stays
 * Spark's and only prunes; the columns the query needs; {@code COUNT(*)} from manifest and
 * fragment metadata. {@link #build()} plans through a fresh Python source instance, whose
 * pickled plan only this scan reads.
 */
final class LanceScanBuilder
    implements SupportsPushDownV2Filters, SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final LanceTable table;
  private final Map<String, String> options;
  private final LanceDelta.Operation operation; // the row-level operation this scan reads for, if any
  private Predicate[] exact = new Predicate[0];
  private Predicate[] residual = new Predicate[0];
  private StructType required;
  private boolean countStar;

  LanceScanBuilder(LanceTable table, Map<String, String> options, LanceDelta.Operation operation) {
    this.table = table;
    this.options = options;
    this.operation = operation;
    this.required = table.schema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    List<Predicate> handled = new ArrayList<>();
    List<Predicate> rest = new ArrayList<>();
    for (Predicate p : predicates) {
      if (table.described != null && Predicates.exact(p, table.described.identity)) {
        handled.add(p);
      } else {
        rest.add(p);
      }
    }
    exact = handled.toArray(new Predicate[0]);
    residual = rest.toArray(new Predicate[0]);
    return residual;
  }

  @Override
  public Predicate[] pushedPredicates() {
    return exact;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  private static boolean isCountStar(Aggregation a) {
    return a.groupByExpressions().length == 0
        && a.aggregateExpressions().length == 1
        && a.aggregateExpressions()[0] instanceof CountStar;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return operation == null && isCountStar(aggregation);
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    countStar = operation == null && isCountStar(aggregation);
    return countStar;
  }

  @Override
  public Scan build() {
    Described d = table.require();
    Map<String, String> opts = new HashMap<>(options);
    opts.put("lp.call", "plan");
    opts.put("lp.version", Long.toString(d.version));
    opts.put("lp.exact", Predicates.toJson(exact).toString());
    opts.put("lp.prune", Predicates.toJson(residual).toString());
    if (countStar) {
      opts.put("lp.count", "true");
    }
    if (operation != null) {
      opts.put("lp.read_set", "true");
    }
    StructType read = readSchema(d, opts);
    if (operation == null && !countStar) {
      opts.put("lp.inline", read.json()); // a small plan answers with its rows
    }
    PythonDataSourceV2 ds = Bridge.source();
    JsonNode plan = Bridge.parse(LanceSqlError.guarded(() -> ds.inferSchema(new CaseInsensitiveStringMap(opts))));
    String summary = plan.get("summary").asText();
    Bridge.LOG.info(summary.replaceFirst("^lance_partitioned: ", ""));
    String pushed = describe(exact);
    String pruning = describe(residual);
    if (countStar) {
      return new CountScan(plan.get("count").asLong(), summary, pushed);
    }
    if (operation != null) {
      operation.scanned(plan.get("read"), d.version, exact, residual);
    }
    if (plan.has("rows")) {
      return new InlineScan(read, plan.get("rows").asText(), LanceScan.describe(table.root, pushed, pruning, read, summary + " (rows read while planning)"), options);
    }
    opts.remove("lp.inline");
    Table python = ds.getTable(read, new Transform[0], opts);
    Scan inner = LanceSqlError.guarded(() -> ((SupportsRead) python).newScanBuilder(new CaseInsensitiveStringMap(opts)).build());
    return new LanceScan(inner, table.root, summary, pushed, pruning, options);
  }

  /** The columns to read: those required (one cheap column when none is), then the row-address ones. */
  private StructType readSchema(Described d, Map<String, String> opts) {
    List<StructField> data = new ArrayList<>();
    boolean rowAddress = false;
    for (StructField f : required.fields()) {
      if (f.name().equals(LanceTable.ROW_TABLE) || f.name().equals(LanceTable.ROW_ADDRESS)) {
        rowAddress = true;
      } else {
        data.add(d.schema.apply(f.name()));
      }
    }
    if (data.isEmpty() && !rowAddress && d.cheap != null) {
      data.add(d.schema.apply(d.cheap));
    }
    StructType out = new StructType(data.toArray(new StructField[0]));
    if (rowAddress) {
      opts.put("with_row_address", "true");
      out = out.add(LanceTable.ROW_TABLE, DataTypes.StringType, false).add(LanceTable.ROW_ADDRESS, DataTypes.LongType, false);
    }
    return out;
  }

  private static String describe(Predicate[] predicates) {
    List<String> parts = new ArrayList<>();
    for (Predicate p : predicates) {
      parts.add(p.toString());
    }
    return "[" + String.join(", ", parts) + "]";
  }

  /** {@code COUNT(*)} answered from metadata on the driver: no task reads a row. */
  private static final class CountScan implements LocalScan {
    private final long count;
    private final String summary;
    private final String pushed;

    CountScan(long count, String summary, String pushed) {
      this.count = count;
      this.summary = summary;
      this.pushed = pushed;
    }

    @Override
    public StructType readSchema() {
      return new StructType().add("count(*)", DataTypes.LongType, false);
    }

    @Override
    public InternalRow[] rows() {
      return new InternalRow[] {new GenericInternalRow(new Object[] {count})};
    }

    @Override
    public String description() {
      return "LancePartitionedScan COUNT(*) from metadata = " + count + " [PushedPredicates: " + pushed + "] " + summary;
    }
  }
}
