package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;
import static org.melon.yarn.Fixtures.place;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;

import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceTypeInfo;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;
import org.melon.yarn.TaskBook.Reply;

/** The AM's state machine without a cluster: gang barrier, restart budgets, exit 75, untracked roles, outcome. */
class TaskBookTest {

  private final FakeYarn yarn = new FakeYarn();
  private final Clock clock = new Clock();
  /** stderr tails the book asked for (task names): only for a task that finally FAILED. */
  private final List<String> tails = new ArrayList<>();
  private final Function<Task, String> tail = t -> {
    tails.add(t.name());
    return "Traceback ...\nRuntimeError: boom in " + t.name();
  };

  private TaskBook book(String plan) {
    return new TaskBook(plan(plan), yarn, clock);
  }

  /** chief x1, worker x2 (restarts 1), ps x1 (untracked); all tasks must succeed unless success_role is set. */
  private TaskBook training(String extra) {
    return book("{register_timeout_s: 60, " + extra + " roles: ["
        + "{name: 'chief', instances: 1}, {name: 'worker', instances: 2, restarts: 1},"
        + "{name: 'ps', instances: 1, tracked: false}]}");
  }

  private static Reply register(TaskBook book, String role, int index, int port) {
    Task t = book.task(role, index);
    return book.register(t, json("{host: 'h-" + role + index + "', port: " + port + "}"));
  }

  private Map<String, Container> placeAll(TaskBook book) {
    Map<String, Container> containers = new HashMap<>();
    String[] hosts = {"node-a", "node-b", "node-c"};
    for (Task t : book.tasks) {
      containers.put(t.name(), place(book, t, hosts[t.number % hosts.length]));
    }
    return containers;
  }

  private void exit(TaskBook book, Container c, int code) {
    book.completed(c.getId(), code, tail);
  }

  // ---------------------------------------------------------------- gang barrier

  @Test
  void noTaskIsToldTheClusterUntilTheWholeGangRegistered() {
    TaskBook book = training("");
    placeAll(book);
    assertEquals(new Reply(202, Map.of("waiting", 3L)), register(book, "worker", 1, 2001));
    assertEquals(new Reply(202, Map.of("waiting", 2L)), register(book, "ps", 0, 3000));
    assertEquals(new Reply(202, Map.of("waiting", 1L)), register(book, "chief", 0, 1000));
    // a task polling again before the gang is complete still waits, and changes nothing
    assertEquals(new Reply(202, Map.of("waiting", 1L)), register(book, "worker", 1, 2001));
    Reply done = register(book, "worker", 0, 2000);
    Map<String, List<String>> cluster = Map.of("chief", List.of("h-chief0:1000"),
        "worker", List.of("h-worker0:2000", "h-worker1:2001"), "ps", List.of("h-ps0:3000"));
    assertEquals(new Reply(200, Map.of("cluster", cluster)), done);
    // every later poll gets the same cluster
    assertEquals(done, register(book, "chief", 0, 1000));
    assertEquals(done, register(book, "worker", 1, 2001));
    for (Task t : book.tasks) {
      assertEquals(State.REGISTERED, t.state, t.name());
    }
  }

  @Test
  void gangRegistrationTimesOutNamingTheMissingTasks() {
    TaskBook book = training("");
    placeAll(book);
    register(book, "chief", 0, 1000);
    register(book, "worker", 1, 2001);
    clock.advance(60_000);
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state(), "not before register_timeout_s has passed");
    clock.advance(1);
    book.checkGangTimeout();
    assertEquals(State.FAILED, book.state());
    assertEquals("gang registration timed out: missing worker:0, ps:0", book.diagnostics());
    assertEquals(0, book.done.getCount(), "the AM is told to finish");
  }

  @Test
  void aTaskThatAlreadySucceededIsNotMissingFromTheGang() {
    TaskBook book = book("{register_timeout_s: 10, roles: [{name: 'worker', instances: 2}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:1"), 0);  // finished before registering (e.g. nothing to do)
    clock.advance(10_001);
    book.checkGangTimeout();
    assertEquals("gang registration timed out: missing worker:0", book.diagnostics());
  }

  @Test
  void aCompleteGangNeverTimesOut() {
    TaskBook book = book("{register_timeout_s: 10, roles: [{name: 'worker', instances: 2}]}");
    placeAll(book);
    register(book, "worker", 0, 1);
    register(book, "worker", 1, 2);
    clock.advance(3_600_000);
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void aRestartedTaskReopensTheBarrierAndItsTimeoutCountsFromTheRestart() {
    TaskBook book = book("{register_timeout_s: 10, roles: [{name: 'worker', instances: 2, restarts: 1}]}");
    Map<String, Container> c = placeAll(book);
    register(book, "worker", 0, 1);
    assertEquals(200, register(book, "worker", 1, 2).code());
    clock.advance(50_000);
    exit(book, c.get("worker:1"), 1);
    Task w1 = book.task("worker", 1);
    assertEquals(List.of("worker:1#1"), yarn.requests);
    assertEquals(State.PENDING, w1.state);
    assertFalse(w1.registered);
    assertEquals(new Reply(202, Map.of("waiting", 1L)), register(book, "worker", 0, 1), "barrier closed again");
    clock.advance(10_000);
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state(), "timeout counts from the restart, not from the start");
    Container again = place(book, w1, "node-c");
    assertEquals(State.RUNNING, w1.state);
    // the restarted task registers at its new address: replaced, and the gang is complete again
    Reply r = book.register(w1, json("{host: 'new-host', port: 9, container_id: '" + again.getId() + "'}"));
    assertEquals(new Reply(200, Map.of("cluster", Map.of("worker", List.of("h-worker0:1", "new-host:9")))), r);
    clock.advance(3_600_000);
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void concurrentRegistrationsCompleteTheGangExactlyOnce() throws Exception {
    int n = 16;
    for (int round = 0; round < 50; round++) {  // a missing lock shows in the first rounds
      TaskBook book = book("{roles: [{name: 'worker', instances: " + n + "}]}");
      placeAll(book);
      CyclicBarrier go = new CyclicBarrier(n);
      AtomicInteger complete = new AtomicInteger();
      Set<Object> waiting = ConcurrentHashMap.newKeySet();
      List<Thread> threads = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int index = i;
        threads.add(new Thread(() -> {
          try {
            go.await();
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
          Reply r = register(book, "worker", index, 1000 + index);
          if (r.code() == 200) {
            complete.incrementAndGet();
          } else {
            waiting.add(((Map<?, ?>) r.body()).get("waiting"));
          }
        }));
      }
      threads.forEach(Thread::start);
      for (Thread t : threads) {
        t.join();
      }
      assertEquals(1, complete.get(), "round " + round);
      assertEquals(n - 1, waiting.size(), "each registration saw its own count, round " + round);
    }
  }

  // ---------------------------------------------------------------- restart budgets and failure

  @Test
  void aFailedTaskRestartsWhileItsRolesBudgetLastsThenTheAppFailsNamingTaskAndCode() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 2, restarts: 2}]}");
    Map<String, Container> c = placeAll(book);
    Task w0 = book.task("worker", 0);
    Task w1 = book.task("worker", 1);
    exit(book, c.get("worker:0"), 1);
    assertEquals(List.of("worker:0#1"), yarn.requests, "restart 1/2: a new container, attempt 1");
    assertEquals(State.PENDING, w0.state);
    assertNull(w0.container);
    assertEquals(1, w0.exitCode);
    Container w0again = place(book, w0, "node-b");
    assertNull(w0.exitCode, "a new attempt has no exit code yet");
    // the budget belongs to the role: worker:1 uses the second restart
    exit(book, c.get("worker:1"), 137);
    assertEquals(List.of("worker:0#1", "worker:1#1"), yarn.requests);
    assertEquals(2, w1.role.restartsUsed);
    assertTrue(tails.isEmpty(), "no diagnostics while restarting");
    assertEquals(State.RUNNING, book.state());
    // budget spent: the next failure of any worker fails the application
    exit(book, w0again, 137);
    assertEquals(List.of("worker:0#1", "worker:1#1"), yarn.requests, "no third restart");
    assertEquals(State.FAILED, w0.state);
    assertEquals(State.FAILED, book.state());
    assertEquals("task worker:0 on node-b exited 137 (killed by SIGKILL): Traceback ...\nRuntimeError: boom in "
        + "worker:0",
        book.diagnostics());
    assertEquals(List.of("worker:0"), tails);
    assertEquals(0, book.done.getCount());
  }

  @Test
  void budgetsAreSeparatePerRole() {
    TaskBook book = book("{roles: [{name: 'chief', instances: 1, restarts: 0},"
        + " {name: 'worker', instances: 1, restarts: 3}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), 2);
    assertEquals(List.of("worker:0#1"), yarn.requests);
    exit(book, c.get("chief:0"), 2);
    assertEquals(List.of("worker:0#1"), yarn.requests, "the chief's budget is 0, whatever the workers have");
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task chief:0 on node-a exited 2: "), book.diagnostics());
  }

  @Test
  void aNegativeYarnExitStatusIsReportedAsIs() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), -1000);  // e.g. localization failed
    assertTrue(book.diagnostics().startsWith("task worker:0 on node-a exited -1000: "), book.diagnostics());
  }

  @Test
  void aLostNodeOrPreemptionDoesNotUseTheRolesBudgetButIsBounded() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, restarts: 0}]}");
    Map<String, Container> c = placeAll(book);
    Task w0 = book.task("worker", 0);
    exit(book, c.get("worker:0"), -100);  // its node was lost
    Container second = place(book, w0, "node-b");
    exit(book, second, -102);  // preempted
    Container third = place(book, w0, "node-c");
    exit(book, third, -101);  // disks failed
    assertEquals(List.of("worker:0#1", "worker:0#2", "worker:0#3"), yarn.requests, "three re-runs, budget 0");
    assertEquals(0, w0.role.restartsUsed);
    assertEquals(State.RUNNING, book.state());
    exit(book, place(book, w0, "node-d"), -100);  // a fourth: bounded
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith(
        "task worker:0 on node-d exited -100 (its node was lost or the container was released): "),
        book.diagnostics());
  }

  @Test
  void progressIsStepOverTotalOfTheDecidingTasksElseTheShareFinished() {
    TaskBook book = training("success_role: 'chief',");
    Map<String, Container> c = placeAll(book);
    assertEquals(0f, book.progress());
    exit(book, c.get("worker:0"), 0);
    assertEquals(0.25f, book.progress(), 1e-6, "no totals reported: the share of tasks finished");
    book.heartbeat(book.task("worker", 1), json("{step: 9, total: 10}"));
    assertEquals(0.25f, book.progress(), 1e-6, "a worker's total does not decide: the chief does");
    book.heartbeat(book.task("chief", 0), json("{step: 3, total: 4, loss: 0.5, metrics: {accuracy: 0.9}}"));
    assertEquals(0.75f, book.progress(), 1e-6);
    assertEquals(Map.of("accuracy", 0.9), book.task("chief", 0).metrics);
    book.heartbeat(book.task("chief", 0), json("{step: 7, total: 4}"));
    assertEquals(1f, book.progress(), 1e-6, "never past 1");
  }

  // ---------------------------------------------------------------- the output task (output_role)

  @Test
  void theSuccessRoleExitingWaitsForTheOutputTaskToPublish() {
    TaskBook book = training("success_role: 'chief', output_role: 'worker',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.RUNNING, book.state(), "worker:0 publishes the outputs: the application waits for it");
    assertEquals("task chief:0 succeeded; waiting for the output task worker:0 to publish the outputs",
        book.diagnostics());
    assertEquals(1L, book.done.getCount());
    exit(book, c.get("worker:1"), 0);
    assertEquals(State.RUNNING, book.state(), "only the output task's exit ends the wait");
    exit(book, c.get("worker:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals("task chief:0 succeeded; waited for the output task worker:0, which published the outputs",
        book.diagnostics());
  }

  @Test
  void anOutputTaskThatAlreadyPublishedDoesNotHoldTheSuccessBack() {
    TaskBook book = training("success_role: 'chief', output_role: 'worker',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), 0);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals("task chief:0 succeeded; the output task worker:0 had published the outputs", book.diagnostics());
  }

  @Test
  void theOutputTaskFailingAfterTheSuccessRoleFailsTheApplicationNamingIt() {
    // the output role is untracked here: its failure still fails the job (the outputs are missing)
    TaskBook book = book("{success_role: 'chief', output_role: 'ps', roles: [{name: 'chief', instances: 1},"
        + "{name: 'ps', instances: 1, tracked: false}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("chief:0"), 0);
    exit(book, c.get("ps:0"), 5);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("output task ps:0 on node-b exited 5: Traceback"), book.diagnostics());
  }

  @Test
  void whileTheOutputTaskPublishesAnotherTaskFailingNeitherFailsNorRestarts() {
    TaskBook book = training("success_role: 'chief', output_role: 'worker',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("chief:0"), 0);
    exit(book, c.get("worker:1"), 1);  // its chief is gone
    assertEquals(State.RUNNING, book.state());
    assertEquals(List.of(), yarn.requests, "no restart of worker:1: the job's outcome is decided");
    exit(book, c.get("worker:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
  }

  @Test
  void theOutputTaskBeingTheSuccessTaskChangesNothing() {
    TaskBook book = training("success_role: 'chief', output_role: 'chief',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals("task chief:0 succeeded", book.diagnostics());
  }

  @Test
  void exitCodesAreDescribed() {
    assertEquals("exited 137 (killed by SIGKILL)", TaskBook.describeExit(137));
    assertEquals("exited 143 (killed by SIGTERM)", TaskBook.describeExit(143));
    assertEquals("exited 3", TaskBook.describeExit(3));
    assertEquals("exited -104 (killed by YARN: over its physical memory limit)", TaskBook.describeExit(-104));
    assertEquals("exited -1000", TaskBook.describeExit(-1000));
    assertEquals("exited 76 (out of GPU memory)", TaskBook.describeExit(76));
  }

  @Test
  void aCompletionOfAContainerThatIsNotTheTasksCurrentOneIsIgnored() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, restarts: 1}]}");
    Map<String, Container> c = placeAll(book);
    Task w0 = book.task("worker", 0);
    exit(book, c.get("worker:0"), 1);
    Container second = place(book, w0, "node-b");
    exit(book, c.get("worker:0"), 1);  // the first container's completion, reported twice
    exit(book, Fixtures.container(w0, "node-c"), 1);  // a container that was never the task's
    assertEquals(State.RUNNING, w0.state);
    assertSame(second, w0.container);
    assertEquals(List.of("worker:0#1"), yarn.requests);
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void aContainerNobodyWaitsForIsRefused() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Task w0 = book.task("worker", 0);
    place(book, w0, "node-a");
    assertNull(book.allocated(Fixtures.container(w0, "node-b")), "the task already has a container");
    Container bogus = Fixtures.container(w0, "node-b");
    bogus.setAllocationRequestId(5);
    assertNull(book.allocated(bogus), "no task 5");
  }

  // ---------------------------------------------------------------- exit 75: no GPU fits on this node

  @Test
  void exit75RetriesElsewhereWithoutUsingTheBudgetThreeTimesThenCountsAsAFailure() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, restarts: 1}]}");
    Task w0 = book.task("worker", 0);
    Container c = place(book, w0, "node-a");
    String[] next = {"node-b", "node-c", "node-a"};
    for (int i = 1; i <= 3; i++) {
      String left = c.getNodeId().getHost();
      exit(book, c, 75);
      assertEquals(i, w0.noFitRetries);
      assertEquals(0, w0.role.restartsUsed, "exit 75 does not use the restart budget");
      assertEquals(State.PENDING, w0.state);
      assertEquals(left, w0.avoidHost);
      assertTrue(book.avoidedHosts().contains(left));
      c = place(book, w0, next[i - 1]);
      assertNull(w0.avoidHost, "placed elsewhere: nothing avoided any more");
      assertEquals(Set.of(), book.avoidedHosts());
    }
    assertEquals(List.of("+node-a", "-node-a", "+node-b", "-node-b", "+node-c", "-node-c"), yarn.blacklist);
    assertEquals(List.of("worker:0#1", "worker:0#2", "worker:0#3"), yarn.requests);
    // a fourth exit 75 is an ordinary failure: the budget's restart, on any node
    exit(book, c, 75);
    assertEquals(1, w0.role.restartsUsed);
    assertNull(w0.avoidHost);
    assertEquals(6, yarn.blacklist.size(), "no avoidance past the retries");
    c = place(book, w0, "node-a");
    exit(book, c, 75);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task worker:0 on node-a exited 75 (no GPU fits on its node): "), book.diagnostics());
  }

  @Test
  void exit75OnOneOfTwoNodeManagersOfAHostGivesBackGrantsOnThatNodeManager() {
    // The embedded cluster: two NodeManagers on one host, so the host cannot be blacklisted; YARN may grant the
    // retry on the same NodeManager again (the CI timeout of test_shared_mode_runs_more_tasks_than_gpus: 5 of 6
    // tasks on one NM whose GPUs fit 4, the 5th's retries landing there until its no-fit retries ran out).
    yarn.hosts = Set.of("localhost");
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Task w0 = book.task("worker", 0);
    Container first = Fixtures.container(w0, "localhost", 1111);
    assertSame(w0, book.allocated(first));
    book.started(first.getId());
    exit(book, first, 75);
    assertEquals(List.of(), yarn.blacklist, "the host is the last one: never blacklisted");
    assertEquals(List.of("worker:0#1"), yarn.requests);
    for (int i = 1; i <= NodeAvoidance.MAX_NODE_REFUSALS; i++) {
      assertNull(book.allocated(Fixtures.container(w0, "localhost", 1111)), "refusal " + i);
      assertEquals(State.PENDING, w0.state);
      assertEquals(i, yarn.cancelled.size(), "its request withdrawn ...");
      assertEquals(1 + i, yarn.requests.size(), "... and made again");
    }
    assertSame(w0, book.allocated(Fixtures.container(w0, "localhost", 1111)), "bounded: then taken there");
    exit(book, w0.container, 75);
    assertSame(w0, book.allocated(Fixtures.container(w0, "localhost", 2222)), "the other NodeManager: taken");
    assertEquals(2, w0.noFitRetries);
  }

  @Test
  void aRefusedNodeManagerIsTakenAgainAfterAvoidMs() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Task w0 = book.task("worker", 0);
    exit(book, place(book, w0, "node-a"), 75);
    assertNull(book.allocated(Fixtures.container(w0, "node-a")));
    clock.advance(NodeAvoidance.AVOID_MS + 1);
    assertSame(w0, book.allocated(Fixtures.container(w0, "node-a")));
  }

  @Test
  void theLastUsableNodeIsNeverAvoided() {
    yarn.hosts = Set.of("node-a");
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Task w0 = book.task("worker", 0);
    exit(book, place(book, w0, "node-a"), 75);
    assertEquals(List.of("worker:0#1"), yarn.requests, "retried all the same");
    assertEquals(List.of(), yarn.blacklist);
    assertNull(w0.avoidHost);
  }

  @Test
  void anAvoidedNodeIsGivenBackAfterAvoidMs() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1}]}");
    Task w0 = book.task("worker", 0);
    exit(book, place(book, w0, "node-a"), 75);
    assertEquals(List.of("+node-a"), yarn.blacklist);
    clock.advance(NodeAvoidance.AVOID_MS);
    book.expireAvoidance();
    assertEquals(List.of("+node-a"), yarn.blacklist, "not before AVOID_MS has passed");
    clock.advance(1);
    book.expireAvoidance();
    assertEquals(List.of("+node-a", "-node-a"), yarn.blacklist);
    assertNull(w0.avoidHost);
    place(book, w0, "node-a");
    assertEquals(2, yarn.blacklist.size(), "nothing left to give back");
  }

  @Test
  void aNodeAvoidedByTwoTasksIsGivenBackWhenBothRunElsewhere() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 2}]}");
    Task w0 = book.task("worker", 0);
    Task w1 = book.task("worker", 1);
    Container c0 = place(book, w0, "node-a");
    Container c1 = place(book, w1, "node-a");
    exit(book, c0, 75);
    exit(book, c1, 75);
    assertEquals(List.of("+node-a"), yarn.blacklist, "blacklisted once");
    assertEquals(1, yarn.hostQueries, "the cluster's nodes are read only for a new avoidance");
    place(book, w0, "node-b");
    assertEquals(List.of("+node-a"), yarn.blacklist, "worker:1 still avoids node-a");
    place(book, w1, "node-c");
    assertEquals(List.of("+node-a", "-node-a"), yarn.blacklist);
  }

  @Test
  void avoidanceNeverTakesTheLastNodeLeft() {
    yarn.hosts = Set.of("node-a", "node-b");
    TaskBook book = book("{roles: [{name: 'worker', instances: 2}]}");
    exit(book, place(book, book.task("worker", 0), "node-a"), 75);
    exit(book, place(book, book.task("worker", 1), "node-b"), 75);
    assertEquals(List.of("+node-a"), yarn.blacklist, "node-b is the only node not avoided");
    assertEquals(Set.of("node-a"), book.avoidedHosts());
  }

  // ---------------------------------------------------------------- exit 76: out of its expected GPU memory

  /** The final heartbeat of an executor that exits 76, then the exit. */
  private void oom(TaskBook book, Container c, String report) {
    Task t = taskOf(book, c);
    assertEquals(200, book.heartbeat(t, json("{container_id: '" + c.getId() + "', oom: " + report + "}")).code());
    exit(book, c, TaskBook.EXIT_OOM);
  }

  private static Task taskOf(TaskBook book, Container c) {
    return book.tasks.get((int) c.getAllocationRequestId());
  }

  /** The AM's log lines written while {@code r} runs. */
  private static String logOf(Runnable r) {
    java.io.PrintStream out = System.out;
    java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
    System.setOut(new java.io.PrintStream(buf, true));
    try {
      r.run();
    } finally {
      System.setOut(out);
    }
    return buf.toString();
  }

  @Test
  void anOomGrowsTheTasksExpectedGpuMemoryTwiceOutsideTheBudgetThenFailsSayingWhatToSet() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 2, gpu_memory_mb: 1024, restarts: 1}]}");
    Map<String, Container> c = placeAll(book);
    Task w1 = book.task("worker", 1);
    book.heartbeat(w1, json("{gpu_memory_used_mb: 700, gpu_memory_peak_mb: 900}"));
    String log = logOf(() -> oom(book, c.get("worker:1"), "{cap_mb: 1024, peak_mb: 1300, largest_gpu_mb: 16384,"
        + " signature: 'torch.OutOfMemoryError: CUDA out of memory.'}"));
    assertTrue(log.contains("restarting task worker:1: exceeded its expected GPU memory (cap 1024 MiB; peak seen 1300"
        + " MiB): asking again with 1536 MiB (growth 1/2, not counted against the role's restarts)"), log);
    assertEquals(List.of("worker:1#1"), yarn.requests);
    assertEquals(List.of(1536L), yarn.requestedGpuMemoryMb, "the new request asks for the grown memory");
    assertEquals(State.PENDING, w1.state);
    assertEquals(1536, w1.expectedMb);
    assertEquals(1, w1.oomGrowths);
    assertEquals(0, w1.role.restartsUsed, "not counted against the role's restarts");
    assertEquals(1024, book.task("worker", 0).expectedMb, "the task's own figure, not its role's");
    assertTrue(tails.isEmpty());

    Container second = place(book, w1, "node-b");
    oom(book, second, "{cap_mb: 1536, peak_mb: 1600, largest_gpu_mb: 16384, signature: 'CUDA out of memory'}");
    assertEquals(List.of(1536L, 2304L), yarn.requestedGpuMemoryMb, "1536 x 1.5");
    assertEquals(2, w1.oomGrowths);
    assertEquals(0, w1.role.restartsUsed);
    assertEquals(State.RUNNING, book.state());

    Container third = place(book, w1, "node-c");
    oom(book, third, "{cap_mb: 2304, peak_mb: 2400, largest_gpu_mb: 16384, signature: 'CUDA out of memory'}");
    assertEquals(List.of("worker:1#1", "worker:1#2"), yarn.requests, "an OOM is never re-run with the same memory");
    assertEquals(State.FAILED, w1.state);
    assertEquals(State.FAILED, book.state());
    assertEquals("task worker:1 exceeded its expected GPU memory (cap 2304 MiB; peak seen 2400 MiB): grown 2 of 2 times;"
        + " raise roles.worker.gpu_memory above 2304 MiB. It exited 76 (out of GPU memory) on node-c: Traceback ...\n"
        + "RuntimeError: boom in worker:1", book.diagnostics());
    assertEquals(0, w1.role.restartsUsed, "the role's restart is still there: an OOM does not use it");
    assertEquals(2400L, w1.gpuMemoryPeakMb);
  }

  @Test
  void anOomOutsideTheAllocatorGrowsTheContextReserveNotTheExpectedMemory() {
    withGpuResourceTypes(() -> {
      TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 4096, gpu_context_mb: 1024}]}");
      Task w0 = book.task("worker", 0);
      String log = logOf(() -> oom(book, place(book, w0, "node-a"), "{cap_mb: 4096, peak_mb: 1200, largest_gpu_mb:"
          + " 16384, signature: 'RuntimeError: CUDA error: out of memory', kind: 'outside', need_mb: 1200}"));
      assertTrue(log.contains("restarting task worker:0: ran out of GPU memory outside its framework's allocator (its"
          + " context reserve 1024 MiB; cap 4096 MiB; peak seen 1200 MiB): asking again with a context reserve of 1536"
          + " MiB beside its unchanged 4096 MiB (growth 1/2, not counted against the role's restarts)"), log);
      assertEquals(4096, w0.expectedMb, "the cap is not what ran out");
      assertEquals(1536, w0.contextMb);
      assertEquals(5632, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      assertEquals("outside", w0.oom.path("kind").asText());
      assertEquals(1200, w0.oom.path("need_mb").asLong());
      // a cap OOM afterwards grows the expected memory, and the grown context stays beside it
      oom(book, place(book, w0, "node-a"), "{cap_mb: 4096, peak_mb: 4000, largest_gpu_mb: 16384, signature: 'x',"
          + " kind: 'cap'}");
      assertEquals(6144, w0.expectedMb);
      assertEquals(7680, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      oom(book, place(book, w0, "node-a"), "{cap_mb: 6144, signature: 'x', kind: 'outside'}");
      assertEquals(State.FAILED, book.state(), "growths are shared by both figures");
      assertTrue(book.diagnostics().startsWith("task worker:0 ran out of GPU memory outside its framework's allocator"
          + " (its context reserve 1536 MiB; cap 6144 MiB; peak seen unknown): grown 2 of 2 times; the CUDA context,"
          + " cuBLAS/cuDNN workspaces or NCCL buffers need more than 1536 MiB beside the cap"), book.diagnostics());
    });
  }

  @Test
  void aGrantForATasksSizeBeforeItsOomGrowthIsGivenBack() {
    withGpuResourceTypes(() -> {
      TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 4096, gpu_context_mb: 1024}]}");
      Task w0 = book.task("worker", 0);
      oom(book, place(book, w0, "node-a"), "{cap_mb: 4096, peak_mb: 4000, largest_gpu_mb: 16384, signature: 'x',"
          + " kind: 'cap'}");
      assertEquals(7168, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      // a late grant for the request of the first size (5120 MiB): the task would run below what YARN holds for it
      Container stale = Fixtures.container(w0, "node-b");
      stale.getResource().setResourceValue(MelonApplicationMaster.GPU_MEM, 5120);
      assertNull(book.allocated(stale), "a container of the size before the growth");
      Container grown = Fixtures.container(w0, "node-b");
      grown.getResource().setResourceValue(MelonApplicationMaster.GPU_MEM, 7168);
      assertSame(w0, book.allocated(grown));
    });
  }

  @Test
  void aContextReserveGrowsFromZeroAndNeverPastTheLargestGpu() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 15000, gpu_context_mb: 0}]}");
    Task w0 = book.task("worker", 0);
    oom(book, place(book, w0, "node-a"), "{cap_mb: 15000, largest_gpu_mb: 16384, signature: 'x', kind: 'outside'}");
    assertEquals(256, w0.contextMb, "at least a step more than nothing");
    oom(book, place(book, w0, "node-a"), "{cap_mb: 15000, largest_gpu_mb: 16384, signature: 'x', kind: 'outside'}");
    assertEquals(512, w0.contextMb);
    assertEquals(15000, w0.expectedMb);
    TaskBook full = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 16000, gpu_context_mb: 384}]}");
    Task f0 = full.task("worker", 0);
    oom(full, place(full, f0, "node-a"), "{cap_mb: 16000, largest_gpu_mb: 16384, signature: 'x', kind: 'outside'}");
    assertEquals(State.FAILED, full.state(), "16000 + 640 is more than the largest GPU: nothing to grow into");
    assertEquals(384, f0.contextMb);
    assertTrue(full.diagnostics().contains("already at the largest GPU (16384 MiB); reduce the batch or the model"),
        full.diagnostics());
  }

  @Test
  void aVictimOfAnOversubscribedGpuIsRetriedAtItsOldFigureNotGrown() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024, restarts: 0}]}");
    Task w0 = book.task("worker", 0);
    String culprit = "task application_1_0002:worker:0 (pid 4242) uses 11000 MiB of its 4500 MiB reservation";
    String log = logOf(() -> oom(book, place(book, w0, "node-a"), "{cap_mb: 1024, peak_mb: 700, largest_gpu_mb: "
        + "16384, signature: 'RuntimeError: CUDA error: out of memory', oversubscribed: true, culprit: '" + culprit
        + "'}"));
    assertEquals(List.of(1024L), yarn.requestedGpuMemoryMb, "asked again with its old figure");
    assertEquals(1024, w0.expectedMb);
    assertEquals(0, w0.oomGrowths, "a victim is not grown");
    assertEquals(0, w0.role.restartsUsed, "nor charged the role's restarts");
    assertTrue(w0.oom.path("oversubscribed").asBoolean() && culprit.equals(w0.oom.path("culprit").asText()),
        w0.oom.toString());
    assertTrue(log.contains("restarting task worker:0: ran out of GPU memory on node-a, whose GPU was oversubscribed "
        + "beyond its reservations (" + culprit + "): asking again with the same 1024 MiB"), log);
    // its own OOM afterwards (no oversubscription) grows it as before
    oom(book, place(book, w0, "node-b"), "{cap_mb: 1024, peak_mb: 1100, largest_gpu_mb: 16384, signature: 'x'}");
    assertEquals(List.of(1024L, 1536L), yarn.requestedGpuMemoryMb);
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void theRolesRestartsAreUntouchedByOomsAndARestartKeepsTheGrownMemory() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024, restarts: 1}]}");
    Task w0 = book.task("worker", 0);
    oom(book, place(book, w0, "node-a"), "{cap_mb: 1024, peak_mb: 1100, signature: 'CUDA out of memory'}");
    Container second = place(book, w0, "node-b");
    exit(book, second, 1);  // an ordinary failure: the budget's restart, with the task's grown memory
    assertEquals(1, w0.role.restartsUsed);
    assertEquals(List.of(1536L, 1536L), yarn.requestedGpuMemoryMb);
    oom(book, place(book, w0, "node-c"), "{cap_mb: 1536, peak_mb: 1600, signature: 'CUDA out of memory'}");
    assertEquals(List.of(1536L, 1536L, 2304L), yarn.requestedGpuMemoryMb, "budget spent, growth left: grown");
    assertEquals(State.RUNNING, book.state());
    exit(book, place(book, w0, "node-a"), 1);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task worker:0 on node-a exited 1: "), book.diagnostics());
  }

  @Test
  void growthStopsAtTheLargestGpuEverReported() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 2, gpu_memory_mb: 12000}]}");
    Map<String, Container> c = placeAll(book);
    Task w0 = book.task("worker", 0);
    oom(book, c.get("worker:0"), "{cap_mb: 12000, peak_mb: 12100, largest_gpu_mb: 16384, signature: 'x'}");
    assertEquals(16384, w0.expectedMb, "not 18000: no GPU seen has more");
    // worker:1's node has smaller GPUs: the largest ever reported still bounds the growth
    oom(book, c.get("worker:1"), "{cap_mb: 12000, peak_mb: 12001, largest_gpu_mb: 8192, signature: 'x'}");
    assertEquals(16384, book.task("worker", 1).expectedMb);
    oom(book, place(book, w0, "node-b"), "{cap_mb: 16384, peak_mb: 16390, largest_gpu_mb: 16384, signature: 'x'}");
    assertEquals(1, w0.oomGrowths, "a growth was left, but nothing to grow into");
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task worker:0 exceeded its expected GPU memory (cap 16384 MiB; peak seen"
        + " 16390 MiB): already at the largest GPU (16384 MiB); "), book.diagnostics());
  }

  @Test
  void aSharedTaskAsksForItsSlotUntilItsGrownMemoryOutgrowsIt() {
    withGpuResourceTypes(() -> {
      TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 4000, gpu_context_mb: 400,"
          + " gpu_slot_mb: 8192}]}");
      Task w0 = book.task("worker", 0);
      assertEquals(8192, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      oom(book, place(book, w0, "node-a"), "{cap_mb: 4000, peak_mb: null, largest_gpu_mb: 32768, signature: 'x'}");
      assertEquals(6000, w0.expectedMb);
      assertEquals(8192, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM),
          "6000 + 400 is still inside the slot");
      oom(book, place(book, w0, "node-a"), "{cap_mb: 6000, peak_mb: null, largest_gpu_mb: 32768, signature: 'x'}");
      assertEquals(9400, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM),
          "9000 + 400 outgrew the slot");
    });
  }

  @Test
  void theCudaContextIsReservedBesideTheExpectedMemoryAndLeftRoomOnTheLargestGpu() {
    withGpuResourceTypes(() -> {
      TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 10000, gpu_context_mb: 400}]}");
      Task w0 = book.task("worker", 0);
      assertEquals(10400, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      oom(book, place(book, w0, "node-a"), "{cap_mb: 10000, peak_mb: null, largest_gpu_mb: 16384, signature: 'x'}");
      assertEquals(15000, w0.expectedMb, "15000 + 400 fits a 16384 MiB GPU");
      oom(book, place(book, w0, "node-a"), "{cap_mb: 15000, peak_mb: null, largest_gpu_mb: 16384, signature: 'x'}");
      assertEquals(15984, w0.expectedMb, "not 22500: the GPU must hold the context too");
      assertEquals(16384, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
    });
  }

  @Test
  void growthStopsAtTheClustersMaximumAllocation() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024, oom_max_growths: 5}]}");
    book.maxGpuMemoryMb(2000);
    Task w0 = book.task("worker", 0);
    oom(book, place(book, w0, "node-a"), "{cap_mb: 1024, peak_mb: null, largest_gpu_mb: null, signature: 'x'}");
    oom(book, place(book, w0, "node-a"), "{cap_mb: 1536, peak_mb: null, largest_gpu_mb: null, signature: 'x'}");
    assertEquals(List.of(1536L, 2000L), yarn.requestedGpuMemoryMb, "never a request the RM would refuse");
    oom(book, place(book, w0, "node-a"), "{cap_mb: 2000, signature: 'x'}");
    assertTrue(book.diagnostics().startsWith("task worker:0 exceeded its expected GPU memory (cap 2000 MiB; peak seen"
        + " unknown): already at the cluster's maximum allocation of melon.io/gpu-memory (2000 MiB); "),
        book.diagnostics());
  }

  @Test
  void withOomRetryOffAnOomFailsAtOnce() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 2, gpu_memory_mb: 4096, restarts: 3,"
        + " oom_growth: 2.0, oom_max_growths: 0}]}");
    Map<String, Container> c = placeAll(book);
    oom(book, c.get("worker:1"), "{cap_mb: 4096, peak_mb: 4370, largest_gpu_mb: 81920, signature: 'x'}");
    assertEquals(List.of(), yarn.requests, "neither grown nor restarted with the same memory");
    assertEquals(0, book.task("worker", 1).role.restartsUsed);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task worker:1 exceeded its expected GPU memory (cap 4096 MiB; peak seen"
        + " 4370 MiB): oom retry is off (oom_max_growths: 0); raise roles.worker.gpu_memory above 4096 MiB. It exited"
        + " 76 (out of GPU memory) on node-b: Traceback"), book.diagnostics());
  }

  @Test
  void anOomOnWholeGpusIsNotRetried() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpus: 1, restarts: 2}]}");
    Task w0 = book.task("worker", 0);
    oom(book, place(book, w0, "node-a"), "{cap_mb: null, peak_mb: 80000, largest_gpu_mb: 81920, signature: 'x'}");
    assertEquals(List.of(), yarn.requests);
    assertEquals(0, w0.role.restartsUsed);
    assertTrue(book.diagnostics().startsWith("task worker:0 ran out of GPU memory on its 1 whole GPU(s) (exclusive"
        + " mode: not retried with more): reduce the batch or ask for more gpus. It exited 76"), book.diagnostics());
    assertTrue(w0.oom.path("cap_mb").isNull(), "no cap to fill in: " + w0.oom);
  }

  @Test
  void anExit76WhoseReportWasLostCountsAsAnOomAtTheTasksExpectedMemory() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024, oom_max_growths: 1}]}");
    Task w0 = book.task("worker", 0);
    exit(book, place(book, w0, "node-a"), 76);  // no oom heartbeat
    assertEquals(List.of(1536L), yarn.requestedGpuMemoryMb);
    assertEquals("{\"cap_mb\":1024,\"peak_mb\":null,\"largest_gpu_mb\":null,\"signature\":null}", w0.oom.toString());
    exit(book, place(book, w0, "node-a"), 76);
    assertTrue(book.diagnostics().startsWith("task worker:0 exceeded its expected GPU memory (cap 1536 MiB; peak seen"
        + " unknown): grown 1 of 1 times; raise roles.worker.gpu_memory above 1536 MiB."), book.diagnostics());
  }

  @Test
  void theReportFillsInTheCapAndThePeakIsKeptOverAttempts() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024}]}");
    Task w0 = book.task("worker", 0);
    Container first = place(book, w0, "node-a");
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 1000}"));
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 800}"));
    assertEquals(1000L, w0.gpuMemoryPeakMb, "the most seen");
    String longLine = "x".repeat(300);
    oom(book, first, "{peak_mb: 1100, signature: '" + longLine + "'}");
    assertEquals(1024, w0.oom.path("cap_mb").asLong(), "filled from the task's expected memory");
    assertEquals(GpuMemory.OOM_SIGNATURE_MAX, w0.oom.path("signature").asText().length());
    assertEquals(1100L, w0.gpuMemoryPeakMb, "from the report");
    place(book, w0, "node-b");
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 200}"));
    assertEquals(1100L, w0.gpuMemoryPeakMb, "across attempts");
    assertEquals(200L, w0.attemptPeakMb);
    assertEquals(1100, w0.oom.path("peak_mb").asLong(), "the last OOM stays until the next one");
  }

  @Test
  void thePeakKeepsItsSourceAndAFrameworkCounterWinsOverALargerNvmlFigure() {
    TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 4096}]}");
    Task w0 = book.task("worker", 0);
    Container first = place(book, w0, "node-a");
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 3000, gpu_memory_peak_source: 'nvml-device'}"));
    assertEquals("nvml-device", w0.gpuMemoryPeakSource);
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 2000, gpu_memory_peak_source: 'nvml-process'}"));
    assertEquals(2000L, w0.gpuMemoryPeakMb, "the process's own figure beats the device's rise, though smaller");
    assertEquals("nvml-process", w0.gpuMemoryPeakSource);
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 1800, gpu_memory_peak_source: 'tensorflow'}"));
    assertEquals(1800L, w0.gpuMemoryPeakMb, "the framework's counter wins over NVML, as runtime/peak.task_peak");
    assertEquals("tensorflow", w0.gpuMemoryPeakSource);
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 2500, gpu_memory_peak_source: 'nvml-process'}"));
    assertEquals(1800L, w0.gpuMemoryPeakMb, "a later, larger NVML figure does not take the counter's place");
    assertEquals("tensorflow", w0.gpuMemoryPeakSource);
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 1900}"));
    assertEquals("tensorflow", w0.gpuMemoryPeakSource, "a figure without a source (an older executor) ranks last");
    oom(book, first, "{cap_mb: 4096, peak_mb: 1950, peak_source: 'user', signature: 'x'}");
    assertEquals(1950L, w0.gpuMemoryPeakMb, "counters among themselves: the largest");
    assertEquals("user", w0.gpuMemoryPeakSource, "the OOM report's own source");
    assertEquals("user", w0.oom.path("peak_source").asText(), "kept in the report");
    place(book, w0, "node-b");
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 2100, gpu_memory_peak_source: 'torch'}"));
    assertEquals(2100L, w0.gpuMemoryPeakMb, "across attempts");
    assertEquals("torch", w0.gpuMemoryPeakSource);
    assertEquals("torch", w0.attemptPeakSource);
    book.heartbeat(w0, json("{gpu_memory_peak_mb: 3000, gpu_memory_peak_source: 'nvml-process',"
        + " oom: {cap_mb: 6144, peak_mb: 3000, signature: 'x'}}"));
    assertEquals(2100L, w0.gpuMemoryPeakMb, "the report's peak without a source has the heartbeat's");
    assertEquals("torch", w0.gpuMemoryPeakSource);
  }

  @Test
  void anOomOfAnOptionalRolePastItsGrowthsIsOnlyLoggedAndOfAParameterServerFailsTheJob() {
    TaskBook book = book("{roles: [{name: 'chief', instances: 1}, {name: 'evaluator', instances: 1, tracked: false,"
        + " optional: true, gpu_memory_mb: 1024, oom_max_growths: 0}, {name: 'ps', instances: 1, tracked: false,"
        + " gpu_memory_mb: 1024, oom_max_growths: 0}]}");
    Map<String, Container> c = placeAll(book);
    oom(book, c.get("evaluator:0"), "{cap_mb: 1024, peak_mb: 1030, signature: 'x'}");
    assertEquals(State.FAILED, book.task("evaluator", 0).state);
    assertEquals(State.RUNNING, book.state());
    oom(book, c.get("ps:0"), "{cap_mb: 1024, peak_mb: 1030, signature: 'x'}");
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task ps:0 exceeded its expected GPU memory"), book.diagnostics());
    assertTrue(book.diagnostics().endsWith("(role ps is untracked, but the job cannot go on without it; optional: true"
        + " lets it fail)"), book.diagnostics());
  }

  @Test
  void anOomAfterTheOutcomeIsDecidedChangesNothing() {
    TaskBook book = training("success_role: 'chief', output_role: 'worker',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("chief:0"), 0);
    exit(book, c.get("worker:1"), 76);  // decided: only the output task is waited for
    assertEquals(State.FAILED, book.task("worker", 1).state);
    assertEquals(List.of(), yarn.requests);
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void theContainerRequestCarriesTheTasksGrownMemory() {
    withGpuResourceTypes(() -> {
      TaskBook book = book("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024, memory_mb: 2048}]}");
      Task w0 = book.task("worker", 0);
      assertEquals(1024, MelonApplicationMaster.resource(w0).getResourceValue(MelonApplicationMaster.GPU_MEM));
      exit(book, place(book, w0, "node-a"), 76);
      Resource grown = MelonApplicationMaster.resource(w0);
      assertEquals(1536, grown.getResourceValue(MelonApplicationMaster.GPU_MEM));
      assertEquals(2048, grown.getMemorySize());
    });
  }

  // ---------------------------------------------------------------- untracked roles and the outcome

  @Test
  void anUntrackedRoleFailingForGoodFailsTheJob() {
    // a parameter server that is gone for good: the workers would wait for it until the job's timeout
    TaskBook book = training("");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), 0);
    exit(book, c.get("ps:0"), 1);  // ps: no restarts, untracked
    assertEquals(State.FAILED, book.task("ps", 0).state);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task ps:0 on node-"), book.diagnostics());
    assertTrue(book.diagnostics().contains("exited 1: Traceback ...\nRuntimeError: boom in ps:0 (role ps is untracked, but the job cannot go on "
        + "without it; optional: true lets it fail)"), book.diagnostics());
  }

  @Test
  void anOptionalRoleNeitherFailsNorBlocksSuccess() {
    TaskBook book = book("{register_timeout_s: 60, roles: ["
        + "{name: 'chief', instances: 1}, {name: 'worker', instances: 2, restarts: 1},"
        + "{name: 'ps', instances: 1, tracked: false, optional: true}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("ps:0"), 1);
    assertEquals(State.FAILED, book.task("ps", 0).state);
    assertEquals(List.of("ps:0"), tails, "its tail is logged");
    assertEquals(State.RUNNING, book.state());
    exit(book, c.get("worker:0"), 0);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.RUNNING, book.state(), "worker:1 still runs");
    assertEquals(0.5f, book.progress());
    exit(book, c.get("worker:1"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals("all tracked tasks succeeded", book.diagnostics());
  }

  @Test
  void anUntrackedTaskThatStillRunsDoesNotBlockSuccess() {
    TaskBook book = training("");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), 0);
    exit(book, c.get("worker:1"), 0);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals(State.RUNNING, book.task("ps", 0).state, "the AM stops it at shutdown");
  }

  @Test
  void withNoTrackedRoleEveryTaskMustSucceed() {
    TaskBook book = book("{roles: [{name: 'a', instances: 1, tracked: false},"
        + " {name: 'b', instances: 1, tracked: false}]}");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("a:0"), 0);
    assertEquals(State.RUNNING, book.state());
    exit(book, c.get("b:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
  }

  @Test
  void theSuccessRolesFirstTaskDecidesSuccess() {
    TaskBook book = training("success_role: 'chief',");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:0"), 0);
    exit(book, c.get("worker:1"), 0);
    assertEquals(State.RUNNING, book.state(), "all workers done, but the chief decides");
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.SUCCEEDED, book.state());
    assertEquals("task chief:0 succeeded", book.diagnostics());
  }

  @Test
  void aTrackedFailureFailsTheAppEvenWithASuccessRole() {
    TaskBook book = training("success_role: 'chief',");
    Map<String, Container> c = placeAll(book);
    Task w1 = book.task("worker", 1);
    exit(book, c.get("worker:1"), 1);
    exit(book, place(book, w1, "node-a"), 1);
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("task worker:1 on node-a exited 1: "), book.diagnostics());
  }

  @Test
  void onceDecidedTheOutcomeStaysAndLiveTasksAreOnlyMarkedEnded() {
    TaskBook book = training("");
    Map<String, Container> c = placeAll(book);
    exit(book, c.get("worker:1"), 1);
    assertEquals(List.of("worker:1#1"), yarn.requests, "worker:1 waits for a new container");
    book.finish(State.FAILED, "first");
    book.finish(State.SUCCEEDED, "second");
    assertEquals(State.FAILED, book.state());
    assertEquals("first", book.diagnostics());
    exit(book, c.get("worker:0"), 1);
    exit(book, c.get("chief:0"), 0);
    assertEquals(State.KILLED, book.task("worker", 0).state);
    assertEquals(State.SUCCEEDED, book.task("chief", 0).state, "it exited 0 by itself: not shown as killed");
    assertEquals(List.of("worker:1#1"), yarn.requests, "no restarts after the end");
    assertNull(book.allocated(Fixtures.container(book.task("worker", 1), "node-a")), "nor new containers");
    book.stopped(c.get("ps:0").getId());
    assertEquals(State.KILLED, book.task("ps", 0).state);
  }

  /** Runs {@code body} with the cluster's resource types declared, the GPU ones too (as an RM with them answers the
   * AM), then resets them for the other tests. */
  private static void withGpuResourceTypes(Runnable body) {
    ResourceUtils.reinitializeResources(List.of(ResourceTypeInfo.newInstance("memory-mb", "Mi"),
        ResourceTypeInfo.newInstance("vcores"), ResourceTypeInfo.newInstance(MelonApplicationMaster.GPU),
        ResourceTypeInfo.newInstance(MelonApplicationMaster.GPU_MEM, "Mi")));
    try {
      body.run();
    } finally {  // back to memory and vcores only (the no-argument reset leaves the type count stale)
      ResourceUtils.resetResourceTypes(new org.apache.hadoop.conf.Configuration(false));
    }
  }
}
