package lance_partitioned;

import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.TreePattern$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import scala.Option;

/**
 * A SQL {@code DELETE}, {@code UPDATE} or {@code MERGE INTO} whose commit lost to another
 * writer's change of rows it read is run again, as the Python API's row-level changes are.
 *
 * <p>Spark's row-level operations give a connector no way to plan a statement again, so the
 * delta write's commit does it: it aborts its own rows (nothing was committed) and runs the
 * statement's own text (the origin Spark's parser gives the plan) again in the same session,
 * which reads the latest version. The runs inside are marked with a local property, so a
 * conflict there fails that run instead of nesting; this loop spends the attempts, and only
 * then the one-line {@code LANCE_CONCURRENT_MODIFICATION} error reaches the user.
 *
 * <p>Not run again: a statement with parameter markers (its arguments are not in the text), a
 * text that is not the one statement (a script), a plan built by the DataFrame API (no text).
 */
final class Rerun {
  static final int ATTEMPTS = 8;
  static final String CONFLICT = "LANCE_CONCURRENT_MODIFICATION";
  private static final String INSIDE = "lance_partitioned.rerun";
  private static final Set<String> STATEMENTS = Set.of("DeleteFromTable", "UpdateTable", "MergeIntoTable");

  private Rerun() {}

  static boolean conflict(RuntimeException failure) {
    RuntimeException e = LanceSqlError.of(failure);
    return e instanceof LanceSqlError && CONFLICT.equals(((LanceSqlError) e).getCondition());
  }

  /** True inside a run this class started: a conflict there is for the loop to handle. */
  static boolean inside() {
    SparkContext sc = SparkContext.getOrCreate();
    return "true".equals(sc.getLocalProperty(INSIDE));
  }

  /** The running statement and its session, when it can be run again; otherwise null. */
  static Statement statement() {
    String id = SparkContext.getOrCreate().getLocalProperty(SQLExecution.EXECUTION_ID_KEY());
    if (id == null) {
      return null;
    }
    QueryExecution qe = SQLExecution.getQueryExecution(Long.parseLong(id));
    if (qe == null) {
      return null;
    }
    Option<String> text = qe.logical().origin().sqlText();
    if (text.isEmpty()) {
      return null;
    }
    SparkSession session = qe.sparkSession();
    LogicalPlan parsed;
    try {
      parsed = session.sessionState().sqlParser().parsePlan(text.get());
    } catch (Exception notOneStatement) { // ParseException: not one statement Spark parses alone
      return null;
    }
    LogicalPlan statement = parsed.getClass().getSimpleName().equals("UnresolvedWith") ? parsed.children().head() : parsed;
    if (!STATEMENTS.contains(statement.getClass().getSimpleName()) || parsed.containsPattern(TreePattern$.MODULE$.PARAMETER())) {
      return null;
    }
    return new Statement(session, text.get());
  }

  /** The statement, its text and session. */
  static final class Statement {
    final SparkSession session;
    final String text;

    Statement(SparkSession session, String text) {
      this.session = session;
      this.text = text;
    }

    /**
     * Runs the statement again until a run commits; {@code first}: the conflict of the run
     * that called this. After {@link #ATTEMPTS} runs that each lost, the last conflict's line.
     */
    void runAgain(String command, String root, RuntimeException first) {
      SparkContext sc = session.sparkContext();
      String before = sc.getLocalProperty(INSIDE);
      RuntimeException last = first;
      for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
        Bridge.LOG.info("{} on {}: {}; running the statement again ({} of {})", command, root, why(last, command, root), attempt, ATTEMPTS);
        pause(attempt);
        sc.setLocalProperty(INSIDE, "true");
        try {
          session.sql(text);
          return;
        } catch (RuntimeException failure) {
          if (!conflict(failure)) {
            throw failure;
          }
          last = LanceSqlError.of(failure);
        } finally {
          sc.setLocalProperty(INSIDE, before);
        }
      }
      throw LanceSqlError.conflict(
          command
              + " on "
              + root
              + " ran "
              + (ATTEMPTS + 1)
              + " times and another writer changed rows it read before each commit; nothing was committed (last: "
              + why(last, command, root)
              + ")",
          last);
    }
  }

  /** Why a run lost: its conflict's line without the statement and root before it or the advice after it. */
  private static String why(RuntimeException e, String command, String root) {
    String line = e instanceof LanceSqlError ? ((LanceSqlError) e).line() : String.valueOf(e.getMessage());
    String prefix = command + " on " + root + ": ";
    if (line.startsWith(prefix)) {
      line = line.substring(prefix.length());
    }
    String advice = "; nothing was committed, run the statement again";
    return line.endsWith(advice) ? line.substring(0, line.length() - advice.length()) : line;
  }

  private static void pause(int attempt) {
    long most = Math.min(2000L, 100L << Math.min(attempt, 5));
    try {
      Thread.sleep(ThreadLocalRandom.current().nextLong(most / 2, most + 1));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting to run the statement again", e);
    }
  }
}
