package org.melon.yarn;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * Gang formation, all or nothing ({@code gang_hold_s} in the plan; 0: off, each container starts as it comes).
 * Granted containers are held unlaunched until every task has one; a gang still incomplete after the hold time
 * gives every container back, withdraws its requests, and asks again after a random backoff (half to one and a half
 * hold times), so two waiting gangs cannot deadlock and a waiting gang does not sit on part of the cluster.
 * {@code register_timeout_s} counts from the moment the whole gang was granted; {@code queue_timeout_s} (0: none,
 * like YARN) bounds the wait for it. Called under the task book's monitor.
 */
final class GangHold {

  final long holdMs;
  private final long queueTimeoutMs;
  private final List<Task> tasks;
  private final TaskBook.Yarn yarn;
  private final LongSupplier clock;
  private final Random random;
  /** Gives a granted, unlaunched container back to YARN (the task book forgets it first). */
  private final Consumer<Task> giveBack;
  final long startedAt;
  boolean formed;
  /** When the first container of the current formation attempt was granted; -1: none held. */
  private long holdingSince = -1;
  /** Backing off (nothing held, nothing asked) until then; -1: not backing off. */
  private long rerequestAt = -1;
  /** When the current formation attempt asked (the first check after the AM's first asks, or asking again); -1: not
   * asking. A gang granted nothing withdraws its asks after the hold time too: the scheduler grants nothing past the
   * queue's headroom, and a FIFO queue stops at the first application whose ask does not fit it, so a gang asking for
   * ever with nothing granted would stop every application behind it (their AMs too). */
  private long askingSince = -1;
  private int holdReleases;
  private long longestHoldMs;

  GangHold(long holdMs, long queueTimeoutMs, List<Task> tasks, TaskBook.Yarn yarn, LongSupplier clock, Random random,
      Consumer<Task> giveBack) {
    this.holdMs = holdMs;
    this.queueTimeoutMs = queueTimeoutMs;
    this.tasks = tasks;
    this.yarn = yarn;
    this.clock = clock;
    this.random = random;
    this.giveBack = giveBack;
    this.startedAt = clock.getAsLong();
  }

  /** Whether containers are held unlaunched now: the hold is on and the gang not granted whole yet. */
  boolean forming() {
    return holdMs > 0 && !formed;
  }

  /** Whether the gang waits out a backoff: a grant now is for a withdrawn request. */
  boolean backingOff() {
    return rerequestAt >= 0;
  }

  /** A container was granted while {@link #forming}: none of the held ones to start until every task holds one,
   * then all of them (the gang has formed). */
  List<Task> granted() {
    List<Task> out = new ArrayList<>();
    long now = clock.getAsLong();
    if (holdingSince < 0) {
      holdingSince = now;
    }
    if (Elastic.enough(tasks, x -> x.container != null && x.state == State.ALLOCATED)) {
      formed = true;
      longestHoldMs = Math.max(longestHoldMs, now - holdingSince);
      MelonApplicationMaster.log("gang granted whole: " + tasks.size() + " containers after "
          + (now - startedAt) / 1000 + " s (" + holdReleases + " hold(s) given back); starting them");
      holdingSince = -1;
      tasks.stream().filter(x -> x.container != null && !x.launched).forEach(out::add);
    }
    return out;
  }

  /** The formation's clock while {@link #forming}: the end of a hold (give every container back, withdraw the
   * requests, back off), the end of a backoff (ask again). Returns why the application fails (the queue timeout
   * passed), else null. */
  String check() {
    long now = clock.getAsLong();
    if (queueTimeoutMs > 0 && now - startedAt > queueTimeoutMs) {
      return "the gang was not granted within queue_timeout_s (" + queueTimeoutMs / 1000 + " s): " + message();
    }
    if (rerequestAt >= 0) {
      if (now >= rerequestAt) {
        rerequestAt = -1;
        askingSince = now;
        MelonApplicationMaster.log("gang: asking again for all " + tasks.size() + " containers");
        for (Task t : tasks) {
          if (t.state == State.PENDING) {
            yarn.request(t);
          }
        }
      }
      return null;
    }
    if (askingSince < 0) {
      askingSince = now;
    }
    long since = holdingSince >= 0 ? holdingSince : askingSince;  // a hold counts from its first grant
    if (now - since < holdMs) {
      return null;
    }
    long held = now - since;
    int granted = grantedCount();
    for (Task t : tasks) {
      if (t.container != null && !t.launched) {
        giveBack.accept(t);
        t.container = null;
        t.nodeHost = null;
        t.host = null;
        t.state = State.PENDING;
        t.updated = now;
      } else if (t.state == State.PENDING) {
        yarn.cancel(t);
      }
    }
    holdReleases++;
    longestHoldMs = Math.max(longestHoldMs, granted > 0 ? held : 0);
    holdingSince = -1;
    askingSince = -1;
    long backoff = holdMs / 2 + (long) (random.nextDouble() * holdMs);
    rerequestAt = now + backoff;
    MelonApplicationMaster.log("gang incomplete after holding " + granted + " of " + tasks.size()
        + " containers for " + held / 1000.0 + " s: gave them back, asking again in " + backoff / 1000.0
        + " s (hold " + holdReleases + ")");
    return null;
  }

  private int grantedCount() {
    return (int) tasks.stream().filter(x -> x.container != null).count();
  }

  /** Where gang formation stands, for people (status, diagnostics). */
  String message() {
    if (!forming()) {
      return formed ? "gang granted" : "gang hold off";
    }
    long now = clock.getAsLong();
    String head = "waiting for the gang: " + grantedCount() + " of " + tasks.size() + " containers granted";
    if (rerequestAt >= 0) {
      return head + ", backing off after " + holdReleases + " hold(s) given back; asking again in "
          + Math.max(0, rerequestAt - now) / 1000 + " s";
    }
    return head + (holdingSince >= 0 ? ", held for " + (now - holdingSince) / 1000 + " of " + holdMs / 1000
        + " s" : "") + (holdReleases > 0 ? " (" + holdReleases + " hold(s) given back so far)" : "");
  }

  /** Gang formation for {@code GET /status}; {@code waitedUntil}: when the gang's wait ended, if it has formed. */
  Map<String, Object> status(long waitedUntil) {
    long now = clock.getAsLong();
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("hold_s", holdMs / 1000.0);
    out.put("formed", formed);
    out.put("granted", grantedCount());
    out.put("asked", tasks.size());
    out.put("holds_released", holdReleases);
    out.put("longest_hold_s", longestHoldMs / 1000.0);
    out.put("waiting_s", ((formed ? waitedUntil : now) - startedAt) / 1000.0);
    out.put("asking_again_in_s", rerequestAt >= 0 ? Math.max(0, rerequestAt - now) / 1000.0 : null);
    out.put("message", message());
    return out;
  }
}
