package lance_partitioned;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;

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
final class MergeProcedure extends EngineProcedure {
  static final String NAME = "lance_merge";
  /** The Python side's words for a merge it does not take (pipelines/jvm/upsert_rows.py DECLINED). */
  static final String DECLINED = "the upsert engine declined this MERGE";

  MergeProcedure(LanceCatalog catalog) {
    super(catalog, NAME, "SQL MERGE", "keys", "source");
  }

  @Override
  public String description() {
    return "an upserting SQL MERGE INTO a table of this catalog, run by lance_partitioned's upsert engine";
  }

  @Override
  String run(LanceTable table, Identifier ident, InternalRow input) {
    List<String> keys = strings(input.getUTF8String(1).toString());
    SparkSession session = SparkSession.active();
    Dataset<Row> source;
    try {
      source = LanceSessionExtensions.bypassed(() -> session.sql(input.getUTF8String(2).toString()));
    } catch (RuntimeException e) {
      return "its source is not a query this layer reads on its own (" + firstLine(e) + ")";
    }
    if (!sameNames(source.columns(), table.schema.fieldNames())) {
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

  private static boolean sameNames(String[] a, String[] b) {
    List<String> x = new ArrayList<>();
    List<String> y = new ArrayList<>();
    for (String c : a) {
      x.add(c.toLowerCase(Locale.ROOT));
    }
    for (String c : b) {
      y.add(c.toLowerCase(Locale.ROOT));
    }
    Collections.sort(x);
    Collections.sort(y);
    return x.equals(y);
  }

  private static boolean declined(Throwable failure) {
    Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
    Deque<Throwable> todo = new ArrayDeque<>(List.of(failure));
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
