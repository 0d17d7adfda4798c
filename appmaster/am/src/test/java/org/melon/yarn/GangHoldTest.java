package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.container;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;

import java.util.List;
import java.util.Random;

import org.apache.hadoop.yarn.api.records.Container;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/** Gang formation, all or nothing: held containers, the hold's end, the backoff, the queue timeout. */
class GangHoldTest {

  private final FakeYarn yarn = new FakeYarn();
  private final Clock clock = new Clock();

  /** worker x3, hold 20 s; {@code extra} adds plan fields. */
  private TaskBook gang(String extra) {
    return new TaskBook(plan("{register_timeout_s: 60, gang_hold_s: 20, " + extra
        + " roles: [{name: 'worker', instances: 3}]}"), yarn, clock, new Random(7));
  }

  private Task grant(TaskBook book, int index, String host) {
    Task t = book.task("worker", index);
    Container c = container(t, host);
    assertSame(t, book.allocated(c));
    book.granted(t);
    return t;
  }

  @Test
  void containersAreHeldUnlaunchedUntilTheWholeGangIsGrantedThenStartTogether() {
    TaskBook book = gang("");
    grant(book, 0, "node-a");
    grant(book, 1, "node-b");
    assertEquals(List.of(), yarn.launched, "nothing starts while the gang is incomplete");
    assertTrue(book.gangMessage().contains("2 of 3 containers granted"), book.gangMessage());
    grant(book, 2, "node-a");
    assertEquals(List.of("worker:0", "worker:1", "worker:2"), yarn.launched);
    assertEquals(true, book.gangStatus().get("formed"));
    // once formed, a restarted task's new container starts at once
    book.completed(book.task("worker", 1).container.getId(), -100, t -> "");
    grant(book, 1, "node-c");
    assertEquals("worker:1", yarn.launched.get(3));
  }

  @Test
  void anIncompleteGangGivesEverythingBackAfterTheHoldAndAsksAgainAfterABackoff() {
    TaskBook book = gang("");
    grant(book, 0, "node-a");
    clock.advance(19_000);
    book.checkGangHold();
    assertEquals(List.of(), yarn.released, "the hold has not run out yet");
    clock.advance(1_000);
    book.checkGangHold();
    assertEquals(List.of("worker:0"), yarn.released, "the held container goes back");
    assertEquals(List.of("worker:1", "worker:2"), yarn.cancelled, "the requests still open are withdrawn");
    assertNull(book.task("worker", 0).container);
    assertEquals(State.PENDING, book.task("worker", 0).state);
    assertEquals(1, book.gangStatus().get("holds_released"));
    assertTrue(book.gangMessage().contains("backing off"), book.gangMessage());
    int asked = yarn.requests.size();
    // a grant that arrives for a withdrawn request while backing off is refused (the AM releases it)
    assertNull(book.allocated(container(book.task("worker", 1), "node-b")));
    // the backoff is between half and one and a half hold times: nothing is asked before 10 s
    clock.advance(9_999);
    book.checkGangHold();
    assertEquals(asked, yarn.requests.size());
    clock.advance(20_001);
    book.checkGangHold();
    assertEquals(asked + 3, yarn.requests.size(), "all three are asked for again");
    assertEquals(0, book.task("worker", 0).attempt, "giving a held container back is no attempt of the task");
    // now the gang forms
    grant(book, 0, "node-a");
    grant(book, 1, "node-a");
    grant(book, 2, "node-b");
    assertEquals(List.of("worker:0", "worker:1", "worker:2"), yarn.launched);
    assertEquals(State.RUNNING, book.state());
  }

  @Test
  void aGangGrantedNothingWithdrawsItsAsksAfterTheHoldToo() {
    // The CapacityScheduler grants nothing past the queue's headroom, and a FIFO queue stops at the first application
    // whose ask does not fit it: a gang asking for ever with nothing granted would stop every job behind it.
    TaskBook book = gang("");
    book.checkGangHold();  // the AM's first check, right after its first asks
    clock.advance(19_000);
    book.checkGangHold();
    assertEquals(List.of(), yarn.cancelled, "the hold has not run out yet");
    clock.advance(1_000);
    book.checkGangHold();
    assertEquals(List.of("worker:0", "worker:1", "worker:2"), yarn.cancelled, "every request is withdrawn");
    assertEquals(List.of(), yarn.released);
    assertEquals(1, book.gangStatus().get("holds_released"));
    assertEquals(0.0, book.gangStatus().get("longest_hold_s"), "nothing was held");
    int asked = yarn.requests.size();
    clock.advance(30_000);
    book.checkGangHold();
    assertEquals(asked + 3, yarn.requests.size(), "all three are asked for again after the backoff");
    // once something is granted, the hold counts from that grant, as before
    clock.advance(15_000);
    grant(book, 0, "node-a");
    clock.advance(19_000);
    book.checkGangHold();
    assertEquals(List.of(), yarn.released, "held for less than the hold time since the grant");
    clock.advance(1_000);
    book.checkGangHold();
    assertEquals(List.of("worker:0"), yarn.released);
  }

  @Test
  void theRegisterTimeoutCountsFromTheWholeGrantNotFromTheWaitForResources() {
    TaskBook book = gang("");
    clock.advance(300_000);  // five minutes waiting for resources: longer than register_timeout_s (60)
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state());
    grant(book, 0, "node-a");
    grant(book, 1, "node-a");
    grant(book, 2, "node-b");
    clock.advance(59_000);
    book.checkGangTimeout();
    assertEquals(State.RUNNING, book.state());
    clock.advance(2_000);
    book.checkGangTimeout();
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().startsWith("gang registration timed out"), book.diagnostics());
  }

  @Test
  void theQueueTimeoutFailsAGangNeverGrantedWithWhereItStood() {
    TaskBook book = gang("queue_timeout_s: 90,");
    grant(book, 0, "node-a");
    clock.advance(89_000);
    book.checkGangHold();
    assertEquals(State.RUNNING, book.state());
    clock.advance(2_000);
    book.checkGangHold();
    assertEquals(State.FAILED, book.state());
    assertTrue(book.diagnostics().contains("not granted within queue_timeout_s (90 s)"), book.diagnostics());
    assertTrue(book.diagnostics().contains("containers granted"), book.diagnostics());
  }

  @Test
  void withTheHoldOffEachContainerStartsAsItComesAndNothingIsGivenBack() {
    TaskBook book = new TaskBook(plan("{register_timeout_s: 60, roles: [{name: 'worker', instances: 3}]}"),
        yarn, clock, new Random(7));
    grant(book, 0, "node-a");
    assertEquals(List.of("worker:0"), yarn.launched);
    clock.advance(600_000);
    book.checkGangHold();
    assertEquals(List.of(), yarn.released);
    assertFalse((Boolean) book.gangStatus().get("formed"));
  }

  @Test
  void twoGangsBackingOffDoNotAskAgainInLockstep() {
    TaskBook a = new TaskBook(plan("{gang_hold_s: 20, roles: [{name: 'worker', instances: 3}]}"), yarn, clock,
        new Random(1));
    TaskBook b = new TaskBook(plan("{gang_hold_s: 20, roles: [{name: 'worker', instances: 3}]}"), new FakeYarn(),
        clock, new Random(5));
    grant(a, 0, "node-a");
    Task tb = b.task("worker", 0);
    b.allocated(container(tb, "node-b"));
    b.granted(tb);
    clock.advance(20_000);
    a.checkGangHold();
    b.checkGangHold();
    Object ia = a.gangStatus().get("asking_again_in_s");
    Object ib = b.gangStatus().get("asking_again_in_s");
    assertFalse(ia.equals(ib), "the backoffs are random: " + ia + " / " + ib);
  }
}
