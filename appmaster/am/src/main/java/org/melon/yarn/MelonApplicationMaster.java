package org.melon.yarn;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

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
import org.apache.hadoop.yarn.api.records.RejectedSchedulingRequest;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.URL;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.security.AMRMTokenIdentifier;
import org.apache.hadoop.yarn.util.resource.Resources;

/**
 * MeLoN ApplicationMaster (docs/protocol.md section 2): one container per task, gang registration over HTTP,
 * per-role restart budgets, final status with the failing task's stderr tail. This class is the YARN side (the
 * RM and NM clients and their callbacks, launch contexts, stderr tails); the bookkeeping and the decisions are
 * {@link TaskBook}'s, the HTTP API is {@link AmHttp}.
 */
public final class MelonApplicationMaster {

  static final String GPU = "yarn.io/gpu";
  static final String GPU_MEM = "melon.io/gpu-memory";

  private static final ObjectMapper JSON = new ObjectMapper();

  private final JsonNode plan;
  /** The alias of the AM's secret in the application's credentials (the submitter's credentials.secrets). */
  static final String SECRET_ALIAS = "melon.am.secret";
  /** The AM's secret, from the credentials (its tasks find it in their token files). */
  private final String secret;
  /** Where the HTTP server may listen (null: an ephemeral port). */
  private final PortRange ports;
  private final String appId;
  private final String amHost;
  private final TaskBook book;
  private final YarnConfiguration conf = new YarnConfiguration();
  /** Hosts that have run one of our containers: the fallback view of the cluster when the RM's node list
   * cannot be read (a secure cluster gives the AM no client credentials). Guarded by {@code book}. */
  private final Set<String> seenHosts = new HashSet<>();

  private String amUrl;
  private AmHttp http;
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private ByteBuffer tokens;
  private Map<String, LocalResource> localResources = Collections.emptyMap();
  /** An elastic torchrun job's rendezvous store (null: none asked for). */
  private RendezvousStore rdzvStore;

  MelonApplicationMaster(JsonNode plan, String secret, PortRange ports) {
    this.plan = plan;
    this.secret = secret;
    this.ports = ports;
    ContainerId cid = ContainerId.fromString(System.getenv(Environment.CONTAINER_ID.name()));
    this.appId = cid.getApplicationAttemptId().getApplicationId().toString();
    String h = System.getenv(Environment.NM_HOST.name());
    this.amHost = h != null ? h : "localhost";
    this.book = new TaskBook(plan, new BookActions(), System::currentTimeMillis);
  }

  public static void main(String[] args) {
    try {
      JsonNode plan = JSON.readTree(new File(args.length > 0 ? args[0] : "melon-plan.json"));
      List<String> bad = Schemas.violations(Schemas.PLAN, plan);
      if (!bad.isEmpty()) {
        refuse("bad plan: " + String.join("; ", bad));
        System.exit(0);
      }
      String secret = credentialSecret();
      if (secret == null) {
        refuse("no AM secret in the application's credentials (secret " + SECRET_ALIAS + ")");
        System.exit(0);
      }
      PortRange ports;
      try {
        ports = PortRange.of(System.getenv(), plan.path(PlanFields.ENV));
      } catch (IllegalArgumentException e) {
        refuse(e.getMessage());
        System.exit(0);
        return;
      }
      int rc = new MelonApplicationMaster(plan, secret, ports).run();
      System.exit(rc);
    } catch (Throwable t) {
      // A crash of the AM itself: exit non-zero so that YARN starts the next attempt (max_attempts).
      t.printStackTrace();
      System.exit(1);
    }
  }

  /** A plan that breaks plan.schema.json: register only to unregister FAILED with {@code diagnostics} (YARN's
   * diagnostics of the application), so that no further attempt starts on the same plan. */
  static void refuse(String diagnostics) throws Exception {
    log(diagnostics);
    AMRMClient<ContainerRequest> rm = AMRMClient.createAMRMClient();
    rm.init(new YarnConfiguration());
    rm.start();
    rm.registerApplicationMaster("", 0, "");
    rm.unregisterApplicationMaster(FinalApplicationStatus.FAILED, diagnostics, null);
    rm.stop();
  }

  int run() throws Exception {
    log("starting AM for " + appId + " with " + book.tasks.size() + " tasks on Java "
        + System.getProperty("java.version") + " (" + System.getProperty("java.home") + "), Hadoop "
        + org.apache.hadoop.util.VersionInfo.getVersion());
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

    ViewAcl viewers = ViewAcl.fromEnvironment(appId, owner(), conf);
    log(viewers == null ? "yarn.acl.enable is off: the AM's pages are open to every caller"
        : "the AM's pages, for a user the RM proxy names: " + viewers);
    http = new AmHttp(book, secret, appId, plan.path(PlanFields.LABELS), viewers);
    int port = http.start("0.0.0.0", ports);
    amUrl = "http://" + amHost + ":" + port;
    log("HTTP API on port " + port + (ports == null ? " (ephemeral)" : " (" + ports + ")"));
    amrm = AMRMClientAsync.createAMRMClientAsync(500, new RMCallbacks());
    amrm.init(conf);
    amrm.start();
    nm = NMClientAsync.createNMClientAsync(new NMCallbacks());
    nm.init(conf);
    nm.start();
    Resource max = amrm.registerApplicationMaster(amHost, port, amUrl + "/")
        .getMaximumResourceCapability();
    log("registered with the RM, tracking URL " + amUrl + "/, maximum allocation " + max);
    book.maxGpuMemoryMb(resourceValue(max, GPU_MEM));

    startRendezvousStore();
    synchronized (book) {
      try {
        localResources = parseLocalResources();
        String noModels = GpuModels.byConstraint(book.tasks)
            ? GpuModels.unsupportedOn(org.apache.hadoop.util.VersionInfo.getVersion()) : null;
        if (noModels != null) {
          throw new IllegalArgumentException(noModels);
        }
        for (Task t : book.tasks) {
          if (!Resources.fitsIn(resource(t), max)) {
            throw new IllegalArgumentException("role " + t.role.name + " asks for " + resource(t)
                + ", more than the cluster's maximum allocation " + max);
          }
        }
        for (Task t : book.tasks) {
          request(t);
        }
      } catch (IllegalArgumentException e) {
        book.finish(State.FAILED, "bad plan: " + e.getMessage());
      }
    }
    while (!book.done.await(500, TimeUnit.MILLISECONDS)) {
      book.checkGangHold();
      book.checkGangTimeout();
      book.checkElastic();
      book.checkStall();
      book.expireAvoidance();
    }
    return shutdown();
  }

  /** How long the rendezvous store may take to serve (the job's Python importing torch on a busy node). */
  static final long RDZV_STORE_WAIT_MS = 120_000;

  /** An elastic torchrun job: its agents' rendezvous store beside the AM ({@link RendezvousStore}), before any task
   * starts; where it cannot start, task 0's agent hosts it, as the log and {@code GET /status} say. */
  private void startRendezvousStore() {
    JsonNode command = plan.path(PlanFields.RENDEZVOUS_STORE);
    if (!command.isTextual()) {
      return;
    }
    RendezvousStore store = RendezvousStore.start(command.asText(), amHost, ports, RDZV_STORE_WAIT_MS);
    log(store.endpoint != null ? "rendezvous store beside the AM at " + store.endpoint + ": every agent is its client"
        : "no rendezvous store beside the AM (" + store.why + "): task 0's agent hosts it, as before, and the loss "
        + "of task 0 is not survived by torchrun");
    book.rendezvous(store);
    rdzvStore = store;
  }

  // ---------------------------------------------------------------- scheduling

  /** What a container of {@code t} is asked for: its role's memory, vcores and whole GPUs, and the GPU memory the
   * task holds: its own expected memory plus its context reserve (its role's, each grown after OOMs), at least its
   * role's slot. */
  static Resource resource(Task t) {
    Role role = t.role;
    Resource res = Resource.newInstance(role.memoryMb, role.vcores);
    if (role.gpus > 0) {
      res.setResourceValue(GPU, role.gpus);
    }
    if (t.expectedMb > 0) {
      res.setResourceValue(GPU_MEM, GpuMemory.ask(t));
    }
    return res;
  }

  /** {@code res}'s value of the resource type {@code name}; 0 when the cluster does not know the type. */
  static long resourceValue(Resource res, String name) {
    try {
      return res.getResourceValue(name);
    } catch (RuntimeException e) {  // ResourceNotFoundException
      return 0;
    }
  }

  private void request(Task t) {
    if (GpuModels.byConstraint(book.tasks)) {  // a role names GPU models: scheduling requests (GpuModels)
      t.scheduling = GpuModels.request(t, resource(t), book.tasks.size());
      amrm.addSchedulingRequests(Collections.singletonList(t.scheduling));
      return;
    }
    t.request = new ContainerRequest(resource(t), null, null, Priority.newInstance(1), t.number);
    amrm.addContainerRequest(t.request);
  }

  /** Withdraw {@code t}'s outstanding ask, if any (a scheduling request's is dropped by the client once granted). */
  private void withdraw(Task t) {
    if (t.request != null) {
      amrm.removeContainerRequest(t.request);
    }
    if (t.scheduling != null) {
      amrm.addSchedulingRequests(Collections.singletonList(GpuModels.withdrawn(t.scheduling)));
      t.scheduling = null;
    }
  }

  private void allocated(List<Container> containers) {
    synchronized (book) {
      for (Container c : containers) {
        Task t = book.allocated(c);
        if (t == null) {
          amrm.releaseAssignedContainer(c.getId());
          continue;
        }
        if (t.request != null) {
          amrm.removeContainerRequest(t.request);
        }
        t.scheduling = null;  // granted: the client has counted it off
        seenHosts.add(t.nodeHost);
        log("task " + t.name() + " attempt " + t.attempt + " -> " + c.getId() + " on " + c.getNodeId()
            + (t.expectedMb > 0 ? " (expected GPU memory " + t.expectedMb + " MiB)" : "")
            + (t.role.gpuModels.isEmpty() ? "" : " (GPU models " + t.role.gpuModels + ")"));
        book.granted(t);  // starts it, or holds it until the whole gang is granted
      }
    }
  }

  private Map<String, LocalResource> parseLocalResources() {
    Map<String, LocalResource> resources = new HashMap<>();
    for (JsonNode r : plan.path(PlanFields.LOCAL_RESOURCES)) {
      try {
        resources.put(r.path(PlanFields.RES_NAME).asText(), LocalResource.newInstance(
            URL.fromURI(new URI(r.path(PlanFields.RES_URL).asText())),
            LocalResourceType.valueOf(r.path(PlanFields.RES_TYPE).asText("FILE").toUpperCase()),
            LocalResourceVisibility.valueOf(r.path(PlanFields.RES_VISIBILITY).asText("APPLICATION").toUpperCase()),
            r.path(PlanFields.RES_SIZE).asLong(), r.path(PlanFields.RES_TIMESTAMP).asLong()));
      } catch (Exception e) {
        throw new IllegalArgumentException("bad local resource " + r + ": " + e, e);
      }
    }
    return resources;
  }

  /** The application's user: the NodeManager sets USER to it; else this process's user. */
  private static String owner() throws IOException {
    String user = System.getenv(Environment.USER.name());
    return user != null && !user.isEmpty() ? user : UserGroupInformation.getCurrentUser().getShortUserName();
  }

  private static String credentialSecret() {
    try {
      byte[] key = UserGroupInformation.getCurrentUser().getCredentials()
          .getSecretKey(new org.apache.hadoop.io.Text(SECRET_ALIAS));
      return key == null ? null : new String(key, java.nio.charset.StandardCharsets.UTF_8);
    } catch (IOException e) {
      return null;
    }
  }

  private ContainerLaunchContext launchContext(Task t) {
    Map<String, String> env = new HashMap<>();
    plan.path(PlanFields.ENV).fields().forEachRemaining(e -> env.put(e.getKey(), e.getValue().asText()));
    env.put("MELON_ROLE", t.role.name);
    env.put("MELON_INDEX", String.valueOf(t.index));
    env.put("MELON_TASK_ATTEMPT", String.valueOf(t.attempt));
    env.put("MELON_ROLE_INSTANCES", String.valueOf(t.role.instances));  // the role's bounds (Elastic)
    env.put("MELON_ROLE_MIN_INSTANCES", String.valueOf(t.role.minInstances));
    env.put("MELON_AM_URL", amUrl);
    if (rdzvStore != null && rdzvStore.endpoint != null) {
      env.put("MELON_RDZV_ENDPOINT", rdzvStore.endpoint);  // torchrun's rendezvous, every agent a client (framework.py)
    }
    env.put("MELON_APP_ID", appId);
    env.put("MELON_CONTAINER_ID", t.container.getId().toString());
    env.put("MELON_GPUS", String.valueOf(t.role.gpus));
    env.put("MELON_GPU_MEMORY_MB", String.valueOf(t.expectedMb));  // the task's: grown after an OOM
    env.put("MELON_GPU_CONTEXT_MB", String.valueOf(t.contextMb));  // the task's: grown after an OOM outside the cap
    env.put("MELON_GPU_MODELS", String.join(",", t.role.gpuModels));  // the executor checks its GPU (NVML)
    String command = plan.path(PlanFields.COMMAND).asText() + " 1>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR
        + "/stdout 2>" + ApplicationConstants.LOG_DIR_EXPANSION_VAR + "/stderr";
    return ContainerLaunchContext.newInstance(new HashMap<>(localResources), env, Collections.singletonList(command), null, tokens.duplicate(), null);
  }

  private void completed(ContainerStatus status) {
    book.completed(status.getContainerId(), status.getExitStatus(), t -> stderrTail(t, status));
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

  /** After a success, how long the tasks that decide it (tracked, running) may take to end on their own before
   * they are stopped: a multi-worker job's workers end with its chief, and their last heartbeats (the final
   * progress) reach the AM before it stops them and writes the final status. */
  static final long FINISH_GRACE_MS = 10_000;

  private int shutdown() throws Exception {
    if (book.state() == State.SUCCEEDED) {
      long graceEnd = System.currentTimeMillis() + FINISH_GRACE_MS;
      while (System.currentTimeMillis() < graceEnd && anyLiveTracked()) {
        Thread.sleep(100);
      }
    }
    List<Task> toStop = new ArrayList<>();
    synchronized (book) {
      for (Task t : book.tasks) {
        if (t.live() && !t.launched) {  // held for a gang that never formed: never started, so give it back
          amrm.releaseAssignedContainer(t.container.getId());
          t.state = State.KILLED;
        } else if (t.live()) {
          toStop.add(t);
        } else if (t.state == State.PENDING) {
          withdraw(t);
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
    log("stall watchdog: " + book.stallStatus());  // the job's stretches without a step (docs/elastic.md)
    writeFinalStatus();
    State state = book.state();
    FinalApplicationStatus status = state == State.SUCCEEDED ? FinalApplicationStatus.SUCCEEDED
        : state == State.KILLED ? FinalApplicationStatus.KILLED : FinalApplicationStatus.FAILED;
    amrm.unregisterApplicationMaster(status, book.diagnostics(), null);
    log("unregistered: " + status);
    nm.stop();
    amrm.stop();
    http.stop();
    if (rdzvStore != null) {
      rdzvStore.stop();
    }
    return 0;
  }

  private boolean anyLiveTracked() {
    synchronized (book) {
      return book.tasks.stream().anyMatch(t -> t.live() && t.launched && t.role.tracked);
    }
  }

  /**
   * The final {@code GET /status} (every task's last report: step, total, loss, metrics, its end) to the plan's
   * {@code status_file} in HDFS, as the application's user, before unregistering: once the application has ended the
   * AM serves nothing, and this is what the train operator's result is read from. Bounded (20 s) and best effort:
   * a failure is logged and the operator falls back to what it saw last.
   */
  private void writeFinalStatus() {
    String target = plan.path(PlanFields.STATUS_FILE).asText("");
    if (target.isEmpty()) {
      return;
    }
    byte[] body;
    try {
      body = JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(http.statusJson());
    } catch (IOException e) {
      log("final status not written: " + e);
      return;
    }
    java.util.concurrent.ExecutorService writer = java.util.concurrent.Executors.newSingleThreadExecutor(r -> {
      Thread th = new Thread(r, "melon-final-status");
      th.setDaemon(true);
      return th;
    });
    try {
      UserGroupInformation ugi = UserGroupInformation.createRemoteUser(owner());
      ugi.addCredentials(UserGroupInformation.getCurrentUser().getCredentials());
      writer.submit(() -> ugi.doAs((java.security.PrivilegedExceptionAction<Void>) () -> {
        org.apache.hadoop.conf.Configuration fsConf = new org.apache.hadoop.conf.Configuration(conf);
        fsConf.setInt("ipc.client.connect.max.retries", 2);
        fsConf.setBoolean("fs.hdfs.impl.disable.cache", true);
        org.apache.hadoop.fs.Path path = new org.apache.hadoop.fs.Path(target);
        try (org.apache.hadoop.fs.FileSystem fs = path.getFileSystem(fsConf);
             java.io.OutputStream out = fs.create(path, true)) {
          out.write(body);
        }
        return null;
      })).get(20, TimeUnit.SECONDS);
      log("final status written to " + target);
    } catch (Exception e) {
      log("final status not written to " + target + ": " + e);
    } finally {
      writer.shutdownNow();
    }
  }

  private boolean anyLive(List<Task> list) {
    synchronized (book) {
      return list.stream().anyMatch(Task::live);
    }
  }

  // ---------------------------------------------------------------- stderr tail

  /** Last 20 lines of the container's stderr, from its NodeManager's REST API; else YARN's diagnostics. */
  private String stderrTail(Task t, ContainerStatus status) {
    String text = t.container == null ? null
        : fetchTail(t.container.getNodeHttpAddress(), status.getContainerId().toString());
    if (text == null) {
      // No stderr (e.g. localization failed, exit -1000): YARN's own diagnostics, whose head names the cause.
      List<String> lines = Arrays.asList(status.getDiagnostics().trim().split("\r?\n"));
      return String.join("\n", lines.subList(0, Math.min(lines.size(), 20)));
    }
    List<String> lines = Arrays.asList(text.trim().split("\r?\n"));
    return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
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
        String body = new String(IO.readAll(in), StandardCharsets.UTF_8);
        int from = body.indexOf("LogContents:\n");
        int to = body.lastIndexOf("End of LogType:");
        return from >= 0 && to > from ? body.substring(from + "LogContents:\n".length(), to) : body;
      }
    } catch (IOException e) {
      log("could not fetch stderr of " + cid + " from " + nodeHttp + ": " + e);
      return null;
    }
  }

  static void log(String msg) {
    System.out.println(new java.util.Date() + " MelonAM: " + msg);
    System.out.flush();
  }

  // ---------------------------------------------------------------- YARN callbacks

  /** What the book asks of YARN (called under the book's monitor). */
  private final class BookActions implements TaskBook.Yarn {
    @Override
    public void request(Task t) {
      MelonApplicationMaster.this.request(t);
    }

    @Override
    public void blacklist(List<String> add, List<String> remove) {
      amrm.updateBlacklist(add, remove);
    }

    @Override
    public Set<String> runningHosts() {
      return MelonApplicationMaster.this.runningHosts();
    }

    @Override
    public void launch(Task t) {
      nm.startContainerAsync(t.container, launchContext(t));
    }

    @Override
    public void release(Task t) {
      amrm.releaseAssignedContainer(t.container.getId());
    }

    @Override
    public void cancel(Task t) {
      withdraw(t);
    }

    @Override
    public void stop(Task t) {
      log("stopping " + t.container.getId() + " of task " + t.name());
      nm.stopContainerAsync(t.container.getId(), t.container.getNodeId());
    }
  }

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
    public void onRequestsRejected(List<RejectedSchedulingRequest> rejected) {
      // the RM gave up placing a task on a node of its GPU models: say why instead of waiting for ever
      synchronized (book) {
        for (RejectedSchedulingRequest r : rejected) {
          long id = r.getRequest().getAllocationRequestId();
          Task t = book.tasks.get((int) (id % book.tasks.size()));
          if (id != GpuModels.allocationRequestId(t, book.tasks.size())) {
            continue;  // a request for the task's size before an OOM growth, withdrawn since
          }
          book.finish(State.FAILED, "the ResourceManager rejected the request for task " + t.name() + " on a node of"
              + " GPU models " + t.role.gpuModels + ": " + r.getReason());
        }
      }
    }

    @Override
    public float getProgress() {
      return book.progress();
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
      book.started(id);
    }

    @Override
    public void onStartContainerError(ContainerId id, Throwable e) {
      log("could not start " + id + ": " + e);
      completed(ContainerStatus.newInstance(id, org.apache.hadoop.yarn.api.records.ContainerState.COMPLETE,
          "failed to start container: " + e, -1));
    }

    @Override
    public void onContainerStopped(ContainerId id) {
      book.stopped(id);
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