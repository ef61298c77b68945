package lance_partitioned;

import java.io.IOException;
import java.net.URI;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * The latest {@code __manifest} version of a namespace on the local file system, from the
 * names in its {@code _versions} directory (Lance writes {@code <version>.manifest}, or
 * {@code <u64::MAX - version>.manifest} with 20 digits), with that file's size and
 * modification time: what tells the catalog that a description it holds is still the
 * latest (and of the same namespace, not one dropped and created again), with no Python
 * round trip.
 */
final class ManifestVersions {
  private static final int V2_DIGITS = 20;

  private ManifestVersions() {}

  /** {@code <version>:<size>:<mtime>} of the latest version, or null for a root that is not a
   * local path or cannot be listed. */
  static String latest(String root) {
    Path dir = local(root);
    if (dir == null) {
      return null;
    }
    long latest = -1;
    Path file = null;
    try (DirectoryStream<Path> names = Files.newDirectoryStream(dir.resolve("__manifest").resolve("_versions"), "*.manifest")) {
      for (Path p : names) {
        String stem = p.getFileName().toString();
        stem = stem.substring(0, stem.length() - ".manifest".length());
        if (stem.isEmpty() || !stem.chars().allMatch(Character::isDigit)) {
          continue;
        }
        long version = stem.length() == V2_DIGITS ? ~Long.parseUnsignedLong(stem) : Long.parseLong(stem);
        if (version > latest) {
          latest = version;
          file = p;
        }
      }
      if (file == null) {
        return null;
      }
      return latest + ":" + Files.size(file) + ":" + Files.getLastModifiedTime(file).toMillis();
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  /** The version a {@link #latest} answer names. */
  static long version(String latest) {
    return Long.parseLong(latest.substring(0, latest.indexOf(':')));
  }

  private static Path local(String root) {
    if (root.startsWith("/")) {
      return Paths.get(root);
    }
    if (root.startsWith("file:")) {
      try {
        return Paths.get(URI.create(root));
      } catch (RuntimeException e) {
        return null;
      }
    }
    return null;
  }
}
