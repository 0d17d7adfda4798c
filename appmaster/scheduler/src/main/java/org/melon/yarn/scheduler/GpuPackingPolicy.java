package org.melon.yarn.scheduler;

import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.resourcemanager.RMContext;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.QueueMetrics;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.SchedulerNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.placement.MultiNodeLookupPolicy;

/**
 * The CapacityScheduler's node order under multi-node placement ({@code
 * yarn.scheduler.capacity.multi-node-sorting.policy.<name>.class}): best fit by GPU memory, the node with the least
 * GPU memory still free first (as the RM can know it per GPU: {@link NodeView}), then the node whose memory and
 * vcores are most used, then the node id. The scheduler grants an ask on the first node in this order that has
 * room, so GPUs fill node by node and whole nodes stay whole for tasks that need several GPUs; nodes without GPUs
 * come first, so tasks without GPUs leave the GPU nodes' memory and cores alone. Which GPU a task gets stays the
 * node's ledger's choice; that the node has one GPU with the room is {@link GpuFitPlacement}'s check.
 *
 * <p>Brought up to date before every placement when the sorting interval is 0, at a cost of one comparison per
 * node that held nothing new; skipped altogether while the cluster allocated and released nothing (its root
 * queue's counters), and at most {@link #FULL_PASS_NS} apart.
 */
public class GpuPackingPolicy<N extends SchedulerNode> implements MultiNodeLookupPolicy<N> {

  /** However still the cluster looks, every node is looked at again this often. */
  static final long FULL_PASS_NS = 1_000_000_000L;

  private final Map<String, Order<N>> partitions = new ConcurrentHashMap<>();

  public GpuPackingPolicy() {
    // the ledger's gains load here, when the RM starts and builds its policies: a jar without them fails the RM's
    // start with LedgerRule's message rather than a scheduling thread later
    LedgerRule.gain(0);
    SchedulerStats.get().policyLoaded();
  }

  /** Tells two entries of one node id apart (a NodeManager that registers again is a new node object). */
  private static final AtomicLong ENTRIES = new AtomicLong();

  /** One node's place in the order, and what it was computed from. */
  static final class Ranked<N extends SchedulerNode> implements Comparable<Ranked<N>> {
    final N node;
    final GpuResources.Held basis;
    final long freeMb;
    final double used;
    final long entry = ENTRIES.incrementAndGet();
    long pass;

    Ranked(N node, GpuResources.Held basis) {
      this.node = node;
      this.basis = basis;
      this.freeMb = basis.view.freeMb();
      Resource total = basis.total;
      this.used = Math.max(fraction(basis.memoryMb, total.getMemorySize()),
          fraction(basis.vcores, total.getVirtualCores()));
    }

    @Override
    public int compareTo(Ranked<N> o) {
      int c = Long.compare(freeMb, o.freeMb);
      if (c == 0) {
        c = Double.compare(o.used, used);
      }
      if (c == 0) {
        c = node.getNodeID().compareTo(o.node.getNodeID());
      }
      return c != 0 ? c : Long.compare(entry, o.entry);
    }
  }

  /** A partition's nodes, in order, and where each one is (by the scheduler's node object). */
  private static final class Order<N extends SchedulerNode> {
    final ConcurrentSkipListSet<Ranked<N>> sorted = new ConcurrentSkipListSet<>();
    final Map<N, Ranked<N>> byNode = new IdentityHashMap<>();
    long pass;
    long lastFullNs;
    long allocated = -1;
    long released = -1;
  }

  private static double fraction(long part, long whole) {
    return whole > 0 ? (double) part / whole : 1.0;
  }

  @Override
  public synchronized void addAndRefreshNodesSet(Collection<N> nodes, String partition) {
    long start = System.nanoTime();
    Order<N> order = partitions.computeIfAbsent(partition, p -> new Order<>());
    QueueMetrics metrics = rootMetrics(nodes);
    long allocated = metrics == null ? -1 : metrics.getAggregateAllocatedContainers();
    long released = metrics == null ? -1 : metrics.getAggegatedReleasedContainers();
    if (metrics != null && allocated == order.allocated && released == order.released
        && nodes.size() == order.byNode.size() && start - order.lastFullNs < FULL_PASS_NS) {
      return;  // nothing was allocated or released since the last pass: the order stands
    }
    long pass = ++order.pass;
    for (N node : nodes) {
      GpuResources.Held held = GpuResources.held(node);
      Ranked<N> before = order.byNode.get(node);
      if (before != null && before.basis == held) {
        before.pass = pass;
        continue;
      }
      if (before != null) {
        order.sorted.remove(before);
      }
      Ranked<N> now = new Ranked<>(node, held);
      now.pass = pass;
      order.sorted.add(now);
      order.byNode.put(node, now);
    }
    if (order.byNode.size() > nodes.size()) {  // some node left the partition
      order.byNode.values().removeIf(r -> {
        if (r.pass != pass) {
          order.sorted.remove(r);
          GpuResources.forget(r.node);
          return true;
        }
        return false;
      });
    }
    order.allocated = allocated;
    order.released = released;
    order.lastFullNs = start;
    SchedulerStats.get().sorted(order.sorted.size(), System.nanoTime() - start);
  }

  /** The root queue's metrics, through any node's RM context; null when they cannot be reached. */
  private QueueMetrics rootMetrics(Collection<N> nodes) {
    Iterator<N> it = nodes.iterator();
    if (!it.hasNext()) {
      return null;
    }
    RMNode rmNode = it.next().getRMNode();
    RMContext context = rmNode == null ? null : rmNode.getRMContext();
    return context == null || context.getScheduler() == null ? null : context.getScheduler().getRootQueueMetrics();
  }

  @Override
  public Iterator<N> getPreferredNodeIterator(Collection<N> nodes, String partition) {
    Order<N> order = partitions.get(partition);
    if (order == null) {
      return nodes.iterator();
    }
    Iterator<Ranked<N>> ranked = order.sorted.iterator();
    return new Iterator<N>() {
      @Override
      public boolean hasNext() {
        return ranked.hasNext();
      }

      @Override
      public N next() {
        return ranked.next().node;
      }
    };
  }

  @Override
  public Set<N> getNodesPerPartition(String partition) {
    Order<N> order = partitions.get(partition);
    if (order == null) {
      return Collections.emptySet();
    }
    Set<N> out = new LinkedHashSet<>();
    for (Ranked<N> r : order.sorted) {
      out.add(r.node);
    }
    return Collections.unmodifiableSet(out);
  }
}
