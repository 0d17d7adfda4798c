package org.melon.yarn.scheduler;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import javax.management.JMException;
import javax.management.ObjectName;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The plug-in's counters, registered once per ResourceManager JVM as an MBean, so that the RM's {@code /jmx} shows
 * whether it places by the plug-in (what {@code melon doctor} reads) and what ordering the nodes costs.
 */
public final class SchedulerStats implements SchedulerStatsMBean {

  /** The MBean's name on the RM's {@code /jmx} ({@code ?qry=} takes it as it is). */
  public static final String NAME = "Hadoop:service=ResourceManager,name=MelonScheduler";
  /** The plug-in's version: the provider's, written into the jar's manifest. */
  static final String VERSION = String.valueOf(SchedulerStats.class.getPackage().getImplementationVersion());

  private static final Logger LOG = LoggerFactory.getLogger(SchedulerStats.class);
  private static final SchedulerStats STATS = register();

  private volatile boolean policyLoaded;
  private final AtomicInteger sortedNodes = new AtomicInteger();
  private final AtomicLong sortPasses = new AtomicLong();
  private final AtomicLong sortNanos = new AtomicLong();
  private final AtomicLong viewsBuilt = new AtomicLong();
  private final AtomicLong fitChecks = new AtomicLong();
  private final AtomicLong fitRefusals = new AtomicLong();

  private SchedulerStats() {
  }

  static SchedulerStats get() {
    return STATS;
  }

  private static SchedulerStats register() {
    SchedulerStats stats = new SchedulerStats();
    try {
      ManagementFactory.getPlatformMBeanServer().registerMBean(stats, new ObjectName(NAME));
    } catch (JMException e) {  // already registered by another class loader, or no MBean server: counting goes on
      LOG.warn("MeLoN scheduler plug-in: could not register " + NAME + ": " + e);
    }
    return stats;
  }

  void policyLoaded() {
    policyLoaded = true;
  }

  void sorted(int nodes, long nanos) {
    sortedNodes.set(nodes);
    sortPasses.incrementAndGet();
    sortNanos.addAndGet(nanos);
  }

  void viewBuilt() {
    viewsBuilt.incrementAndGet();
  }

  void fitChecked(boolean refused) {
    fitChecks.incrementAndGet();
    if (refused) {
      fitRefusals.incrementAndGet();
    }
  }

  @Override
  public String getVersion() {
    return VERSION;
  }

  @Override
  public boolean getPolicyLoaded() {
    return policyLoaded;
  }

  @Override
  public int getSortedNodes() {
    return sortedNodes.get();
  }

  @Override
  public long getSortPasses() {
    return sortPasses.get();
  }

  @Override
  public long getSortNanos() {
    return sortNanos.get();
  }

  @Override
  public long getViewsBuilt() {
    return viewsBuilt.get();
  }

  @Override
  public long getFitChecks() {
    return fitChecks.get();
  }

  @Override
  public long getFitRefusals() {
    return fitRefusals.get();
  }
}
