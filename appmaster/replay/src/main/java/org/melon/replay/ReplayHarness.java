package org.melon.replay;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.protocolrecords.GetNewApplicationRequest;
import org.apache.hadoop.yarn.api.protocolrecords.SubmitApplicationRequest;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ExecutionType;
import org.apache.hadoop.yarn.api.records.ExecutionTypeRequest;
import org.apache.hadoop.yarn.api.records.NodeAttribute;
import org.apache.hadoop.yarn.api.records.NodeAttributeOpCode;
import org.apache.hadoop.yarn.api.records.NodeAttributeType;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceRequest;
import org.apache.hadoop.yarn.api.records.ResourceSizing;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.AbstractConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints.PlacementTargets;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.resourcemanager.MockAM;
import org.apache.hadoop.yarn.server.resourcemanager.MockNM;
import org.apache.hadoop.yarn.server.resourcemanager.MockRM;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMApp;
import org.apache.hadoop.yarn.server.resourcemanager.rmapp.RMAppState;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.ContainerUpdates;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.ResourceScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerApp;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.event.NodeUpdateSchedulerEvent;
import org.apache.hadoop.yarn.util.resource.DominantResourceCalculator;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;
import org.melon.yarn.scheduler.GpuFitPlacement;
import org.melon.yarn.scheduler.GpuPackingPolicy;
import org.melon.yarn.scheduler.SchedulerStats;

/**
 * Replays a sequence of task arrivals through Hadoop's real CapacityScheduler (a {@link MockRM}: the
 * ResourceManager's own services in this JVM, NodeManagers simulated), one placement rule per run, for
 * {@code benchmarks/bench_scale.py}.
 *
 * <p>Rules: {@code heartbeat} (stock: each NodeManager heartbeat fills the node that heartbeated; the nodes heartbeat
 * in turn), {@code multinode} (stock multi-node placement, Hadoop's {@code ResourceUsageMultiNodeLookupPolicy}) and
 * {@code melon} (multi-node placement by {@link GpuPackingPolicy}, the application asking for {@link GpuFitPlacement}
 * through {@code APPLICATION_PLACEMENT_TYPE_CLASS} in its AM container's environment, as the provider sets it).
 *
 * <p>Tasks arrive one at a time, each asked for by one application (one allocation request id per task, as the AM
 * asks); the nodes heartbeat until the scheduler grants the task a container, or until every node heartbeated once
 * (multi-node: two heartbeats, each a pass over all nodes) without a grant: the task is refused and its ask
 * withdrawn. No task leaves. Which GPU of the granted node the task gets is the node's ledger's choice, made by the
 * ledger's own Python code: for each grant the harness writes {@code A <task> <node>} to standard output and reads
 * {@code OK} or {@code NO}. {@code NO} is the product's exit 75 (no GPU of the node fits): the container is released,
 * the node goes on the application's blacklist while the task is asked for again, at most {@code --retries} times
 * ({@code NodeAvoidance}), then the task is refused. At the end: {@code END <json>} with the counts, the CPU time the
 * scheduler's calls took on this (the only scheduling) thread, and the heap in use.
 *
 * <p>Input files: nodes, one per line {@code name cpu_milli memory_mib gpus gpu_units model}; arrivals, one per line
 * {@code cpu_milli memory_mib gpus gpu_units models} (a share's {@code gpu_units}, else 0; {@code models}: the GPU
 * models it accepts, comma-separated, or {@code -}). CPU is in vcores of a thousandth of a core and GPU memory in
 * units of a thousandth of the node's GPU, so that a trace's {@code gpu_milli} is the same share on every model.
 */
public final class ReplayHarness {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEMORY = "melon.io/gpu-memory";
  static final String PLACEMENT_ENV = "APPLICATION_PLACEMENT_TYPE_CLASS";
  static final String MODEL_ATTRIBUTE = "gpu-model";
  static final String STOCK_POLICY =
      "org.apache.hadoop.yarn.server.resourcemanager.scheduler.placement.ResourceUsageMultiNodeLookupPolicy";
  /** The AM's container, on a node of its own size: no task fits beside it. */
  static final int AM_MB = 1024;
  static final int AM_VCORES = 1000;
  static final long QUIET_MS = 7_200_000L;  // two hours: under a third of the token keys' rolling interval

  enum Rule { HEARTBEAT, MULTINODE, MELON }

  static final class NodeSpec {
    final String name;  // the node list's, for the reader: the RM knows the node by host(index)
    final Resource capability;
    final String model;

    NodeSpec(String[] f) {
      name = f[0];
      Map<String, Long> gpus = new HashMap<>();
      gpus.put(GPU, Long.parseLong(f[3]));
      gpus.put(GPU_MEMORY, Long.parseLong(f[4]));
      capability = Resource.newInstance(Long.parseLong(f[2]), Integer.parseInt(f[1]), gpus);
      model = f[5];
    }
  }

  static final class TaskSpec {
    final Resource ask;
    final List<String> models;

    TaskSpec(String[] f) {
      ask = Resource.newInstance(Math.max(1, Long.parseLong(f[1])), Math.max(1, Integer.parseInt(f[0])));
      long gpus = Long.parseLong(f[2]);
      long units = Long.parseLong(f[3]);
      if (gpus > 0) {
        ask.setResourceValue(GPU, gpus);
      }
      if (units > 0) {
        ask.setResourceValue(GPU_MEMORY, units);
      }
      models = f[4].equals("-") ? Collections.emptyList() : Arrays.asList(f[4].split(","));
    }
  }

  private final Rule rule;
  private final int retries;
  private final BufferedReader ledgerIn;
  private final PrintStream ledgerOut;
  private final ThreadMXBean threads = ManagementFactory.getThreadMXBean();

  private MockRM rm;
  private CapacityScheduler cs;
  private ApplicationAttemptId attempt;
  private final List<RMNode> rmNodes = new ArrayList<>();
  private final Map<NodeId, Integer> nodeIndex = new HashMap<>();
  private int next;  // the node that heartbeats next

  private long cpuNs;
  private long heartbeats;
  private long grants;
  private long misfits;
  private long refused;
  private long placed;

  ReplayHarness(Rule rule, int retries, BufferedReader ledgerIn, PrintStream ledgerOut) {
    this.rule = rule;
    this.retries = retries;
    this.ledgerIn = ledgerIn;
    this.ledgerOut = ledgerOut;
  }

  /** The RM's configuration: the CapacityScheduler on the DominantResourceCalculator, the two GPU resource types,
   * one queue, and the rule's node order. */
  static Configuration configuration(Rule rule, long sortingIntervalMs) {
    YarnConfiguration conf = new YarnConfiguration();
    conf.setClass(YarnConfiguration.RM_SCHEDULER, CapacityScheduler.class, ResourceScheduler.class);
    conf.set(YarnConfiguration.RESOURCE_TYPES, GPU + "," + GPU_MEMORY);
    conf.set("yarn.scheduler.capacity.resource-calculator", DominantResourceCalculator.class.getName());
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 1);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_VCORES, 1);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, Integer.MAX_VALUE);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, Integer.MAX_VALUE);
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "1.0");
    // the node-attribute store's default folder is one per user: two replays at once would share it
    conf.set(YarnConfiguration.FS_NODE_ATTRIBUTE_STORE_ROOT_DIR,
        new java.io.File(System.getProperty("java.io.tmpdir"), "node-attribute").toURI().toString());
    conf.set(YarnConfiguration.RM_PLACEMENT_CONSTRAINTS_HANDLER, YarnConfiguration.SCHEDULER_RM_PLACEMENT_CONSTRAINTS_HANDLER);
    // the simulated NodeManagers and AM speak only at registration: nothing may expire during a long replay
    conf.setLong(YarnConfiguration.RM_NM_EXPIRY_INTERVAL_MS, QUIET_MS);
    conf.setLong(YarnConfiguration.RM_AM_EXPIRY_INTERVAL_MS, QUIET_MS);
    conf.setLong(YarnConfiguration.RM_CONTAINER_ALLOC_EXPIRY_INTERVAL_MS, QUIET_MS);
    if (rule != Rule.HEARTBEAT) {
      String policy = rule == Rule.MELON ? GpuPackingPolicy.class.getName() : STOCK_POLICY;
      String prefix = "yarn.scheduler.capacity.multi-node-sorting.policy";
      conf.set("yarn.scheduler.capacity.multi-node-placement-enabled", "true");
      conf.set(prefix + ".names", "replay");
      conf.set(prefix + ".replay.class", policy);
      conf.set(prefix + ".replay.sorting-interval.ms", String.valueOf(sortingIntervalMs));
      conf.set(prefix, "replay");
      conf.set("yarn.scheduler.capacity.root.default.multi-node-sorting.policy", "replay");
    }
    return conf;
  }

  /** Start the RM, its one application (AM on a node of its own) and the nodes. */
  void start(Configuration conf, List<NodeSpec> nodes, boolean attributes) throws Exception {
    rm = new MockRM(conf);
    org.apache.log4j.LogManager.getRootLogger().setLevel(org.apache.log4j.Level.WARN);  // MockRM turns on DEBUG
    rm.start();
    cs = (CapacityScheduler) rm.getResourceScheduler();
    MockNM amNode = rm.registerNode(host(nodes.size()) + ":1", Resource.newInstance(AM_MB, AM_VCORES));
    RMApp app = submit();
    MockAM am = MockRM.launchAndRegisterAM(app, rm, amNode);
    attempt = am.getApplicationAttemptId();
    Map<String, Set<NodeAttribute>> byHost = new HashMap<>();
    for (NodeSpec n : nodes) {
      String host = host(rmNodes.size());
      MockNM nm = new MockNM(host + ":1", n.capability, rm.getResourceTrackerService());
      nm.registerNode();
      if (attributes) {
        byHost.put(host, Collections.singleton(NodeAttribute.newInstance(NodeAttribute.PREFIX_CENTRALIZED,
            MODEL_ATTRIBUTE, NodeAttributeType.STRING, n.model)));
      }
      nodeIndex.put(nm.getNodeId(), rmNodes.size());
      rmNodes.add(null);
    }
    rm.drainEvents();
    for (Map.Entry<NodeId, Integer> e : nodeIndex.entrySet()) {
      RMNode n = rm.getRMContext().getRMNodes().get(e.getKey());
      if (n == null) {
        throw new IllegalStateException("node " + e.getKey() + " did not register");
      }
      rmNodes.set(e.getValue(), n);
    }
    if (!byHost.isEmpty()) {
      rm.getRMContext().getNodeAttributesManager().addNodeAttributes(byHost);
      rm.drainEvents();
    }
    if (cs.getNumClusterNodes() != nodes.size() + 1) {
      throw new IllegalStateException("the scheduler knows " + cs.getNumClusterNodes() + " nodes, not "
          + (nodes.size() + 1));
    }
  }

  /**
   * Node {@code i}'s host: a loopback address of its own, which the RM resolves without asking DNS (it resolves each
   * NodeManager's host at registration, and a container token's).
   */
  static String host(int i) {
    int n = i + 1;
    return "127." + ((n >> 16) & 255) + "." + ((n >> 8) & 255) + "." + (n & 255);
  }

  /** Submit the application as the provider does: {@code GpuFitPlacement} in the AM's environment for MeLoN. */
  private RMApp submit() throws Exception {
    ApplicationId id = rm.getClientRMService().getNewApplication(GetNewApplicationRequest.newInstance())
        .getApplicationId();
    Map<String, String> env = new HashMap<>();
    if (rule == Rule.MELON) {
      env.put(PLACEMENT_ENV, GpuFitPlacement.class.getName());
    }
    ApplicationSubmissionContext sub = ApplicationSubmissionContext.newInstance(id, "replay", "default",
        Priority.newInstance(0), ContainerLaunchContext.newInstance(Collections.emptyMap(), env,
            Collections.emptyList(), null, null, null),
        false, false, 1, Resource.newInstance(AM_MB, AM_VCORES), "MELON");
    rm.getClientRMService().submitApplication(SubmitApplicationRequest.newInstance(sub));
    rm.waitForState(id, RMAppState.ACCEPTED);
    return rm.getRMContext().getRMApps().get(id);
  }

  /** Replay the arrivals. */
  void replay(List<TaskSpec> tasks) throws IOException {
    FiCaSchedulerApp app = cs.getApplicationAttempt(attempt);
    for (int i = 0; i < tasks.size(); i++) {
      TaskSpec t = tasks.get(i);
      List<String> avoided = new ArrayList<>();
      for (int tries = 0; ; tries++) {
        ask(i, t, 1);
        Container c = drive(app);
        if (c == null) {
          ask(i, t, 0);
          refused++;
          break;
        }
        grants++;
        int node = nodeIndex.get(c.getNodeId());
        ledgerOut.println("A " + i + " " + node);
        ledgerOut.flush();
        String verdict = ledgerIn.readLine();
        if ("OK".equals(verdict)) {
          placed++;
          break;
        }
        if (!"NO".equals(verdict)) {
          throw new IOException("the ledger answered " + verdict + " for task " + i);
        }
        misfits++;  // exit 75: the container is given back, its host avoided while the task is asked again
        String host = c.getNodeId().getHost();
        avoided.add(host);
        schedulerCall(() -> cs.allocate(attempt, Collections.emptyList(), Collections.emptyList(),
            Collections.singletonList(c.getId()), Collections.singletonList(host), Collections.emptyList(),
            new ContainerUpdates()));
        if (tries >= retries) {
          refused++;
          break;
        }
      }
      if (!avoided.isEmpty()) {
        schedulerCall(() -> cs.allocate(attempt, Collections.emptyList(), Collections.emptyList(),
            Collections.<ContainerId>emptyList(), Collections.emptyList(), avoided, new ContainerUpdates()));
      }
    }
  }

  /** Ask for {@code count} (1, or 0: withdrawn) containers of task {@code i}, as the AM does. */
  private void ask(int i, TaskSpec t, int count) {
    Priority p = Priority.newInstance(1);
    if (t.models.isEmpty()) {
      ResourceRequest r = ResourceRequest.newBuilder().priority(p).resourceName(ResourceRequest.ANY)
          .capability(t.ask).numContainers(count).allocationRequestId(i).build();
      schedulerCall(() -> cs.allocate(attempt, Collections.singletonList(r), Collections.emptyList(),
          Collections.emptyList(), Collections.emptyList(), Collections.emptyList(), new ContainerUpdates()));
    } else {
      SchedulingRequest r = SchedulingRequest.newBuilder().allocationRequestId(i).priority(p)
          .executionType(ExecutionTypeRequest.newInstance(ExecutionType.GUARANTEED, true))
          .allocationTags(Collections.singleton("task"))
          .resourceSizing(ResourceSizing.newInstance(count, t.ask))
          .placementConstraintExpression(modelConstraint(t.models)).build();
      schedulerCall(() -> cs.allocate(attempt, Collections.emptyList(), Collections.singletonList(r),
          Collections.emptyList(), Collections.emptyList(), Collections.emptyList(), new ContainerUpdates()));
    }
  }

  /** A node whose {@code gpu-model} attribute is one of {@code models} (the AM's {@code GpuModels} shape: an OR of
   * one equality per model and attribute prefix). */
  static PlacementConstraint modelConstraint(List<String> models) {
    List<AbstractConstraint> any = new ArrayList<>();
    for (String model : models) {
      for (String prefix : Arrays.asList(NodeAttribute.PREFIX_DISTRIBUTED, NodeAttribute.PREFIX_CENTRALIZED)) {
        any.add(PlacementConstraints.targetNodeAttribute(PlacementConstraints.NODE, NodeAttributeOpCode.EQ,
            PlacementTargets.nodeAttribute(prefix + "/" + MODEL_ATTRIBUTE, model)));
      }
    }
    return PlacementConstraints.build(PlacementConstraints.or(any.toArray(new AbstractConstraint[0])));
  }

  /** Heartbeat nodes in turn until a container is granted: at most one round of all nodes on heartbeats, two
   * heartbeats (each a pass over all nodes) with multi-node placement. */
  private Container drive(FiCaSchedulerApp app) {
    int beats = rule == Rule.HEARTBEAT ? rmNodes.size() : 2;
    for (int k = 0; k < beats; k++) {
      RMNode node = rmNodes.get(next);
      next = (next + 1) % rmNodes.size();
      heartbeats++;
      schedulerCall(() -> cs.handle(new NodeUpdateSchedulerEvent(node)));
      List<Container> got = app.pullNewlyAllocatedContainers();
      if (!got.isEmpty()) {
        if (got.size() > 1) {
          throw new IllegalStateException("one ask, " + got.size() + " containers");
        }
        return got.get(0);
      }
    }
    return null;
  }

  private void schedulerCall(Runnable call) {
    long start = threads.getCurrentThreadCpuTime();
    call.run();
    cpuNs += threads.getCurrentThreadCpuTime() - start;
  }

  /** The run's figures, as one JSON object. */
  String summary() throws Exception {
    System.gc();
    System.gc();
    Runtime r = Runtime.getRuntime();
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("rule", rule.name().toLowerCase());
    out.put("nodes", rmNodes.size());
    out.put("grants", grants);
    out.put("placed", placed);
    out.put("misfits", misfits);
    out.put("refused", refused);
    out.put("heartbeats", heartbeats);
    out.put("scheduler_cpu_s", cpuNs / 1e9);
    out.put("heap_mib", (r.totalMemory() - r.freeMemory()) / 1048576.0);
    MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
    ObjectName name = new ObjectName(SchedulerStats.NAME);
    if (mbs.isRegistered(name)) {
      for (String a : new String[] {"SortPasses", "SortNanos", "ViewsBuilt", "FitChecks", "FitRefusals"}) {
        out.put(a, mbs.getAttribute(name, a));
      }
    }
    StringBuilder sb = new StringBuilder("{");
    for (Map.Entry<String, Object> e : out.entrySet()) {
      if (sb.length() > 1) {
        sb.append(", ");
      }
      Object v = e.getValue();
      sb.append('"').append(e.getKey()).append("\": ");
      sb.append(v instanceof String ? "\"" + v + "\"" : String.valueOf(v));
    }
    return sb.append('}').toString();
  }

  void stop() {
    rm.stop();
  }

  private static List<String[]> rows(String path) throws IOException {
    List<String[]> out = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8)) {
      if (!line.trim().isEmpty()) {
        out.add(line.trim().split("\\s+"));
      }
    }
    return out;
  }

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable e) {  // the RM's threads would keep the JVM alive
      e.printStackTrace();
      System.exit(1);
    }
    System.exit(0);
  }

  private static void run(String[] args) throws Exception {
    Map<String, String> opt = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      opt.put(args[i], args[i + 1]);
    }
    Rule rule = Rule.valueOf(opt.getOrDefault("--rule", "melon").toUpperCase());
    // the protocol owns standard output: anything else printed goes to standard error
    PrintStream ledgerOut = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
    System.setOut(System.err);
    BufferedReader ledgerIn = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    Configuration conf = configuration(rule, Long.parseLong(opt.getOrDefault("--sorting-interval-ms", "0")));
    ResourceUtils.resetResourceTypes(conf);  // before the first Resource with GPUs is made
    List<NodeSpec> nodes = new ArrayList<>();
    for (String[] f : rows(opt.get("--nodes"))) {
      nodes.add(new NodeSpec(f));
    }
    List<TaskSpec> tasks = new ArrayList<>();
    Set<String> models = new HashSet<>();
    for (String[] f : rows(opt.get("--arrivals"))) {
      TaskSpec t = new TaskSpec(f);
      tasks.add(t);
      models.addAll(t.models);
    }
    ReplayHarness h = new ReplayHarness(rule, Integer.parseInt(opt.getOrDefault("--retries", "3")), ledgerIn,
        ledgerOut);
    h.start(conf, nodes, !models.isEmpty());
    long wall = System.nanoTime();
    h.replay(tasks);
    wall = System.nanoTime() - wall;
    String summary = h.summary();
    ledgerOut.println("END " + summary.substring(0, summary.length() - 1) + ", \"wall_s\": " + wall / 1e9 + "}");
    ledgerOut.flush();
    h.stop();
  }
}
