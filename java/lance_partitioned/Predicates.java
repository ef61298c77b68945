package lance_partitioned;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark's V2 predicates as JSON for the Python side (partitioning/sql/predicates.py), and which
 * of them a scan applies itself, exactly: those on identity partition columns only, with
 * operators and literal types the Python evaluator follows Spark on. Every other predicate
 * stays Spark's and only prunes.
 */
final class Predicates {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final List<String> COMPARISONS = Arrays.asList("=", "<>", "<=>", "<", "<=", ">", ">=");
  private static final List<String> STRINGS = Arrays.asList("STARTS_WITH", "ENDS_WITH", "CONTAINS");

  private Predicates() {}

  static ArrayNode toJson(Predicate[] predicates) {
    ArrayNode out = NODES.arrayNode();
    for (Predicate p : predicates) {
      out.add(node(p, 0));
    }
    return out;
  }

  static ObjectNode node(Expression e, int depth) {
    ObjectNode out = NODES.objectNode();
    if (depth > 64) {
      return out.put("op", "opaque");
    }
    if (e instanceof NamedReference) {
      ArrayNode parts = out.putArray("col");
      for (String part : ((NamedReference) e).fieldNames()) {
        parts.add(part);
      }
      return out;
    }
    if (e instanceof Literal) {
      Literal<?> lit = (Literal<?>) e;
      out.put("type", lit.dataType().typeName());
      putValue(out, lit.value());
      return out;
    }
    if (e instanceof Predicate) {
      Predicate p = (Predicate) e;
      out.put("op", p.name());
      ArrayNode children = out.putArray("children");
      for (Expression child : p.children()) {
        children.add(node(child, depth + 1));
      }
      return out;
    }
    return out.put("op", "opaque");
  }

  private static void putValue(ObjectNode out, Object value) {
    if (value == null) {
      out.putNull("lit");
    } else if (value instanceof UTF8String) {
      out.put("lit", value.toString());
    } else if (value instanceof Decimal) {
      out.put("lit", ((Decimal) value).toJavaBigDecimal().toPlainString());
    } else if (value instanceof byte[]) {
      out.put("lit", Base64.getEncoder().encodeToString((byte[]) value));
    } else if (value instanceof Boolean) {
      out.put("lit", (Boolean) value);
    } else if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        out.put("lit", Double.toString(d));
      } else {
        out.put("lit", d);
      }
    } else if (value instanceof Number) {
      out.put("lit", ((Number) value).longValue());
    } else {
      out.put("lit", value.toString());
      out.put("type", "unknown");
    }
  }

  /** Whether the scan can apply {@code e} exactly: identity partition columns only. */
  static boolean exact(Expression e, Set<String> identity) {
    if (!(e instanceof Predicate)) {
      return false;
    }
    Predicate p = (Predicate) e;
    Expression[] children = p.children();
    String name = p.name();
    switch (name) {
      case "ALWAYS_TRUE":
      case "ALWAYS_FALSE":
        return true;
      case "AND":
      case "OR":
      case "NOT":
        for (Expression child : children) {
          if (!exact(child, identity)) {
            return false;
          }
        }
        return children.length > 0;
      case "IS_NULL":
      case "IS_NOT_NULL":
        return children.length == 1 && onIdentity(children[0], identity);
      default:
        break;
    }
    boolean known = COMPARISONS.contains(name) || name.equals("IN") || STRINGS.contains(name);
    if (!known || children.length < 2 || !onIdentity(children[0], identity)) {
      return false;
    }
    for (int i = 1; i < children.length; i++) {
      if (!(children[i] instanceof Literal) || !exactType(((Literal<?>) children[i]).dataType())) {
        return false;
      }
    }
    return !STRINGS.contains(name) || DataTypes.StringType.equals(((Literal<?>) children[1]).dataType());
  }

  private static boolean onIdentity(Expression e, Set<String> identity) {
    return e instanceof NamedReference
        && ((NamedReference) e).fieldNames().length == 1
        && identity.contains(((NamedReference) e).fieldNames()[0]);
  }

  private static boolean exactType(DataType t) {
    return t instanceof IntegerType
        || t instanceof LongType
        || t instanceof ShortType
        || t instanceof ByteType
        || DataTypes.StringType.equals(t)
        || t instanceof DateType
        || t instanceof BooleanType
        || t instanceof DecimalType;
  }
}
