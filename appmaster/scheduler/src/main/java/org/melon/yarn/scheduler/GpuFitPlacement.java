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

  @Override
  public boolean precheckNode(SchedulerNode node, SchedulingMode mode, Optional<DiagnosticsCollector> dcOpt) {
    if (!super.precheckNode(node, mode, dcOpt)) {
      return false;
    }
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
