package lance_partitioned;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How the JVM layer reaches the project's Python engine: every call goes through a fresh
 * {@link PythonDataSourceV2} of the Python source {@code lance_partitioned_py}
 * (pipelines/jvm/source.py), so no scan, write or catalog call ever shares another's state.
 * A call is the source's {@code schema()} with {@code lp.call} set; its answer is JSON in
 * the returned schema's metadata.
 */
final class Bridge {
  static final String PYTHON_SOURCE = "lance_partitioned_py";
  /**
   * The Spark this layer was compiled against (java/build_jar.py writes it into the jar as
   * {@code lance_partitioned/spark-version}); another one gets the plain Python source.
   */
  static final String COMPILED_FOR = compiledFor();
  static final ObjectMapper JSON = new ObjectMapper();
  static final Logger LOG = LoggerFactory.getLogger("lance_partitioned");
  private static volatile Boolean compatible;

  private Bridge() {}

  private static String compiledFor() {
    try (java.io.InputStream in = Bridge.class.getResourceAsStream("spark-version")) {
      return in == null ? "unknown" : new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8).trim();
    } catch (java.io.IOException e) {
      return "unknown";
    }
  }

  /** The switch off: {@code spark.lance_partitioned.jvm.enabled=false} gives the Python source as is. */
  static final String ENABLED_CONF = "spark.lance_partitioned.jvm.enabled";

  /** Whether the layer plans here: this Spark is the one it was compiled for (checked once,
   * logged once if not) and the session did not switch it off. */
  /** The oldest Spark the layer plans on: {@code make test-matrix} runs it on each minor from here. */
  static final String OLDEST = "4.1";

  /**
   * Whether a jar compiled against Spark {@code compiled} plans on Spark {@code running}: a
   * minor from {@link #OLDEST} to the compiled one (the layer reaches the APIs that differ
   * between them by reflection; one jar, proven on each by {@code make test-matrix}).
   */
  static boolean covers(String compiled, String running) {
    int[] c = minor(compiled);
    int[] r = minor(running);
    int[] o = minor(OLDEST);
    if (c == null || r == null || r[0] != c[0]) {
      return false;
    }
    return r[1] <= c[1] && (r[0] > o[0] || r[1] >= o[1]);
  }

  private static int[] minor(String version) {
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("^(\\d+)\\.(\\d+)").matcher(version);
    return m.find() ? new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))} : null;
  }

  static boolean compatible() {
    if ("false".equalsIgnoreCase(org.apache.spark.sql.internal.SQLConf.get().getConfString(ENABLED_CONF, "true"))) {
      return false;
    }
    Boolean known = compatible;
    if (known == null) {
      String running = org.apache.spark.package$.MODULE$.SPARK_VERSION();
      known = covers(COMPILED_FOR, running);
      if (!known) {
        LOG.warn(
            "lance_partitioned: this jar was compiled for Spark {} and runs on Spark {} (it plans on Spark {} "
                + "to the minor it was compiled for); using the Python data source as is (no per-scan pushdown, "
                + "catalog or SQL DML)",
            COMPILED_FOR,
            running,
            OLDEST);
      }
      compatible = known;
    }
    return known;
  }

  /** The session's time zone, for a timestamp written without one. */
  static String sessionTimeZone() {
    return org.apache.spark.sql.internal.SQLConf.get().sessionLocalTimeZone();
  }

  /** The master of the active session (the Python side refuses a relative root on a cluster). */
  static String master() {
    scala.Option<org.apache.spark.sql.SparkSession> active = org.apache.spark.sql.SparkSession.getActiveSession();
    return active.isDefined() ? active.get().sparkContext().master() : null;
  }

  /** Whether the session's client is Spark Connect (set by pipelines.source.datasource.jvm_layer). */
  static boolean connect() {
    return "true".equals(org.apache.spark.sql.internal.SQLConf.get().getConfString(CONNECT_CONF, "false"));
  }

  static final String CONNECT_CONF = "spark.lance_partitioned.connect";

  /** Where the session runs, for the Python side's checks of a relative root. */
  static Map<String, String> sessionOptions() {
    Map<String, String> out = new HashMap<>();
    String master = master();
    if (master != null) {
      out.put("lp.master", master);
    }
    out.put("lp.connect", Boolean.toString(connect()));
    return out;
  }

  static PythonDataSourceV2 source() {
    PythonDataSourceV2 ds = new PythonDataSourceV2();
    ds.setShortName(PYTHON_SOURCE);
    return ds;
  }

  /** Run {@code schema()} of a fresh source with these options; the JSON answer. */
  static JsonNode ask(Map<String, String> options) {
    StructType answer = LanceSqlError.guarded(() -> source().inferSchema(new CaseInsensitiveStringMap(options)));
    return parse(answer);
  }

  static JsonNode parse(StructType answer) {
    if (answer.fields().length != 1 || !answer.fields()[0].metadata().contains("lp")) {
      throw new IllegalStateException("lance_partitioned: the Python side answered " + answer.simpleString());
    }
    try {
      return JSON.readTree(answer.fields()[0].metadata().getString("lp"));
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("lance_partitioned: the Python side answered no JSON", e);
    }
  }

  /** A catalog call with its arguments; the JSON answer. */
  static JsonNode call(String name, Map<String, Object> args, Map<String, String> storage) {
    Map<String, String> options = new HashMap<>(storage);
    options.put("lp.call", name);
    options.put("lp.args", write(args));
    return ask(options);
  }

  static String write(Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("lance_partitioned: cannot write " + value, e);
    }
  }

  /** These options without the bridge's own keys ({@code lp.*}): the plain Python source's. */
  static Map<String, String> plain(Map<String, String> options) {
    Map<String, String> out = new HashMap<>(options);
    out.keySet().removeIf(k -> k.toLowerCase(java.util.Locale.ROOT).startsWith("lp."));
    return out;
  }

  /** A stream out of the namespace these options name: the Python source's stream reader
   * (Spark plans a stream's scan as a batch's, so every scan this layer builds can stream). */
  static org.apache.spark.sql.connector.read.streaming.MicroBatchStream stream(
      Map<String, String> options, String checkpointLocation) {
    Map<String, String> plain = plain(options);
    PythonDataSourceV2 python = source();
    CaseInsensitiveStringMap o = new CaseInsensitiveStringMap(plain);
    return LanceSqlError.guarded(
        () -> {
          org.apache.spark.sql.connector.catalog.Table t =
              python.getTable(python.inferSchema(o), new org.apache.spark.sql.connector.expressions.Transform[0], plain);
          return ((org.apache.spark.sql.connector.catalog.SupportsRead) t)
              .newScanBuilder(o)
              .build()
              .toMicroBatchStream(checkpointLocation);
        });
  }

  /** Read options only a stream takes (pipelines/source/stream_reader.py). */
  static final java.util.Set<String> STREAM_ONLY = java.util.Set.of("startingversion", "on_change");

  /** A batch read given a stream's option: refused in one line, as the Python source refuses it. */
  static void refuseStreamOptions(Map<String, String> options) {
    for (String key : options.keySet()) {
      if (STREAM_ONLY.contains(key.toLowerCase(java.util.Locale.ROOT))) {
        throw LanceSqlError.invalid(
            "lance_partitioned: option " + key + " is for spark.readStream only; a batch read takes versionAsOf "
                + "or timestampAsOf");
      }
    }
  }

  /** The storage options ({@code storage.<key>}) among these options. */
  static Map<String, String> storageOptions(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().toLowerCase(java.util.Locale.ROOT).startsWith("storage.")) {
        out.put(e.getKey(), e.getValue());
      }
    }
    return out;
  }
}
