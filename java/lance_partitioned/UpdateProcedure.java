package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.procedures.BoundProcedure;
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * {@code CALL <catalog>.system.lance_update(table, set, condition, statement)}: what
 * {@link SqlUpdates} makes of an SQL {@code UPDATE}. The Python side
 * ({@code pipelines/jvm/update_rows.py}) runs it through {@code update_rows}' engine when that
 * engine computes it exactly as Spark (one {@code __manifest} commit, no Spark job); otherwise
 * {@code statement} runs as Spark plans it (its row-level update), with the rule out of the way.
 */
final class UpdateProcedure implements UnboundProcedure, BoundProcedure {
  static final String NAMESPACE = "system";
  static final String NAME = "lance_update";

  private final LanceCatalog catalog;

  UpdateProcedure(LanceCatalog catalog) {
    this.catalog = catalog;
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String description() {
    return "an SQL UPDATE of a table of this catalog, run by lance_partitioned's update_rows engine";
  }

  @Override
  public BoundProcedure bind(StructType inputType) {
    return this;
  }

  @Override
  public ProcedureParameter[] parameters() {
    return new ProcedureParameter[] {
      ProcedureParameter.in("table", DataTypes.StringType).build(),
      ProcedureParameter.in("set", DataTypes.StringType).build(),
      ProcedureParameter.in("condition", DataTypes.StringType).build(),
      ProcedureParameter.in("statement", DataTypes.StringType).build()
    };
  }

  @Override
  public boolean isDeterministic() {
    return false;
  }

  @Override
  public Iterator<Scan> call(InternalRow input) {
    String statement = input.getUTF8String(3).toString();
    String why = run(input);
    if (why != null) {
      Bridge.LOG.info("SQL UPDATE runs as Spark's row-level update: {}", why);
      LanceSessionExtensions.bypassed(() -> SparkSession.active().sql(statement).collect());
    }
    return Collections.emptyIterator();
  }

  /** Null when the update is done here; else why Spark runs it. */
  private String run(InternalRow input) {
    List<String> parts = new ArrayList<>();
    try {
      for (JsonNode p : Bridge.JSON.readTree(input.getUTF8String(0).toString())) {
        parts.add(p.asText());
      }
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalArgumentException("lance_partitioned: lance_update takes a JSON array of names", e);
    }
    if (parts.size() < 1) {
      return "no table named";
    }
    Identifier ident = Identifier.of(parts.subList(0, parts.size() - 1).toArray(new String[0]), parts.get(parts.size() - 1));
    Table table;
    try {
      table = catalog.loadTable(ident);
    } catch (org.apache.spark.sql.catalyst.analysis.NoSuchTableException e) {
      return "no table " + ident;
    }
    if (!(table instanceof LanceTable) || ((LanceTable) table).described == null) {
      return ident + " is not a partitioned namespace of this catalog";
    }
    LanceTable lance = (LanceTable) table;
    SQLConf conf = SQLConf.get();
    Map<String, Object> sqlConf = new HashMap<>();
    sqlConf.put("escapedStringLiterals", conf.escapedStringLiterals());
    sqlConf.put("doubleQuotedIdentifiers", conf.doubleQuotedIdentifiers());
    sqlConf.put("caseSensitive", conf.caseSensitiveAnalysis());
    sqlConf.put("timestampNTZ", "TIMESTAMP_NTZ".equalsIgnoreCase(conf.getConfString("spark.sql.timestampType", "TIMESTAMP_LTZ")));
    sqlConf.put("ansi", conf.ansiEnabled());
    Map<String, Object> args = new HashMap<>();
    args.put("root", lance.root);
    args.put("set", input.getUTF8String(1).toString());
    args.put("where", input.getUTF8String(2).toString());
    args.put("timeZone", conf.sessionLocalTimeZone());
    args.put("sqlConf", Bridge.write(sqlConf));
    JsonNode answer = Bridge.call("sql_update", args, Bridge.storageOptions(lance.options));
    if (!answer.path("done").asBoolean(false)) {
      return answer.path("why").asText("the Python side did not take it");
    }
    Bridge.LOG.info(
        "SQL UPDATE of {} ran in {} ({} rows, __manifest version {})",
        ident,
        answer.path("engine").asText(),
        answer.path("rows").asLong(),
        answer.path("version").asLong());
    SparkSession session = SparkSession.active();
    if (!session.sharedState().cacheManager().isEmpty()) {
      session.catalog().refreshTable(catalog.name() + "." + ident);
    }
    return null;
  }
}
