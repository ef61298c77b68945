package lance_partitioned;

import org.apache.spark.sql.api.java.UDF1;

/**
 * murmur3 x86_32 with seed 0 of a byte array (SPEC-NOTES 7), as a signed int; NULL for NULL.
 *
 * <p>Spark's own hash() treats the trailing 1-3 bytes differently from the reference
 * algorithm; this is the reference algorithm. pipelines/columns/murmur3.py registers it as a Java
 * UDF when the jar is on the classpath and hashes strings and binaries with it.
 */
public final class Murmur3 implements UDF1<byte[], Integer> {
  private static final long serialVersionUID = 1L;
  private static final int C1 = 0xcc9e2d51;
  private static final int C2 = 0x1b873593;

  @Override
  public Integer call(byte[] data) {
    return data == null ? null : hash(data);
  }

  public static int hash(byte[] data) {
    int h = 0;
    int len = data.length;
    int i = 0;
    for (; i + 4 <= len; i += 4) {
      int k = (data[i] & 0xff) | ((data[i + 1] & 0xff) << 8) | ((data[i + 2] & 0xff) << 16) | (data[i + 3] << 24);
      h ^= mix(k);
      h = Integer.rotateLeft(h, 13) * 5 + 0xe6546b64;
    }
    int tail = len & 3;
    if (tail > 0) {
      int k = data[i] & 0xff;
      if (tail > 1) {
        k |= (data[i + 1] & 0xff) << 8;
      }
      if (tail > 2) {
        k |= (data[i + 2] & 0xff) << 16;
      }
      h ^= mix(k);
    }
    h ^= len;
    h ^= h >>> 16;
    h *= 0x85ebca6b;
    h ^= h >>> 13;
    h *= 0xc2b2ae35;
    h ^= h >>> 16;
    return h;
  }

  private static int mix(int k) {
    return Integer.rotateLeft(k * C1, 15) * C2;
  }
}
