package lance_partitioned;

import java.util.function.Supplier;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The session extension ({@code spark.sql.extensions=lance_partitioned.LanceSessionExtensions}):
 * SQL {@code UPDATE} of a catalog table runs in this project's engine ({@link SqlUpdates}).
 *
 * <p>Spark rewrites an {@code UPDATE} of a row-level table into a scan of the target and a
 * delta write in its Resolution batch, before any resolution rule a session can add; only a
 * hint-resolution rule sees the statement first. The rule turns it into a call of the
 * catalog's procedure {@code system.lance_update} ({@link UpdateProcedure}), which runs the
 * update through {@code update_rows}' engine (Lance's own {@code update}, or the rows read
 * and computed in the driver) and, when that engine does not compute it exactly as Spark,
 * runs the statement as Spark plans it, with the rule out of the way ({@link #bypassed}).
 */
public final class LanceSessionExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  private static final ThreadLocal<Boolean> BYPASS = ThreadLocal.withInitial(() -> Boolean.FALSE);

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectHintResolutionRule(
        new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(SparkSession session) {
            return new SqlUpdates(session);
          }
        });
    return BoxedUnit.UNIT;
  }

  /** Whether this thread runs a statement as Spark plans it (the rule leaves it alone). */
  static boolean bypassing() {
    return BYPASS.get();
  }

  /** {@code body} with the rule out of the way on this thread. */
  static <T> T bypassed(Supplier<T> body) {
    boolean before = BYPASS.get();
    BYPASS.set(Boolean.TRUE);
    try {
      return body.get();
    } finally {
      BYPASS.set(before);
    }
  }
}
