package org.melon.yarn;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;

/**
 * Elastic membership (docs/internals.md, "Elastic roles"). A role whose plan gives {@code min_instances} below its
 * {@code instances} needs only that many of its tasks, its task 0 among them (it heads the role's list in the
 * cluster: torchrun's rendezvous host): the gang forms, and registration answers, once that many hold containers or
 * have registered; the others join as YARN grants them. Once the job has started, a lost member is asked for again
 * (the role's restart budget counts as for any task, its node is avoided) while the others go on; a member past its
 * budget stays lost. A role with fewer live members than its minimum for longer than {@code elastic_grace_s} fails
 * the job, naming its lost members. A role without bounds needs every task, as before. Called under the book's
 * monitor.
 */
final class Elastic {

  private final long graceMs;
  /** Once the gang first registered whole: from then on the elastic roles' membership is watched. */
  private boolean started;
  /** Per elastic role below its minimum: since when. */
  private final Map<String, Long> belowSince = new HashMap<>();
  /** The members lost and not back (yet): how each was lost. */
  private final Map<Task, String> lost = new LinkedHashMap<>();

  Elastic(long graceMs) {
    this.graceMs = Math.max(0, graceMs);
  }

  static boolean elastic(Role r) {
    return r.minInstances < r.instances;
  }

  /** Whether task 0 of an elastic role hosts torchrun's rendezvous store (none beside the AM): then it is needed
   * as the others are not. */
  boolean anchored = true;

  /** Whether the tasks of each role matching {@code has} are enough: every task of a role without bounds; at least
   * {@code min_instances}, task 0 among them, of an elastic one. */
  static boolean enough(List<Task> tasks, Predicate<Task> has) {
    return enough(tasks, has, true);
  }

  /** {@link #enough}; task 0 is needed only when {@code anchored}. */
  static boolean enough(List<Task> tasks, Predicate<Task> has, boolean anchored) {
    Map<Role, Integer> count = new HashMap<>();
    for (Task t : tasks) {
      count.merge(t.role, has.test(t) ? 1 : 0, Integer::sum);
      if (anchored && t.index == 0 && elastic(t.role) && !has.test(t)) {
        return false;
      }
    }
    return count.entrySet().stream().allMatch(e -> e.getValue() >= Math.min(e.getKey().minInstances,
        e.getKey().instances));
  }

  /** The tasks still missing for {@link #enough}: all those not matching {@code has} of a role short of its need. */
  static List<Task> missing(List<Task> tasks, Predicate<Task> has, boolean anchored) {
    List<Task> out = new ArrayList<>();
    for (Task t : tasks) {
      if (!has.test(t) && (!elastic(t.role) || (anchored && t.index == 0)
          || count(tasks, t.role, has) < t.role.minInstances)) {
        out.add(t);
      }
    }
    return out;
  }

  private static int count(List<Task> tasks, Role role, Predicate<Task> has) {
    return (int) tasks.stream().filter(x -> x.role == role && has.test(x)).count();
  }

  /** A task of an elastic role counts as live from its launch until its container ends. */
  static boolean live(Task t) {
    return t.live() && t.launched;
  }

  boolean started() {
    return started;
  }

  /** The gang registered whole (enough of each elastic role). */
  void start() {
    started = true;
  }

  /** Whether {@code t} is a member whose loss the role survives (an elastic role's, once the job has started). */
  boolean watches(Task t) {
    return started && elastic(t.role);
  }

  /** {@code t} (watched) ended with {@code how}: recorded and logged; returns what the task log says of it. */
  String lost(Task t, String how, List<Task> tasks, String next) {
    lost.put(t, t.name() + " (" + how + ")");
    String text = "lost from elastic role " + t.role.name + " (" + how + "); " + membership(tasks, t.role, t)
        + "; " + next;
    MelonApplicationMaster.log("task " + t.name() + " " + text);
    return text;
  }

  /** {@code t} (watched) registered: a member again; returns what the task log says of it. */
  String joined(Task t, List<Task> tasks) {
    lost.remove(t);
    String text = "joined elastic role " + t.role.name + " (attempt " + t.attempt + "); " + membership(tasks, t.role);
    MelonApplicationMaster.log("task " + t.name() + " " + text);
    return text;
  }

  static String membership(List<Task> tasks, Role role) {
    return membership(tasks, role, null);
  }

  /** The role's live members, {@code gone} (its container just ended) left out. */
  private static String membership(List<Task> tasks, Role role, Task gone) {
    List<String> names = new ArrayList<>();
    for (Task x : tasks) {
      if (x.role == role && x != gone && live(x)) {
        names.add(x.name());
      }
    }
    return names.size() + " of " + role.instances + " live (min " + role.minInstances + "): "
        + (names.isEmpty() ? "none" : String.join(", ", names));
  }

  /** Whether an elastic role has ended well: at least its minimum of tasks succeeded and none is still live. */
  static boolean succeeded(List<Task> tasks, Role role) {
    int ok = 0;
    for (Task t : tasks) {
      if (t.role == role) {
        if (live(t)) {
          return false;
        }
        ok += t.state == State.SUCCEEDED ? 1 : 0;
      }
    }
    return ok >= role.minInstances;
  }

  /** The AM's clock tick: null, or why the job fails (an elastic role below its minimum past the grace). */
  String check(List<Task> tasks, long now) {
    if (!started) {
      return null;
    }
    Map<Role, Integer> live = new LinkedHashMap<>();
    for (Task t : tasks) {
      if (elastic(t.role)) {
        live.merge(t.role, live(t) || t.state == State.SUCCEEDED ? 1 : 0, Integer::sum);
      }
    }
    for (Map.Entry<Role, Integer> e : live.entrySet()) {
      Role role = e.getKey();
      if (e.getValue() >= role.minInstances) {
        if (belowSince.remove(role.name) != null) {
          MelonApplicationMaster.log("elastic role " + role.name + " back at its minimum: "
              + membership(tasks, role));
        }
        continue;
      }
      Long since = belowSince.get(role.name);
      if (since == null) {
        belowSince.put(role.name, now);
        MelonApplicationMaster.log("elastic role " + role.name + " below its minimum: " + membership(tasks, role)
            + "; the job fails unless it is back within " + graceMs / 1000.0 + " s (elastic_grace_s)");
      } else if (now - since > graceMs) {
        List<String> gone = new ArrayList<>();
        for (Map.Entry<Task, String> l : lost.entrySet()) {
          if (l.getKey().role == role) {
            gone.add(l.getValue());
          }
        }
        return "elastic role " + role.name + " below its minimum of " + role.minInstances + " for more than "
            + graceMs / 1000.0 + " s (elastic_grace_s): " + membership(tasks, role) + "; lost: "
            + (gone.isEmpty() ? "none recorded" : String.join("; ", gone));
      }
    }
    return null;
  }

  /** For {@code GET /status}: each elastic role's bounds, live members and lost ones. */
  Map<String, Object> status(List<Task> tasks) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Task t : tasks) {
      if (elastic(t.role) && !out.containsKey(t.role.name)) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("min_instances", t.role.minInstances);
        r.put("instances", t.role.instances);
        r.put("live", (int) tasks.stream().filter(x -> x.role == t.role && live(x)).count());
        List<String> gone = new ArrayList<>();
        lost.forEach((task, how) -> {
          if (task.role == t.role) {
            gone.add(how);
          }
        });
        r.put("lost", gone);
        r.put("below_min_since_ms", belowSince.get(t.role.name));
        out.put(t.role.name, r);
      }
    }
    return out;
  }
}
