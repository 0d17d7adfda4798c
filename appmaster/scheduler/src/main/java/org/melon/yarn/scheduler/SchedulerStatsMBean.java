package org.melon.yarn.scheduler;

/** What the plug-in reports on the ResourceManager's {@code /jmx} (name {@link SchedulerStats#NAME}). */
public interface SchedulerStatsMBean {

  /** The plug-in's version (the provider's). */
  String getVersion();

  /** Whether the node-sorting policy was loaded (multi-node placement names it). */
  boolean getPolicyLoaded();

  /** Nodes in the policy's order, all partitions. */
  int getSortedNodes();

  /** Passes that brought the order up to date. */
  long getSortPasses();

  /** Nanoseconds spent in those passes, in all. */
  long getSortNanos();

  /** Node views rebuilt because what the node holds changed. */
  long getViewsBuilt();

  /** Nodes the GPU-fit allocator checked for an ask with GPUs. */
  long getFitChecks();

  /** Of those, nodes it turned down: no single GPU there could hold the ask. */
  long getFitRefusals();
}
