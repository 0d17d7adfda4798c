package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.container;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;

import java.util.List;
import java.util.Map;
import java.util.Random;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.hadoop.yarn.api.records.Container;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;
import org.melon.yarn.TaskBook.Reply;

/** Elastic roles: the gang and the registration barrier at the minimum, late members, lost members replaced away
 * from their node, the grace below the minimum, success with the members left. */
class ElasticTest {

  private final FakeYarn yarn = new FakeYarn();
  private final Clock clock = new Clock();

  /** worker x3, min 2, restarts {@code restarts}, grace 10 s, gang hold 20 s. */
  private TaskBook book(int restarts) {
    return new TaskBook(plan("{register_timeout_s: 60, gang_hold_s: 20, elastic_grace_s: 10, roles: [{name: "
        + "'worker', instances: 3, min_instances: 2, restarts: " + restarts + "}]}"), yarn, clock, new Random(7));
  }

  private Task grant(TaskBook book, int index, String host) {
    Task t = book.task("worker", index);
    Container c = container(t, host);
    assertSame(t, book.allocated(c));
    for (Task x : book.granted(t)) {  // the AM's NodeManager client reports the launched ones started
      book.started(x.container.getId());
    }
    return t;
  }

  private Reply register(TaskBook book, int index) {
    Task t = book.task("worker", index);
    ObjectNode body = JsonNodeFactory.instance.objectNode();
    body.put("host", "h" + index);
    body.put("port", 4000 + index);
    body.put("container_id", t.container.getId().toString());
    return book.register(t, body);
  }

  @SuppressWarnings("unchecked")
  private static List<String> members(Reply r) {
    return ((Map<String, List<String>>) ((Map<String, Object>) r.body()).get("cluster")).get("worker");
  }

  /** Workers 0 and 1 granted, started and registered: the job is under way with its minimum. */
  private TaskBook started(int restarts) {
    TaskBook book = book(restarts);
    grant(book, 1, "node-b");
    assertEquals(List.of(), yarn.launched, "one container is not the minimum: held");
    grant(book, 0, "node-a");
    assertEquals(List.of("worker:0", "worker:1"), yarn.launched, "the minimum granted: the held ones start");
    assertEquals(202, register(book, 0).code());
    Reply whole = register(book, 1);
    assertEquals(200, whole.code(), "the minimum registered: the barrier opens");
    assertEquals(List.of("h0:4000", "h1:4001"), members(whole), "the members registered, task 0 first");
    return book;
  }

  @Test
  void theGangFormsAtTheMinimumWithTaskZeroAndALateMemberJoinsAtOnce() {
    TaskBook book = book(0);
    grant(book, 1, "node-b");
    grant(book, 2, "node-c");
    assertEquals(List.of(), yarn.launched, "two containers, but not task 0 (the rendezvous host): still held");
    grant(book, 0, "node-a");
    assertEquals(3, yarn.launched.size());
    assertEquals(202, register(book, 1).code(), "task 0 has not registered");
    assertEquals(200, register(book, 0).code());
    assertEquals(200, register(book, 1).code());
    assertEquals(List.of("h0:4000", "h1:4001", "h2:4002"), members(register(book, 2)));
  }

  @Test
  void theExtraTaskStartsWhenGrantedAfterTheStart() {
    TaskBook book = started(0);
    grant(book, 2, "node-c");
    assertEquals("worker:2", yarn.launched.get(2), "granted after the start: launched at once");
    assertEquals(List.of("h0:4000", "h1:4001", "h2:4002"), members(register(book, 2)));
  }

  @Test
  void aLostMemberIsReplacedAwayFromItsNodeWhileTheOthersGoOn() {
    TaskBook book = started(1);
    Task w2 = grant(book, 2, "node-c");
    register(book, 2);
    book.completed(w2.container.getId(), 137, t -> "killed");
    assertEquals(State.RUNNING, book.state(), "two live members: the job goes on");
    assertEquals("worker:2#1", yarn.requests.get(yarn.requests.size() - 1), "a replacement is asked for");
    assertEquals(List.of("+node-c"), yarn.blacklist, "away from the node it was lost on");
    assertEquals(1, book.task("worker", 2).role.restartsUsed, "a SIGKILL uses the role's restarts, as before");
    assertTrue(book.events().stream().anyMatch(e -> e.path("task").asText().equals("worker:2") && e.path("text")
        .asText().startsWith("lost from elastic role worker (") && e.path("text").asText().contains(
        "2 of 3 live (min 2): worker:0, worker:1; asking for a replacement (restart 1/1")), book.events().toString());
    Map<String, Object> st = book.elastic.status(book.tasks);
    assertTrue(st.toString().contains("worker:2 (") && st.toString().contains("exited 137"), st.toString());
    // a grant back on the very NodeManager it was lost on is given back
    assertEquals(null, book.allocated(container(w2, "node-c")));
    Task again = grant(book, 2, "node-a");
    assertEquals(200, register(book, 2).code(), "the replacement joins the registered members at once");
    assertTrue(book.events().stream().anyMatch(e -> e.path("text").asText().startsWith(
        "joined elastic role worker (attempt 1); 3 of 3 live")), book.events().toString());
    assertEquals(List.of("-node-c"), yarn.blacklist.subList(1, 2), "placed elsewhere: the node is given back");
    clock.advance(60_000);
    book.checkElastic();
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state());
    assertEquals(1, again.attempt);
  }

  @Test
  void belowTheMinimumPastTheGraceTheJobFailsNamingTheLostMembers() {
    TaskBook book = started(0);
    Task w1 = book.task("worker", 1);
    book.completed(w1.container.getId(), 137, t -> "killed");
    book.checkElastic();
    assertEquals(State.RUNNING, book.state(), "within the grace (and its restarts are used up: not replaced)");
    assertEquals(State.FAILED, w1.state);
    clock.advance(10_000);
    book.checkElastic();
    assertEquals(State.RUNNING, book.state(), "10 s is the grace itself");
    clock.advance(1);
    book.checkElastic();
    assertEquals(State.FAILED, book.state());
    String diag = book.diagnostics();
    assertTrue(diag.startsWith("elastic role worker below its minimum of 2 for more than 10.0 s (elastic_grace_s): "
        + "1 of 3 live (min 2): worker:0; lost: worker:1 ("), diag);
    assertTrue(diag.contains("exited 137 (killed by SIGKILL)"), diag);
  }

  @Test
  void backAtTheMinimumWithinTheGraceTheJobGoesOn() {
    TaskBook book = started(1);
    book.completed(book.task("worker", 1).container.getId(), -100, t -> "");
    book.checkElastic();
    clock.advance(9_000);
    grant(book, 1, "node-c");
    register(book, 1);
    book.checkElastic();
    clock.advance(5_000);
    book.checkElastic();
    assertEquals(State.RUNNING, book.state());
    assertEquals(0, book.task("worker", 1).role.restartsUsed, "a lost node is not the task's fault");
  }

  @Test
  void theJobSucceedsWithItsMinimumWhenNoMemberIsLeftRunning() {
    TaskBook book = started(0);
    book.completed(book.task("worker", 0).container.getId(), 0, t -> "");
    assertEquals(State.RUNNING, book.state(), "worker:1 still runs");
    book.completed(book.task("worker", 1).container.getId(), 0, t -> "");
    assertEquals(State.SUCCEEDED, book.state(), "two of three succeeded, none runs: worker:2 was never needed");
  }

  @Test
  void aRoleWithoutBoundsStillNeedsEveryTask() {
    TaskBook book = new TaskBook(plan("{register_timeout_s: 60, gang_hold_s: 20, roles: [{name: 'worker', "
        + "instances: 2, restarts: 0}]}"), yarn, clock, new Random(7));
    grant(book, 0, "node-a");
    assertEquals(List.of(), yarn.launched);
    grant(book, 1, "node-b");
    assertEquals(202, register(book, 0).code());
    assertEquals(200, register(book, 1).code());
    book.completed(book.task("worker", 1).container.getId(), 137, t -> "killed");
    assertEquals(State.FAILED, book.state(), "a lost task without bounds fails the job, as before");
  }
}
