package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;
import static org.melon.yarn.Fixtures.place;

import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.hadoop.yarn.api.records.Container;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/** {@code GET /status}'s container history of each task and the AM's decisions about tasks (the task log's source
 * when a task moves to a new container: after an OOM growth, a restart). */
class ContainerHistoryTest {

  private final FakeYarn yarn = new FakeYarn();
  private final Clock clock = new Clock();

  private static void oom(TaskBook book, Container c, long cap) {
    Task t = book.tasks.get((int) c.getAllocationRequestId());
    book.heartbeat(t, json("{container_id: '" + c.getId() + "', oom: {cap_mb: " + cap + ", peak_mb: null,"
        + " largest_gpu_mb: 16384, signature: 'CUDA out of memory'}}"));
    book.completed(c.getId(), TaskBook.EXIT_OOM, x -> "torch.OutOfMemoryError");
  }

  private static List<String> texts(JsonNode events, String field) {
    List<String> out = new ArrayList<>();
    events.forEach(e -> out.add(e.path(field).asText()));
    return out;
  }

  @Test
  void eachContainerOfATaskIsListedInOrderWithTheDecisionThatEndedIt() {
    TaskBook book = new TaskBook(plan("{roles: [{name: 'worker', instances: 1, gpu_memory_mb: 1024}]}"), yarn,
        clock);
    AmHttp http = new AmHttp(book, "s", "application_1700000000000_0007", json("{}"));
    Task w = book.task("worker", 0);
    Container first = place(book, w, "node-a");
    oom(book, first, 1024);
    Container second = place(book, w, "node-b");
    oom(book, second, 1536);
    Container third = place(book, w, "node-c");

    JsonNode status = http.statusJson();
    JsonNode containers = status.path("tasks").get(0).path("containers");
    assertEquals(List.of(first.getId().toString(), second.getId().toString(), third.getId().toString()),
        texts(containers, "container_id"));
    assertEquals(List.of("node-a:45454", "node-b:45454", "node-c:45454"), texts(containers, "node_id"));
    assertEquals(List.of("0", "1", "2"), texts(containers, "attempt"));
    assertEquals(List.of("1024", "1536", "2304"), texts(containers, "expected_gpu_memory_mb"));
    assertEquals(List.of("76", "76", "null"), texts(containers, "exit_code"));

    JsonNode events = status.path("events");
    assertEquals(List.of("1", "2"), texts(events, "seq"));
    assertEquals(List.of("worker:0", "worker:0"), texts(events, "task"));
    assertEquals(List.of(first.getId().toString(), second.getId().toString()), texts(events, "container_id"),
        "each decision names the container it was about");
    assertEquals("exceeded its expected GPU memory (cap 1024 MiB; peak seen unknown): asking again with 1536 MiB"
        + " (growth 1/2, not counted against the role's restarts)", events.get(0).path("text").asText());

    oom(book, third, 2304);  // growths used up: the AM gives up
    JsonNode last = http.statusJson().path("events").get(2);
    assertEquals(third.getId().toString(), last.path("container_id").asText());
    String text = last.path("text").asText();
    assertTrue(text.startsWith("failed: exceeded its expected GPU memory (cap 2304 MiB"), text);
  }

  @Test
  void aRestartIsADecisionAndTheEventListKeepsTheNewestWithItsSequence() {
    TaskBook book = new TaskBook(plan("{roles: [{name: 'worker', instances: 1, restarts: 300}]}"), yarn, clock);
    AmHttp http = new AmHttp(book, "s", "application_1700000000000_0007", json("{}"));
    Task w = book.task("worker", 0);
    for (int i = 0; i < TaskBook.MAX_EVENTS + 5; i++) {
      book.completed(place(book, w, "node-a").getId(), 1, x -> "boom");
    }
    JsonNode events = http.statusJson().path("events");
    assertEquals(TaskBook.MAX_EVENTS, events.size());
    assertEquals(6, events.get(0).path("seq").asLong(), "the oldest dropped first; seq keeps counting");
    assertEquals("exited 1, restart 205/300 of role worker", events.get(events.size() - 1).path("text").asText());
    JsonNode containers = http.statusJson().path("tasks").get(0).path("containers");
    assertEquals(TaskBook.MAX_CONTAINERS, containers.size(), "the newest containers of a task");
    assertEquals(TaskBook.MAX_EVENTS + 5 - TaskBook.MAX_CONTAINERS, containers.get(0).path("attempt").asInt());
  }
}
