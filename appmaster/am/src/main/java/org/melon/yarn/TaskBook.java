package org.melon.yarn;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;
import java.util.function.LongSupplier;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;

/**
 * The AM's bookkeeping and decisions (docs/protocol.md section 2), kept apart from the YARN clients so that they
 * can be tested without a cluster: the plan's tasks and their containers, the gang barrier and its timeout,
 * per-role restart budgets, exit 75 (no GPU fits on that node: retry elsewhere), exit 76 (out of GPU memory: ask
 * again with more), success and failure. Its parts: {@link GangHold} (gang formation), {@link Elastic} (elastic
 * roles' membership), {@link NodeAvoidance} (nodes a task left), {@link GpuMemory} (peaks and OOM growth). What it
 * decides to ask of YARN goes through {@link Yarn}. One lock: every method holds this object's monitor (its parts
 * are called under it), and the AM takes the same monitor ({@code synchronized (book)}) around its own steps that
 * read or change tasks.
 */
final class TaskBook {

  static final int EXIT_NO_GPU_FIT = 75;
  static final int MAX_NO_FIT_RETRIES = 3;
  /** The executor's exit code when the task's process ran out of GPU memory (its final heartbeat says {@code oom}). */
  static final int EXIT_OOM = 76;
  /** Re-runs of one task after exits that are not its fault (its node lost, disks failed, preempted). */
  static final int MAX_NOT_ITS_FAULT = 3;
  /** Step/loss samples kept per task for progress charts (oldest dropped first). */
  static final int HISTORY = 500;
  /** Decisions kept for {@code GET /status}'s {@code events} (oldest dropped first; {@code seq} keeps counting). */
  static final int MAX_EVENTS = 200;
  /** Containers kept per task in its history (oldest dropped first). */
  static final int MAX_CONTAINERS = 100;
  /** An event's text is kept to this many characters. */
  static final int EVENT_TEXT_MAX = 500;
  /** The stall watchdog waits at least this many times the longest stretch between two steps it has seen (a job
   * that reports an epoch an hour is not stalled after {@code stall_timeout_s}): see {@link #checkStall}. */
  static final int STALL_FACTOR = 5;

  /** What the book asks of YARN: the AM does it with its clients, tests record it. */
  interface Yarn {
    /** Ask for a container for {@code t} (already PENDING, its attempt counted). */
    void request(Task t);

    /** Change the application's blacklist; either list may be null. */
    void blacklist(List<String> add, List<String> remove);

    /** Hosts of the cluster's usable nodes (the last one is never avoided). */
    Set<String> runningHosts();

    /** Start {@code t}'s container (granted, not yet launched). */
    void launch(Task t);

    /** Give back {@code t}'s container, granted but never launched (the gang hold ran out). */
    void release(Task t);

    /** Withdraw {@code t}'s outstanding container request (the gang backs off). */
    void cancel(Task t);

    /** Stop {@code t}'s running container (its gang is restarted whole, or it stalled): what it reports after is
     * not counted, its task has moved on. */
    void stop(Task t);
  }

  /** An answer to an HTTP call: status code and a body for Jackson (a value, as a record would be: Java 8). */
  static final class Reply {
    private final int code;
    private final Object body;

    Reply(int code, Object body) {
      this.code = code;
      this.body = body;
    }

    int code() {
      return code;
    }

    Object body() {
      return body;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Reply && ((Reply) o).code == code && Objects.equals(((Reply) o).body, body);
    }

    @Override
    public int hashCode() {
      return 31 * code + Objects.hashCode(body);
    }

    @Override
    public String toString() {
      return "Reply[code=" + code + ", body=" + body + "]";
    }
  }

  final List<Task> tasks = new ArrayList<>();
  /** Counted down once the application's outcome is decided ({@link #finish}). */
  final CountDownLatch done = new CountDownLatch(1);
  private final Map<ContainerId, Task> byContainer = new HashMap<>();
  private final Yarn yarn;
  private final LongSupplier clock;
  private final long registerTimeoutMs;
  /** The role whose index-0 success ends the job; null: all tracked tasks must succeed. */
  private final String successRole;
  /** Task 0 of the plan's {@code output_role}: it publishes the outputs after its process exits 0, so the
   * application succeeds only once it has exited 0 too (and fails if it fails); null: no outputs. */
  private final Task outputTask;
  /** Why the application succeeds, once decided, while it waits for {@link #outputTask}. */
  private String succeededBy;
  /** Since when the gang's registration is awaited ({@code register_timeout_s}): the AM's start, the whole gang
   * granted (with the hold on), or the restart of a registered task that left the gang incomplete. */
  private long gangWaitSince;
  /** Every task needed has registered (the cluster map is out). */
  private boolean gangComplete;
  /** Elastic roles' membership ({@code min_instances}). */
  final Elastic elastic;
  private final GangHold gang;
  private final NodeAvoidance avoidance;
  private final GpuMemory gpuMemory = new GpuMemory();
  /** An elastic torchrun job's rendezvous store (null: none asked for). */
  private RendezvousStore rendezvous;
  /** The stall watchdog ({@link #checkStall}): {@code stall_timeout_s} (0: off); whether a task has ever reported
   * a step; since when the gang is whole this round (its registration barrier opened); the longest stretch seen
   * between a task's registration or step and its next step; the longest stretch without a step, stalls included. */
  private final long stallTimeoutMs;
  private boolean stepSeen;
  private long roundStart;
  private long longestGapMs;
  private long longestIdleMs;
  private State state = State.RUNNING;
  private String diagnostics = "";
  /** The AM's decisions about tasks (restart, grow, fail), at most {@link #MAX_EVENTS}: see {@link #event}. */
  private final ArrayDeque<ObjectNode> events = new ArrayDeque<>();
  private long eventSeq;

  TaskBook(JsonNode plan, Yarn yarn, LongSupplier clock) {
    this(plan, yarn, clock, new Random());
  }

  TaskBook(JsonNode plan, Yarn yarn, LongSupplier clock, Random random) {
    this.yarn = yarn;
    this.clock = clock;
    this.avoidance = new NodeAvoidance(yarn, tasks, clock);
    // The plan passed its schema check (Schemas.PLAN): every field is there and within its bounds,
    // declared once in Python's spec.py.
    this.registerTimeoutMs = plan.path(PlanFields.REGISTER_TIMEOUT_S).asLong() * 1000L;
    this.gang = new GangHold(Math.round(plan.path(PlanFields.GANG_HOLD_S).asDouble() * 1000),
        Math.round(plan.path(PlanFields.QUEUE_TIMEOUT_S).asDouble() * 1000), tasks, yarn, clock, random, t -> {
          byContainer.remove(t.container.getId());
          yarn.release(t);
        });
    this.elastic = new Elastic(Math.round(plan.path(PlanFields.ELASTIC_GRACE_S).asDouble() * 1000));
    this.stallTimeoutMs = Math.round(plan.path(PlanFields.STALL_TIMEOUT_S).asDouble() * 1000);
    this.successRole = plan.path(PlanFields.SUCCESS_ROLE).isTextual() ? plan.path(PlanFields.SUCCESS_ROLE).asText() : null;
    this.gangWaitSince = gang.startedAt;
    int number = 0;
    for (JsonNode r : plan.path(PlanFields.ROLES)) {
      Role role = new Role(r);
      for (int i = 0; i < role.instances; i++) {
        tasks.add(new Task(role, i, number++, gangWaitSince));
      }
    }
    this.outputTask = plan.path(PlanFields.OUTPUT_ROLE).isTextual() ? task(plan.path(PlanFields.OUTPUT_ROLE).asText(), 0) : null;
  }

  /** Where an elastic torchrun job's rendezvous store is ({@link RendezvousStore}): beside the AM (task 0 is then a
   * member like the others), or on task 0's agent. */
  synchronized void rendezvous(RendezvousStore store) {
    rendezvous = store;
    elastic.anchored = store.endpoint == null;
  }

  synchronized Map<String, Object> rendezvousStatus() {
    return rendezvous == null ? null : rendezvous.status();
  }

  /** The cluster's maximum allocation of {@code melon.io/gpu-memory}, MiB (0: unknown): growth stops there. */
  synchronized void maxGpuMemoryMb(long mb) {
    gpuMemory.maxGpuMemoryMb = Math.max(0, mb);
  }

  synchronized State state() {
    return state;
  }

  synchronized String diagnostics() {
    return diagnostics;
  }

  private boolean running() {
    return state == State.RUNNING;
  }

  private long now() {
    return clock.getAsLong();
  }

  /** The task {@code role:index}, or null. The task list never changes, so no lock is needed. */
  Task task(String role, int index) {
    for (Task t : tasks) {
      if (t.role.name.equals(role) && t.index == index) {
        return t;
      }
    }
    return null;
  }

  // ---------------------------------------------------------------- containers

  /** The task a new container is for, now ALLOCATED to it; null if nothing waits for it (release it). */
  synchronized Task allocated(Container c) {
    long id = c.getAllocationRequestId();  // the task's number (plus task counts: GpuModels.allocationRequestId)
    Task t = id >= 0 ? tasks.get((int) (id % tasks.size())) : null;
    if (t == null || t.state != State.PENDING || !running() || gang.backingOff()) {
      return null;  // nothing waits for it, or the gang is backing off (a grant for a withdrawn request)
    }
    long granted = MelonApplicationMaster.resourceValue(c.getResource(), MelonApplicationMaster.GPU_MEM);
    if (granted > 0 && granted < GpuMemory.ask(t)) {
      return null;  // a late grant for the task's size before an OOM growth: it would run below what it needs
    }
    if (avoidance.refuses(t, c.getNodeId().toString())) {
      return null;  // the AM gives the container back
    }
    t.container = c;
    t.nodeHost = c.getNodeId().getHost();
    t.host = t.nodeHost;
    avoidance.placed(t);
    t.state = State.ALLOCATED;
    t.launched = false;
    t.exitCode = null;
    t.updated = now();
    byContainer.put(c.getId(), t);
    return t;
  }

  /**
   * {@code t} was just {@link #allocated}: the containers to start now. Once the gang has formed (or with the hold
   * off) that is {@code t}'s alone; while it forms, none until every task holds one, then all of them at once
   * (and {@code register_timeout_s} starts counting).
   */
  synchronized List<Task> granted(Task t) {
    List<Task> out;
    if (gang.forming()) {
      out = gang.granted();
      if (gang.formed) {
        gangWaitSince = now();
      }
    } else {
      out = Collections.singletonList(t);
    }
    for (Task x : out) {
      x.launched = true;
      ranIn(x);
      yarn.launch(x);
    }
    return out;
  }

  /** Gang formation's clock (the AM calls this every 500 ms): see {@link GangHold#check}. */
  synchronized void checkGangHold() {
    if (running() && gang.forming()) {
      String failed = gang.check();
      if (failed != null) {
        finish(State.FAILED, failed);
      }
    }
  }

  /** Where gang formation stands, for people (status, diagnostics). */
  synchronized String gangMessage() {
    return gang.message();
  }

  // ---------------------------------------------------------------- container history and decisions

  /** {@code t}'s container is started: the next entry of its container history (once per container: launched, then
   * reported started). */
  private static void ranIn(Task t) {
    String id = t.container.getId().toString();
    int last = t.containers.size() - 1;
    if (last >= 0 && id.equals(t.containers.get(last).path("container_id").asText())) {
      return;
    }
    ObjectNode c = JsonNodeFactory.instance.objectNode();
    c.put("container_id", id);
    c.put("node_id", t.container.getNodeId().toString());
    c.put("attempt", t.attempt);
    c.put("expected_gpu_memory_mb", t.expectedMb);
    c.putNull("exit_code");
    t.containers.add(c);
    if (t.containers.size() > MAX_CONTAINERS) {
      t.containers.remove(0);
    }
  }

  /**
   * A decision of the AM about {@code t} (asking again with more GPU memory, a restart, giving up, a replacement),
   * about its current container (null: none), for {@code GET /status}'s {@code events}: the task log puts each
   * one after that container's output ({@code [melon-am] worker:0 <text>}). {@code text} reads after the task's
   * name.
   */
  synchronized void event(Task t, String text) {
    ObjectNode e = JsonNodeFactory.instance.objectNode();
    e.put("seq", ++eventSeq);
    e.put("time", now());
    e.put("task", t.name());
    e.put("container_id", t.container == null ? null : t.container.getId().toString());
    e.put("text", text.length() <= EVENT_TEXT_MAX ? text : text.substring(0, EVENT_TEXT_MAX) + "...");
    events.addLast(e);
    while (events.size() > MAX_EVENTS) {
      events.removeFirst();
    }
  }

  /** {@code t}'s containers in the order it ran in them, for {@code GET /status}. */
  synchronized List<ObjectNode> containers(Task t) {
    List<ObjectNode> out = new ArrayList<>();
    for (ObjectNode c : t.containers) {
      out.add(c.deepCopy());
    }
    return out;
  }

  /** The decisions kept ({@link #event}), oldest first, for {@code GET /status}. */
  synchronized List<ObjectNode> events() {
    List<ObjectNode> out = new ArrayList<>();
    for (ObjectNode e : events) {
      out.add(e.deepCopy());
    }
    return out;
  }

  /** Gang formation for {@code GET /status}. */
  synchronized Map<String, Object> gangStatus() {
    return gang.status(gangWaitSince);
  }

  synchronized void started(ContainerId id) {
    Task t = byContainer.get(id);
    if (t != null && t.state == State.ALLOCATED) {
      t.state = State.RUNNING;
      t.updated = now();
      ranIn(t);
    }
  }

  synchronized void stopped(ContainerId id) {
    for (Task t : tasks) {
      if (t.container != null && t.container.getId().equals(id) && t.live()) {
        t.state = State.KILLED;
        t.updated = now();
      }
    }
  }

  /**
   * A container of ours ended with {@code code}. 0: the task SUCCEEDED (maybe the application too). 75 (no GPU
   * fits on that node), at most {@link #MAX_NO_FIT_RETRIES} times per task: a new container elsewhere, outside the
   * restart budget. 76 (out of GPU memory): see {@link GpuMemory#afterOom}. Other codes: a new container while the role's
   * budget lasts, else the task FAILED, and the application with it unless the role is untracked and optional; the
   * diagnostics name the task, its node, the code and {@code stderrTail} of the task. Once the application is decided, a
   * live task is only marked KILLED.
   */
  synchronized void completed(ContainerId id, int code, Function<Task, String> stderrTail) {
    Task t = byContainer.remove(id);
    if (t == null || t.container == null || !t.container.getId().equals(id)) {
      return;
    }
    t.exitCode = code;
    t.updated = now();
    for (ObjectNode c : t.containers) {
      if (c.path("container_id").asText().equals(id.toString())) {
        c.put("exit_code", code);
      }
    }
    if (!running()) {  // decided: a task ending now is not restarted; one that exits 0 by itself did succeed
      if (t.live()) {
        t.state = code == 0 ? State.SUCCEEDED : State.KILLED;
      }
      return;
    }
    MelonApplicationMaster.log("task " + t.name() + " (" + id + ") exited " + code);
    if (code == 0) {
      t.state = State.SUCCEEDED;
      checkSuccess(t);
      return;
    }
    if (succeededBy != null && t != outputTask) {  // decided already: only the output task is waited for
      t.state = State.FAILED;
      MelonApplicationMaster.log("task " + t.name() + " " + describeExit(code) + " after the application's success "
          + "was decided (waiting for the output task " + outputTask.name() + "): not restarted");
      return;
    }
    if (code == EXIT_OOM) {  // asked for again with more GPU memory, or failed
      GpuMemory.Verdict v = gpuMemory.afterOom(t);
      if (v.again) {
        restartLost(t, v.text);
      } else {
        fail(t, "task " + t.name() + " " + v.text + ". It " + describeExit(EXIT_OOM) + " on " + t.nodeHost + ": "
            + stderrTail.apply(t));
      }
      return;
    }
    if (code == EXIT_NO_GPU_FIT && t.noFitRetries < MAX_NO_FIT_RETRIES) {
      t.noFitRetries++;
      avoidance.left(t, "exit 75: no GPU fits there");
      restart(t, "no GPU fits on " + t.nodeHost + " (exit 75), retry " + t.noFitRetries);
      return;
    }
    boolean member = elastic.watches(t);
    if (member) {  // its replacement, if any, goes elsewhere
      avoidance.left(t, "elastic member " + t.name() + " lost there");
    }
    String loss = t.container.getId() + " on " + t.nodeHost + " " + describeExit(code);
    if (notItsFault(code) && t.notItsFault < MAX_NOT_ITS_FAULT) {
      if (member) {
        event(t, elastic.lost(t, loss, tasks, "asking for a replacement (not its fault: not counted against restarts)"));
      }
      t.notItsFault++;
      restartLost(t, describeExit(code) + " on " + t.nodeHost + ", re-run " + t.notItsFault + "/" + MAX_NOT_ITS_FAULT
          + " (not counted against the role's restarts)");
      return;
    }
    if (t.role.restartsUsed < t.role.restarts) {
      t.role.restartsUsed++;
      if (member) {
        event(t, elastic.lost(t, loss, tasks, "asking for a replacement (restart " + t.role.restartsUsed + "/"
            + t.role.restarts + " of role " + t.role.name + ")"));
      }
      restartLost(t, describeExit(code) + ", restart " + t.role.restartsUsed + "/" + t.role.restarts + " of role "
          + t.role.name);
      return;
    }
    if (member) {  // the role goes on without it while it has its minimum (Elastic.check)
      t.state = State.FAILED;
      event(t, elastic.lost(t, loss, tasks, "not replaced: role " + t.role.name + "'s restarts ("
          + t.role.restarts + ") are used up"));
      return;
    }
    fail(t, "task " + t.name() + " on " + t.nodeHost + " " + describeExit(code) + ": " + stderrTail.apply(t));
  }

  /** The elastic roles' clock (the AM calls this every 500 ms): fail the job when one has been below its minimum
   * for longer than {@code elastic_grace_s}. */
  synchronized void checkElastic() {
    if (!running() || succeededBy != null) {
      return;
    }
    String why = elastic.check(tasks, now());
    if (why != null) {
      finish(State.FAILED, why);
    }
  }

  /** {@code t} FAILED for good: the application fails with {@code diag} unless the task's role is untracked and
   * optional (then it is only logged); the output task fails it whatever its role. */
  private void fail(Task t, String diag) {
    t.state = State.FAILED;
    String prefix = "task " + t.name() + " ";
    event(t, "failed: " + (diag.startsWith(prefix) ? diag.substring(prefix.length()) : diag));
    if (t == outputTask) {
      finish(State.FAILED, "output " + diag);
    } else if (t.role.tracked) {
      finish(State.FAILED, diag);
    } else if (!t.role.optional) {  // a parameter server: the tracked tasks would wait for it forever
      finish(State.FAILED, diag + " (role " + t.role.name + " is untracked, but the job cannot go on without it; "
          + "optional: true lets it fail)");
    } else {
      MelonApplicationMaster.log("optional " + diag);
    }
  }

  /** YARN's codes for a container that ended through no fault of its task: its node was lost (-100 ABORTED),
   * its disks failed (-101), or it was preempted (-102). */
  static boolean notItsFault(int code) {
    return code == -100 || code == -101 || code == -102;
  }

  /** "exited 137 (SIGKILL)", "exited -100 (its node was lost or the container was released)", "exited 3". */
  static String describeExit(int code) {
    String why;
    switch (code) {
      case -100: why = "its node was lost or the container was released"; break;
      case -101: why = "the node's disks failed"; break;
      case -102: why = "preempted by the scheduler"; break;
      case -103: why = "killed by YARN: over its virtual memory limit"; break;
      case -104: why = "killed by YARN: over its physical memory limit"; break;
      case -105: why = "killed by the ApplicationMaster"; break;
      case -106: why = "killed by the ResourceManager"; break;
      case -108: why = "killed: the application finished"; break;
      case 75: why = "no GPU fits on its node"; break;
      case 76: why = "out of GPU memory"; break;
      default: why = code > 128 && code < 128 + 65 ? signalName(code - 128) : null;
    }
    return "exited " + code + (why == null ? "" : " (" + why + ")");
  }

  private static String signalName(int sig) {
    String[] names = {null, "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
        "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM"};
    return sig < names.length && names[sig] != null ? "killed by " + names[sig] : "killed by signal " + sig;
  }

  /** {@code t} was lost and is asked for again ({@link #restart}); a task of a {@code restart_gang} role that had
   * its cluster (the gang was whole) takes the rest of its gang with it: every live task of those roles is stopped
   * and asked for again, not counted against any budget, and all register anew, so every one gets the live
   * addresses only. */
  private void restartLost(Task t, String why) {
    boolean formed = gangComplete;
    restart(t, why);
    if (!t.role.restartGang || !formed) {
      return;
    }
    List<String> others = new ArrayList<>();
    for (Task x : tasks) {
      if (x != t && x.role.restartGang && x.live()) {
        stopAndRestart(x, "restarted with its gang: " + t.name() + " was lost (" + why + "); not counted against "
            + "restarts");
        others.add(x.name());
      }
    }
    if (!others.isEmpty()) {
      event(t, "its gang restarted whole: " + String.join(", ", others) + " stopped and asked for again; every "
          + "task registers anew");
    }
  }

  /** {@code t} (live) is stopped by the AM and asked for again: what its old container reports is not counted. */
  private void stopAndRestart(Task t, String why) {
    byContainer.remove(t.container.getId());
    for (ObjectNode c : t.containers) {
      if (c.path("container_id").asText().equals(t.container.getId().toString())) {
        c.put("stopped_by_am", true);
      }
    }
    if (t.launched) {
      yarn.stop(t);
    } else {
      yarn.release(t);
    }
    restart(t, why);
  }

  private void restart(Task t, String why) {
    MelonApplicationMaster.log("restarting task " + t.name() + ": " + why);
    event(t, why);
    t.attempt++;
    boolean wasRegistered = t.registered;
    t.registered = false;
    if (wasRegistered && gangComplete && !Elastic.enough(tasks, x -> x.registered, elastic.anchored)) {
      gangComplete = false;  // the gang is incomplete again: its timeout counts from now
      gangWaitSince = now();
    }
    t.state = State.PENDING;
    t.container = null;
    t.launched = false;
    t.attemptPeakMb = null;
    t.attemptPeakSource = null;
    t.attemptOom = null;
    t.stepAt = 0;
    t.updated = now();
    yarn.request(t);
  }

  /** {@code t} exited 0: the application succeeds once its success condition holds (the success role's task 0,
   * else every tracked task) and the output task, if another one, has exited 0 as well (it published). */
  private void checkSuccess(Task t) {
    if (succeededBy != null) {  // decided before: waiting for the output task
      if (t == outputTask) {
        finish(State.SUCCEEDED, succeededBy + "; waited for the output task " + t.name()
            + ", which published the outputs");
      }
      return;
    }
    succeededBy = successReason(t);
    if (succeededBy == null) {
      return;
    }
    if (outputTask == null || outputTask == t) {
      finish(State.SUCCEEDED, succeededBy);
    } else if (outputTask.state == State.SUCCEEDED) {
      finish(State.SUCCEEDED, succeededBy + "; the output task " + outputTask.name() + " had published the outputs");
    } else {
      diagnostics = succeededBy + "; waiting for the output task " + outputTask.name() + " to publish the outputs";
      MelonApplicationMaster.log(diagnostics);
    }
  }

  /** Why the application's success condition holds after {@code t} exited 0, or null while it does not. */
  private String successReason(Task t) {
    if (successRole != null) {
      return t.role.name.equals(successRole) && t.index == 0 ? "task " + t.name() + " succeeded" : null;
    }
    boolean anyTracked = tasks.stream().anyMatch(x -> x.role.tracked);
    boolean all = tasks.stream().filter(x -> x.role.tracked || !anyTracked)
        .allMatch(x -> Elastic.elastic(x.role) ? Elastic.succeeded(tasks, x.role) : x.state == State.SUCCEEDED);
    return all ? "all tracked tasks succeeded" : null;
  }

  /** The application's outcome (the first one decided wins). */
  synchronized void finish(State finalState, String diag) {
    if (!running()) {
      return;
    }
    MelonApplicationMaster.log("finishing " + finalState + ": " + diag);
    state = finalState;
    diagnostics = diag;
    done.countDown();
  }

  /** The application's progress for YARN (the RM's progress bar): the mean of {@code step / total} over the tasks
   * that decide success (the success role's task 0, else the tracked tasks) when they report a total, a
   * finished one counting 1; else the share of tasks finished. */
  synchronized float progress() {
    if (tasks.isEmpty()) {
      return 0f;
    }
    List<Task> deciding = new ArrayList<>();
    for (Task t : tasks) {
      if (successRole != null ? t.role.name.equals(successRole) && t.index == 0 : t.role.tracked) {
        deciding.add(t);
      }
    }
    if (!deciding.isEmpty() && deciding.stream().anyMatch(t -> t.total != null)) {
      double sum = 0;
      for (Task t : deciding) {
        if (t.state == State.SUCCEEDED) {
          sum += 1;
        } else if (t.total != null && t.step != null) {
          sum += Math.min(1.0, Math.max(0.0, (double) t.step / t.total));
        }
      }
      return (float) Math.min(1.0, sum / deciding.size());
    }
    long finished = tasks.stream().filter(t -> t.state == State.SUCCEEDED).count();
    return Math.min(1f, (float) finished / tasks.size());
  }

  // ---------------------------------------------------------------- node avoidance (exit 75)

  /** Give back the nodes avoided for too long (the AM calls this every 500 ms). */
  synchronized void expireAvoidance() {
    avoidance.expire();
  }

  synchronized Set<String> avoidedHosts() {
    return avoidance.hosts();
  }

  // ---------------------------------------------------------------- gang registration

  /**
   * {@code t} says where it listens ({@code host}, {@code port}; optional {@code container_id}, {@code gpu},
   * {@code gpu_memory_mb}, {@code mps}). The gang barrier: 202 {"waiting": n missing} until every task has
   * registered, then 200 {"cluster": {role: ["host:port", ...]}} (to every caller from then on).
   *
   * <p>The executor polls with the same body until it gets 200, so a repeated registration from the same
   * container with the same address is idempotent (same answer). A conflicting one changes nothing and gets 409:
   * a {@code container_id} that is not the task's current container (a stale attempt), or, once the task is
   * registered, another address (its peers may already have been told the first one). A restarted task is a new
   * registration: its old address is replaced.
   */
  synchronized Reply register(Task t, JsonNode body) {
    Reply stale = staleContainer(t, body);
    if (stale != null) {
      return stale;
    }
    String host = body.path("host").asText(t.host);
    int port = body.path("port").asInt();
    if (t.registered && !(Objects.equals(host, t.host) && port == t.port)) {
      return new Reply(409, Collections.singletonMap("error", "task " + t.name() + " is already registered at " + t.host + ":"
          + t.port + ", not " + host + ":" + port));
    }
    t.host = host;
    t.port = port;
    t.gpu = body.path("gpu").isNull() || body.path("gpu").isMissingNode() ? null : body.path("gpu").asText();
    t.gpuMemoryMb = body.path("gpu_memory_mb").asLong(0);
    t.mps = body.path("mps").asBoolean(false);
    boolean joining = !t.registered;
    if (!t.registered) {
      MelonApplicationMaster.log("task " + t.name() + " registered at " + t.host + ":" + t.port);
      t.registeredAt = now();
    }
    t.registered = true;
    if (t.state == State.ALLOCATED || t.state == State.RUNNING) {
      t.state = State.REGISTERED;
    }
    t.updated = now();
    long missing = Elastic.missing(tasks, x -> x.registered, elastic.anchored).size();
    if (missing > 0) {
      return new Reply(202, Collections.singletonMap("waiting", missing));
    }
    if (!gangComplete) {
      roundStart = now();  // the stall watchdog's clock runs while the gang is whole
    }
    gangComplete = true;
    if (elastic.watches(t) && joining) {
      event(t, elastic.joined(t, tasks));
    }
    elastic.start();
    // an elastic role lists its registered members (task 0 first); a role without bounds has all registered
    Map<String, List<String>> cluster = new LinkedHashMap<>();
    for (Task x : tasks) {
      List<String> members = cluster.computeIfAbsent(x.role.name, k -> new ArrayList<>());
      if (x.registered) {
        members.add(x.host + ":" + x.port);
      }
    }
    return new Reply(200, Collections.singletonMap("cluster", cluster));
  }

  /** Progress of {@code t}: {@code step}, {@code loss}, {@code gpu}, {@code gpu_memory_used_mb},
   * {@code gpu_memory_peak_mb} with {@code gpu_memory_peak_source}, {@code message}, and in the final heartbeat of
   * an OOM (exit 76) {@code oom} (all optional; optional {@code container_id} as for {@link #register}). */
  synchronized Reply heartbeat(Task t, JsonNode body) {
    Reply stale = staleContainer(t, body);
    if (stale != null) {
      return stale;
    }
    if (body.hasNonNull("loss")) {
      t.loss = body.path("loss").asDouble();
    }
    if (body.hasNonNull("step")) {
      long step = body.path("step").asLong();
      if (t.stepAt == 0 || t.step == null || step != t.step) {
        long from = t.stepAt > 0 ? t.stepAt : Math.max(t.registeredAt, roundStart);
        longestGapMs = Math.max(longestGapMs, now() - from);
        t.stepAt = now();
        stepSeen = true;
      }
      if (t.step == null || step != t.step) {
        t.history.addLast(new double[] {now(), step, t.loss == null ? Double.NaN : t.loss});
        if (t.history.size() > HISTORY) {
          t.history.removeFirst();
        }
      }
      t.step = step;
    }
    if (body.hasNonNull("total")) {
      t.total = body.path("total").asLong();
    }
    if (body.path("metrics").isObject()) {
      t.metrics.clear();
      body.path("metrics").fields().forEachRemaining(e -> {
        if (e.getValue().isNumber() && t.metrics.size() < 32) {
          t.metrics.put(e.getKey().length() > 64 ? e.getKey().substring(0, 64) : e.getKey(), e.getValue().asDouble());
        }
      });
    }
    if (body.hasNonNull("gpu")) {
      t.gpu = body.path("gpu").asText();
    }
    if (body.hasNonNull("gpu_memory_used_mb")) {
      t.gpuMemoryUsedMb = body.path("gpu_memory_used_mb").asLong();
    }
    String peakSource = body.path("gpu_memory_peak_source").isTextual()
        ? body.path("gpu_memory_peak_source").asText() : null;
    if (body.hasNonNull("gpu_memory_peak_mb")) {
      GpuMemory.notePeak(t, body.path("gpu_memory_peak_mb").asLong(), peakSource);
    }
    if (body.path("oom").isObject()) {
      gpuMemory.oomReported(t, body.path("oom"), peakSource);
    }
    if (body.hasNonNull("message")) {
      t.message = body.path("message").asText();
    }
    t.updated = now();
    return new Reply(200, Collections.singletonMap("ok", true));
  }

  /** 409 if the body names a container ({@code container_id}, non-empty) other than the task's current one;
   * callers that name none (older executors) are taken at their word. */
  private static Reply staleContainer(Task t, JsonNode body) {
    String given = body.path("container_id").isTextual() ? body.path("container_id").asText() : "";
    if (given.isEmpty()) {
      return null;
    }
    String current = t.container == null ? null : t.container.getId().toString();
    if (given.equals(current)) {
      return null;
    }
    return new Reply(409, Collections.singletonMap("error", "task " + t.name() + " does not run in " + given + " (its container: "
        + (current == null ? "none" : current) + ")"));
  }

  /**
   * The stall watchdog (the AM calls this every 500 ms). A job whose tasks report steps is watched while its gang is
   * whole: when no live task has reported a new step for longer than {@code stall_timeout_s}, and than
   * {@link #STALL_FACTOR} times the longest stretch seen between steps, the gang is treated as lost: every live task
   * is stopped and asked for again (one restart of the first role, in the plan's order, with restarts left), or,
   * with none left, the job fails naming the stalled tasks and their last steps. A job that reports no steps is not
   * watched.
   */
  synchronized void checkStall() {
    if (!running() || succeededBy != null || stallTimeoutMs <= 0 || !stepSeen || !gangComplete) {
      return;
    }
    List<Task> live = new ArrayList<>();
    long last = roundStart;
    for (Task t : tasks) {
      if (t.live() && t.launched) {
        live.add(t);
        last = Math.max(last, Math.max(t.stepAt, t.registeredAt));
      }
    }
    if (live.isEmpty()) {
      return;
    }
    long idle = now() - last;
    longestIdleMs = Math.max(longestIdleMs, idle);
    long threshold = stallThresholdMs();
    if (idle <= threshold) {
      return;
    }
    List<String> where = new ArrayList<>();
    for (Task t : live) {
      where.add(t.name() + (t.stepAt > 0 ? " at step " + t.step : t.step != null ? " (no step since its start; "
          + "step " + t.step + " before)" : " (no step reported)"));
    }
    String head = "stalled: no task reported a new step for " + seconds(idle) + " s (stall_timeout_s "
        + seconds(stallTimeoutMs) + " s, or " + STALL_FACTOR + " x the longest stretch between steps, "
        + seconds(longestGapMs) + " s): " + String.join(", ", where);
    Role budget = null;
    for (Task t : live) {
      if (t.role.tracked && t.role.restartsUsed < t.role.restarts) {
        budget = t.role;
        break;
      }
    }
    MelonApplicationMaster.log(head);
    if (budget == null) {
      Set<String> roles = new java.util.LinkedHashSet<>();
      for (Task t : live) {
        roles.add(t.role.name + " (" + t.role.restarts + ")");
      }
      String diag = head + "; the gang is not restarted: the restarts of " + String.join(", ", roles)
          + " are used up";
      for (Task t : live) {
        event(t, diag);
      }
      finish(State.FAILED, diag);
      return;
    }
    budget.restartsUsed++;
    String why = head + "; restarting the gang (restart " + budget.restartsUsed + "/" + budget.restarts + " of role "
        + budget.name + ")";
    for (Task t : live) {
      stopAndRestart(t, why);
    }
  }

  private static String seconds(long ms) {
    return String.format(java.util.Locale.ROOT, "%.1f", ms / 1000.0);
  }

  private long stallThresholdMs() {
    return Math.max(stallTimeoutMs, STALL_FACTOR * longestGapMs);
  }

  /** The stall watchdog for {@code GET /status}: its timeout and threshold, whether it watches now, how long no
   * live task has reported a step, and the longest stretch without one so far (stalls included). */
  synchronized Map<String, Object> stallStatus() {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("timeout_s", stallTimeoutMs / 1000.0);
    out.put("threshold_s", stallThresholdMs() / 1000.0);
    boolean watched = running() && stallTimeoutMs > 0 && stepSeen && gangComplete;
    out.put("watched", watched);
    Double since = null;
    if (gangComplete && stepSeen) {
      long last = roundStart;
      for (Task t : tasks) {
        if (t.live() && t.launched) {
          last = Math.max(last, Math.max(t.stepAt, t.registeredAt));
        }
      }
      since = (now() - last) / 1000.0;
    }
    out.put("since_last_step_s", since);
    out.put("longest_between_steps_s", longestGapMs / 1000.0);
    out.put("longest_without_step_s", Math.max(longestIdleMs, longestGapMs) / 1000.0);
    return out;
  }

  /** Fail the application if the gang has not registered within {@code register_timeout_s} (the AM calls this
   * every 500 ms); a task that already exited 0 is not missing. */
  synchronized void checkGangTimeout() {
    if (!running() || gangComplete || gang.forming()) {
      return;  // still forming: the wait for resources is the queue timeout's, not the registration's
    }
    if (now() - gangWaitSince > registerTimeoutMs) {
      List<String> missing = new ArrayList<>();
      for (Task t : Elastic.missing(tasks, x -> x.registered, elastic.anchored)) {
        if (t.state != State.SUCCEEDED && !elastic.watches(t)) {
          missing.add(t.name());
        }
      }
      if (!missing.isEmpty()) {
        finish(State.FAILED, "gang registration timed out: missing " + String.join(", ", missing));
      }
    }
  }
}
