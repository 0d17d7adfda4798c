package org.melon.yarn.scheduler;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One node's GPUs as the ResourceManager can know them: each GPU's free memory after the node's ledger placed the
 * node's containers (by {@link LedgerRule}), in the order YARN allocated them. Mirrors
 * {@code airflow_provider_melon.gpu.node_view}; both answer {@code tests/data/node_view_cases.json} alike.
 */
final class NodeView {

  /** A node without GPUs. */
  static final NodeView NONE = new NodeView(0, new long[0]);

  /** Each GPU's memory (MiB, the unit of {@code melon.io/gpu-memory}). */
  final long perGpu;
  /** Each GPU's free memory. */
  final long[] free;

  private NodeView(long perGpu, long[] free) {
    this.perGpu = perGpu;
    this.free = free;
  }

  /**
   * The view of a node with {@code gpus} GPUs ({@code yarn.io/gpu}) and {@code gpuMb} of {@code melon.io/gpu-memory}
   * in all (one GPU where it advertises memory but no count), holding {@code held}: per container in allocation
   * order, {@code {whole GPUs, GPU memory}}. Whole GPUs take the lowest idle ones; a share goes where the ledger
   * puts it; a container that no GPU holds any more (the RM's view and the node's drifted apart) takes the GPU with
   * the most room, down to none left.
   */
  static NodeView estimate(long gpus, long gpuMb, List<long[]> held) {
    int n = (int) Math.max(1, gpus);
    long per = gpuMb / n;
    if (per <= 0) {
      return NONE;
    }
    long[] total = new long[n];
    long[] reserved = new long[n];
    List<List<Long>> tasks = new ArrayList<>();
    Arrays.fill(total, per);
    for (int i = 0; i < n; i++) {
      tasks.add(new ArrayList<>());
    }
    for (long[] c : held) {
      if (c[0] > 0) {
        for (int i : wholeGpus(total, reserved, tasks, (int) c[0])) {
          reserved[i] += per;
          tasks.get(i).add(per);
        }
      } else if (c[1] > 0) {
        int i = LedgerRule.place(total, reserved, tasks, c[1]);
        if (i < 0) {
          i = mostRoom(total, reserved);
        }
        reserved[i] += c[1];
        tasks.get(i).add(c[1]);
      }
    }
    long[] free = new long[n];
    for (int i = 0; i < n; i++) {
      free[i] = LedgerRule.room(total[i], reserved[i]);
    }
    return new NodeView(per, free);
  }

  /** The lowest idle GPUs ({@code policy.exclusive_set}); where too few are idle, those with the most room. */
  private static List<Integer> wholeGpus(long[] total, long[] reserved, List<List<Long>> tasks, int count) {
    List<Integer> idle = new ArrayList<>();
    for (int i = 0; i < total.length; i++) {
      if (tasks.get(i).isEmpty() && reserved[i] <= 0) {
        idle.add(i);
      }
    }
    if (idle.size() >= count) {
      return idle.subList(0, count);
    }
    List<Integer> byRoom = new ArrayList<>();
    for (int i = 0; i < total.length; i++) {
      byRoom.add(i);
    }
    byRoom.sort((a, b) -> Long.compare(LedgerRule.room(total[b], reserved[b]), LedgerRule.room(total[a], reserved[a])));
    return byRoom.subList(0, Math.min(count, byRoom.size()));
  }

  private static int mostRoom(long[] total, long[] reserved) {
    int best = 0;
    for (int i = 1; i < total.length; i++) {
      if (LedgerRule.room(total[i], reserved[i]) > LedgerRule.room(total[best], reserved[best])) {
        best = i;
      }
    }
    return best;
  }

  /** Could a container asking for {@code gpus} whole GPUs, or {@code gpuMb} of one GPU's memory, go here? */
  boolean holds(long gpus, long gpuMb) {
    if (gpus > 0) {
      int idle = 0;
      for (long f : free) {
        if (f >= perGpu) {
          idle++;
        }
      }
      return idle >= gpus;
    }
    if (gpuMb > 0) {
      for (long f : free) {
        if (f >= gpuMb) {
          return true;
        }
      }
      return false;
    }
    return true;
  }

  /** The GPU memory still free on the node, all GPUs together. */
  long freeMb() {
    long sum = 0;
    for (long f : free) {
      sum += f;
    }
    return sum;
  }
}
