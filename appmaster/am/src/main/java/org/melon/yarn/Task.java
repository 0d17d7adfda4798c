package org.melon.yarn;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;

/** One task = one container at a time. */
final class Task {
  final Role role;
  final int index;
  final int number;
  State state = State.PENDING;
  int attempt;
  int noFitRetries;
  int notItsFault;
  ContainerRequest request;
  /** Its outstanding ask when its role names GPU models ({@link GpuModels}), instead of {@link #request}. */
  SchedulingRequest scheduling;
  Container container;
  /** Whether {@link #container} was started; a granted container is held unlaunched until the gang is whole. */
  boolean launched;
  String nodeHost;
  String host;
  int port;
  boolean registered;
  Integer exitCode;
  /** The host this task left with exit 75 (no GPU fits there): avoided until the task is placed elsewhere. */
  String avoidHost;
  /** The NodeManager (host:port) it left with exit 75, since when, and how many grants there it gave back. */
  String avoidNode;
  long avoidNodeSince;
  int nodeRefusals;
  String gpu;
  /** GPU memory reserved for the task on its GPU (its expected memory), MiB. */
  long gpuMemoryMb;
  /** GPU memory the task's processes use (NVML, from heartbeats), MiB; null without a GPU. */
  Long gpuMemoryUsedMb;
  /** The task's expected GPU memory, MiB: its role's, grown after each OOM in shared mode. Its containers are asked
   * for with it ({@code melon.io/gpu-memory}) and its executor caps the process at it. */
  long expectedMb;
  /** How many times {@link #expectedMb} or {@link #contextMb} grew after an OOM. */
  int oomGrowths;
  /** What the task reserves on its GPU beside {@link #expectedMb}, MiB: the CUDA context, the libraries' handles and
   * buffers, outside the cap. Its role's ({@code gpu_context_mb}), grown after an OOM outside the framework's
   * allocator ({@code oom.kind} {@code outside}). */
  long contextMb;
  /** The peak GPU memory of the task's processes over all its attempts (heartbeats, OOM reports), MiB: the largest
   * figure of the best source ({@link GpuMemory#peakWins}); null: none reported. */
  Long gpuMemoryPeakMb;
  /** Where {@link #gpuMemoryPeakMb} came from ({@link GpuMemory#PEAK_SOURCES}); null: not said (an older executor). */
  String gpuMemoryPeakSource;
  /** The same for the current attempt only. */
  Long attemptPeakMb;
  String attemptPeakSource;
  /** The current attempt's OOM report (from its final heartbeat); null: none. */
  ObjectNode attemptOom;
  /** The last OOM of the task as reported ({@code cap_mb} filled in when it came without one); null: none. */
  ObjectNode oom;
  /** Whether the task's node runs a CUDA MPS control daemon (reported at registration). */
  boolean mps;
  Long step;
  /** What {@code step} counts up to (epochs, steps), when the job reports it: progress = step / total. */
  Long total;
  Double loss;
  /** The job's other numbers from its last report (accuracy, learning rate, ...). */
  final Map<String, Double> metrics = new TreeMap<>();
  /** [epoch ms, step, loss] each time the step changed, at most {@link TaskBook#HISTORY}. */
  final ArrayDeque<double[]> history = new ArrayDeque<>();
  /** The containers the task was started in, in order, the last {@code MAX_CONTAINERS} ({@code container_id},
   * {@code node_id}, {@code attempt}, {@code expected_gpu_memory_mb}, {@code exit_code}: null while it runs). */
  final List<ObjectNode> containers = new ArrayList<>();
  String message;
  long updated;
  /** When this attempt last reported a new step (0: none yet), and when it registered: the stall watchdog's
   * clock ({@link TaskBook#checkStall}). */
  long stepAt;
  long registeredAt;

  Task(Role role, int index, int number, long now) {
    this.role = role;
    this.index = index;
    this.number = number;
    this.updated = now;
    this.expectedMb = role.gpuMemoryMb;
    this.contextMb = role.gpuContextMb;
  }

  String name() {
    return role.name + ":" + index;
  }

  boolean live() {
    return container != null && (state == State.ALLOCATED || state == State.RUNNING
        || state == State.REGISTERED);
  }
}
