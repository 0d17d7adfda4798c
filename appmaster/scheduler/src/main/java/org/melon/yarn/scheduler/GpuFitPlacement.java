package org.melon.yarn.scheduler;

import java.util.Optional;

import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceRequest;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.activities.DiagnosticsCollector;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.SchedulingMode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.PendingAsk;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.placement.LocalityAppPlacementAllocator;

/**
 * YARN's allocator of an application's asks, plus one check: a node is a candidate for an ask with GPUs only when
 * one of its GPUs can hold it ({@link NodeView#holds}): whole GPUs that are idle, or one GPU with the memory. YARN
 * itself only sees the node's sum of {@code melon.io/gpu-memory}, so without this check it grants a share on a node
 * whose free memory is split between GPUs none of which can take it, and the task exits 75 there. Asks without
 * GPUs (the AM's own container) are allocated exactly as YARN's default does.
 *
 * <p>An application asks for it with {@code APPLICATION_PLACEMENT_TYPE_CLASS=org.melon.yarn.scheduler.GpuFitPlacement}
 * in its AM container's environment (the ResourceManager copies it into the application's scheduling
 * environment); where the class is not on the RM's classpath, YARN falls back to its default allocator.
 */
public class GpuFitPlacement<N extends SchedulerNode> extends LocalityAppPlacementAllocator<N> {

  /**
   * Whether this ResourceManager's allocator has {@code precheckNode(node, mode, diagnostics)} (Hadoop 3.3 and later,
   * where the two-argument form calls it). Hadoop 3.1 and 3.2 have only {@code precheckNode(node, mode)}: there the
   * check runs in the two-argument override, and the three-argument one is never called. Decided once, from the
   * RM's own class, so one jar serves every line.
   */
  static final boolean DIAGNOSTICS_API = hasDiagnosticsApi(LocalityAppPlacementAllocator.class);

  static boolean hasDiagnosticsApi(Class<?> allocator) {
    for (java.lang.reflect.Method m : allocator.getMethods()) {
      if (m.getName().equals("precheckNode") && m.getParameterCount() == 3) {
        return true;
      }
    }
    return false;
  }

  /** Hadoop 3.1/3.2: YARN's check, then the GPU fit. Hadoop 3.3+: YARN's, which calls the override below. */
  @Override
  public boolean precheckNode(SchedulerNode node, SchedulingMode mode) {
    if (DIAGNOSTICS_API) {
      return super.precheckNode(node, mode);
    }
    return super.precheckNode(node, mode) && fits(node);
  }

  @Override
  public boolean precheckNode(SchedulerNode node, SchedulingMode mode, Optional<DiagnosticsCollector> dcOpt) {
    return super.precheckNode(node, mode, dcOpt) && fits(node);
  }

  private boolean fits(SchedulerNode node) {
    PendingAsk ask = getPendingAsk(ResourceRequest.ANY);
    Resource r = ask == null ? null : ask.getPerAllocationResource();
    long gpus = GpuResources.value(r, GpuResources.GPU);
    long gpuMb = GpuResources.value(r, GpuResources.GPU_MEMORY);
    if (gpus <= 0 && gpuMb <= 0) {
      return true;
    }
    boolean holds = GpuResources.view(node).holds(gpus, gpuMb);
    SchedulerStats.get().fitChecked(!holds);
    return holds;
  }
}
