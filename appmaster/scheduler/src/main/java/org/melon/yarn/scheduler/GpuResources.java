package org.melon.yarn.scheduler;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;

/**
 * The GPU resources of YARN's records, and each node's {@link NodeView}, rebuilt only when what the node holds
 * changed (its allocated resource), so that ordering thousands of nodes costs a comparison per unchanged node.
 */
final class GpuResources {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEMORY = "melon.io/gpu-memory";

  /** Per node: what it held when its view was built (allocated resource, number of containers), and the view. */
  private static final ConcurrentHashMap<NodeId, Cached> VIEWS = new ConcurrentHashMap<>();

  private GpuResources() {
  }

  private static final class Cached {
    final Resource allocated;
    final int containers;
    final Resource total;
    final NodeView view;

    Cached(Resource allocated, int containers, Resource total, NodeView view) {
      this.allocated = allocated;
      this.containers = containers;
      this.total = total;
      this.view = view;
    }
  }

  /** {@code r}'s value of the resource type {@code name}; 0 when the cluster does not know the type. */
  static long value(Resource r, String name) {
    if (r == null) {
      return 0;
    }
    try {
      return r.getResourceValue(name);
    } catch (RuntimeException e) {  // ResourceNotFoundException: the type is not configured
      return 0;
    }
  }

  /**
   * The node's GPUs as the RM can know them, cached while the node's allocation and number of containers stay the
   * same (a container released and another of the same size allocated between two looks is not noticed: the view
   * then keeps the first one's GPU, a drift the executor's exit 75 absorbs).
   */
  static NodeView view(SchedulerNode node) {
    Resource allocated = Resource.newInstance(node.getAllocatedResource());
    int containers = node.getNumContainers();
    Resource total = node.getTotalResource();
    Cached c = VIEWS.get(node.getNodeID());
    if (c != null && c.containers == containers && c.allocated.equals(allocated) && c.total.equals(total)) {
      return c.view;
    }
    long gpus = value(total, GPU);
    long gpuMb = value(total, GPU_MEMORY);
    NodeView view = gpuMb > 0 ? NodeView.estimate(gpus, gpuMb, held(node)) : NodeView.NONE;
    VIEWS.put(node.getNodeID(), new Cached(allocated, containers, Resource.newInstance(total), view));
    SchedulerStats.get().viewBuilt();
    return view;
  }

  /** The node's containers in the order YARN allocated them: {whole GPUs, GPU memory} each. */
  private static List<long[]> held(SchedulerNode node) {
    List<RMContainer> containers = new ArrayList<>(node.getCopiedListOfRunningContainers());
    containers.sort(Comparator.comparingLong(RMContainer::getCreationTime)
        .thenComparing(RMContainer::getContainerId));
    List<long[]> out = new ArrayList<>(containers.size());
    for (RMContainer c : containers) {
      Resource r = c.getAllocatedResource();
      out.add(new long[] {value(r, GPU), value(r, GPU_MEMORY)});
    }
    return out;
  }

  /** Forget a node's view (it left the cluster). */
  static void forget(NodeId node) {
    VIEWS.remove(node);
  }
}
