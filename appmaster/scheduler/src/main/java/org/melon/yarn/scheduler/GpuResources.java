package org.melon.yarn.scheduler;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmcontainer.RMContainer;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;

/**
 * The GPU resources of YARN's records, and each node's {@link NodeView}, rebuilt only when what the node holds
 * changed, so that looking at thousands of nodes costs a few field reads per unchanged node.
 */
final class GpuResources {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEMORY = "melon.io/gpu-memory";

  /** Per node (the scheduler's own object, by identity: a NodeId hashes its host name on every lookup). */
  private static final ConcurrentHashMap<NodeKey, Held> VIEWS = new ConcurrentHashMap<>();

  private GpuResources() {
  }

  /** A scheduler node as a map key, by identity. */
  private static final class NodeKey {
    final SchedulerNode node;
    final int hash;

    NodeKey(SchedulerNode node) {
      this.node = node;
      this.hash = System.identityHashCode(node);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof NodeKey && ((NodeKey) o).node == node;
    }

    @Override
    public int hashCode() {
      return hash;
    }
  }

  /**
   * What a node held when its view was built: its number of containers and allocated memory and vcores (a
   * container allocated or released changes the first), its total resource (the object: YARN replaces it when the
   * node's resource is updated), and the view.
   */
  static final class Held {
    final int containers;
    final long memoryMb;
    final int vcores;
    final Resource total;
    final NodeView view;

    Held(int containers, long memoryMb, int vcores, Resource total, NodeView view) {
      this.containers = containers;
      this.memoryMb = memoryMb;
      this.vcores = vcores;
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

  /** The node's GPUs as the RM can know them. */
  static NodeView view(SchedulerNode node) {
    return held(node).view;
  }

  /**
   * What the node holds and its view, rebuilt only when its number of containers, its allocated memory or vcores,
   * or its total resource changed (a container released and another of the same size allocated between two looks
   * is not noticed: the view then keeps the first one's GPU, a drift the executor's exit 75 absorbs).
   */
  static Held held(SchedulerNode node) {
    NodeKey key = new NodeKey(node);
    Held h = VIEWS.get(key);
    int containers = node.getNumContainers();
    Resource allocated = node.getAllocatedResource();
    long memoryMb = allocated.getMemorySize();
    int vcores = allocated.getVirtualCores();
    Resource total = node.getTotalResource();
    if (h != null && h.containers == containers && h.memoryMb == memoryMb && h.vcores == vcores
        && h.total == total) {
      return h;
    }
    long gpus = value(total, GPU);
    long gpuMb = value(total, GPU_MEMORY);
    NodeView view = gpuMb > 0 ? NodeView.estimate(gpus, gpuMb, containers(node)) : NodeView.NONE;
    h = new Held(containers, memoryMb, vcores, total, view);
    if (VIEWS.size() > 2 * knownNodes(node) + 16) {
      VIEWS.clear();  // nodes that left the cluster (each registration is a new node object): start afresh
    }
    VIEWS.put(key, h);
    SchedulerStats.get().viewBuilt();
    return h;
  }

  /** How many nodes the RM knows, through the node's RM context (0 when it cannot be reached). */
  private static int knownNodes(SchedulerNode node) {
    RMNode rmNode = node.getRMNode();
    RMContext context = rmNode == null ? null : rmNode.getRMContext();
    return context == null ? 0 : context.getRMNodes().size();
  }

  /** The node's containers in the order YARN allocated them: {whole GPUs, GPU memory} each. */
  private static List<long[]> containers(SchedulerNode node) {
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
  static void forget(SchedulerNode node) {
    VIEWS.remove(new NodeKey(node));
  }
}
