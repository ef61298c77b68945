package lance_partitioned;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.Filter;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.config.Configuration;
import org.apache.logging.log4j.core.config.LoggerConfig;
import org.apache.logging.log4j.core.filter.AbstractFilter;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * {@code spark.plugins=lance_partitioned.QuietErrors}: a project error raised in a task (bad
 * input: a NULL in a required column, a vector of the wrong length, ...) reaches the user as
 * its own one line, from the driver; this plugin keeps Spark's executor and scheduler logs from
 * printing the same error again with its Java and Python stacks, in the driver and in every
 * executor JVM. Only warnings and errors that carry a project error are held back; Spark's own
 * internal errors keep their traces.
 */
public final class QuietErrors implements SparkPlugin {
  /** What a project error carries: its Python class or the message prefix of its JVM checks. */
  static final String[] MARKERS = {"partitioning.errors.", "lance_partitioned:", "lance_partitioned.Lance", "[LANCE_"};

  private static final Set<Configuration> INSTALLED = Collections.newSetFromMap(new IdentityHashMap<>());

  @Override
  public DriverPlugin driverPlugin() {
    return new DriverPlugin() {
      @Override
      public Map<String, String> init(SparkContext sc, PluginContext ctx) {
        install();
        return Collections.emptyMap();
      }
    };
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext ctx, Map<String, String> extraConf) {
        install();
      }
    };
  }

  /** Add the filter to every logger of the current log4j configuration, once (public: Python calls it by reflection). */
  public static synchronized void install() {
    // Spark's own context: this class may come from ADD JAR's class loader, whose context
    // (log4j selects one per class loader) is not the one Spark's loggers write to
    org.apache.logging.log4j.spi.LoggerContext found = LogManager.getContext(SparkContext.class.getClassLoader(), false);
    if (!(found instanceof LoggerContext)) {
      return; // another logging backend: nothing to filter
    }
    LoggerContext context = (LoggerContext) found;
    Configuration config = context.getConfiguration();
    if (!INSTALLED.add(config)) {
      return;
    }
    ProjectErrorFilter filter = new ProjectErrorFilter();
    for (LoggerConfig logger : config.getLoggers().values()) {
      logger.addFilter(filter);
    }
    config.getRootLogger().addFilter(filter);
    context.updateLoggers();
  }

  /** Denies a WARN or ERROR event of Spark's whose message or exception carries a project error. */
  static final class ProjectErrorFilter extends AbstractFilter {
    ProjectErrorFilter() {
      super(Filter.Result.DENY, Filter.Result.NEUTRAL);
    }

    @Override
    public Filter.Result filter(LogEvent event) {
      if (!event.getLevel().isMoreSpecificThan(Level.WARN) || event.getLoggerName().startsWith("lance_partitioned")) {
        return Filter.Result.NEUTRAL;
      }
      if (carries(event.getMessage() == null ? null : event.getMessage().getFormattedMessage())) {
        return Filter.Result.DENY;
      }
      int depth = 0;
      for (Throwable t = event.getThrown(); t != null && depth < 16; t = t.getCause(), depth++) {
        if (carries(t.getMessage())) {
          return Filter.Result.DENY;
        }
      }
      return Filter.Result.NEUTRAL;
    }

    private static boolean carries(String text) {
      if (text == null) {
        return false;
      }
      for (String marker : MARKERS) {
        if (text.contains(marker)) {
          return true;
        }
      }
      return false;
    }
  }
}
