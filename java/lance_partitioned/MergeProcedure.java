package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
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
 * {@code CALL <catalog>.system.lance_merge(table, keys, source, statement)}: what {@link SqlUpdates}
 * makes of an upserting SQL {@code MERGE INTO}. The source query's rows are written to the
 * table with the option {@code lp.upsert} (Spark's tasks write them as fragments); the Python
 * side's commit ({@code pipelines/jvm/upsert_rows.py}) deletes the target rows whose key a
 * source row has and adds the fragments in one {@code __manifest} commit, with no join in
 * Spark. When that engine declines (the source's columns are not the table's, a key type that
 * does not compare in Arrow as in Spark, a target too large to probe in the driver, a key two
 * target rows hold), {@code statement} runs as Spark plans it, with the rule out of the way.
 */
final class MergeProcedure implements UnboundProcedure, BoundProcedure {
  static final String NAME = "lance_merge";
  /** The Python side's words for a merge it does not take (pipelines/jvm/upsert_rows.py DECLINED). */
  static final String DECLINED = "the upsert engine declined this MERGE";

  private final LanceCatalog catalog;

  MergeProcedure(LanceCatalog catalog) {
    this.catalog = catalog;
  }

  @Override
  public String name() {
    return NAME;
  }

  @Override
  public String description() {
    return "an upserting SQL MERGE INTO a table of this catalog, run by lance_partitioned's upsert engine";
  }

  @Override
  public BoundProcedure bind(StructType inputType) {
    return this;
  }

  @Override
  public ProcedureParameter[] parameters() {
    return new ProcedureParameter[] {
      ProcedureParameter.in("table", DataTypes.StringType).build(),
      ProcedureParameter.in("keys", DataTypes.StringType).build(),
      ProcedureParameter.in("source", DataTypes.StringType).build(),
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
      Bridge.LOG.info("SQL MERGE runs as Spark's row-level merge: {}", why);
      LanceSessionExtensions.bypassed(() -> SparkSession.active().sql(statement).collect());
    }
    return Collections.emptyIterator();
  }

  /** Null when the merge is done here; else why Spark runs it. */
  private String run(InternalRow input) {
    List<String> parts = strings(input.getUTF8String(0).toString());
    List<String> keys = strings(input.getUTF8String(1).toString());
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
    SparkSession session = SparkSession.active();
    Dataset<Row> source;
    try {
      source = LanceSessionExtensions.bypassed(() -> session.sql(input.getUTF8String(2).toString()));
    } catch (RuntimeException e) {
      return "its source is not a query this layer reads on its own (" + firstLine(e) + ")";
    }
    List<String> columns = new ArrayList<>();
    for (String c : source.columns()) {
      columns.add(c.toLowerCase(Locale.ROOT));
    }
    List<String> wanted = new ArrayList<>();
    for (String c : ((LanceTable) table).schema.fieldNames()) {
      wanted.add(c.toLowerCase(Locale.ROOT));
    }
    Collections.sort(columns);
    Collections.sort(wanted);
    if (!columns.equals(wanted)) {
      return "the source's columns are not the table's";
    }
    String name = quoted(catalog.name()) + "." + quotedIdent(ident);
    try {
      source.writeTo(name).option("lp.upsert", Bridge.write(keys)).append();
    } catch (Exception e) {
      if (declined(e)) {
        return firstLine(e);
      }
      throw e instanceof RuntimeException ? (RuntimeException) e : new IllegalStateException(e);
    }
    Bridge.LOG.info("SQL MERGE into {} ran in the upsert engine on {} (no join in Spark)", ident, keys);
    return null;
  }

  private static boolean declined(Throwable failure) {
    java.util.Set<Throwable> seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    java.util.Deque<Throwable> todo = new java.util.ArrayDeque<>(List.of(failure));
    while (!todo.isEmpty()) {
      Throwable t = todo.pop();
      if (!seen.add(t)) {
        continue;
      }
      if (String.valueOf(t.getMessage()).contains(DECLINED)) {
        return true;
      }
      if (t.getCause() != null) {
        todo.push(t.getCause());
      }
      for (Throwable s : t.getSuppressed()) {
        todo.push(s);
      }
    }
    return false;
  }

  private static String firstLine(Throwable e) {
    String m = String.valueOf(e.getMessage());
    int i = m.indexOf('\n');
    return i < 0 ? m : m.substring(0, i);
  }

  private static List<String> strings(String json) {
    List<String> out = new ArrayList<>();
    try {
      for (JsonNode p : Bridge.JSON.readTree(json)) {
        out.add(p.asText());
      }
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalArgumentException("lance_partitioned: " + NAME + " takes JSON arrays of names", e);
    }
    if (out.isEmpty()) {
      throw LanceSqlError.invalid("lance_partitioned: " + NAME + " needs a table and keys");
    }
    return out;
  }

  private static String quoted(String part) {
    return "`" + part.replace("`", "``") + "`";
  }

  private static String quotedIdent(Identifier ident) {
    StringBuilder out = new StringBuilder();
    for (String n : ident.namespace()) {
      out.append(quoted(n)).append('.');
    }
    return out.append(quoted(ident.name())).toString();
  }
}
