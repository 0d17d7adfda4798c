package org.melon.yarn.scheduler;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

/**
 * The Java view of a node's GPUs answers the shared cases exactly as Python's {@code gpu/node_view.py} does: the
 * same GPU for every container (so the same free memory per GPU), and the same verdict for every ask. The cases
 * are written by Python ({@code python -m tests.unit.test_node_view --write}), which checks them against itself.
 */
class NodeViewTest {

  @Test
  void answersTheSharedCasesAsPythonDoes() throws IOException {
    File file = new File(System.getProperty("melon.node-view.cases", "../../tests/data/node_view_cases.json"));
    JsonNode cases = new ObjectMapper().readTree(file).path("cases");
    assertTrue(cases.size() >= 100, "too few cases in " + file);
    List<String> wrong = new ArrayList<>();
    int i = 0;
    for (JsonNode c : cases) {
      List<long[]> held = new ArrayList<>();
      for (JsonNode h : c.path("containers")) {
        held.add(new long[] {h.get(0).asLong(), h.get(1).asLong()});
      }
      NodeView view = NodeView.estimate(c.path("gpus").asLong(), c.path("gpu_mb").asLong(), held);
      long[] expected = new long[c.path("free").size()];
      for (int g = 0; g < expected.length; g++) {
        expected[g] = c.path("free").get(g).asLong();
      }
      if (!java.util.Arrays.equals(expected, view.free)) {
        wrong.add("case " + i + ": free " + java.util.Arrays.toString(view.free) + ", Python "
            + java.util.Arrays.toString(expected));
      }
      for (JsonNode a : c.path("asks")) {
        boolean holds = view.holds(a.path("gpus").asLong(), a.path("gpu_mb").asLong());
        if (holds != a.path("holds").asBoolean()) {
          wrong.add("case " + i + ": ask " + a + " holds " + holds);
        }
      }
      i++;
    }
    assertEquals(List.of(), wrong);
  }

  @Test
  void twoHalvesSpreadOverTwoGpusLeaveNoWholeGpu() {
    List<long[]> held = new ArrayList<>();
    held.add(new long[] {0, 8192});
    held.add(new long[] {0, 8192});
    NodeView view = NodeView.estimate(2, 2 * 16384, held);
    assertArrayEquals(new long[] {8192, 8192}, view.free);
    assertEquals(16384, view.freeMb());
    assertTrue(!view.holds(1, 0) && !view.holds(0, 12000) && view.holds(0, 8192));
  }

  @Test
  void theGainsComeFromTheRuleFile() {
    assertEquals(1.0, LedgerRule.gain(0));
    assertEquals(0.0, LedgerRule.gain(LedgerRule.SMALL_TASK_GAINS.length + 5));
    assertTrue(LedgerRule.gain(1) > 0.5 && LedgerRule.gain(1) < 1.0);
  }
}
