package org.melon.yarn;

import java.util.Arrays;
import java.util.Collections;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * A task's GPU memory as the AM learns it: its peak (heartbeats and OOM reports, the best source winning) and what
 * an out-of-memory exit (76) makes of its expected memory (grown and asked for again, or failed). Called under the
 * task book's monitor.
 */
final class GpuMemory {

  /** The GPU memory YARN is asked for task {@code t}, MiB: its expected memory and context reserve (both grown
   * after OOMs), at least its role's slot; 0 for a task that does not share a GPU. */
  static long ask(Task t) {
    return t.expectedMb > 0 ? Math.max(t.expectedMb + t.contextMb, t.role.gpuSlotMb) : 0;
  }

  /** An OOM report's {@code signature} (the matched error line) is kept to this many characters. */
  static final int OOM_SIGNATURE_MAX = 200;
  /** An OOM report's {@code kind} when memory outside the framework's allocator ran out (Python's
   * {@code runtime/oom.py} OUTSIDE; {@code cap}, the other, is its CAP): the context reserve grows, not the expected
   * memory. The messages' schema ({@code am/messages.schema.json}) holds both. */
  static final String OUTSIDE = "outside";
  /** A context reserve grows by at least this much after an OOM outside the allocator, MiB (from 0, say). */
  static final long CONTEXT_STEP_MB = 256;
  /** Where a peak figure came from: the heartbeat's {@code gpu_memory_peak_source} and an OOM report's
   * {@code peak_source}, declared by Python's {@code runtime/peak.py} ({@code SOURCES}; {@code test_peak.py} checks
   * these lists against it). The first three are the framework's counters ({@code COUNTERS}). */
  static final List<String> PEAK_SOURCES = Collections.unmodifiableList(Arrays.asList(
      "tensorflow", "torch", "user", "nvml-process", "nvml-device"));
  static final List<String> PEAK_COUNTERS = PEAK_SOURCES.subList(0, 3);

  /** The largest GPU memory of one GPU any OOM report named (its node's largest GPU), MiB; 0: none known. A task's
   * expected GPU memory never grows past it. */
  private long largestGpuMb;
  /** The cluster's maximum allocation of {@code melon.io/gpu-memory} (the RM's answer at registration), MiB; 0:
   * unknown. A request above it would be refused by the RM (and end the AM), so growth stops there too. */
  long maxGpuMemoryMb;

  /** A heartbeat's {@code oom} (the final one of an attempt that ran out of GPU memory): kept as the attempt's and
   * the task's last report, its peak taken in ({@code peak_source}, else the heartbeat's {@code peakSource}: the
   * executor sends one figure), its node's largest GPU remembered. */
  void oomReported(Task t, JsonNode given, String peakSource) {
    ObjectNode report = report(t, given);
    if (report.path("peak_mb").isNumber()) {
      notePeak(t, report.path("peak_mb").asLong(),
          report.path("peak_source").isTextual() ? report.path("peak_source").asText() : peakSource);
    }
    if (report.path("largest_gpu_mb").isNumber()) {
      largestGpuMb = Math.max(largestGpuMb, report.path("largest_gpu_mb").asLong());
    }
    t.attemptOom = report;
    t.oom = report;
  }

  /** What an OOM leads to: the task asked for again ({@code again}; {@code text}: why) or FAILED ({@code text}: what
   * happened, with advice). */
  static final class Verdict {
    final boolean again;
    final String text;

    Verdict(boolean again, String text) {
      this.again = again;
      this.text = text;
    }
  }

  /**
   * {@code t} ran out of GPU memory (exit 76; its final heartbeat's {@code oom} says the cap, the peak, the node's
   * largest GPU and which memory ran out, {@code kind}; a lost report counts as one with the task's expected memory as
   * cap, no peak, and the cap's kind). In shared mode, while the task has growths left ({@code oom_max_growths}), the
   * figure that ran out grows by {@code oom_growth}: its expected GPU memory after an OOM at its cap ({@code cap}),
   * its context reserve (at least {@link #CONTEXT_STEP_MB} more) after one outside its framework's allocator
   * ({@code outside}: the CUDA context, cuBLAS, cuDNN, NCCL); the two together at most the largest GPU reported and
   * the cluster's maximum allocation. It is asked for again with that, not counted against the role's restarts.
   * Otherwise (growths used up, retry off, nothing left to grow into, exclusive mode) it FAILED: an OOM is never re-run
   * with the same memory, nor does it use the role's restarts, unless the report says {@code oversubscribed} (a
   * neighbour beyond its reservation, named in {@code culprit}, took the memory): that victim is asked for again with
   * the same memory, at most {@link TaskBook#MAX_NOT_ITS_FAULT} times.
   */
  Verdict afterOom(Task t) {
    ObjectNode report = t.attemptOom;
    if (report == null) {  // its final heartbeat was lost
      report = report(t, JsonNodeFactory.instance.objectNode());
      t.oom = report;
    }
    Role role = t.role;
    String what;
    String advice;
    if (role.gpus > 0) {
      what = "ran out of GPU memory on its " + role.gpus + " whole GPU(s) (exclusive mode: not retried with more)";
      advice = ": reduce the batch or ask for more gpus";
    } else if (t.expectedMb <= 0) {
      what = "ran out of GPU memory with no expected GPU memory (no cap: not retried with more)";
      advice = ": set roles." + role.name + ".gpu_memory";
    } else if (report.path("oversubscribed").asBoolean(false) && t.notItsFault < TaskBook.MAX_NOT_ITS_FAULT) {
      // a victim, not a culprit: a neighbour (or a process MeLoN did not place) held memory beyond its reservation
      t.notItsFault++;
      return new Verdict(true, "ran out of GPU memory on " + t.nodeHost + ", whose GPU was oversubscribed beyond its "
          + "reservations (" + report.path("culprit").asText("culprit unknown") + "): asking again with the same "
          + t.expectedMb + " MiB, not grown (re-run " + t.notItsFault + "/" + TaskBook.MAX_NOT_ITS_FAULT
          + ", not counted against the role's restarts)");
    } else {
      boolean outside = OUTSIDE.equals(report.path("kind").asText());
      long cap = report.path("cap_mb").isNumber() ? report.path("cap_mb").asLong() : t.expectedMb;
      Long peak = report.path("peak_mb").isNumber() ? Long.valueOf(report.path("peak_mb").asLong()) : t.attemptPeakMb;
      String exceeded = outside
          ? "ran out of GPU memory outside its framework's allocator (its context reserve " + t.contextMb + " MiB; cap "
              + cap + " MiB; peak seen " + (peak == null ? "unknown" : peak + " MiB") + ")"
          : "exceeded its expected GPU memory (cap " + cap + " MiB; peak seen "
              + (peak == null ? "unknown" : peak + " MiB") + ")";
      String notGrown;
      advice = outside
          ? "; the CUDA context, cuBLAS/cuDNN workspaces or NCCL buffers need more than " + t.contextMb + " MiB beside"
              + " the cap (the next run starts with the reserve it reached; an admin raises [melon] gpu_context_mb)"
          : "; raise roles." + role.name + ".gpu_memory above " + cap + " MiB";
      long other = outside ? t.expectedMb : t.contextMb;  // the figure that does not grow shares the GPU
      long now = outside ? t.contextMb : t.expectedMb;
      if (role.oomMaxGrowths == 0) {
        notGrown = "oom retry is off (oom_max_growths: 0)";
      } else if (t.oomGrowths >= role.oomMaxGrowths) {
        notGrown = "grown " + t.oomGrowths + " of " + role.oomMaxGrowths + " times";
      } else {
        long grown = (long) Math.ceil(now * role.oomGrowth - 1e-6);  // 1000 x 1.1 is 1100, not 1101
        if (outside) {
          grown = Math.max(grown, now + CONTEXT_STEP_MB);
        }
        notGrown = "oom_growth " + role.oomGrowth + " does not grow " + now + " MiB";
        if (largestGpuMb > 0 && grown + other > largestGpuMb) {  // expected memory and context share the GPU
          grown = largestGpuMb - other;
          notGrown = "already at the largest GPU (" + largestGpuMb + " MiB)";
          advice = "; reduce the batch or the model: no GPU seen has more memory";
        }
        if (maxGpuMemoryMb > 0 && grown + other > maxGpuMemoryMb) {
          grown = maxGpuMemoryMb - other;
          notGrown = "already at the cluster's maximum allocation of " + MelonApplicationMaster.GPU_MEM + " ("
              + maxGpuMemoryMb + " MiB)";
          advice = "; reduce the batch or the model: YARN grants no more";
        }
        if (grown > now) {
          t.oomGrowths++;
          String growth = " (growth " + t.oomGrowths + "/" + role.oomMaxGrowths
              + ", not counted against the role's restarts)";
          if (outside) {
            t.contextMb = grown;
            return new Verdict(true, exceeded + ": asking again with a context reserve of " + grown + " MiB beside"
                + " its unchanged " + t.expectedMb + " MiB" + growth);
          }
          t.expectedMb = grown;
          return new Verdict(true, exceeded + ": asking again with " + grown + " MiB" + growth);
        }
      }
      what = exceeded + ": " + notGrown;
    }
    return new Verdict(false, what + advice);
  }

  /** An OOM report of {@code t} as kept: the executor's fields ({@code cap_mb}, {@code peak_mb},
   * {@code largest_gpu_mb}: integers or null; {@code peak_source}, {@code kind} and {@code need_mb} when sent;
   * {@code signature}, at most
   * {@link #OOM_SIGNATURE_MAX} characters), with {@code cap_mb} filled from the task's expected memory (shared mode)
   * when it came without one. */
  private static ObjectNode report(Task t, JsonNode given) {
    ObjectNode o = JsonNodeFactory.instance.objectNode();
    for (String k : new String[] {"cap_mb", "peak_mb", "largest_gpu_mb"}) {
      if (given.path(k).isNumber()) {
        o.put(k, given.path(k).asLong());
      } else {
        o.putNull(k);
      }
    }
    if (o.path("cap_mb").isNull() && t.role.shared()) {
      o.put("cap_mb", t.expectedMb);
    }
    if (given.path("peak_source").isTextual()) {  // only when sent: the report as sent
      o.put("peak_source", given.path("peak_source").asText());
    }
    if (given.path("kind").isTextual()) {
      o.put("kind", given.path("kind").asText());
    }
    if (given.path("need_mb").isNumber()) {
      o.put("need_mb", given.path("need_mb").asLong());
    }
    String signature = given.path("signature").isTextual() ? given.path("signature").asText() : null;
    o.put("signature", signature == null || signature.length() <= OOM_SIGNATURE_MAX ? signature
        : signature.substring(0, OOM_SIGNATURE_MAX));
    if (given.path("oversubscribed").asBoolean(false)) {  // the GPU was full beyond its reservations: a victim
      String culprit = given.path("culprit").isTextual() ? given.path("culprit").asText() : null;
      o.put("oversubscribed", true);
      o.put("culprit", culprit == null || culprit.length() <= OOM_SIGNATURE_MAX ? culprit
          : culprit.substring(0, OOM_SIGNATURE_MAX));
    }
    return o;
  }

  /** Take in a peak figure and its source (null: not said): kept, for the task and for its attempt, when
   * {@link #peakWins} says so. */
  static void notePeak(Task t, long mb, String source) {
    if (peakWins(mb, source, t.attemptPeakMb, t.attemptPeakSource)) {
      t.attemptPeakMb = mb;
      t.attemptPeakSource = source;
    }
    if (peakWins(mb, source, t.gpuMemoryPeakMb, t.gpuMemoryPeakSource)) {
      t.gpuMemoryPeakMb = mb;
      t.gpuMemoryPeakSource = source;
    }
  }

  /** Whether figure {@code mb} from {@code source} takes the place of the one kept ({@code keptMb} from
   * {@code keptSource}; null: none). The rule is Python's {@code runtime.peak.task_peak}, which is its home: the
   * framework's counter wins whenever it has a figure (tensorflow, torch, user: the allocator's own count, so it
   * wins over an NVML figure even when that is larger), else NVML per process ({@code nvml-process}), else the
   * device's rise ({@code nvml-device}, neighbours included). Over heartbeats and attempts the AM applies it as a
   * rank, the largest figure of the best rank kept; a figure whose source was not said (an older executor) ranks
   * last. */
  static boolean peakWins(long mb, String source, Long keptMb, String keptSource) {
    if (keptMb == null) {
      return true;
    }
    int rank = peakRank(source);
    int kept = peakRank(keptSource);
    return rank > kept || (rank == kept && mb > keptMb);
  }

  private static int peakRank(String source) {
    if (source == null) {
      return 0;
    }
    return PEAK_COUNTERS.contains(source) ? 3 : "nvml-process".equals(source) ? 2 : 1;
  }
}
