package lance_partitioned;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Describe answers of tables at their latest {@code __manifest} version, reused only while a
 * local root's latest version file is the one described ({@link ManifestVersions#latest}: the
 * version, the file's size and modification time), so a reused answer is never stale and a
 * query plans without a Python round trip. Other stores are described every time. At most
 * 256 answers, the least recently used going first.
 */
final class Descriptions {
  private final Map<String, Seen> seen =
      Collections.synchronizedMap(
          new LinkedHashMap<String, Seen>(16, 0.75f, true) {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Seen> eldest) {
              return size() > 256;
            }
          });

  /** An answer and the {@link ManifestVersions#latest} it describes. */
  private static final class Seen {
    final JsonNode answer;
    final String latest;

    Seen(JsonNode answer, String latest) {
      this.answer = answer;
      this.latest = latest;
    }
  }

  /** The answer kept under {@code key}, while its root's latest version file is the one it read; else null. */
  JsonNode current(String key) {
    Seen s = seen.get(key);
    if (s == null) {
      return null;
    }
    return s.latest.equals(ManifestVersions.latest(s.answer.path("root").asText(""))) ? s.answer : null;
  }

  /** Keep an answer when the latest version file, listed after it, is the one it read. */
  void remember(String key, JsonNode answer) {
    String latest = ManifestVersions.latest(answer.path("root").asText(""));
    if (latest != null && !answer.has("error") && ManifestVersions.version(latest) == answer.path("version").asLong(-1)) {
      seen.put(key, new Seen(answer, latest));
    } else {
      seen.remove(key);
    }
  }

  void forget(String key) {
    seen.remove(key);
  }
}
