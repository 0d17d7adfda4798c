package org.melon.yarn.scheduler;

import java.io.IOException;
import java.io.InputStream;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The node's ledger's choice of GPU ({@code airflow_provider_melon.gpu.policy.place_default}) for what the
 * ResourceManager can know: every task small, no MPS, each holding what it was granted. The same arithmetic as the
 * Python rule, so both answer alike on {@code tests/data/node_view_cases.json} (NodeViewTest); the anchor's throughput
 * gains come from {@code ledger-rule.json}, which Python writes.
 */
final class LedgerRule {

  /** Throughput one more small task adds to a GPU that holds k small ones (k = index); 0 beyond the table. */
  static final double[] SMALL_TASK_GAINS = loadGains();

  private LedgerRule() {
  }

  private static double[] loadGains() {
    try (InputStream in = LedgerRule.class.getResourceAsStream("ledger-rule.json")) {
      if (in == null) {
        throw new IllegalStateException("ledger-rule.json is missing from the melon-scheduler jar");
      }
      JsonNode gains = new ObjectMapper().readTree(in).path("small_task_gains");
      double[] out = new double[gains.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = gains.get(i).asDouble();
      }
      return out;
    } catch (IOException e) {
      throw new IllegalStateException("cannot read ledger-rule.json from the melon-scheduler jar", e);
    }
  }

  static double gain(int smallTasks) {
    return smallTasks < SMALL_TASK_GAINS.length ? SMALL_TASK_GAINS[smallTasks] : 0.0;
  }

  /** Python's {@code round(x, 9)}: the exact binary value rounded half-even to 9 decimals. */
  static double round9(double x) {
    return new BigDecimal(x).setScale(9, RoundingMode.HALF_EVEN).doubleValue();
  }

  /**
   * The GPU a task holding {@code mb} goes to, or -1 when none has the room. {@code total[i]}, {@code reserved[i]}
   * and {@code tasks.get(i)} (the MiB each task there holds) describe the node's GPUs. Among those with room: the
   * least fragmentation over the kinds the node holds, then the largest throughput gain, then the least room left,
   * then the lowest index.
   */
  static int place(long[] total, long[] reserved, List<List<Long>> tasks, long mb) {
    Map<Long, Integer> counts = new TreeMap<>();  // node_kinds: the node's tasks and the new one, by size
    for (List<Long> ts : tasks) {
      for (long t : ts) {
        counts.merge(t, 1, Integer::sum);
      }
    }
    counts.merge(mb, 1, Integer::sum);
    int n = 0;
    for (int c : counts.values()) {
      n += c;
    }
    long[] kindMb = new long[counts.size()];
    double[] weight = new double[counts.size()];
    int k = 0;
    for (Map.Entry<Long, Integer> e : counts.entrySet()) {
      kindMb[k] = e.getKey();
      weight[k++] = (double) e.getValue() / n;
    }
    int best = -1;
    double bestFrag = 0;
    double bestGain = 0;
    long bestLeft = 0;
    for (int i = 0; i < total.length; i++) {
      long left = room(total[i], reserved[i]) - mb;
      if (left < 0) {
        continue;
      }
      double frag = 0.0;
      for (int j = 0; j < kindMb.length; j++) {
        for (int g = 0; g < total.length; g++) {
          long r = g == i ? room(total[g], reserved[g] + mb) : room(total[g], reserved[g]);
          if (total[g] > 0 && r < kindMb[j]) {
            frag += weight[j] * (double) r / (double) total[g];
          }
        }
      }
      frag = round9(frag);
      double gain = -round9(gain(tasks.get(i).size()));
      // the key (frag, -gain, left, index), compared as Python compares tuples (so -0.0 == 0.0)
      if (best < 0 || frag < bestFrag || (frag == bestFrag && (gain < bestGain
          || (gain == bestGain && left < bestLeft)))) {
        best = i;
        bestFrag = frag;
        bestGain = gain;
        bestLeft = left;
      }
    }
    return best;
  }

  static long room(long total, long reserved) {
    return Math.max(0, total - reserved);
  }
}
