package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.container;
import static org.melon.yarn.Fixtures.plan;

import java.util.List;
import java.util.Map;
import java.util.Random;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;
import org.melon.yarn.TaskBook.Reply;

/** A TensorFlow collective gang ({@code restart_gang}) restarted whole on a loss, for one restart, with a new
 * registration round; the stall watchdog treating a job that reports no new step as a lost gang. */
class GangRestartTest {

  private final FakeYarn yarn = new FakeYarn();
  private final Clock clock = new Clock();

  private TaskBook book(String roles, double stallTimeoutS) {
    return new TaskBook(plan("{register_timeout_s: 60, stall_timeout_s: " + stallTimeoutS + ", roles: [" + roles
        + "]}"), yarn, clock, new Random(7));
  }

  private Container run(TaskBook book, String role, int index) {
    Task t = book.task(role, index);
    Container c = container(t, "node-" + index);
    assertSame(t, book.allocated(c));
    book.granted(t);
    book.started(c.getId());
    return c;
  }

  private Reply register(TaskBook book, String role, int index, int port) {
    Task t = book.task(role, index);
    ObjectNode body = JsonNodeFactory.instance.objectNode();
    body.put("host", "h" + index);
    body.put("port", port);
    body.put("container_id", t.container.getId().toString());
    return book.register(t, body);
  }

  private void step(TaskBook book, String role, int index, long step) {
    Task t = book.task(role, index);
    ObjectNode body = JsonNodeFactory.instance.objectNode();
    body.put("step", step);
    body.put("container_id", t.container.getId().toString());
    assertEquals(200, book.heartbeat(t, body).code());
  }

  @SuppressWarnings("unchecked")
  private static List<String> members(Reply r, String role) {
    return ((Map<String, List<String>>) ((Map<String, Object>) r.body()).get("cluster")).get(role);
  }

  private static final String TF = "{name: 'chief', restarts: 1, restart_gang: true}, {name: 'worker', instances: 2,"
      + " restarts: 1, restart_gang: true}";

  @Test
  void aLostMemberOfACollectiveGangRestartsItWholeForOneRestartAndEveryTaskRegistersAnew() {
    TaskBook book = book(TF, 0);
    Container chief = run(book, "chief", 0);
    Container w0 = run(book, "worker", 0);
    Container w1 = run(book, "worker", 1);
    register(book, "chief", 0, 5000);
    register(book, "worker", 0, 5001);
    assertEquals(200, register(book, "worker", 1, 5002).code());
    yarn.requests.clear();

    book.completed(w1.getId(), 137, t -> "killed");
    assertEquals(List.of("chief:0", "worker:0"), yarn.stopped, "the rest of the gang is stopped at once");
    assertEquals(List.of("worker:1#1", "chief:0#1", "worker:0#1"), yarn.requests, "every task asked for again");
    Task lost = book.task("worker", 1);
    assertEquals(1, lost.role.restartsUsed, "one loss: one restart of the lost task's role");
    assertEquals(0, book.task("chief", 0).role.restartsUsed, "the others' restarts are not counted");
    // the stopped containers end (143, -105): their task has moved on, nothing more is counted or restarted
    book.completed(chief.getId(), 143, t -> "stopped");
    book.completed(w0.getId(), -105, t -> "stopped");
    assertEquals(State.RUNNING, book.state());
    assertEquals(3, yarn.requests.size());
    // a new registration round: the barrier answers once all have registered, with the new addresses only
    run(book, "chief", 0);
    run(book, "worker", 0);
    run(book, "worker", 1);
    assertEquals(202, register(book, "chief", 0, 6000).code());
    assertEquals(202, register(book, "worker", 0, 6001).code());
    Reply whole = register(book, "worker", 1, 6002);
    assertEquals(200, whole.code());
    assertEquals(List.of("h0:6001", "h1:6002"), members(whole, "worker"));
    assertEquals(List.of("h0:6000"), members(whole, "chief"));
    assertTrue(book.events().stream().anyMatch(e -> e.path("task").asText().equals("worker:1")
        && e.path("text").asText().startsWith("its gang restarted whole: chief:0, worker:0")), book.events().toString());
  }

  @Test
  void aGangLossPastTheBudgetFailsTheJob() {
    TaskBook book = book(TF.replace("restarts: 1", "restarts: 0"), 0);
    run(book, "chief", 0);
    run(book, "worker", 0);
    Container w1 = run(book, "worker", 1);
    register(book, "chief", 0, 5000);
    register(book, "worker", 0, 5001);
    register(book, "worker", 1, 5002);
    book.completed(w1.getId(), 137, t -> "killed");
    assertEquals(State.FAILED, book.state());
    assertEquals(List.of(), yarn.stopped);
  }

  @Test
  void aTaskLostBeforeTheGangFormedIsRestartedAlone() {
    TaskBook book = book(TF, 0);
    run(book, "chief", 0);
    Container w0 = run(book, "worker", 0);
    register(book, "chief", 0, 5000);
    yarn.requests.clear();
    book.completed(w0.getId(), 1, t -> "crashed");
    assertEquals(List.of("worker:0#1"), yarn.requests, "nobody had the cluster: the others wait at the barrier");
    assertEquals(List.of(), yarn.stopped);
  }

  @Test
  void aRoleWithoutTheGangRestartsTheLostTaskAlone() {
    TaskBook book = book("{name: 'worker', instances: 2, restarts: 1}", 0);
    run(book, "worker", 0);
    Container w1 = run(book, "worker", 1);
    register(book, "worker", 0, 5001);
    register(book, "worker", 1, 5002);
    yarn.requests.clear();
    book.completed(w1.getId(), 137, t -> "killed");
    assertEquals(List.of("worker:1#1"), yarn.requests);
    assertEquals(List.of(), yarn.stopped);
  }

  @Test
  void aJobWhoseStepsStopIsRestartedWholeThenFailedNamingTheStalledTasks() {
    TaskBook book = book("{name: 'worker', instances: 2, restarts: 1}", 10);
    run(book, "worker", 0);
    run(book, "worker", 1);
    register(book, "worker", 0, 5001);
    register(book, "worker", 1, 5002);
    clock.advance(1000);
    step(book, "worker", 0, 1);
    step(book, "worker", 1, 1);
    clock.advance(1000);
    step(book, "worker", 0, 2);
    step(book, "worker", 1, 2);
    clock.advance(10_000);
    book.checkStall();
    assertEquals(List.of(), yarn.stopped, "10 s without a step is not more than stall_timeout_s");
    assertEquals(10.0, (Double) book.stallStatus().get("since_last_step_s"));
    clock.advance(600);
    yarn.requests.clear();
    book.checkStall();
    assertEquals(List.of("worker:0", "worker:1"), yarn.stopped, "stalled: the gang is stopped");
    assertEquals(List.of("worker:0#1", "worker:1#1"), yarn.requests, "and asked for again");
    assertEquals(State.RUNNING, book.state());
    String why = book.events().get(book.events().size() - 1).path("text").asText();
    assertTrue(why.startsWith("stalled: no task reported a new step for 10.6 s (stall_timeout_s 10.0 s, or 5 x the longest "
        + "stretch between steps, 1.0 s)") && why.contains("worker:1 at step 2")
        && why.endsWith("restarting the gang (restart 1/1 of role worker)"), why);
    // the new round is not watched until its gang is whole; then it stalls again: no restarts left, the job fails
    clock.advance(60_000);
    book.checkStall();
    assertEquals(State.RUNNING, book.state(), "the gang is not whole: the register timeout's, not the watchdog's");
    run(book, "worker", 0);
    run(book, "worker", 1);
    register(book, "worker", 0, 6001);
    register(book, "worker", 1, 6002);
    clock.advance(2000);
    step(book, "worker", 0, 3);
    clock.advance(10_500);
    book.checkStall();
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("stalled: no task reported a new step for 10.5 s"), book.diagnostics());
    assertTrue(book.diagnostics().contains("worker:0 at step 3, worker:1 (no step since its start; step 2 before)")
        && book.diagnostics().endsWith("the restarts of worker (1) are used up"), book.diagnostics());
    assertTrue((Double) book.stallStatus().get("longest_without_step_s") >= 10.5);
  }

  @Test
  void theWatchdogWaitsFiveTimesTheLongestStretchBetweenStepsAndIgnoresJobsWithoutSteps() {
    TaskBook book = book("{name: 'worker', restarts: 1}", 10);
    run(book, "worker", 0);
    register(book, "worker", 0, 5001);
    clock.advance(100_000);
    book.checkStall();
    assertEquals(List.of(), yarn.stopped, "a job that reports no steps is not watched");
    assertFalse((Boolean) book.stallStatus().get("watched"));
    step(book, "worker", 0, 1);  // its first step came 100 s after its start: a slow job
    clock.advance(400_000);
    book.checkStall();
    assertEquals(List.of(), yarn.stopped, "400 s is not more than 5 x 100 s");
    assertEquals(500.0, (Double) book.stallStatus().get("threshold_s"));
    clock.advance(100_001);
    book.checkStall();
    assertEquals(List.of("worker:0"), yarn.stopped);
  }

  @Test
  void aStalledOldContainerReportingLateIsRefused() {
    TaskBook book = book("{name: 'worker', restarts: 1}", 1);
    Container old = run(book, "worker", 0);
    register(book, "worker", 0, 5001);
    step(book, "worker", 0, 1);
    clock.advance(1500);
    book.checkStall();
    Task t = book.task("worker", 0);
    ObjectNode body = JsonNodeFactory.instance.objectNode();
    body.put("step", 2);
    body.put("container_id", old.getId().toString());
    assertEquals(409, book.heartbeat(t, body).code(), "its old container is no longer the task's");
    ContainerId id = old.getId();
    book.completed(id, 143, x -> "stopped");
    assertEquals(State.PENDING, t.state);
  }
}
