package org.melon.yarn;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;

/**
 * One-JVM HDFS + YARN cluster for tests and demos (see docs/protocol.md section 1).
 * Loopback only, fixed ports, GPU resource types declared but not backed by real GPUs.
 */
public final class MiniClusterLauncher {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEM = "melon.io/gpu-memory";

  private final Map<String, String> opts = new LinkedHashMap<>();
  private MiniDFSCluster dfs;
  private MiniYARNCluster yarn;
  private File details;
  private com.sun.net.httpserver.HttpServer control;
  private SecureCluster secure;

  public static void main(String[] args) {
    try {
      new MiniClusterLauncher().run(args);
    } catch (Throwable t) {
      t.printStackTrace();
      System.err.println("ERROR: mini cluster failed to start: " + t);
      System.err.flush();
      Runtime.getRuntime().halt(1);
    }
  }

  private String opt(String name) {
    return opts.get(name);
  }

  private int intOpt(String name) {
    return Integer.parseInt(opts.get(name));
  }

  private static void fail(String message) {
    System.err.println("ERROR: " + message);
    System.err.flush();
    Runtime.getRuntime().halt(2);
  }

  /** The options that take a string; every other one is an integer. */
  private static final Set<String> STRING_OPTS =
      new HashSet<>(Arrays.asList("work-dir", "details", "nm-env", "placement", "nm-gpu-models"));

  private void parse(String[] args) {
    opts.put("work-dir", ".melon-minicluster");
    opts.put("rm-port", "18032");
    opts.put("rm-web-port", "18088");
    opts.put("nn-port", "18020");
    opts.put("nn-http-port", "18070");
    opts.put("nodemanagers", "2");
    opts.put("nm-memory-mb", "8192");
    opts.put("nm-vcores", "16");
    opts.put("gpus", "2");
    opts.put("gpu-memory-mb", "32768");
    // 0: a vanilla YARN (no GPU resource types, the default memory-only calculator), to test `melon doctor`
    opts.put("melon-config", "1");
    // 0: the launcher sets no resource calculator, the configuration files decide: a yarn-site.xml on the classpath
    // (minicluster.start's yarn_site), then capacity-scheduler.xml, which the CapacityScheduler reads after it (the
    // classpath's is Hadoop's stock file, from hadoop-yarn-server-tests: the DefaultResourceCalculator)
    opts.put("set-calculator", "1");
    // fault tests: how long the RM waits for a silent NodeManager; 1 = RM recovery (state in the work dir, NMs
    // over RPC) so the RM can be restarted with its applications kept
    opts.put("nm-expiry-ms", "600000");
    opts.put("rm-recovery", "0");
    // 1 = Kerberos: a MiniKdc, SPNEGO on the RM/NM/NN web endpoints (see secureConf)
    opts.put("secure", "0");
    // 1: multi-tenant setup (tenantsConf): tenant queues with preemption, ACLs, HDFS permissions and homes, an
    // `airflow` service user that may impersonate the tenants
    opts.put("tenants", "0");
    // 1: the default queue orders its applications by fair share instead of FIFO, so two apps asking at once get
    // their containers interleaved (the gang tests: two gangs that each hold part of what the other needs)
    opts.put("fair", "0");
    // > 0: the NameNode's delegation-token renew interval (dfs.namenode.delegation.token.renew-interval), short so
    // a test job outlives its HDFS token's first expiry and only the RM's renewal keeps it valid
    opts.put("dt-renew-ms", "0");
    // melon: multi-node placement in the order of MeLoN's scheduler plug-in (its jar on this JVM's classpath);
    // heartbeat: YARN's stock placement, the node that heartbeats gets the container
    opts.put("placement", "melon");
    opts.put("details", null);
    // a JSON list, one object per NodeManager: the environment its containers are forced to (its admin-env), e.g.
    // {"CUDA_VISIBLE_DEVICES": "1", "MELON_GPU_INVENTORY": ".../gpu-inventory-nm1.json"}: a host's real GPUs
    // split between the NodeManagers (minicluster.gpu_layout), so no two claim one GPU
    opts.put("nm-env", null);
    // each NodeManager's GPU model, comma-separated, one per NodeManager (e.g. A10,T4,T4): see gpuModelsConf
    opts.put("nm-gpu-models", null);
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      String key = a.startsWith("--") ? a.substring(2) : null;
      String value = null;
      if (key != null && key.contains("=")) {
        value = key.substring(key.indexOf('=') + 1);
        key = key.substring(0, key.indexOf('='));
      } else if (key != null && i + 1 < args.length) {
        value = args[++i];
      }
      if (key == null || !opts.containsKey(key) || value == null) {
        fail("bad argument " + a + " (flags: --" + String.join(" --", opts.keySet()) + ")");
      }
      opts.put(key, value);
    }
    for (String k : opts.keySet()) {
      if (!STRING_OPTS.contains(k)) {
        try {
          Integer.parseInt(opts.get(k));
        } catch (NumberFormatException e) {
          fail("--" + k + " must be an integer, got " + opts.get(k));
        }
      }
    }
  }

  /** Fails (exit 2) if any port we need is taken, before anything starts. */
  private void checkPorts() {
    int rm = intOpt("rm-port");
    Object[][] ports = {
        {rm, "rm-port"}, {rm + 1, "rm-port (+1 scheduler)"}, {rm + 2, "rm-port (+2 resource-tracker)"},
        {rm + 3, "rm-port (+3 admin)"}, {intOpt("rm-web-port"), "rm-web-port"},
        {intOpt("nn-port"), "nn-port"}, {intOpt("nn-http-port"), "nn-http-port"}};
    for (Object[] p : ports) {
      int port = (Integer) p[0];
      try (ServerSocket s = new ServerSocket()) {
        s.setReuseAddress(true);
        s.bind(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), port));
      } catch (IOException e) {
        fail("port " + port + " in use (flag --" + p[1] + ")");
      }
    }
  }

  private Configuration buildConf(File work) {
    Configuration conf = new YarnConfiguration();
    String host = "127.0.0.1";
    int rm = intOpt("rm-port");
    int gpus = intOpt("gpus");
    int gpuMem = intOpt("gpu-memory-mb");
    int nmMem = intOpt("nm-memory-mb");
    int nmCores = intOpt("nm-vcores");

    boolean melon = intOpt("melon-config") != 0;

    // Resource types: must be in the conf before ResourceUtils is first initialised.
    if (melon) {
      conf.set("yarn.resource-types", GPU + "," + GPU_MEM);
      conf.set("yarn.resource-types." + GPU_MEM + ".units", "Mi");
      conf.set("yarn.resource-types." + GPU + ".maximum-allocation", String.valueOf(Math.max(gpus, 1)));
      conf.set("yarn.resource-types." + GPU_MEM + ".maximum-allocation", String.valueOf(Math.max(gpuMem, 1)));
      conf.set("yarn.nodemanager.resource-type." + GPU, String.valueOf(gpus));
      conf.set("yarn.nodemanager.resource-type." + GPU_MEM, gpuMem + "Mi");
    }

    // HDFS
    conf.set("fs.defaultFS", "hdfs://" + host + ":" + intOpt("nn-port"));
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "hdfs").getAbsolutePath());
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setInt("dfs.replication", 1);

    // Simple auth, anyone may impersonate (loopback-only test cluster).
    String user = System.getProperty("user.name");
    conf.set("hadoop.security.authentication", "simple");
    conf.set("hadoop.http.authentication.type", "simple");
    conf.setBoolean("hadoop.http.authentication.simple.anonymous.allowed", true);
    conf.set("hadoop.proxyuser." + user + ".hosts", "*");
    conf.set("hadoop.proxyuser." + user + ".groups", "*");

    // ResourceManager on fixed loopback ports.
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    conf.set(YarnConfiguration.RM_HOSTNAME, host);
    conf.set(YarnConfiguration.RM_ADDRESS, host + ":" + rm);
    conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, host + ":" + (rm + 1));
    conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, host + ":" + (rm + 2));
    conf.set(YarnConfiguration.RM_ADMIN_ADDRESS, host + ":" + (rm + 3));
    conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, host + ":" + intOpt("rm-web-port"));
    conf.set(YarnConfiguration.RM_BIND_HOST, host);

    // Scheduler: capacity + dominant resource calculator so GPUs count.
    conf.set(YarnConfiguration.RM_SCHEDULER,
        "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler");
    if (intOpt("set-calculator") != 0) {
      conf.set("yarn.scheduler.capacity.resource-calculator", melon
          ? "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
          : "org.apache.hadoop.yarn.util.resource.DefaultResourceCalculator");
    } else if (conf.getClassLoader().getResource("capacity-scheduler.xml") == null) {
      fail("--set-calculator 0: no capacity-scheduler.xml on the classpath to decide the calculator");
    }
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.5");
    // application priorities up to learned.MAX_PRIORITY (priority: auto, longest runs first); YARN's default, 0,
    // lowers every application's to 0
    conf.setInt(YarnConfiguration.MAX_CLUSTER_LEVEL_APPLICATION_PRIORITY, 25);
    if (intOpt("fair") != 0) {
      conf.set("yarn.scheduler.capacity.root.default.ordering-policy", "fair");
    }
    // Scheduling on each NodeManager heartbeat, in queue order: Hadoop 3.5 made the CapacityScheduler schedule
    // asynchronously by default (YARN-7327), and on this 2-node, 4-GPU cluster that kept a request reserved on a
    // full node while the other node's GPU stayed free for minutes, and handed freed GPUs out of fair-share order
    // (the gang tests' flakes: small-c reserved on the full NM for 4 min with a GPU free on the other; 3 of 6 loaded
    // runs of test_gang_live failed so, 0 of 6 with this). A 250 ms heartbeat keeps grants prompt (that module:
    // 207 s, against 180-197 s asynchronous and 204-247 s at the default 1 s).
    conf.setBoolean("yarn.scheduler.capacity.schedule-asynchronously.enable", false);
    conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 250);
    if (melon) {
      placementConf(conf, opt("placement"));
    }
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, nmMem);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, nmCores);

    // NodeManagers: advertised resources, no memory enforcement, logs kept locally.
    conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, nmMem);
    conf.setInt(YarnConfiguration.NM_PMEM_MB, nmMem);
    conf.setInt(YarnConfiguration.NM_VCORES, nmCores);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, false);
    conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 24 * 3600);
    conf.setLong(YarnConfiguration.NM_LOG_RETAIN_SECONDS, 24 * 3600);
    // An NM waits sigkill-delay + process-kill-wait + 1 s for its containers on shutdown (default ~6 s).
    conf.setLong(YarnConfiguration.NM_PROCESS_KILL_WAIT_MS, 2000);
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.0f);
    conf.setLong(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, 256);
    // Containers run {{JAVA_HOME}}/bin/java: make sure JAVA_HOME is set even if our env lacks it.
    conf.set(YarnConfiguration.NM_ADMIN_USER_ENV, "JAVA_HOME=" + System.getProperty("java.home"));
    conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);

    conf.setLong(YarnConfiguration.RM_NM_EXPIRY_INTERVAL_MS, Long.parseLong(opt("nm-expiry-ms")));
    if (intOpt("rm-recovery") != 0) {
      conf.setBoolean(YarnConfiguration.RECOVERY_ENABLED, true);
      conf.setBoolean(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_ENABLED, true);
      conf.set(YarnConfiguration.RM_STORE,
          "org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore");
      conf.set(YarnConfiguration.FS_RM_STATE_STORE_URI, new File(work, "rmstore").toURI().toString());
      conf.setLong(YarnConfiguration.RM_WORK_PRESERVING_RECOVERY_SCHEDULING_WAIT_MS, 2000);
      // NodeManagers reach the RM by RPC (not in-JVM calls bound to one RM instance), so they re-sync with the
      // restarted one as real daemons do
      conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_USE_RPC, true);
      conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 1000);
    }
    if (intOpt("tenants") != 0) {
      tenantsConf(conf, user);
    }
    if (intOpt("dt-renew-ms") > 0) {
      conf.setLong("dfs.namenode.delegation.token.renew-interval", intOpt("dt-renew-ms"));
    }
    return conf;
  }

  /** The scheduler plug-in's node order (docs/scheduler-plugin.md), the lines an admin puts in capacity-scheduler.xml. */
  static final String PACKING_POLICY = "org.melon.yarn.scheduler.GpuPackingPolicy";

  /**
   * {@code --placement melon}: multi-node placement, so that on each NodeManager heartbeat the scheduler looks at
   * every node in the plug-in's order (best fit by GPU memory) rather than filling whichever node heartbeated; the
   * sorting interval 0 brings the order up to date before each placement. {@code heartbeat}: YARN's stock
   * placement.
   */
  private static void placementConf(Configuration conf, String placement) {
    if ("heartbeat".equals(placement)) {
      return;
    }
    if (!"melon".equals(placement)) {
      fail("--placement must be melon or heartbeat, got " + placement);
    }
    if (!HadoopLine.hasMultiNodePlacement()) {
      // Hadoop 3.1 has no multi-node placement and no MultiNodeLookupPolicy (both 3.2.0, YARN-7494): the plug-in's
      // node order cannot load there, so the RM places on heartbeat (its allocator, GpuFitPlacement, still can)
      System.out.println("MiniClusterLauncher: --placement melon: Hadoop " + HadoopLine.version()
          + " has no multi-node placement (3.2.0+): heartbeat placement");
      return;
    }
    try {
      Class.forName(PACKING_POLICY);
    } catch (ClassNotFoundException e) {
      fail("--placement melon: " + PACKING_POLICY + " is not on the classpath (airflow_provider_melon/rm/"
          + "melon-scheduler.jar, built by appmaster/build.sh)");
    }
    String p = "yarn.scheduler.capacity.";
    conf.setBoolean(p + "multi-node-placement-enabled", true);
    conf.set(p + "multi-node-sorting.policy.names", "melon");
    conf.set(p + "multi-node-sorting.policy.melon.class", PACKING_POLICY);
    conf.setLong(p + "multi-node-sorting.policy.melon.sorting-interval.ms", 0);
    conf.set(p + "multi-node-sorting.policy", "melon");
  }

  // ---- tenants (--tenants 1) ----------------------------------------------------------------------------------

  /** The service principal that submits on behalf of tenants (doAs), as Airflow's connection does. */
  static final String SERVICE_USER = "airflow";
  /** Tenant user → its queue. {@link #ADMIN_USER} is in {@link #ADMIN_GROUP}, and so may view/kill any melon app
   * whose application ACLs name that group. */
  static final String[][] TENANTS = {{"alice", "tenant_a"}, {"bob", "tenant_b"}};
  static final String ADMIN_USER = "ops";
  static final String ADMIN_GROUP = "melon-admins";
  /** Users only (simple auth): the group of every tenant user, the one group airflow may impersonate. */
  static final String TENANT_GROUP = "tenants";

  /**
   * Multi-tenant setup on the plain (simple-auth) cluster, the way an admin configures one:
   * <ul>
   *   <li>users are names (simple auth: {@code user.name}); groups come from Hadoop's static mapping, so no OS
   *       users are needed: alice, bob, ops in {@code tenants}, ops also in {@code melon-admins};</li>
   *   <li>the {@code airflow} service user may impersonate ({@code doAs}) members of {@code tenants} from any
   *       host, nobody else; the web endpoints (RM REST, WebHDFS) honour {@code doAs} through Hadoop's
   *       ProxyUserAuthenticationFilter;</li>
   *   <li>CapacityScheduler queues {@code tenant_a} (alice) and {@code tenant_b} (bob): each guaranteed 40 % of
   *       every resource (so of {@code melon.io/gpu-memory} and GPUs, with the dominant resource calculator),
   *       tenant_a may grow to 100 %, tenant_b to 50 %; {@code default} keeps 20 % for anyone; preemption (the
   *       proportional capacity policy, 1 s rounds) gives a queue its guarantee back;</li>
   *   <li>{@code yarn.acl.enable}: only the launching user is YARN admin and queue administrator, so other users
   *       reach an application only as its owner or through its application ACLs (set at submit);</li>
   *   <li>HDFS permissions on; homes {@code /user/<tenant>} 0700 are made once HDFS is up
   *       ({@link #createTenantHomes}).</li>
   * </ul>
   */
  private void tenantsConf(Configuration conf, String superUser) {
    StringBuilder groups = new StringBuilder();
    for (String[] t : TENANTS) {
      groups.append(t[0]).append('=').append(TENANT_GROUP).append(';');
    }
    groups.append(ADMIN_USER).append('=').append(TENANT_GROUP).append(',').append(ADMIN_GROUP).append(';');
    groups.append(SERVICE_USER).append('=').append(SERVICE_USER).append(';');
    groups.append("dr.who=;").append(superUser).append("=supergroup");
    conf.set("hadoop.user.group.static.mapping.overrides", groups.toString());
    conf.set("hadoop.proxyuser." + SERVICE_USER + ".hosts", "*");
    conf.set("hadoop.proxyuser." + SERVICE_USER + ".groups", TENANT_GROUP);
    // doAs on every web endpoint (RM REST, NM, WebHDFS's own handling stays): Hadoop 3.3+'s proxy-user filter
    conf.set("hadoop.http.filter.initializers",
        "org.apache.hadoop.security.authentication.server.ProxyUserAuthenticationFilterInitializer");
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.set("dfs.permissions.superusergroup", "supergroup");

    conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
    conf.set(YarnConfiguration.YARN_ADMIN_ACL, superUser);
    String q = "yarn.scheduler.capacity.root.";
    conf.set(q + "queues", "default,tenant_a,tenant_b");
    conf.set(q + "acl_submit_applications", superUser);
    conf.set(q + "acl_administer_queue", superUser);
    conf.set(q + "default.capacity", "20");
    conf.set(q + "default.maximum-capacity", "100");
    conf.set(q + "default.acl_submit_applications", "*");
    String[][] shares = {{"tenant_a", "40", "100"}, {"tenant_b", "40", "50"}};
    for (int i = 0; i < shares.length; i++) {
      String queue = q + shares[i][0] + ".";
      conf.set(queue + "capacity", shares[i][1]);
      conf.set(queue + "maximum-capacity", shares[i][2]);
      // one user may use the whole queue up to its maximum (the default, 1, stops a user at the guarantee)
      conf.setFloat(queue + "user-limit-factor", 100f / Float.parseFloat(shares[i][1]));
      conf.set(queue + "acl_submit_applications", TENANTS[i][0] + "," + ADMIN_USER);
      conf.set(queue + "acl_administer_queue", " ");
    }
    conf.setBoolean(YarnConfiguration.RM_SCHEDULER_ENABLE_MONITORS, true);
    conf.set(YarnConfiguration.RM_SCHEDULER_MONITOR_POLICIES,
        "org.apache.hadoop.yarn.server.resourcemanager.monitor.capacity.ProportionalCapacityPreemptionPolicy");
    String p = "yarn.resourcemanager.monitor.capacity.preemption.";
    conf.setLong(p + "monitoring_interval", 1000);
    conf.setLong(p + "max_wait_before_kill", 2000);
    conf.setFloat(p + "total_preemption_per_round", 1.0f);
    conf.setFloat(p + "natural_termination_factor", 1.0f);
    conf.setFloat(p + "max_ignored_over_capacity", 0f);
    // a GPU request the scheduler reserved on a full node is served by preempting on *that* node (else the GPU
    // freed elsewhere may not reach it; seen on this cluster: B's task reserved on one NM while the preempted GPU
    // was on the other)
    conf.setBoolean(p + "select_based_on_reserved_containers", true);
    // the group mapping is a JVM-wide singleton built from the first Configuration that asks: make it ours, so the
    // static mapping above holds for the NameNode, the RM and the proxy-user checks of both
    org.apache.hadoop.security.UserGroupInformation.setConfiguration(conf);
    org.apache.hadoop.security.Groups.getUserToGroupsMappingServiceWithLoadedConfiguration(conf);
  }

  /** {@code /user/<name>} owned by each tenant (and the admin, the service user), mode 0700. */
  private void createTenantHomes() throws IOException {
    org.apache.hadoop.fs.FileSystem fs = dfs.getFileSystem();
    List<String> users = new ArrayList<>();
    for (String[] t : TENANTS) {
      users.add(t[0]);
    }
    users.add(ADMIN_USER);
    users.add(SERVICE_USER);
    fs.mkdirs(new org.apache.hadoop.fs.Path("/user"));
    fs.setPermission(new org.apache.hadoop.fs.Path("/user"),
        new org.apache.hadoop.fs.permission.FsPermission((short) 0755));
    for (String u : users) {
      org.apache.hadoop.fs.Path home = new org.apache.hadoop.fs.Path("/user/" + u);
      fs.mkdirs(home);
      fs.setOwner(home, u, u.equals(SERVICE_USER) ? SERVICE_USER : TENANT_GROUP);
      fs.setPermission(home, new org.apache.hadoop.fs.permission.FsPermission((short) 0700));
    }
    // the NodeManagers' log/staging roots some YARN code expects: /tmp world-writable with the sticky bit
    org.apache.hadoop.fs.Path tmp = new org.apache.hadoop.fs.Path("/tmp");
    fs.mkdirs(tmp);
    fs.setPermission(tmp, new org.apache.hadoop.fs.permission.FsPermission((short) 01777));
  }

  /**
   * The RM's HTML UI (/cluster/...) in one JVM with NodeManagers: Hadoop's WebApps define their GuiceFilter by
   * class name, so Jetty's instance dispatches through Guice's *static* pipeline, which the last web app built
   * (a NodeManager's) owns: the RM's port then served NodeManager pages ("/" redirected to /node, /cluster/app/x
   * 404). Point the static pipeline back at the RM's own (the one its injector built). REST (Jersey) is not
   * dispatched by Guice and is unaffected; the NodeManagers' HTML pages are the ones that lose out.
   */
  /**
   * Hadoop 3.3/3.4 serve REST through Jersey 1's GuiceContainer, i.e. through that same Guice pipeline: in one JVM
   * every web app's port then answered from one app's routes (on 3.3.6 the NodeManagers' /ws/v1/node/... were 404:
   * their ports served the RM's). Give each web app's Jetty GuiceFilter the pipeline its own injector built (the
   * filter instance Hadoop keeps, WebApp.guiceFilter, holds it), so each port serves its own daemon whatever the
   * static pipeline is. On 3.5 (Jersey 2 outside Guice) this only fixes the NodeManagers' HTML pages.
   */
  private void pinOwnGuicePipelines() {
    int pinned = 0;
    try {
      List<Object> webApps = new ArrayList<>();
      java.lang.reflect.Field rmWebApp =
          org.apache.hadoop.yarn.server.resourcemanager.ResourceManager.class.getDeclaredField("webApp");
      rmWebApp.setAccessible(true);
      webApps.add(rmWebApp.get(yarn.getResourceManager()));
      java.lang.reflect.Field nmWebApp =
          org.apache.hadoop.yarn.server.nodemanager.webapp.WebServer.class.getDeclaredField("webApp");
      nmWebApp.setAccessible(true);
      for (int i = 0; i < intOpt("nodemanagers"); i++) {
        for (org.apache.hadoop.service.Service s : yarn.getNodeManager(i).getServices()) {
          if (s instanceof org.apache.hadoop.yarn.server.nodemanager.webapp.WebServer) {
            webApps.add(nmWebApp.get(s));
          }
        }
      }
      java.lang.reflect.Field filterField = org.apache.hadoop.yarn.webapp.WebApp.class.getDeclaredField("guiceFilter");
      filterField.setAccessible(true);
      java.lang.reflect.Field injected = com.google.inject.servlet.GuiceFilter.class.getDeclaredField("injectedPipeline");
      injected.setAccessible(true);
      for (Object w : webApps) {
        if (w == null) {
          continue;
        }
        Object own = filterField.get(w);
        Object pipeline = own == null ? null : injected.get(own);
        if (pipeline == null) {
          continue;
        }
        org.apache.hadoop.http.HttpServer2 http = ((org.apache.hadoop.yarn.webapp.WebApp) w).httpServer();
        for (org.eclipse.jetty.servlet.FilterHolder h : http.getWebAppContext().getServletHandler().getFilters()) {
          Object f = h.getFilter();
          if (f instanceof com.google.inject.servlet.GuiceFilter && f != own) {
            injected.set(f, pipeline);
            pinned++;
          }
        }
      }
      System.out.println("MiniClusterLauncher: " + pinned + " web apps' GuiceFilters pinned to their own pipelines");
    } catch (ReflectiveOperationException | RuntimeException e) {
      System.out.println("MiniClusterLauncher: could not pin the web apps' Guice pipelines (" + e + ")");
    }
  }

  private void restoreRmWebUi() {
    pinOwnGuicePipelines();
    try {
      java.lang.reflect.Field webAppField =
          org.apache.hadoop.yarn.server.resourcemanager.ResourceManager.class.getDeclaredField("webApp");
      webAppField.setAccessible(true);
      Object webApp = webAppField.get(yarn.getResourceManager());
      java.lang.reflect.Field filterField =
          org.apache.hadoop.yarn.webapp.WebApp.class.getDeclaredField("guiceFilter");
      filterField.setAccessible(true);
      Object rmFilter = filterField.get(webApp);
      java.lang.reflect.Field injected = com.google.inject.servlet.GuiceFilter.class.getDeclaredField("injectedPipeline");
      injected.setAccessible(true);
      java.lang.reflect.Field shared = com.google.inject.servlet.GuiceFilter.class.getDeclaredField("pipeline");
      shared.setAccessible(true);
      shared.set(null, injected.get(rmFilter));
      System.out.println("MiniClusterLauncher: the RM web UI is served on its port again");
    } catch (ReflectiveOperationException | RuntimeException e) {
      System.out.println("MiniClusterLauncher: could not restore the RM web UI (" + e + "); REST is unaffected");
    }
  }

  private void run(String[] args) throws Exception {
    long t0 = System.nanoTime();
    parse(args);
    File work = new File(opt("work-dir")).getAbsoluteFile();
    details = new File(opt("details") != null ? opt("details") : new File(work, "cluster.json").getPath())
        .getAbsoluteFile();
    checkPorts();
    work.mkdirs();
    Files.deleteIfExists(details.toPath());
    // MiniYARNCluster puts its dirs under GenericTestUtils.getTestDir() = ${test.build.data}.
    System.setProperty("test.build.data", new File(work, "yarn").getAbsolutePath());
    System.setProperty("hadoop.log.dir", new File(work, "logs").getAbsolutePath());

    Configuration conf = buildConf(work);
    if (intOpt("secure") != 0) {
      secure = SecureCluster.start(new File(work, "kerberos"), conf);
    }
    installSignalHandlers();

    dfs = new MiniDFSCluster.Builder(conf)
        .nameNodePort(intOpt("nn-port"))
        .nameNodeHttpPort(intOpt("nn-http-port"))
        .numDataNodes(1)
        .format(true)
        .build();
    dfs.waitActive();
    if (intOpt("tenants") != 0) {
      createTenantHomes();
    }

    int nms = intOpt("nodemanagers");
    gpuModelsConf(conf, work, nms);
    yarn = new MiniYARNCluster("melon", nms, 1, 1);
    yarn.init(conf);
    applyNodeManagerEnv(nms);
    applyNodeManagerGpuModels(nms);
    yarn.start();
    waitForHealthyNodes(nms);
    restoreRmWebUi();

    File confDir = new File(work, "conf");
    confDir.mkdirs();
    Configuration live = yarn.getConfig();
    writeXml(dfs.getConfiguration(0), new File(confDir, "hdfs-site.xml"));
    writeXml(live, new File(confDir, "core-site.xml"));
    writeXml(live, new File(confDir, "yarn-site.xml"));
    startControl();
    writeDetails(confDir);
    System.out.printf("MiniClusterLauncher ready in %.1f s: %s%n", (System.nanoTime() - t0) / 1e9, details);
    System.out.flush();
    Thread.currentThread().join();
  }

  /** {@code --nm-env}: each NodeManager's own container environment, set in its own configuration (every NM of a
   * MiniYARNCluster has its own copy) as {@code yarn.nodemanager.admin-env.<VAR>}: forced over the job's env. */
  private void applyNodeManagerEnv(int nms) throws IOException {
    if (opt("nm-env") == null) {
      return;
    }
    com.fasterxml.jackson.databind.JsonNode perNm = new com.fasterxml.jackson.databind.ObjectMapper()
        .readTree(new File(opt("nm-env")));
    if (!perNm.isArray() || perNm.size() != nms) {
      fail("--nm-env " + opt("nm-env") + ": expected a JSON list of " + nms + " objects, one per NodeManager");
    }
    for (int i = 0; i < nms; i++) {
      Configuration nmConf = yarn.getNodeManager(i).getConfig();
      final int index = i;
      perNm.get(i).fields().forEachRemaining(e -> {
        nmConf.set(YarnConfiguration.NM_ADMIN_USER_ENV + "." + e.getKey(), e.getValue().asText());
        System.out.println("NodeManager " + index + " containers: " + e.getKey() + "=" + e.getValue().asText());
      });
    }
  }

  // ---- GPU models (--nm-gpu-models A10,T4,T4) ------------------------------------------------------------------

  /**
   * What a cluster needs for jobs that name GPU models, set as an admin would: each NodeManager publishes its model as
   * the node attribute {@code nm.yarn.io/gpu-model} (its node-attributes provider, the configured one), and the RM
   * takes the AM's placement constraints in its CapacityScheduler
   * ({@code yarn.resourcemanager.placement-constraints.handler=scheduler}). Always: the RM's node-attribute store in
   * the work dir, not {@code /tmp/hadoop-yarn-<user>} shared by every cluster on the machine.
   */
  // Node attributes date from Hadoop 3.2.0 (YARN-3409): their settings by name, so the launcher compiles against 3.1
  static final String NODE_ATTRIBUTE_STORE_ROOT_DIR = "yarn.node-attribute.fs-store.root-dir";
  static final String NM_NODE_ATTRIBUTES_PROVIDER = "yarn.nodemanager.node-attributes.provider";
  static final String NM_CONFIGURED_NODE_ATTRIBUTES =
      "yarn.nodemanager.node-attributes.provider.configured-node-attributes";
  /** {@code OwnConfigNodeAttributes.java}, left out of the build on Hadoop 3.1 (the launcher's hadoop-3.1 profile). */
  static final String OWN_CONFIG_NODE_ATTRIBUTES = "org.melon.yarn.OwnConfigNodeAttributes";

  private void gpuModelsConf(Configuration conf, File work, int nms) {
    conf.set(NODE_ATTRIBUTE_STORE_ROOT_DIR, new File(work, "node-attributes").toURI().toString());
    if (opt("nm-gpu-models") == null) {
      return;
    }
    if (!HadoopLine.hasNodeAttributes()) {
      fail("--nm-gpu-models: node attributes need Hadoop 3.2.0 or later (YARN-3409); this is Hadoop "
          + HadoopLine.version());
    }
    if (opt("nm-gpu-models").split(",", -1).length != nms) {
      fail("--nm-gpu-models " + opt("nm-gpu-models") + ": expected " + nms + " models, one per NodeManager");
    }
    conf.set(YarnConfiguration.RM_PLACEMENT_CONSTRAINTS_HANDLER,
        YarnConfiguration.SCHEDULER_RM_PLACEMENT_CONSTRAINTS_HANDLER);
    conf.set(NM_NODE_ATTRIBUTES_PROVIDER, OWN_CONFIG_NODE_ATTRIBUTES);
  }

  /**
   * Each NodeManager's own {@code configured-node-attributes} line, as in its yarn-site.xml on a real node, and its
   * own loopback address (127.0.0.2, .3, ...): YARN keeps node attributes per host, so NodeManagers sharing one host
   * would share one model. The launcher's JVM resolves names from a hosts file without those addresses
   * ({@code minicluster.start} passes {@code -Djdk.net.hosts.file}), so each NodeManager's host is its address,
   * without a DNS lookup.
   */
  private void applyNodeManagerGpuModels(int nms) {
    if (opt("nm-gpu-models") == null) {
      return;
    }
    String[] models = opt("nm-gpu-models").split(",", -1);
    for (int i = 0; i < nms; i++) {
      String line = models[i].trim().isEmpty() ? "" : "gpu-model,STRING," + models[i].trim();
      Configuration nmConf = yarn.getNodeManager(i).getConfig();
      nmConf.set(NM_CONFIGURED_NODE_ATTRIBUTES, line);
      nmConf.set(YarnConfiguration.NM_ADDRESS, "127.0.0." + (i + 2) + ":0");
      System.out.println("NodeManager " + i + " at 127.0.0." + (i + 2) + ", node attributes: "
          + (line.isEmpty() ? "none" : line));
    }
  }

  private void waitForHealthyNodes(int expected) throws Exception {
    long deadline = System.currentTimeMillis() + 60_000;
    while (true) {
      for (int i = 0; i < expected; i++) {
        NodeManager nm = yarn.getNodeManager(i);
        if (!nm.getNodeHealthChecker().getDiskHandler().areDisksHealthy()) {
          fail("NodeManager " + i + " is UNHEALTHY: "
              + nm.getNodeHealthChecker().getDiskHandler().getDisksHealthReport(false)
              + " (each NodeManager disk needs < " + yarn.getConfig().get(
                  YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE) + "% used and >= "
              + yarn.getConfig().get(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB) + " MB free)");
        }
      }
      int running = 0;
      for (RMNode n : yarn.getResourceManager().getRMContext().getRMNodes().values()) {
        if (n.getState() == NodeState.UNHEALTHY) {
          fail("NodeManager " + n.getNodeID() + " is UNHEALTHY: " + n.getHealthReport());
        }
        if (n.getState() == NodeState.RUNNING) {
          running++;
        }
      }
      if (running >= expected) {
        return;
      }
      if (System.currentTimeMillis() > deadline) {
        fail("only " + running + " of " + expected + " NodeManagers registered within 60 s");
      }
      Thread.sleep(100);
    }
  }

  private static void writeXml(Configuration conf, File file) throws IOException {
    File tmp = new File(file.getPath() + ".tmp");
    try (OutputStream out = new FileOutputStream(tmp)) {
      conf.writeXml(out);
    }
    Files.move(tmp.toPath(), file.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private void writeDetails(File confDir) throws IOException {
    StringBuilder cp = new StringBuilder(confDir.getAbsolutePath());
    for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
      if (!entry.isEmpty()) {
        cp.append(File.pathSeparator).append(new File(entry).getAbsolutePath());
      }
    }
    String nnHttp = "127.0.0.1:" + intOpt("nn-http-port");
    Map<String, Object> d = new LinkedHashMap<>();
    d.put("rm_web_url", "http://127.0.0.1:" + intOpt("rm-web-port"));
    d.put("webhdfs_url", "http://" + nnHttp + "/webhdfs/v1");
    d.put("nn_http", nnHttp);
    d.put("fs_default_fs", "hdfs://127.0.0.1:" + intOpt("nn-port"));
    d.put("conf_dir", confDir.getAbsolutePath());
    d.put("am_classpath", cp.toString());
    d.put("java_home", System.getProperty("java.home"));
    d.put("user", System.getProperty("user.name"));
    d.put("pid", ProcessHandle.current().pid());
    d.put("nodemanagers", intOpt("nodemanagers"));
    d.put("gpus_per_node", intOpt("gpus"));
    d.put("gpu_memory_mb_per_node", intOpt("gpu-memory-mb"));
    List<String> nmIds = new ArrayList<>();  // in NodeManager index order (--nm-env, the control URL's <i>)
    for (int i = 0; i < intOpt("nodemanagers"); i++) {
      nmIds.add(String.valueOf(yarn.getNodeManager(i).getNMContext().getNodeId()));
    }
    d.put("nodemanager_ids", nmIds);
    d.put("tenants", intOpt("tenants"));
    // the calculator the scheduler runs on (what melon doctor must find out from outside)
    d.put("resource_calculator", yarn.getResourceManager().getResourceScheduler().getResourceCalculator()
        .getClass().getName());
    d.put("control_url", "http://127.0.0.1:" + control.getAddress().getPort());
    if (secure != null) {
      d.putAll(secure.details());
    }
    StringBuilder json = new StringBuilder("{");
    for (Map.Entry<String, Object> e : d.entrySet()) {
      if (json.length() > 1) {
        json.append(", ");
      }
      json.append(Json.quote(e.getKey())).append(": ");
      if (e.getValue() instanceof List<?>) {  // no pattern matching: the 3.3.6 launcher is built for Java 11
        List<String> items = new ArrayList<>();
        ((List<?>) e.getValue()).forEach(x -> items.add(Json.quote(String.valueOf(x))));
        json.append("[").append(String.join(", ", items)).append("]");
      } else {
        json.append(e.getValue() instanceof String ? Json.quote((String) e.getValue()) : e.getValue());
      }
    }
    json.append("}\n");
    details.getParentFile().mkdirs();
    File tmp = new File(details.getPath() + ".tmp");
    Files.write(tmp.toPath(), json.toString().getBytes(StandardCharsets.UTF_8));
    Files.move(tmp.toPath(), details.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  /**
   * Fault controls for tests, on a loopback port (its URL is {@code control_url} in the details JSON), each a POST
   * that returns when done:
   * <ul>
   *   <li>{@code /nodemanagers/<i or host:port>/crash}: that NodeManager goes silent as a crashed host would: it stops
   *       heartbeating (without unregistering), then its containers are killed, so the RM finds it LOST only after
   *       {@code --nm-expiry-ms} and its containers end -100;</li>
   *   <li>{@code /namenode/restart}: the NameNode restarts (same ports) and waits until it is active;</li>
   *   <li>{@code /resourcemanager/restart[?down_ms=N]}: the RM restarts (after N ms down); with
   *       {@code --rm-recovery 1} it recovers its applications from the state store and NodeManagers and AMs
   *       re-sync (work-preserving).</li>
   * </ul>
   */
  private void startControl() throws IOException {
    control = com.sun.net.httpserver.HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    control.createContext("/", ex -> {
      String path = ex.getRequestURI().getPath();
      int code = 200;
      String body;
      long t0 = System.nanoTime();
      try {
        if (!"POST".equals(ex.getRequestMethod())) {
          code = 405;
          body = "POST only";
        } else {
          String query = ex.getRequestURI().getQuery();
          long downMs = query != null && query.startsWith("down_ms=") ? Long.parseLong(query.substring(8)) : 0;
          body = controlAction(path, downMs);
          if (body == null) {
            code = 404;
            body = "unknown control " + path;
          }
        }
      } catch (Exception e) {
        code = 500;
        body = e.toString();
        e.printStackTrace();
      }
      String json = "{\"result\": " + Json.quote(body) + ", \"seconds\": "
          + String.format("%.2f", (System.nanoTime() - t0) / 1e9) + "}";
      System.out.println("MiniClusterLauncher control " + path + " -> " + code + " " + body);
      byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("Content-Type", "application/json");
      ex.sendResponseHeaders(code, bytes.length);
      try (OutputStream out = ex.getResponseBody()) {
        out.write(bytes);
      }
    });
    control.start();
  }

  private synchronized String controlAction(String path, long downMs) throws Exception {
    java.util.regex.Matcher nm = java.util.regex.Pattern.compile("/nodemanagers/([^/]+)/crash").matcher(path);
    if (nm.matches()) {  // by index, or by node id (host:port)
      for (int i = 0; i < intOpt("nodemanagers"); i++) {
        String id = String.valueOf(yarn.getNodeManager(i).getNMContext().getNodeId());
        if (nm.group(1).equals(String.valueOf(i)) || nm.group(1).equals(id)) {
          return crashNodeManager(i);
        }
      }
      return null;
    }
    if (path.equals("/namenode/restart")) {
      dfs.restartNameNode(true);
      return "NameNode restarted";
    }
    if (path.equals("/resourcemanager/restart")) {
      int rm = yarn.getActiveRMIndex() < 0 ? 0 : yarn.getActiveRMIndex();
      if (downMs > 0) {  // an outage that spans several polls of the clients
        yarn.stopResourceManager(rm);
        Thread.sleep(downMs);
      }
      yarn.restartResourceManager(rm);
      restoreRmWebUi();
      return "ResourceManager restarted";
    }
    return null;
  }

  /**
   * A host crash, in the order a real one is seen: first the NodeManager goes silent (its status updater stops and
   * the last heartbeat in flight, if any, has returned), only then are its containers' processes killed, then the
   * NodeManager stops without a goodbye. No heartbeat can carry a killed container's exit (137) to the RM, which
   * learns of the containers only when it finds the node LOST (-100), as with a crashed host.
   */
  private String crashNodeManager(int i) throws Exception {
    NodeManager nm = yarn.getNodeManager(i);
    String id = String.valueOf(nm.getNMContext().getNodeId());
    silence(nm.getNodeStatusUpdater(), "crash-nm-" + i);
    List<String> killed = new ArrayList<>();
    for (org.apache.hadoop.yarn.api.records.ContainerId cid : nm.getNMContext().getContainers().keySet()) {
      String pid = nm.getNMContext().getContainerExecutor().getProcessId(cid);
      if (pid != null) {
        ProcessHandle.of(Long.parseLong(pid)).ifPresent(p -> {
          p.descendants().forEach(ProcessHandle::destroyForcibly);
          p.destroyForcibly();
        });
        killed.add(cid.toString());
      }
    }
    bounded("crash-nm-" + i, nm::stop);
    return "NodeManager " + id + " crashed; killed containers " + killed;
  }

  /** Stops the updater's heartbeat loop and waits for its thread to end (no heartbeat in flight after this). Its
   * stop() then skips unregistering (the updater is already stopped and "failed to connect"). */
  private static void silence(org.apache.hadoop.yarn.server.nodemanager.NodeStatusUpdater updater, String name)
      throws Exception {
    Class<?> c = org.apache.hadoop.yarn.server.nodemanager.NodeStatusUpdaterImpl.class;
    field(c, "failedToConnect").set(updater, true);
    field(c, "isStopped").set(updater, true);
    Object monitor = field(c, "heartbeatMonitor").get(updater);
    synchronized (monitor) {
      monitor.notifyAll();  // the loop waits on it between heartbeats: wake it to see isStopped
    }
    Thread loop = (Thread) field(c, "statusUpdater").get(updater);
    if (loop != null) {
      loop.join(60_000);
      if (loop.isAlive()) {
        throw new IllegalStateException(name + ": the NodeManager's heartbeat thread did not stop within 60 s");
      }
    }
  }

  private static java.lang.reflect.Field field(Class<?> c, String name) throws NoSuchFieldException {
    java.lang.reflect.Field f = c.getDeclaredField(name);
    f.setAccessible(true);
    return f;
  }

  private void installSignalHandlers() {
    for (String name : new String[] {"TERM", "INT"}) {
      sun.misc.Signal.handle(new sun.misc.Signal(name), sig -> {
        Thread t = new Thread(this::stopAndExit, "melon-stop");
        t.start();
      });
    }
  }

  private static Thread bounded(String name, Runnable r) {
    Thread t = new Thread(() -> {
      try {
        r.run();
      } catch (Throwable e) {
        System.err.println(name + ": " + e);
      }
    }, name);
    t.setDaemon(true);
    t.start();
    return t;
  }

  private static void joinAll(List<Thread> threads, long timeoutMs) {
    long deadline = System.currentTimeMillis() + timeoutMs;
    try {
      for (Thread t : threads) {
        t.join(Math.max(1, deadline - System.currentTimeMillis()));
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private synchronized void stopAndExit() {
    System.out.println("MiniClusterLauncher stopping");
    try {
      if (details != null) {
        Files.deleteIfExists(details.toPath());
      }
    } catch (IOException e) {
      System.err.println("could not delete " + details + ": " + e);
    }
    if (yarn != null) {
      // NodeManagers in parallel: each kills its containers (~3 s). What follows in an NM's stop only waits
      // for delayed log-deletion tasks, so we do not wait for it. Then the RM, then HDFS.
      List<Thread> stops = new ArrayList<>();
      for (int i = 0; i < intOpt("nodemanagers"); i++) {
        NodeManager nm = yarn.getNodeManager(i);
        stops.add(bounded("stop-nm-" + i, nm::stop));
      }
      joinAll(stops, 5_000);
      joinAll(List.of(bounded("stop-rm", () -> yarn.getResourceManager().stop())), 5_000);
    }
    if (dfs != null) {
      joinAll(List.of(bounded("stop-hdfs", dfs::shutdown)), 10_000);
    }
    if (secure != null) {
      secure.stop();
    }
    System.out.println("MiniClusterLauncher stopped");
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }
}
