package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;

/** Plans, containers, a settable clock and a YARN that records what the book asks of it. */
final class Fixtures {
  private Fixtures() {
  }

  /** Lenient JSON for readable plans in tests: 'single quotes' and unquoted names. */
  static final JsonMapper LENIENT = JsonMapper.builder()
      .enable(JsonReadFeature.ALLOW_SINGLE_QUOTES, JsonReadFeature.ALLOW_UNQUOTED_FIELD_NAMES).build();

  static JsonNode json(String lenient) {
    try {
      return LENIENT.readTree(lenient);
    } catch (Exception e) {
      throw new IllegalArgumentException(lenient, e);
    }
  }

  /**
   * A whole plan, as build_plan writes one (the AM reads only plans that pass its schema check, and has no defaults
   * of its own): {@code lenient}'s fields over a typical job's, each of its roles' over a typical role's. Fails
   * unless the result passes the AM's check ({@link Schemas#PLAN}).
   */
  static JsonNode plan(String lenient) {
    ObjectNode given = (ObjectNode) json(lenient);
    ObjectNode plan = (ObjectNode) json("{app_name: 'job', success_role: null, output_role: null, command: 'run',"
        + " env: {}, local_resources: [], register_timeout_s: 300, gang_hold_s: 0, queue_timeout_s: 0,"
        + " elastic_grace_s: 60, stall_timeout_s: 0, rendezvous_store: null, labels: {}, staged: [], status_file: null}");
    plan.setAll(given);
    ArrayNode roles = plan.putArray(PlanFields.ROLES);
    for (JsonNode r : given.path(PlanFields.ROLES)) {
      ObjectNode role = (ObjectNode) json("{instances: 1, memory_mb: 1024, vcores: 1, gpus: 0, gpu_memory_mb: 0,"
          + " restarts: 0, tracked: true, optional: false, oom_growth: 1.5, oom_max_growths: 2, gpu_context_mb: 0,"
          + " gpu_slot_mb: 0, gpu_models: [], restart_gang: false}");
      role.setAll((ObjectNode) r);
      if (!role.has(PlanFields.ROLE_MIN_INSTANCES)) {
        role.put(PlanFields.ROLE_MIN_INSTANCES, role.path(PlanFields.ROLE_INSTANCES).asInt());
      }
      roles.add(role);
    }
    assertEquals(List.of(), Schemas.violations(Schemas.PLAN, plan), "a test plan the AM would refuse: " + plan);
    return plan;
  }

  /** Records requests ("worker:1#2" = task worker:1, attempt 2) and blacklist changes ("+host", "-host"). */
  static final class FakeYarn implements TaskBook.Yarn {
    final List<String> requests = new ArrayList<>();
    final List<String> blacklist = new ArrayList<>();
    Set<String> hosts = new TreeSet<>(Set.of("node-a", "node-b", "node-c"));
    int hostQueries;

    /** The expected GPU memory (MiB) of each request, in the order of {@link #requests}. */
    final List<Long> requestedGpuMemoryMb = new ArrayList<>();

    @Override
    public void request(Task t) {
      requests.add(t.name() + "#" + t.attempt);
      requestedGpuMemoryMb.add(t.expectedMb);
    }

    @Override
    public void blacklist(List<String> add, List<String> remove) {
      if (add != null) {
        add.forEach(h -> blacklist.add("+" + h));
      }
      if (remove != null) {
        remove.forEach(h -> blacklist.add("-" + h));
      }
    }

    @Override
    public Set<String> runningHosts() {
      hostQueries++;
      return hosts;
    }

    /** Containers started, given back, and requests withdrawn: task names. */
    final List<String> launched = new ArrayList<>();
    final List<String> released = new ArrayList<>();
    final List<String> cancelled = new ArrayList<>();
    /** Running containers stopped by the book: task names. */
    final List<String> stopped = new ArrayList<>();

    @Override
    public void stop(Task t) {
      stopped.add(t.name());
    }

    @Override
    public void launch(Task t) {
      launched.add(t.name());
    }

    @Override
    public void release(Task t) {
      released.add(t.name());
    }

    @Override
    public void cancel(Task t) {
      cancelled.add(t.name());
    }
  }

  /** A clock that moves only when told. */
  static final class Clock implements LongSupplier {
    long now = 1_700_000_000_000L;

    @Override
    public long getAsLong() {
      return now;
    }

    void advance(long ms) {
      now += ms;
    }
  }

  private static final AtomicLong SEQ = new AtomicLong();
  static final ApplicationId APP = ApplicationId.newInstance(1_700_000_000_000L, 7);

  /** A new container for {@code t} (its allocation request id is the task's number) on {@code host}. */
  static Container container(Task t, String host) {
    return container(t, host, 45454);
  }

  /** A container on the NodeManager {@code host:port} (two NodeManagers of one host: the embedded cluster). */
  static Container container(Task t, String host, int port) {
    ContainerId id = ContainerId.newContainerId(ApplicationAttemptId.newInstance(APP, 1), SEQ.incrementAndGet());
    Container c = Container.newInstance(id, NodeId.newInstance(host, port), host + ":8042",
        Resource.newInstance(256, 1), Priority.newInstance(1), null);
    c.setAllocationRequestId(t.number);
    return c;
  }

  /** Allocate a container on {@code host} to {@code t} and start it. */
  static Container place(TaskBook book, Task t, String host) {
    Container c = container(t, host);
    assertSame(t, book.allocated(c), "the book takes the container for " + t.name());
    book.started(c.getId());
    return c;
  }
}
