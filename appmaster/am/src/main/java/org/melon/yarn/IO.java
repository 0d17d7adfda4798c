package org.melon.yarn;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;

/** Stream helpers the AM's Java 8 target lacks ({@code InputStream.readAllBytes}/{@code transferTo} are Java 9). */
final class IO {
  private IO() {
  }

  /** Everything {@code in} has left (null: none). */
  static byte[] readAll(InputStream in) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    if (in != null) {
      copy(in, out);
    }
    return out.toByteArray();
  }

  /** {@code in} to its end into {@code out}, in 64 KiB reads; the number of bytes copied. */
  static long copy(InputStream in, OutputStream out) throws IOException {
    byte[] buf = new byte[64 * 1024];
    long total = 0;
    for (int n; (n = in.read(buf)) != -1; ) {
      out.write(buf, 0, n);
      total += n;
    }
    return total;
  }
}
