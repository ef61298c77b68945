package lance_partitioned;

import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkThrowable;

/**
 * A project error at the SQL door: one line, {@code [LANCE_<KIND>] <the project's line>}, with an
 * error class and SQLSTATE, instead of Spark's {@code [PYTHON_DATA_SOURCE_ERROR] Failed to create
 * Python data source instance: partitioning.errors.X: ...} and a separate {@code SQLSTATE} line.
 * It is an {@link IllegalArgumentException}, which PySpark (classic and Connect) and the
 * {@code spark-sql} CLI show as that one line. The Spark error it replaces is kept as a
 * suppressed exception, not as the cause: PySpark would show a Python worker's error given
 * as a cause in its place.
 */
public final class LanceSqlError extends IllegalArgumentException implements SparkThrowable {
  private static final long serialVersionUID = 1L;
  /** The last {@code partitioning.errors.<Class>: <line>} of a Python error's text (a traceback may precede it). */
  private static final Pattern PROJECT_ERROR =
      Pattern.compile("(?m)partitioning\\.(?:errors|sql\\.binding|sql\\.tokens)\\.(\\w+): (.+)$");
  /** The project's errors defined beside the code that raises them, as the kind they subclass. */
  private static final Map<String, String> SUBCLASSES = Map.of("UnknownColumn", "SchemaError", "SqlSyntaxError", "InvalidInput");
  private static final Map<String, String> STATES =
      Map.of(
          "InvalidInput", "22023",
          "SpecError", "22023",
          "SchemaError", "22023",
          "NamespaceNotFound", "42P01",
          "TableNotFound", "42P01",
          "NamespaceAlreadyExists", "42P07",
          "ConcurrentModification", "40001",
          "Unsupported", "0A000",
          "CorruptNamespace", "XX001");

  /** Spark's errors that carry a Python error's text (a driver call's, a task's). */
  private static final java.util.Set<String> PYTHON_CONDITIONS = java.util.Set.of("PYTHON_DATA_SOURCE_ERROR", "PYTHON_EXCEPTION");

  private final String condition;
  private final String sqlState;
  private final String line;

  private LanceSqlError(String condition, String sqlState, String line, Throwable failure) {
    super("[" + condition + "] " + line);
    this.condition = condition;
    this.sqlState = sqlState;
    this.line = line;
    if (failure != null) {
      addSuppressed(failure); // kept for a stack trace, but not the cause: PySpark shows a Python cause instead
    }
  }

  @Override
  public String getCondition() {
    return condition;
  }

  @Override
  public String getSqlState() {
    return sqlState;
  }

  @Override
  public Map<String, String> getMessageParameters() {
    return Map.of("message", line);
  }

  /** Bad input the JVM layer refuses itself (a missing option, a bad path): one line. */
  static LanceSqlError invalid(String line) {
    return new LanceSqlError("LANCE_INVALID_INPUT", "22023", bare(line), null);
  }

  /** A statement that lost every attempt to other writers' changes: one line, {@code failure} kept. */
  static LanceSqlError conflict(String line, Throwable failure) {
    return new LanceSqlError("LANCE_CONCURRENT_MODIFICATION", "40001", line, failure);
  }

  /** The project's line, without the {@code [CONDITION]} prefix. */
  String line() {
    return line;
  }

  /** What the JVM layer does not support (RENAME TABLE, ADD PARTITION, ...): one line. */
  static LanceSqlError unsupported(String line) {
    return new LanceSqlError("LANCE_UNSUPPORTED", "0A000", bare(line), null);
  }

  private static String bare(String line) {
    return line.startsWith("lance_partitioned: ") ? line.substring("lance_partitioned: ".length()) : line;
  }

  /** {@code LANCE_SPEC_ERROR} for {@code SpecError}. */
  static String condition(String pythonClass) {
    return "LANCE_" + pythonClass.replaceAll("([a-z0-9])([A-Z])", "$1_$2").toUpperCase(java.util.Locale.ROOT);
  }

  /**
   * The one-line error for a failure of a call into the Python side: a project error raised
   * there becomes a {@link LanceSqlError}; anything else is returned as it is (to rethrow).
   */
  static RuntimeException of(Throwable failure) {
    Throwable cause = failure;
    while (cause != null) {
      if (cause instanceof LanceSqlError) {
        return (LanceSqlError) cause;
      }
      if (fromPython(cause)) {
        // the Python error's text: in "msg" (a driver call's) or "traceback" (a worker's)
        StringBuilder text = new StringBuilder(String.valueOf(cause.getMessage()));
        if (cause instanceof SparkThrowable) {
          for (String value : ((SparkThrowable) cause).getMessageParameters().values()) {
            text.append('\n').append(value);
          }
        }
        Matcher m = PROJECT_ERROR.matcher(text);
        String kind = null;
        String line = null;
        while (m.find()) {
          kind = SUBCLASSES.getOrDefault(m.group(1), m.group(1));
          line = m.group(2).trim();
        }
        if (kind != null) {
          return new LanceSqlError(condition(kind), STATES.getOrDefault(kind, "38000"), line, failure);
        }
      }
      cause = cause.getCause();
    }
    return failure instanceof RuntimeException ? (RuntimeException) failure : LanceSqlError.<RuntimeException>rethrow(failure);
  }

  /** Throw {@code failure} as it is (Spark's checked exceptions are not declared in Java). */
  @SuppressWarnings("unchecked")
  private static <E extends Throwable> RuntimeException rethrow(Throwable failure) throws E {
    throw (E) failure;
  }

  /** A Spark error that carries a Python error's text: a driver call's, or a Python worker's in a task. */
  private static boolean fromPython(Throwable t) {
    if (t.getClass().getName().equals("org.apache.spark.api.python.PythonException")) {
      return true;
    }
    return t instanceof SparkThrowable && PYTHON_CONDITIONS.contains(((SparkThrowable) t).getCondition());
  }

  /** {@code call}, its project errors as one-line {@link LanceSqlError}s. */
  static <T> T guarded(java.util.function.Supplier<T> call) {
    try {
      return call.get();
    } catch (Exception e) {
      throw of(e);
    }
  }

  /** {@code call}, its project errors as one-line {@link LanceSqlError}s. */
  static void guarded(Runnable call) {
    try {
      call.run();
    } catch (Exception e) {
      throw of(e);
    }
  }
}
