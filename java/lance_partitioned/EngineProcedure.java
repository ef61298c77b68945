package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.procedures.BoundProcedure;
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A catalog procedure {@link SqlUpdates} makes of a statement: its arguments are the table's
 * names (JSON), the statement's parts, and last the statement's own text. {@link #run} does
 * the statement in this project's engine or says why not; then the statement runs as Spark
 * plans it, with the rule out of the way. It returns no rows, as the statement would.
 */
abstract class EngineProcedure implements UnboundProcedure, BoundProcedure {
  static final String NAMESPACE = "system";

  final LanceCatalog catalog;
  private final String name;
  private final String statement;
  private final String[] parameters;

  EngineProcedure(LanceCatalog catalog, String name, String statement, String... parameters) {
    this.catalog = catalog;
    this.name = name;
    this.statement = statement;
    this.parameters = parameters.clone();
  }

  /** Null when the statement is done; else why Spark runs it. */
  abstract String run(LanceTable table, Identifier ident, InternalRow input);

  @Override
  public String name() {
    return name;
  }

  @Override
  public BoundProcedure bind(StructType inputType) {
    return this;
  }

  @Override
  public ProcedureParameter[] parameters() {
    ProcedureParameter[] out = new ProcedureParameter[parameters.length + 2];
    out[0] = ProcedureParameter.in("table", DataTypes.StringType).build();
    for (int i = 0; i < parameters.length; i++) {
      out[i + 1] = ProcedureParameter.in(parameters[i], DataTypes.StringType).build();
    }
    out[out.length - 1] = ProcedureParameter.in("statement", DataTypes.StringType).build();
    return out;
  }

  @Override
  public boolean isDeterministic() {
    return false;
  }

  @Override
  public Iterator<Scan> call(InternalRow input) {
    String text = input.getUTF8String(parameters.length + 1).toString();
    String why = runOnTable(input);
    if (why != null) {
      Bridge.LOG.info("{} runs as Spark plans it: {}", statement, why);
      LanceSessionExtensions.bypassed(() -> SparkSession.active().sql(text).collect());
    }
    return Collections.emptyIterator();
  }

  private String runOnTable(InternalRow input) {
    List<String> parts = strings(input.getUTF8String(0).toString());
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
    return run((LanceTable) table, ident, input);
  }

  /** A JSON array of names. */
  static List<String> strings(String json) {
    List<String> out = new ArrayList<>();
    try {
      for (JsonNode p : Bridge.JSON.readTree(json)) {
        out.add(p.asText());
      }
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw LanceSqlError.invalid("lance_partitioned: a procedure of this catalog takes JSON arrays of names");
    }
    if (out.isEmpty()) {
      throw LanceSqlError.invalid("lance_partitioned: a procedure of this catalog needs a table");
    }
    return out;
  }
}
