package lance_partitioned;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.analysis.UnresolvedProcedure;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.plans.logical.Assignment;
import org.apache.spark.sql.catalyst.plans.logical.Call;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
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
 * parser's positions). Anything else (another statement, a script, a parameterized query, a
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
    if (!(plan instanceof UpdateTable) || LanceSessionExtensions.bypassing()) {
      return plan;
    }
    if ("false".equalsIgnoreCase(session.sessionState().conf().getConfString(ENABLED_CONF, "true"))
        || !Bridge.compatible()) {
      return plan;
    }
    LogicalPlan call = toCall((UpdateTable) plan);
    return call != null ? call : plan;
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
    List<String> procedure = List.of(table.get(0), UpdateProcedure.NAMESPACE, UpdateProcedure.NAME);
    List<Expression> args = new ArrayList<>();
    args.add(Literal.create(Bridge.write(table.subList(1, table.size())), DataTypes.StringType));
    args.add(Literal.create(Bridge.write(set), DataTypes.StringType));
    args.add(Literal.create(where, DataTypes.StringType));
    args.add(Literal.create(text, DataTypes.StringType));
    return new Call(
        new UnresolvedProcedure(CollectionConverters.asScala(procedure).toList()),
        CollectionConverters.asScala(args).toList(),
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
  private static String span(Expression e, String text) {
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
