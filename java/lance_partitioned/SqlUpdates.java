package lance_partitioned;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.analysis.UnresolvedProcedure;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.Assignment;
import org.apache.spark.sql.catalyst.plans.logical.Call;
import org.apache.spark.sql.catalyst.plans.logical.InsertStarAction;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.UpdateStarAction;
import org.apache.spark.sql.catalyst.plans.logical.UpdateTable;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.Origin;
import org.apache.spark.sql.connector.catalog.CatalogManager;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.types.DataTypes;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The hint-resolution rule of {@link LanceSessionExtensions}: a statement that is exactly one
 * {@code UPDATE <table> [[AS] alias] SET col = expr, ... [WHERE cond]} of a table of a
 * {@link LanceCatalog} becomes {@code CALL <catalog>.system.lance_update(...)} with the
 * statement's own text of each value, of the condition and of the whole statement (from the
 * parser's positions); an upserting {@code MERGE INTO} (below) becomes {@code lance_merge}
 * ({@link MergeProcedure}) with its key columns and its source as a query. Anything else (another statement, a script, a parameterized query, a
 * nested column, a temporary view, another catalog) is left as parsed.
 */
final class SqlUpdates extends Rule<LogicalPlan> {
  /** {@code false} leaves every UPDATE to Spark's row-level plan. */
  static final String ENABLED_CONF = "spark.lance_partitioned.sql.update.enabled";

  private final SparkSession session;

  SqlUpdates(SparkSession session) {
    this.session = session;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!(plan instanceof UpdateTable || plan instanceof MergeIntoTable) || LanceSessionExtensions.bypassing()) {
      return plan;
    }
    if ("false".equalsIgnoreCase(session.sessionState().conf().getConfString(ENABLED_CONF, "true"))
        || !Bridge.compatible()) {
      return plan;
    }
    LogicalPlan call = plan instanceof UpdateTable ? toCall((UpdateTable) plan) : toCall((MergeIntoTable) plan);
    return call != null ? call : plan;
  }

  /**
   * {@code MERGE INTO <table> [[AS] t] USING <source> [[AS] s] ON t.k = s.k [AND ...] WHEN MATCHED
   * THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *}: every condition an equality of a target
   * column and the source column of the same name, each side qualified.
   */
  private LogicalPlan toCall(MergeIntoTable merge) {
    String text = statement(merge.origin());
    if (text == null
        || merge.withSchemaEvolution()
        || merge.matchedActions().size() != 1
        || merge.notMatchedActions().size() != 1
        || !merge.notMatchedBySourceActions().isEmpty()
        || !(merge.matchedActions().head() instanceof UpdateStarAction)
        || !(merge.notMatchedActions().head() instanceof InsertStarAction)
        || merge.matchedActions().head().condition().isDefined()
        || merge.notMatchedActions().head().condition().isDefined()) {
      return null;
    }
    String whole = merge.origin().sqlText().get();
    Side target = Side.of(merge.targetTable());
    Side source = Side.of(merge.sourceTable());
    if (target == null || source == null || !(target.plan instanceof UnresolvedRelation)) {
      return null;
    }
    String from = span(source.plan, whole);
    if (from == null) {
      return null;
    }
    String query = source.plan instanceof UnresolvedRelation ? "SELECT * FROM " + from : "SELECT * FROM (" + from + ")";
    List<String> keys = keys(merge.mergeCondition(), target, source);
    List<String> table = lanceTable(CollectionConverters.asJava(((UnresolvedRelation) target.plan).multipartIdentifier()));
    if (keys == null || keys.isEmpty() || table == null) {
      return null;
    }
    return call(table, MergeProcedure.NAME, Bridge.write(keys), query, text);
  }

  /** A side of a merge: its relation and the qualifiers its columns may carry. */
  private static final class Side {
    final LogicalPlan plan;
    final List<List<String>> qualifiers = new ArrayList<>();

    private Side(LogicalPlan plan) {
      this.plan = plan;
    }

    static Side of(LogicalPlan plan) {
      if (plan instanceof SubqueryAlias) {
        Side side = new Side(((SubqueryAlias) plan).child());
        side.qualifiers.add(List.of(((SubqueryAlias) plan).alias()));
        return side;
      }
      if (plan instanceof UnresolvedRelation) {
        Side side = new Side(plan);
        List<String> parts = CollectionConverters.asJava(((UnresolvedRelation) plan).multipartIdentifier());
        for (int i = 0; i < parts.size(); i++) {
          side.qualifiers.add(parts.subList(i, parts.size()));
        }
        return side;
      }
      return null;
    }

    boolean qualifies(List<String> prefix) {
      for (List<String> q : qualifiers) {
        if (q.size() == prefix.size()) {
          boolean same = true;
          for (int i = 0; i < q.size() && same; i++) {
            same = q.get(i).equalsIgnoreCase(prefix.get(i));
          }
          if (same) {
            return true;
          }
        }
      }
      return false;
    }
  }

  /** The key columns of {@code t.k = s.k AND ...}; null for any other condition. */
  private List<String> keys(Expression condition, Side target, Side source) {
    List<String> out = new ArrayList<>();
    java.util.Deque<Expression> todo = new java.util.ArrayDeque<>(List.of(condition));
    boolean caseSensitive = session.sessionState().conf().caseSensitiveAnalysis();
    while (!todo.isEmpty()) {
      Expression e = todo.pop();
      if (e instanceof And) {
        todo.push(((And) e).right());
        todo.push(((And) e).left());
        continue;
      }
      if (!(e instanceof EqualTo)
          || !(((EqualTo) e).left() instanceof UnresolvedAttribute)
          || !(((EqualTo) e).right() instanceof UnresolvedAttribute)) {
        return null;
      }
      List<String> a = CollectionConverters.asJava(((UnresolvedAttribute) ((EqualTo) e).left()).nameParts());
      List<String> b = CollectionConverters.asJava(((UnresolvedAttribute) ((EqualTo) e).right()).nameParts());
      if (a.size() < 2 || b.size() < 2) {
        return null;
      }
      List<String> pa = a.subList(0, a.size() - 1);
      List<String> pb = b.subList(0, b.size() - 1);
      String ca = a.get(a.size() - 1);
      String cb = b.get(b.size() - 1);
      boolean straight = target.qualifies(pa) && source.qualifies(pb) && !source.qualifies(pa) && !target.qualifies(pb);
      boolean crossed = source.qualifies(pa) && target.qualifies(pb) && !target.qualifies(pa) && !source.qualifies(pb);
      if (!(straight || crossed) || !(caseSensitive ? ca.equals(cb) : ca.equalsIgnoreCase(cb))) {
        return null;
      }
      String column = straight ? ca : cb;
      if (out.stream().anyMatch(k -> caseSensitive ? k.equals(column) : k.equalsIgnoreCase(column))) {
        return null;
      }
      out.add(column);
    }
    return out;
  }

  private LogicalPlan toCall(UpdateTable update) {
    String text = statement(update.origin());
    if (text == null) {
      return null;
    }
    String whole = update.origin().sqlText().get();
    LogicalPlan target = update.table();
    if (target instanceof SubqueryAlias) {
      target = ((SubqueryAlias) target).child();
    }
    if (!(target instanceof UnresolvedRelation)) {
      return null;
    }
    Map<String, String> set = new LinkedHashMap<>();
    for (Assignment a : CollectionConverters.asJava(update.assignments())) {
      if (!(a.key() instanceof UnresolvedAttribute)) {
        return null;
      }
      List<String> name = CollectionConverters.asJava(((UnresolvedAttribute) a.key()).nameParts());
      String value = span(a.value(), whole);
      if (name.size() != 1 || value == null || set.containsKey(name.get(0))) {
        return null;
      }
      set.put(name.get(0), value);
    }
    String where = "";
    if (update.condition().isDefined()) {
      where = span(update.condition().get(), whole);
      if (where == null) {
        return null;
      }
    }
    List<String> table = lanceTable(CollectionConverters.asJava(((UnresolvedRelation) target).multipartIdentifier()));
    if (table == null) {
      return null;
    }
    return call(table, UpdateProcedure.NAME, Bridge.write(set), where, text);
  }

  /** {@code CALL <catalog>.system.<name>(<table's names as JSON>, args...)}; {@code table}: [catalog, names...]. */
  private static LogicalPlan call(List<String> table, String name, String... args) {
    List<String> procedure = List.of(table.get(0), EngineProcedure.NAMESPACE, name);
    List<Expression> values = new ArrayList<>();
    values.add(Literal.create(Bridge.write(table.subList(1, table.size())), DataTypes.StringType));
    for (String a : args) {
      values.add(Literal.create(a, DataTypes.StringType));
    }
    return new Call(
        new UnresolvedProcedure(CollectionConverters.asScala(procedure).toList()),
        CollectionConverters.asScala(values).toList(),
        true);
  }

  /** The statement's text when it is all of the text parsed (not one of a script's). */
  private static String statement(Origin origin) {
    if (origin.sqlText().isEmpty() || origin.startIndex().isEmpty() || origin.stopIndex().isEmpty()) {
      return null;
    }
    String text = origin.sqlText().get();
    int start = (Integer) origin.startIndex().get();
    int stop = (Integer) origin.stopIndex().get();
    if (start < 0 || stop >= text.length() || !text.substring(0, start).isBlank()) {
      return null;
    }
    String rest = text.substring(stop + 1).strip();
    return rest.isEmpty() || rest.equals(";") ? text.substring(start, stop + 1) : null;
  }

  /** The text of {@code e} in the statement, when the parser recorded where it is. */
  private static String span(org.apache.spark.sql.catalyst.trees.TreeNode<?> e, String text) {
    Origin o = e.origin();
    if (o.startIndex().isEmpty() || o.stopIndex().isEmpty() || o.sqlText().isEmpty() || !o.sqlText().get().equals(text)) {
      return null;
    }
    int start = (Integer) o.startIndex().get();
    int stop = (Integer) o.stopIndex().get();
    return start >= 0 && stop < text.length() && start <= stop ? text.substring(start, stop + 1) : null;
  }

  /** [catalog, namespace..., name] when {@code parts} names a table of a Lance catalog. */
  private List<String> lanceTable(List<String> parts) {
    CatalogManager catalogs = session.sessionState().catalogManager();
    List<String> out = new ArrayList<>();
    if (parts.size() > 1 && catalogs.isCatalogRegistered(parts.get(0))) {
      out.addAll(parts);
    } else {
      if (session.sessionState().catalog().isTempView(CollectionConverters.asScala(parts).toSeq())) {
        return null;
      }
      out.add(catalogs.currentCatalog().name());
      if (parts.size() == 1) {
        out.addAll(List.of(catalogs.currentNamespace()));
      }
      out.addAll(parts);
    }
    CatalogPlugin plugin = catalogs.catalog(out.get(0));
    return plugin instanceof LanceCatalog && out.size() >= 2 ? out : null;
  }
}
