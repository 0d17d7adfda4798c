package org.melon.yarn;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.RandomAccessFile;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.ApplicationConstants.Environment;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.URL;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.util.resource.Resources;

/**
 * MeLoN ApplicationMaster (docs/protocol.md section 2): one container per task, gang registration over HTTP,
 * per-role restart budgets, final status with the failing task's stderr tail.
 */
public final class MelonApplicationMaster {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEM = "melon.io/gpu-memory";
  static final int EXIT_NO_GPU_FIT = 75;
  static final int MAX_NO_FIT_RETRIES = 3;
  /** Step/loss samples kept per task for progress charts (oldest dropped first). */
  static final int HISTORY = 500;
  /** A node avoided after an exit 75 is given back after this long, or once the task runs elsewhere. */
  static final long AVOID_MS = 120_000;

  private static final ObjectMapper JSON = new ObjectMapper();

  /** A role from the plan plus its restart budget. */
  static final class Role {
    String name;
    int instances;
    int memoryMb;
    int vcores;
    int gpus;
    int gpuMemoryMb;
    int restarts;
    boolean tracked;
    int restartsUsed;
  }

  /** One task = one container at a time. */
  static final class Task {
    final Role role;
    final int index;
    final int number;
    String state = "PENDING";
    int attempt;
    int noFitRetries;
    ContainerRequest request;
    Container container;
    String nodeHost;
    String host;
    int port;
    boolean registered;
    Integer exitCode;
    /** The host this task left with exit 75 (no GPU fits there): avoided until the task is placed elsewhere. */
    String avoidHost;
    String gpu;
    /** GPU memory reserved for the task on its GPU (its expected memory), MiB. */
    long gpuMemoryMb;
    /** GPU memory the task's processes use (NVML, from heartbeats), MiB; null without a GPU. */
    Long gpuMemoryUsedMb;
    /** Whether the task's node runs a CUDA MPS control daemon (reported at registration). */
    boolean mps;
    Long step;
    Double loss;
    /** [epoch ms, step, loss] each time the step changed, at most {@link #HISTORY}. */
    final java.util.ArrayDeque<double[]> history = new java.util.ArrayDeque<>();
    String message;
    long updated = System.currentTimeMillis();

    Task(Role role, int index, int number) {
      this.role = role;
      this.index = index;
      this.number = number;
    }

    String name() {
      return role.name + ":" + index;
    }

    boolean live() {
      return container != null && ("ALLOCATED".equals(state) || "RUNNING".equals(state)
          || "REGISTERED".equals(state));
    }
  }

  private final JsonNode plan;
  private final String secret = System.getenv().getOrDefault("MELON_SECRET", "");
  private final String appId;
  private final String amHost;
  private final List<Task> tasks = new ArrayList<>();
  private final Map<ContainerId, Task> byContainer = new HashMap<>();
  private final CountDownLatch done = new CountDownLatch(1);
  private final YarnConfiguration conf = new YarnConfiguration();
  private final long registerTimeoutMs;
  private long gangWaitSince = System.currentTimeMillis();
  private boolean gangComplete;
  /** Hosts on the application's blacklist (node avoidance after exit 75) and since when. */
  private final Map<String, Long> avoided = new HashMap<>();
  /** Hosts that have run one of our containers: the fallback view of the cluster when the RM's node list
   * cannot be read (a secure cluster gives the AM no client credentials). */
  private final Set<String> seenHosts = new HashSet<>();

  private String state = "RUNNING";
  private String diagnostics = "";
  private String amUrl;
  private HttpServer http;
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private ByteBuffer tokens;
  private Map<String, LocalResource> localResources = Map.of();

  MelonApplicationMaster(JsonNode plan) {
    this.plan = plan;
    ContainerId cid = ContainerId.fromString(System.getenv(Environment.CONTAINER_ID.name()));
    this.appId = cid.getApplicationAttemptId().getApplicationId().toString();
    String h = System.getenv(Environment.NM_HOST.name());
    this.amHost = h != null ? h : "localhost";
    this.registerTimeoutMs = plan.path("register_timeout_s").asLong(300) * 1000L;
    int number = 0;
    for (JsonNode r : plan.path("roles")) {
      Role role = new Role();
      role.name = r.path("name").asText();
      role.instances = r.path("instances").asInt(1);
      role.memoryMb = r.path("memory_mb").asInt(1024);
      role.vcores = r.path("vcores").asInt(1);
      role.gpus = r.path("gpus").asInt(0);
      role.gpuMemoryMb = r.path("gpu_memory_mb").asInt(0);
      role.restarts = r.path("restarts").asInt(0);
      role.tracked = r.path("tracked").asBoolean(true);
      for (int i = 0; i < role.instances; i++) {
        tasks.add(new Task(role, i, number++));
      }
    }
  }

  public static void main(String[] args) {
    try {
      JsonNode plan = JSON.readTree(new File(args.length > 0 ? args[0] : "melon-plan.json"));
      int rc = new MelonApplicationMaster(plan).run();
      System.exit(rc);
    } catch (Throwable t) {
      // A crash of the AM itself: exit non-zero so that YARN starts the next attempt (max_attempts).
      t.printStackTrace();
      System.exit(1);
    }
  }

  int run() throws Exception {
    log("starting AM for " + appId + " with " + tasks.size() + " tasks");
    Credentials creds = UserGroupInformation.getCurrentUser().getCredentials();
    DataOutputBuffer dob = new DataOutputBuffer();
    Credentials taskCreds = new Credentials(creds);
    for (Iterator<Token<?>> it = taskCreds.getAllTokens().iterator(); it.hasNext(); ) {
      if (it.next().getKind().equals(AMRMTokenIdentifier.KIND_NAME)) {
        it.remove();
      }
    }
    taskCreds.writeTokenStorageToStream(dob);
    tokens = ByteBuffer.wrap(dob.getData(), 0, dob.getLength());

    startHttp();
    amrm = AMRMClientAsync.createAMRMClientAsync(500, new RMCallbacks());
    amrm.init(conf);
    amrm.start();
    nm = NMClientAsync.createNMClientAsync(new NMCallbacks());
    nm.init(conf);
    nm.start();
    Resource max = amrm.registerApplicationMaster(amHost, http.getAddress().getPort(), amUrl + "/")
        .getMaximumResourceCapability();
    log("registered with the RM, tracking URL " + amUrl + "/, maximum allocation " + max);

    synchronized (this) {
      try {
        localResources = parseLocalResources();
        for (Task t : tasks) {
          if (!Resources.fitsIn(resource(t.role), max)) {
            throw new IllegalArgumentException("role " + t.role.name + " asks for " + resource(t.role)
                + ", more than the cluster's maximum allocation " + max);
          }
        }
        for (Task t : tasks) {
          request(t);
        }
      } catch (IllegalArgumentException e) {
        finish("FAILED", "bad plan: " + e.getMessage());
      }
    }
    while (!done.await(500, TimeUnit.MILLISECONDS)) {
      checkGangTimeout();
      expireAvoidance();
    }
    return shutdown();
  }

  // ---------------------------------------------------------------- scheduling

  private static Resource resource(Role role) {
    Resource res = Resource.newInstance(role.memoryMb, role.vcores);
    if (role.gpus > 0) {
      res.setResourceValue(GPU, role.gpus);
    }
    if (role.gpuMemoryMb > 0) {
      res.setResourceValue(GPU_MEM, role.gpuMemoryMb);
    }
    return res;
  }

  private void request(Task t) {
    t.request = new ContainerRequest(resource(t.role), null, null, Priority.newInstance(1), t.number);
    t.state = "PENDING";
    t.container = null;
    t.updated = System.currentTimeMillis();
    amrm.addContainerRequest(t.request);
  }

  private synchronized void allocated(List<Container> containers) {
    for (Container c : containers) {
      long id = c.getAllocationRequestId();
      Task t = id >= 0 && id < tasks.size() ? tasks.get((int) id) : null;
      if (t == null || !"PENDING".equals(t.state) || !"RUNNING".equals(state)) {
        amrm.releaseAssignedContainer(c.getId());
        continue;
      }
      amrm.removeContainerRequest(t.request);
      t.container = c;
      t.nodeHost = c.getNodeId().getHost();
      t.host = t.nodeHost;
      seenHosts.add(t.nodeHost);
      if (t.avoidHost != null) {  // placed again: its avoided node may be given back
        String left = t.avoidHost;
        t.avoidHost = null;
        releaseAvoidance(left, "task " + t.name() + " placed on " + t.nodeHost);
      }
      t.state = "ALLOCATED";
      t.exitCode = null;
      t.updated = System.currentTimeMillis();
      byContainer.put(c.getId(), t);
      log("task " + t.name() + " attempt " + t.attempt + " -> " + c.getId() + " on " + c.getNodeId());
      nm.startContainerAsync(c, launchContext(t));
    }
  }

  private Map<String, LocalResource> parseLocalResources() {
    Map<String, LocalResource> resources = new HashMap<>();
    for (JsonNode r : plan.path("local_resources")) {
      try {
        resources.put(r.path("name").asText(), LocalResource.newInstance(
            URL.fromURI(new URI(r.path("url").asText())),
            LocalResourceType.valueOf(r.path("type").asText("FILE").toUpperCase()),
            LocalResourceVisibility.valueOf(r.path("visibility").asText("APPLICATION").toUpperCase()),
            r.path("size").asLong(), r.path("timestamp").asLong()));
      } catch (Exception e) {
        throw new IllegalArgumentException("bad local resource " + r + ": " + e, e);
      }
    }
    return resources;
  }

  private ContainerLaunchContext launchContext(Task t) {
    Map<String, String> env = new HashMap<>();
    plan.path("env").fields().forEachRemaining(e -> env.put(e.getKey(), e.getValue().asText()));
    env.put("MELON_ROLE", t.role.name);
    env.put("MELON_INDEX", String.valueOf(t.index));
    env.put("MELON_TASK_ATTEMPT", String.valueOf(t.attempt));
    env.put("MELON_AM_URL", amUrl);
    env.put("MELON_SECRET", secret);
    env.put("MELON_APP_ID", appId);
    env.put("MELON_CONTAINER_ID", t.container.getId().toString());
    env.put("MELON_GPUS", String.valueOf(t.role.gpus));
    env.put("MELON_GPU_MEMORY_MB", String.valueOf(t.role.gpuMemoryMb));
    String command = plan.path("command").asText() + " 1>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR
        + "/stdout 2>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stderr";
    return ContainerLaunchContext.newInstance(new HashMap<>(localResources), env, List.of(command), null, tokens.duplicate(), null);
  }

  private synchronized void completed(ContainerStatus status) {
    Task t = byContainer.remove(status.getContainerId());
    if (t == null || t.container == null || !t.container.getId().equals(status.getContainerId())) {
      return;
    }
    int code = status.getExitStatus();
    t.exitCode = code;
    t.updated = System.currentTimeMillis();
    if (!"RUNNING".equals(state)) {
      if (t.live()) {
        t.state = "KILLED";
      }
      return;
    }
    log("task " + t.name() + " (" + status.getContainerId() + ") exited " + code);
    if (code == 0) {
      t.state = "SUCCEEDED";
      checkSuccess(t);
      return;
    }
    if (code == EXIT_NO_GPU_FIT && t.noFitRetries < MAX_NO_FIT_RETRIES) {
      t.noFitRetries++;
      avoid(t, t.nodeHost);
      restart(t, "no GPU fits on " + t.nodeHost + " (exit 75), retry " + t.noFitRetries);
      return;
    }
    if (t.role.restartsUsed < t.role.restarts) {
      t.role.restartsUsed++;
      restart(t, "exit " + code + ", restart " + t.role.restartsUsed + "/" + t.role.restarts + " of role "
          + t.role.name);
      return;
    }
    t.state = "FAILED";
    String diag = "task " + t.name() + " on " + t.nodeHost + " exited " + code + ": " + stderrTail(t, status);
    if (t.role.tracked) {
      finish("FAILED", diag);
    } else {
      log("untracked " + diag);
    }
  }

  // ---------------------------------------------------------------- node avoidance (exit 75)

  /** Put {@code host} on the application's blacklist while {@code t} is re-requested, so YARN places the task on
   * another node. Bounded: never the last usable node (the RM's RUNNING nodes, else the hosts seen so far), and
   * given back once the task is placed elsewhere or after {@link #AVOID_MS}. */
  private void avoid(Task t, String host) {
    if (host == null) {
      return;
    }
    if (avoided.containsKey(host)) {
      t.avoidHost = host;
      return;
    }
    Set<String> others = new TreeSet<>(runningHosts());
    others.removeAll(avoided.keySet());
    others.remove(host);
    if (others.isEmpty()) {
      log("not avoiding " + host + " for task " + t.name() + ": no other node is known");
      return;
    }
    t.avoidHost = host;
    avoided.put(host, System.currentTimeMillis());
    amrm.updateBlacklist(List.of(host), null);
    log("avoiding node " + host + " for task " + t.name() + " (exit 75: no GPU fits there); other nodes " + others);
  }

  private void releaseAvoidance(String host, String why) {
    if (!avoided.containsKey(host) || tasks.stream().anyMatch(x -> host.equals(x.avoidHost))) {
      return;
    }
    avoided.remove(host);
    amrm.updateBlacklist(null, List.of(host));
    log("node " + host + " no longer avoided: " + why);
  }

  private synchronized void expireAvoidance() {
    long now = System.currentTimeMillis();
    for (String host : new ArrayList<>(avoided.keySet())) {
      if (now - avoided.get(host) > AVOID_MS) {
        tasks.stream().filter(x -> host.equals(x.avoidHost)).forEach(x -> x.avoidHost = null);
        releaseAvoidance(host, "avoided for " + AVOID_MS / 1000 + " s");
      }
    }
  }

  /** Hosts of the RM's RUNNING nodes (short timeouts), or the hosts our containers ran on if that fails. */
  private Set<String> runningHosts() {
    YarnConfiguration quick = new YarnConfiguration(conf);
    quick.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, 5_000);
    quick.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 1_000);
    quick.setInt("ipc.client.connect.max.retries", 1);
    try (YarnClient client = YarnClient.createYarnClient()) {
      client.init(quick);
      client.start();
      Set<String> hosts = new HashSet<>();
      for (NodeReport n : client.getNodeReports(NodeState.RUNNING)) {
        hosts.add(n.getNodeId().getHost());
      }
      return hosts;
    } catch (Exception e) {
      log("could not list the cluster's nodes (" + e + "); using the hosts seen so far " + seenHosts);
      return new HashSet<>(seenHosts);
    }
  }

  private void restart(Task t, String why) {
    log("restarting task " + t.name() + ": " + why);
    t.attempt++;
    markUnregistered(t);
    request(t);
  }

  private void markUnregistered(Task t) {
    if (t.registered && gangComplete) {
      gangComplete = false;
      gangWaitSince = System.currentTimeMillis();
    }
    t.registered = false;
  }

  private void checkSuccess(Task t) {
    String successRole = plan.path("success_role").isTextual() ? plan.path("success_role").asText() : null;
    if (successRole != null) {
      if (t.role.name.equals(successRole) && t.index == 0) {
        finish("SUCCEEDED", "task " + t.name() + " succeeded");
      }
      return;
    }
    boolean anyTracked = tasks.stream().anyMatch(x -> x.role.tracked);
    boolean all = tasks.stream().filter(x -> x.role.tracked || !anyTracked)
        .allMatch(x -> "SUCCEEDED".equals(x.state));
    if (all) {
      finish("SUCCEEDED", "all tracked tasks succeeded");
    }
  }

  private synchronized void checkGangTimeout() {
    if (!"RUNNING".equals(state) || gangComplete) {
      return;
    }
    if (System.currentTimeMillis() - gangWaitSince > registerTimeoutMs) {
      List<String> missing = new ArrayList<>();
      for (Task t : tasks) {
        if (!t.registered && !"SUCCEEDED".equals(t.state)) {  // a task that already exited 0 is not missing
          missing.add(t.name());
        }
      }
      if (!missing.isEmpty()) {
        finish("FAILED", "gang registration timed out: missing " + String.join(", ", missing));
      }
    }
  }

  private synchronized void finish(String finalState, String diag) {
    if (!"RUNNING".equals(state)) {
      return;
    }
    log("finishing " + finalState + ": " + diag);
    state = finalState;
    diagnostics = diag;
    done.countDown();
  }

  private int shutdown() throws Exception {
    List<Task> toStop = new ArrayList<>();
    synchronized (this) {
      for (Task t : tasks) {
        if (t.live()) {
          toStop.add(t);
        } else if ("PENDING".equals(t.state) && t.request != null) {
          amrm.removeContainerRequest(t.request);
        }
      }
    }
    for (Task t : toStop) {
      nm.stopContainerAsync(t.container.getId(), t.container.getNodeId());
    }
    long deadline = System.currentTimeMillis() + 10_000;
    while (System.currentTimeMillis() < deadline && anyLive(toStop)) {
      Thread.sleep(100);
    }
    FinalApplicationStatus status = "SUCCEEDED".equals(state) ? FinalApplicationStatus.SUCCEEDED
        : "KILLED".equals(state) ? FinalApplicationStatus.KILLED : FinalApplicationStatus.FAILED;
    amrm.unregisterApplicationMaster(status, diagnostics, null);
    log("unregistered: " + status);
    nm.stop();
    amrm.stop();
    http.stop(0);
    return 0;
  }

  private synchronized boolean anyLive(List<Task> list) {
    return list.stream().anyMatch(Task::live);
  }

  // ---------------------------------------------------------------- stderr tail

  /** Last 20 lines of the container's stderr: the NM's local log dir in a mini cluster, else the NM REST API. */
  private String stderrTail(Task t, ContainerStatus status) {
    String text = null;
    String cid = status.getContainerId().toString();
    String logDirs = System.getenv(Environment.LOG_DIRS.name());
    if (logDirs != null) {
      for (String dir : logDirs.split(",")) {
        // <nm-log-dir>/<app>/<am-container>: the task's file is <some nm-log-dir>/<app>/<cid>/stderr.
        Path amLogDir = Paths.get(dir);
        Path nmLogDir = amLogDir.getParent().getParent();
        List<Path> candidates = new ArrayList<>();
        candidates.add(nmLogDir.resolve(appId).resolve(cid).resolve("stderr"));
        try (DirectoryStream<Path> siblings = Files.newDirectoryStream(nmLogDir.getParent())) {
          for (Path p : siblings) {
            candidates.add(p.resolve(appId).resolve(cid).resolve("stderr"));
          }
        } catch (IOException | RuntimeException e) {
          // not a mini cluster layout
        }
        for (Path p : candidates) {
          if (Files.isReadable(p)) {
            text = readTail(p.toFile());
            break;
          }
        }
        if (text != null) {
          break;
        }
      }
    }
    if (text == null && t.container != null) {
      text = fetchTail(t.container.getNodeHttpAddress(), cid);
    }
    if (text == null) {
      // No stderr (e.g. localization failed, exit -1000): YARN's own diagnostics, whose head names the cause.
      List<String> lines = Arrays.asList(status.getDiagnostics().strip().split("\r?\n"));
      return String.join("\n", lines.subList(0, Math.min(lines.size(), 20)));
    }
    List<String> lines = Arrays.asList(text.strip().split("\r?\n"));
    return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
  }

  private static String readTail(File f) {
    try (RandomAccessFile raf = new RandomAccessFile(f, "r")) {
      long start = Math.max(0, raf.length() - 4096);
      byte[] buf = new byte[(int) (raf.length() - start)];
      raf.seek(start);
      raf.readFully(buf);
      return new String(buf, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return null;
    }
  }

  private String fetchTail(String nodeHttp, String cid) {
    try {
      String user = UserGroupInformation.getCurrentUser().getShortUserName();
      java.net.URL url = new java.net.URL("http://" + nodeHttp + "/ws/v1/node/containers/" + cid
          + "/logs/stderr?size=-4096&user.name=" + user);
      HttpURLConnection c = (HttpURLConnection) url.openConnection();
      c.setConnectTimeout(5000);
      c.setReadTimeout(5000);
      try (InputStream in = c.getInputStream()) {
        // The NM wraps the file in a header ("LogContents:") and a footer ("End of LogType:stderr").
        String body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        int from = body.indexOf("LogContents:\n");
        int to = body.lastIndexOf("End of LogType:");
        return from >= 0 && to > from ? body.substring(from + "LogContents:\n".length(), to) : body;
      }
    } catch (IOException e) {
      log("could not fetch stderr of " + cid + " from " + nodeHttp + ": " + e);
      return null;
    }
  }

  // ---------------------------------------------------------------- HTTP API

  private void startHttp() throws IOException {
    http = HttpServer.create(new InetSocketAddress("0.0.0.0", 0), 64);
    http.setExecutor(Executors.newFixedThreadPool(8));
    http.createContext("/", this::handle);
    http.start();
    amUrl = "http://" + amHost + ":" + http.getAddress().getPort();
  }

  private void handle(HttpExchange ex) throws IOException {
    try {
      String path = ex.getRequestURI().getPath();
      String method = ex.getRequestMethod();
      if ("GET".equals(method) && "/status".equals(path)) {
        send(ex, 200, "application/json", JSON.writeValueAsString(statusJson()));
      } else if ("GET".equals(method) && "/".equals(path)) {
        send(ex, 200, "text/html; charset=utf-8", html());
      } else if ("POST".equals(method) && ("/register".equals(path) || "/heartbeat".equals(path))) {
        String given = ex.getRequestHeaders().getFirst("X-Melon-Secret");
        if (given == null || secret.isEmpty() || !MessageDigest.isEqual(
            given.getBytes(StandardCharsets.UTF_8), secret.getBytes(StandardCharsets.UTF_8))) {
          send(ex, 403, "application/json", "{\"error\": \"bad or missing X-Melon-Secret\"}");
          return;
        }
        JsonNode body = JSON.readTree(ex.getRequestBody());
        Object[] reply = "/register".equals(path) ? register(body) : heartbeat(body);
        send(ex, (Integer) reply[0], "application/json", JSON.writeValueAsString(reply[1]));
      } else if ("/status".equals(path) || "/".equals(path) || "/register".equals(path)
          || "/heartbeat".equals(path)) {
        send(ex, 405, "application/json", "{\"error\": \"method not allowed\"}");
      } else {
        send(ex, 404, "application/json", "{\"error\": \"not found\"}");
      }
    } catch (Exception e) {
      send(ex, 400, "application/json", JSON.writeValueAsString(Map.of("error", String.valueOf(e))));
    } finally {
      ex.close();
    }
  }

  private static void send(HttpExchange ex, int code, String type, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", type);
    ex.sendResponseHeaders(code, bytes.length);
    try (OutputStream out = ex.getResponseBody()) {
      out.write(bytes);
    }
  }

  private Task find(JsonNode body) {
    String role = body.path("role").asText();
    int index = body.path("index").asInt(-1);
    for (Task t : tasks) {
      if (t.role.name.equals(role) && t.index == index) {
        return t;
      }
    }
    throw new IllegalArgumentException("unknown task " + role + ":" + index);
  }

  private synchronized Object[] register(JsonNode body) {
    Task t = find(body);
    t.host = body.path("host").asText(t.host);
    t.port = body.path("port").asInt();
    t.gpu = body.path("gpu").isNull() || body.path("gpu").isMissingNode() ? null : body.path("gpu").asText();
    t.gpuMemoryMb = body.path("gpu_memory_mb").asLong(0);
    t.mps = body.path("mps").asBoolean(false);
    if (!t.registered) {
      log("task " + t.name() + " registered at " + t.host + ":" + t.port);
    }
    t.registered = true;
    if ("ALLOCATED".equals(t.state) || "RUNNING".equals(t.state)) {
      t.state = "REGISTERED";
    }
    t.updated = System.currentTimeMillis();
    long missing = tasks.stream().filter(x -> !x.registered).count();
    if (missing > 0) {
      return new Object[] {202, Map.of("waiting", missing)};
    }
    gangComplete = true;
    Map<String, List<String>> cluster = new LinkedHashMap<>();
    for (Task x : tasks) {
      cluster.computeIfAbsent(x.role.name, k -> new ArrayList<>()).add(x.host + ":" + x.port);
    }
    return new Object[] {200, Map.of("cluster", cluster)};
  }

  private synchronized Object[] heartbeat(JsonNode body) {
    Task t = find(body);
    if (body.hasNonNull("loss")) {
      t.loss = body.path("loss").asDouble();
    }
    if (body.hasNonNull("step")) {
      long step = body.path("step").asLong();
      if (t.step == null || step != t.step) {
        t.history.addLast(new double[] {System.currentTimeMillis(), step, t.loss == null ? Double.NaN : t.loss});
        if (t.history.size() > HISTORY) {
          t.history.removeFirst();
        }
      }
      t.step = step;
    }
    if (body.hasNonNull("gpu")) {
      t.gpu = body.path("gpu").asText();
    }
    if (body.hasNonNull("gpu_memory_used_mb")) {
      t.gpuMemoryUsedMb = body.path("gpu_memory_used_mb").asLong();
    }
    if (body.hasNonNull("message")) {
      t.message = body.path("message").asText();
    }
    t.updated = System.currentTimeMillis();
    return new Object[] {200, Map.of("ok", true)};
  }

  private synchronized ObjectNode statusJson() {
    ObjectNode root = JSON.createObjectNode();
    root.put("app_id", appId);
    root.put("state", state);
    root.put("diagnostics", diagnostics);
    root.set("labels", plan.path("labels").isObject() ? plan.path("labels") : JSON.createObjectNode());
    ArrayNode arr = root.putArray("tasks");
    for (Task t : tasks) {
      ObjectNode o = arr.addObject();
      o.put("role", t.role.name);
      o.put("index", t.index);
      o.put("state", t.state);
      o.put("container_id", t.container == null ? null : t.container.getId().toString());
      o.put("host", t.host);
      o.put("node_id", t.container == null ? null : t.container.getNodeId().toString());
      o.put("port", t.port);
      o.put("attempt", t.attempt);
      o.put("exit_code", t.exitCode);
      o.put("gpu", t.gpu);
      o.put("gpu_memory_mb", t.gpuMemoryMb);
      o.put("expected_gpu_memory_mb", t.role.gpuMemoryMb);
      o.put("gpus", t.role.gpus);
      o.put("gpu_memory_used_mb", t.gpuMemoryUsedMb);
      o.put("mps", t.mps);
      o.put("step", t.step);
      o.put("loss", t.loss);
      o.put("message", t.message);
      o.put("updated", t.updated);
      ArrayNode h = o.putArray("history");
      for (double[] p : t.history) {
        ArrayNode point = h.addArray();
        point.add((long) p[0]);
        point.add((long) p[1]);
        if (Double.isNaN(p[2])) {
          point.addNull();
        } else {
          point.add(p[2]);
        }
      }
    }
    return root;
  }

  private String html() {
    ObjectNode s = statusJson();
    StringBuilder b = new StringBuilder("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>MeLoN ")
        .append(esc(appId)).append("</title></head><body><h1>MeLoN ").append(esc(appId)).append(": ")
        .append(esc(s.path("state").asText())).append("</h1><p>").append(esc(s.path("diagnostics").asText()))
        .append("</p><table border=\"1\" cellpadding=\"4\"><tr>");
    String[] cols = {"role", "index", "state", "container_id", "host", "port", "attempt", "exit_code", "gpu",
        "gpu_memory_mb", "gpu_memory_used_mb", "step", "loss", "message", "updated"};
    for (String c : cols) {
      b.append("<th>").append(c).append("</th>");
    }
    b.append("</tr>");
    for (JsonNode t : s.path("tasks")) {
      b.append("<tr>");
      for (String c : cols) {
        b.append("<td>").append(t.path(c).isNull() ? "" : esc(t.path(c).asText())).append("</td>");
      }
      b.append("</tr>");
    }
    return b.append("</table></body></html>").toString();
  }

  private static String esc(String s) {
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
  }

  private static void log(String msg) {
    System.out.println(new java.util.Date() + " MelonAM: " + msg);
    System.out.flush();
  }

  // ---------------------------------------------------------------- YARN callbacks

  private final class RMCallbacks extends AMRMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainersAllocated(List<Container> containers) {
      allocated(containers);
    }

    @Override
    public void onContainersCompleted(List<ContainerStatus> statuses) {
      for (ContainerStatus s : statuses) {
        completed(s);
      }
    }

    @Override
    public void onContainersUpdated(List<UpdatedContainer> containers) {
    }

    @Override
    public void onShutdownRequest() {
      // The RM killed the application (or lost track of this attempt): nothing left to report.
      log("shutdown requested by the RM, exiting");
      Runtime.getRuntime().halt(0);
    }

    @Override
    public void onNodesUpdated(List<NodeReport> nodes) {
    }

    @Override
    public float getProgress() {
      synchronized (MelonApplicationMaster.this) {
        long finished = tasks.stream().filter(t -> "SUCCEEDED".equals(t.state)).count();
        return tasks.isEmpty() ? 0f : Math.min(1f, (float) finished / tasks.size());
      }
    }

    @Override
    public void onError(Throwable e) {
      log("AMRM client error, exiting: " + e);
      e.printStackTrace();
      Runtime.getRuntime().halt(1);
    }
  }

  private final class NMCallbacks extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> allServiceResponse) {
      synchronized (MelonApplicationMaster.this) {
        Task t = byContainer.get(id);
        if (t != null && "ALLOCATED".equals(t.state)) {
          t.state = "RUNNING";
          t.updated = System.currentTimeMillis();
        }
      }
    }

    @Override
    public void onStartContainerError(ContainerId id, Throwable e) {
      log("could not start " + id + ": " + e);
      completed(ContainerStatus.newInstance(id, org.apache.hadoop.yarn.api.records.ContainerState.COMPLETE,
          "failed to start container: " + e, -1));
    }

    @Override
    public void onContainerStopped(ContainerId id) {
      synchronized (MelonApplicationMaster.this) {
        for (Task t : tasks) {
          if (t.container != null && t.container.getId().equals(id) && t.live()) {
            t.state = "KILLED";
            t.updated = System.currentTimeMillis();
          }
        }
      }
    }

    @Override
    public void onStopContainerError(ContainerId id, Throwable e) {
      onContainerStopped(id);
    }

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {
    }

    @Override
    public void onGetContainerStatusError(ContainerId id, Throwable e) {
    }

    @Override
    public void onContainerResourceIncreased(ContainerId id, Resource resource) {
    }

    @Override
    public void onContainerResourceUpdated(ContainerId id, Resource resource) {
    }

    @Override
    public void onIncreaseContainerResourceError(ContainerId id, Throwable e) {
    }

    @Override
    public void onUpdateContainerResourceError(ContainerId id, Throwable e) {
    }
  }
}
