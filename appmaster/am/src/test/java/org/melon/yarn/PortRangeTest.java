package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;

import java.io.File;
import java.io.IOException;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.Collections;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

/** The AM's HTTP port in {@code MELON_PORT_RANGE}: the rule of the executors' ports.py, where it comes from, and a
 * free port of the range taken whichever others are taken. */
class PortRangeTest {

  private static final String LOOPBACK = InetAddress.getLoopbackAddress().getHostAddress();

  @Test
  void parsesAsTheExecutorDoesAndNamesTheVariable() {
    PortRange r = PortRange.parse(" 50100-50200 ", "the job's env");
    assertEquals(50100, r.low);
    assertEquals(50200, r.high);
    assertEquals("MELON_PORT_RANGE=50100-50200 (the job's env)", r.toString());
  }

  /** The cases ports.py's test reads too: one rule on both sides. */
  @Test
  void parsesTheSharedCasesAsPortsPyDoes() throws IOException {
    File file = new File(System.getProperty("melon.port-range.cases", "../../tests/data/port_range_cases.json"));
    JsonNode cases = new ObjectMapper().readTree(file).path("cases");
    assertTrue(cases.size() >= 10, "too few cases in " + file);
    for (JsonNode c : cases) {
      String text = c.path("text").asText();
      if (c.has("range")) {
        PortRange r = PortRange.parse(text, "x");
        assertEquals(c.path("range").get(0).asInt(), r.low, text);
        assertEquals(c.path("range").get(1).asInt(), r.high, text);
        continue;
      }
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PortRange.parse(text, "x"),
          text);
      String expected = "format".equals(c.path("error").asText()) ? "): expected 'low-high'"
          : "): needs 1024 <= low <= high <= 65535";
      assertTrue(e.getMessage().startsWith("MELON_PORT_RANGE='" + text + "' (x") && e.getMessage().contains(expected),
          e.getMessage());
    }
  }

  @Test
  void theNodeManagersEnvironmentWinsOverTheJobsEnv() {
    String planEnv = "{MELON_PORT_RANGE: '50100-50200'}";
    PortRange forced = PortRange.of(Collections.singletonMap("MELON_PORT_RANGE", "40000-40010"), json(planEnv));
    assertEquals(40000, forced.low);
    assertEquals("the NodeManager's environment", forced.source);
    PortRange job = PortRange.of(Collections.emptyMap(), json(planEnv));
    assertEquals(50100, job.low);
    assertEquals("the job's env", job.source);
    assertNull(PortRange.of(Collections.emptyMap(), json("{OTHER: '1'}")));
    assertNull(PortRange.of(Collections.singletonMap("MELON_PORT_RANGE", " "), json("{}")));
  }

  @Test
  void theServerTakesTheRangesFreePortAndSaysWhenNoneIs() throws IOException {
    int low;
    try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      low = probe.getLocalPort();  // free once closed; its neighbour is checked below
    }
    try (ServerSocket taken = new ServerSocket()) {
      taken.bind(new InetSocketAddress(LOOPBACK, low));
      PortRange two = PortRange.parse(low + "-" + (low + 1), "the job's env");
      AmHttp http = new AmHttp(null, "s", "application_1_0001", null);
      int port;
      try {
        port = http.start(LOOPBACK, two);
      } catch (BindException e) {  // the neighbour is someone else's: nothing to learn from this pair
        return;
      }
      try {
        assertEquals(low + 1, port);
        BindException none = assertThrows(BindException.class,
            () -> new AmHttp(null, "s", "application_1_0001", null).start(LOOPBACK, two));
        assertEquals("no free port in MELON_PORT_RANGE=" + low + "-" + (low + 1) + " (the job's env) on " + LOOPBACK
            + ": all 2 taken", none.getMessage());
      } finally {
        http.stop();
      }
    }
  }
}
