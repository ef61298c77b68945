package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.internal.SQLConf;

/**
 * {@code CALL <catalog>.system.lance_update(table, set, condition, statement)}: what
 * {@link SqlUpdates} makes of an SQL {@code UPDATE}. The Python side
 * ({@code pipelines/jvm/update_rows.py}) runs it through {@code update_rows}' engine when that
 * engine computes it exactly as Spark (one {@code __manifest} commit, no Spark job); otherwise
 * {@code statement} runs as Spark plans it (its row-level update), with the rule out of the way.
 */
final class UpdateProcedure extends EngineProcedure {
  static final String NAME = "lance_update";

  UpdateProcedure(LanceCatalog catalog) {
    super(catalog, NAME, "SQL UPDATE", "set", "condition");
  }

  @Override
  public String description() {
    return "an SQL UPDATE of a table of this catalog, run by lance_partitioned's update_rows engine";
  }

  @Override
  String run(LanceTable lance, Identifier ident, InternalRow input) {
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
