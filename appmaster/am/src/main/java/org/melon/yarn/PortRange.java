package org.melon.yarn;

import java.io.IOException;
import java.net.BindException;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.concurrent.ThreadLocalRandom;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The ports the AM's HTTP server may listen on: {@code MELON_PORT_RANGE=low-high}, the variable the executors read
 * for their tasks' ports ({@code airflow_provider_melon/runtime/ports.py}, whose {@code parse_range} rule this
 * follows: 1024 &lt;= low &lt;= high &lt;= 65535), so that a firewall opens one range for the job's every listener.
 * The AM takes it from its own environment (the NodeManager's {@code yarn.nodemanager.admin-env}, which YARN forces
 * on every container, the tasks' too), else from the plan's {@code env} (the job's {@code env} and the yarn
 * connection's {@code container_env}: what its tasks get). Without it the server takes an ephemeral port.
 */
final class PortRange {

  static final String VAR = "MELON_PORT_RANGE";

  final int low;
  final int high;
  /** Where the range came from, for the AM's log. */
  final String source;

  private PortRange(int low, int high, String source) {
    this.low = low;
    this.high = high;
    this.source = source;
  }

  /** {@code low-high}: ASCII digits, at most five each (ports.py's {@code RANGE}; both sides are tested on
   * {@code tests/data/port_range_cases.json}). */
  private static final Pattern RANGE = Pattern.compile("\\s*([0-9]{1,5})\\s*-\\s*([0-9]{1,5})\\s*");

  /** {@code "low-high"}; an {@link IllegalArgumentException} naming {@link #VAR} otherwise. */
  static PortRange parse(String text, String source) {
    Matcher m = RANGE.matcher(text);
    if (!m.matches()) {
      throw new IllegalArgumentException(VAR + "='" + text + "' (" + source + "): expected 'low-high', e.g. "
          + "'50100-50200'");
    }
    int low = Integer.parseInt(m.group(1));
    int high = Integer.parseInt(m.group(2));
    if (!(1024 <= low && low <= high && high <= 65535)) {
      throw new IllegalArgumentException(VAR + "='" + text + "' (" + source + "): needs 1024 <= low <= high <= "
          + "65535");
    }
    return new PortRange(low, high, source);
  }

  /** The range the AM's environment or else the plan's {@code env} sets; null when neither does. */
  static PortRange of(Map<String, String> env, JsonNode planEnv) {
    String own = env.get(VAR);
    if (own != null && !own.trim().isEmpty()) {
      return parse(own, "the NodeManager's environment");
    }
    JsonNode job = planEnv == null ? null : planEnv.get(VAR);
    if (job != null && job.isTextual() && !job.asText().trim().isEmpty()) {
      return parse(job.asText(), "the job's env");
    }
    return null;
  }

  /** Something bound to one port. */
  interface Binder<T> {
    T bind(int port) throws IOException;
  }

  /** {@code binder} on each port of the range in turn, from one at random, until one is free. */
  <T> T bind(Binder<T> binder, String host) throws IOException {
    int size = high - low + 1;
    int first = ThreadLocalRandom.current().nextInt(size);
    for (int i = 0; i < size; i++) {
      try {
        return binder.bind(low + (first + i) % size);
      } catch (BindException e) {
        // taken: the next one
      }
    }
    throw new BindException("no free port in " + this + " on " + host + ": all " + size + " taken");
  }

  @Override
  public String toString() {
    return VAR + "=" + low + "-" + high + " (" + source + ")";
  }
}
