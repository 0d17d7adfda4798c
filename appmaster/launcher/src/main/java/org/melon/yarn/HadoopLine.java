package org.melon.yarn;

import org.apache.hadoop.util.VersionInfo;

/**
 * What the Hadoop line the launcher runs on has, decided from its version at run time (the launcher is built once
 * per line, but its code is one): node attributes and the CapacityScheduler's multi-node placement
 * ({@code MultiNodeLookupPolicy}, which the scheduler plug-in implements) both date from Hadoop 3.2.0 (YARN-3409,
 * YARN-7494). docs/hadoop-compat.md lists them.
 */
final class HadoopLine {
  private HadoopLine() {}

  static String version() {
    return VersionInfo.getVersion();
  }

  /** {@code "3.1.4"} → {3, 1}; {0, 0} when the version does not parse. */
  static int[] majorMinor(String version) {
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("^\\s*(\\d+)\\.(\\d+)").matcher(String.valueOf(version));
    return m.find() ? new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))} : new int[] {0, 0};
  }

  static boolean atLeast(String version, int major, int minor) {
    int[] v = majorMinor(version);
    return v[0] > major || (v[0] == major && v[1] >= minor);
  }

  static boolean hasNodeAttributes() {
    return atLeast(version(), 3, 2);
  }

  static boolean hasMultiNodePlacement() {
    return atLeast(version(), 3, 2);
  }
}
