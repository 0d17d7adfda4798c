package org.melon.yarn;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.LongSupplier;

/**
 * Where a task that left a node is not placed again (exit 75: no GPU fits there; an elastic member lost there).
 * Its host goes on the application's blacklist while the task is asked for again. Bounded: never the last usable
 * node (the RM's RUNNING nodes), and given back once the task is placed elsewhere or after {@link #AVOID_MS}. A
 * blacklist names hosts, which cannot tell apart two NodeManagers of one host (the embedded cluster's), so a grant
 * on the very NodeManager the task left is given back too, at most {@link #MAX_NODE_REFUSALS} times. Called under
 * the task book's monitor.
 */
final class NodeAvoidance {

  /** A node avoided is given back after this long, or once the task runs elsewhere. */
  static final long AVOID_MS = 120_000;
  /** How many grants on the very NodeManager a task left it gives back (asking again) before it takes one there. */
  static final int MAX_NODE_REFUSALS = 10;

  private final TaskBook.Yarn yarn;
  private final List<Task> tasks;
  private final LongSupplier clock;
  /** Hosts on the application's blacklist and since when. */
  private final Map<String, Long> avoided = new HashMap<>();

  NodeAvoidance(TaskBook.Yarn yarn, List<Task> tasks, LongSupplier clock) {
    this.yarn = yarn;
    this.tasks = tasks;
    this.clock = clock;
  }

  /** {@code t}'s container ended on its node ({@code why}): its NodeManager and its host are avoided. */
  void left(Task t, String why) {
    t.avoidNode = t.container.getNodeId().toString();
    t.avoidNodeSince = clock.getAsLong();
    t.nodeRefusals = 0;
    avoid(t, t.nodeHost, why);
  }

  /** Whether {@code t} gives back a grant on NodeManager {@code node}, the one it left (then it is asked for
   * again here). */
  boolean refuses(Task t, String node) {
    if (t.avoidNode != null && t.avoidNode.equals(node) && t.nodeRefusals < MAX_NODE_REFUSALS
        && clock.getAsLong() - t.avoidNodeSince <= AVOID_MS) {
      t.nodeRefusals++;
      MelonApplicationMaster.log("task " + t.name() + " granted again on " + node + ", which it left (exit "
          + t.exitCode + "): given back and asked again (" + t.nodeRefusals + "/" + MAX_NODE_REFUSALS + ")");
      yarn.cancel(t);
      yarn.request(t);
      return true;
    }
    t.avoidNode = null;
    return false;
  }

  /** {@code t} was placed on {@code t.nodeHost}: the host it left may be given back. */
  void placed(Task t) {
    if (t.avoidHost != null) {
      String left = t.avoidHost;
      t.avoidHost = null;
      release(left, "task " + t.name() + " placed on " + t.nodeHost);
    }
  }

  /** Put {@code host} on the blacklist while {@code t} is asked for again, unless no other node is known. */
  private void avoid(Task t, String host, String why) {
    if (host == null) {
      return;
    }
    if (avoided.containsKey(host)) {
      t.avoidHost = host;
      return;
    }
    Set<String> others = new TreeSet<>(yarn.runningHosts());
    others.removeAll(avoided.keySet());
    others.remove(host);
    if (others.isEmpty()) {
      MelonApplicationMaster.log("not avoiding " + host + " for task " + t.name() + ": no other node is known");
      return;
    }
    t.avoidHost = host;
    avoided.put(host, clock.getAsLong());
    yarn.blacklist(Collections.singletonList(host), null);
    MelonApplicationMaster.log("avoiding node " + host + " for task " + t.name()
        + " (" + why + "); other nodes " + others);
  }

  private void release(String host, String why) {
    if (!avoided.containsKey(host) || tasks.stream().anyMatch(x -> host.equals(x.avoidHost))) {
      return;
    }
    avoided.remove(host);
    yarn.blacklist(null, Collections.singletonList(host));
    MelonApplicationMaster.log("node " + host + " no longer avoided: " + why);
  }

  /** Give back the hosts avoided for longer than {@link #AVOID_MS}. */
  void expire() {
    long now = clock.getAsLong();
    for (String host : new ArrayList<>(avoided.keySet())) {
      if (now - avoided.get(host) > AVOID_MS) {
        tasks.stream().filter(x -> host.equals(x.avoidHost)).forEach(x -> x.avoidHost = null);
        release(host, "avoided for " + AVOID_MS / 1000 + " s");
      }
    }
  }

  Set<String> hosts() {
    return new TreeSet<>(avoided.keySet());
  }
}
