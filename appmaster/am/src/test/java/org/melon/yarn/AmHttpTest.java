package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;
import static org.melon.yarn.Fixtures.place;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.hadoop.yarn.api.records.Container;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/** The AM's HTTP API served in-process on 127.0.0.1 (no YARN): the happy path and every way to call it wrong. */
class AmHttpTest {

  private static final String SECRET = "s3cret-0123456789abcdef";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final HttpClient CLIENT = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
      .proxy(HttpClient.Builder.NO_PROXY).build();

  private final Clock clock = new Clock();
  private final List<AmHttp> servers = new ArrayList<>();
  private TaskBook book;
  private final Map<String, Container> containers = new HashMap<>();
  private int port;

  /** An AM for {@code workers} worker tasks, each in a running container, serving on loopback. */
  private void start(int workers, String secret) throws IOException {
    start("{name: 'worker', instances: " + workers + "}", secret);
  }

  /** An AM for the one role {@code role} (lenient JSON), each task in a running container, serving on loopback. */
  private void start(String role, String secret) throws IOException {
    book = new TaskBook(plan("{roles: [" + role + "], labels: {dag_id: 'd', task_id: 't'}}"), new FakeYarn(), clock);
    for (Task t : book.tasks) {
      containers.put(t.name(), place(book, t, "node-" + t.index % 2));
    }
    AmHttp http = new AmHttp(book, secret, "application_1700000000000_0007", json("{dag_id: 'd', task_id: 't'}"));
    servers.add(http);
    port = http.start(InetAddress.getLoopbackAddress().getHostAddress());
  }

  private void start(int workers) throws IOException {
    start(workers, SECRET);
  }

  @AfterEach
  void stop() {
    servers.forEach(AmHttp::stop);
  }

  // ---------------------------------------------------------------- helpers

  record Answer(int code, String body) {
    JsonNode json() {
      try {
        return JSON.readTree(body);
      } catch (IOException e) {
        throw new UncheckedIOException(body, e);
      }
    }
  }

  private Answer call(String method, String path, String secret, String body) {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
            : HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
    if (secret != null) {
      b.header("X-Melon-Secret", secret);
    }
    try {
      HttpResponse<String> r = CLIENT.send(b.build(), HttpResponse.BodyHandlers.ofString());
      return new Answer(r.statusCode(), r.body());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);
    }
  }

  private Answer post(String path, String body) {
    return call("POST", path, SECRET, body);
  }

  private String status() {
    Answer a = call("GET", "/status", null, null);
    assertEquals(200, a.code());
    return a.body();
  }

  private String registration(int index, int taskPort) {
    return "{\"role\": \"worker\", \"index\": " + index + ", \"host\": \"10.0.0." + index + "\", \"port\": "
        + taskPort + ", \"gpu\": null, \"gpu_memory_mb\": 0, \"pid\": 4242, \"mps\": false, \"container_id\": \""
        + containers.get("worker:" + index).getId() + "\"}";
  }

  /** {@code call} is answered {@code code} with an error message, the AM's state is unchanged, the server
   * still answers. */
  private void assertRefused(int code, Supplier<Answer> call) {
    String before = status();
    Answer a = call.get();
    assertEquals(code, a.code(), a.body());
    assertTrue(a.json().path("error").isTextual(), a.body());
    assertEquals(before, status(), "state unchanged");
  }

  /** Send raw bytes, return the status line of the answer; the timeout only guards against a hang. */
  private String raw(String head, byte[] body) throws IOException {
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.setSoTimeout(30_000);
      OutputStream out = s.getOutputStream();
      out.write(head.getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.flush();
      return new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII)).readLine();
    }
  }

  private static String postHead(String path, String extraHeaders) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Melon-Secret: " + SECRET
        + "\r\nContent-Type: application/json\r\n" + extraHeaders + "\r\n";
  }

  // ---------------------------------------------------------------- the happy path

  /** Whether a heartbeat carrying {@code oom} passes the heartbeat's schema. */
  private static boolean validOom(String oom) {
    return Schemas.violations(Schemas.HEARTBEAT, json("{role: 'worker', index: 0, oom: " + oom + "}")).isEmpty();
  }

  @Test
  void anOomReportMaySayTheGpuWasOversubscribedAndNameTheCulprit() {
    assertTrue(validOom("{cap_mb: 1024, peak_mb: null, signature: 'x', oversubscribed: true, "
        + "culprit: 'task t (pid 1) uses 9000 MiB of its 4500 MiB reservation'}"));
    assertTrue(validOom("{cap_mb: 1024, signature: 'x'}"), "both are optional");
    assertFalse(validOom("{oversubscribed: 'yes'}"));
    assertFalse(validOom("{oversubscribed: true, culprit: 42}"));
    assertTrue(validOom("{peak_mb: 1300, peak_source: 'torch'}"));
    assertFalse(validOom("{peak_mb: 1300, peak_source: 'guess'}"), "a source of runtime/peak.py");
    assertFalse(validOom("{peak_mb: 1300, peak_source: 3}"));
  }

  @Test
  void registersHeartbeatsAndReportsStatus() throws IOException {
    start(2);
    Answer first = post("/register", registration(0, 5000));
    assertEquals(202, first.code());
    assertEquals(1, first.json().path("waiting").asInt());
    Answer second = post("/register", registration(1, 5001));
    assertEquals(200, second.code());
    assertEquals(json("{cluster: {worker: ['10.0.0.0:5000', '10.0.0.1:5001']}}"), second.json());
    Answer beat = post("/heartbeat", "{\"role\": \"worker\", \"index\": 1, \"step\": 10, \"loss\": 0.5,"
        + " \"gpu_memory_used_mb\": 1234, \"message\": \"<b>hi</b>\", \"container_id\": \""
        + containers.get("worker:1").getId() + "\"}");
    assertEquals(200, beat.code());
    JsonNode s = json(status());
    assertEquals("application_1700000000000_0007", s.path("app_id").asText());
    assertEquals("RUNNING", s.path("state").asText());
    assertEquals(json("{dag_id: 'd', task_id: 't'}"), s.path("labels"));
    JsonNode w1 = s.path("tasks").path(1);
    assertEquals("REGISTERED", w1.path("state").asText());
    assertEquals(containers.get("worker:1").getId().toString(), w1.path("container_id").asText());
    assertEquals("10.0.0.1", w1.path("host").asText());
    assertEquals(5001, w1.path("port").asInt());
    assertEquals(10, w1.path("step").asLong());
    assertEquals(1234, w1.path("gpu_memory_used_mb").asLong());
    assertEquals(1, w1.path("history").size());
    Answer page = call("GET", "/", null, null);
    assertEquals(200, page.code());
    assertTrue(page.body().contains("&lt;b&gt;hi&lt;/b&gt;"), "HTML-escaped: " + page.body());
    assertFalse(page.body().contains("<b>hi</b>"));
  }

  @Test
  void theStatusShowsEachTasksGrownExpectedMemoryItsPeakAndItsLastOom() throws IOException {
    start("{name: 'worker', instances: 2, gpu_memory_mb: 1024}", SECRET);
    JsonNode before = json(status()).path("tasks").path(1);
    assertEquals(1024, before.path("expected_gpu_memory_mb").asLong());
    assertEquals(1024, before.path("initial_gpu_memory_mb").asLong());
    assertTrue(before.path("gpu_memory_peak_mb").isNull(), before.toString());
    assertTrue(before.has("gpu_memory_peak_source") && before.path("gpu_memory_peak_source").isNull(),
        before.toString());
    assertEquals(0, before.path("oom_growths").asInt());
    assertTrue(before.path("oom").isNull(), before.toString());
    String cid = containers.get("worker:1").getId().toString();
    assertEquals(200, post("/heartbeat", "{\"role\": \"worker\", \"index\": 1, \"gpu_memory_peak_mb\": 900,"
        + " \"gpu_memory_peak_source\": \"nvml-process\", \"container_id\": \"" + cid + "\"}").code());
    assertEquals(200, post("/heartbeat", "{\"role\": \"worker\", \"index\": 1, \"container_id\": \"" + cid + "\","
        + " \"gpu_memory_peak_mb\": 1300, \"gpu_memory_peak_source\": \"torch\","
        + " \"oom\": {\"cap_mb\": null, \"peak_mb\": 1300, \"largest_gpu_mb\": 16384,"
        + " \"signature\": \"torch.OutOfMemoryError: CUDA out of memory\"}}").code());
    book.completed(containers.get("worker:1").getId(), TaskBook.EXIT_OOM, t -> "tail");
    JsonNode w1 = json(status()).path("tasks").path(1);
    assertEquals(1536, w1.path("expected_gpu_memory_mb").asLong(), "grown");
    assertEquals(1024, w1.path("initial_gpu_memory_mb").asLong(), "the plan's");
    assertEquals(1300, w1.path("gpu_memory_peak_mb").asLong());
    assertEquals("torch", w1.path("gpu_memory_peak_source").asText(), "the source that came with the figure");
    assertEquals(1, w1.path("oom_growths").asInt());
    assertEquals(json("{cap_mb: 1024, peak_mb: 1300, largest_gpu_mb: 16384,"
        + " signature: 'torch.OutOfMemoryError: CUDA out of memory'}"), w1.path("oom"), "cap_mb filled in");
    assertEquals(1024, json(status()).path("tasks").path(0).path("expected_gpu_memory_mb").asLong());
    String page = call("GET", "/", null, null).body();
    assertTrue(page.contains("<th>gpu_memory_peak_mb</th>") && page.contains("<td>1536</td>"), page);
  }

  // ---------------------------------------------------------------- refused calls

  @Test
  void aWrongOrMissingSecretIs403AndTheBodyIsNotUsed() throws IOException {
    start(2);
    for (String path : List.of("/register", "/heartbeat")) {
      assertRefused(403, () -> call("POST", path, null, registration(0, 5000)));
      assertRefused(403, () -> call("POST", path, "", registration(0, 5000)));
      assertRefused(403, () -> call("POST", path, "not-the-secret", registration(0, 5000)));
      assertRefused(403, () -> call("POST", path, SECRET.substring(0, SECRET.length() - 1), registration(0, 5000)));
      assertRefused(403, () -> call("POST", path, SECRET + "x", registration(0, 5000)));
    }
    assertFalse(book.task("worker", 0).registered);
  }

  @Test
  void anAmWithoutASecretRefusesEveryWrite() throws IOException {
    start(1, "");
    assertRefused(403, () -> call("POST", "/register", "", registration(0, 5000)));
    assertRefused(403, () -> call("POST", "/heartbeat", "", "{\"role\": \"worker\", \"index\": 0}"));
  }

  @Test
  void malformedBodiesAre400() throws IOException {
    start(2);
    List<String> bad = List.of("", "{", "not json", "{\"role\": \"worker\", \"index\": 0", "[]", "\"worker\"",
        "null", "42", "{\"role\": \"worker\", \"index\": 0} {}", "{\"role\": \"worker\", \"index\": 0} trailing",
        "{\"index\": 0}", "{\"role\": \"worker\"}", "{\"role\": 1, \"index\": 0}",
        "{\"role\": \"worker\", \"index\": \"0\"}", "{\"role\": \"worker\", \"index\": 0.5}",
        "{\"role\": \"worker\", \"index\": 99999999999}", "{\"role\": null, \"index\": 0}");
    for (String body : bad) {
      for (String path : List.of("/register", "/heartbeat")) {
        assertRefused(400, () -> post(path, body));
      }
    }
    // fields of the wrong type, each named in the answer
    String w0 = "{\"role\": \"worker\", \"index\": 0";
    Map<String, String> register = new LinkedHashMap<>();
    register.put(w0 + "}", "port");  // no port
    register.put(w0 + ", \"port\": \"5000\"}", "/port");
    register.put(w0 + ", \"port\": -1}", "/port");
    register.put(w0 + ", \"port\": 65536}", "/port");
    register.put(w0 + ", \"port\": 1.5}", "/port");
    register.put(w0 + ", \"port\": 5000, \"host\": 7}", "/host");
    register.put(w0 + ", \"port\": 5000, \"mps\": \"yes\"}", "/mps");
    register.put(w0 + ", \"port\": 5000, \"gpu_memory_mb\": \"lots\"}", "/gpu_memory_mb");
    register.forEach((body, field) -> assertRefusedNaming("/register", body, field));
    Map<String, String> heartbeat = new LinkedHashMap<>();
    heartbeat.put(w0 + ", \"step\": \"ten\"}", "/step");
    heartbeat.put(w0 + ", \"loss\": [1]}", "/loss");
    heartbeat.put(w0 + ", \"gpu_memory_used_mb\": {}}", "/gpu_memory_used_mb");
    heartbeat.put(w0 + ", \"gpu_memory_peak_mb\": \"lots\"}", "/gpu_memory_peak_mb");
    heartbeat.put(w0 + ", \"gpu_memory_peak_source\": 7}", "/gpu_memory_peak_source");
    heartbeat.put(w0 + ", \"gpu_memory_peak_source\": \"guess\"}", "/gpu_memory_peak_source");
    heartbeat.put(w0 + ", \"oom\": {\"peak_source\": \"nvml\"}}", "/oom/peak_source");
    heartbeat.put(w0 + ", \"oom\": true}", "/oom");
    heartbeat.put(w0 + ", \"oom\": {\"cap_mb\": \"4g\"}}", "/oom/cap_mb");
    heartbeat.put(w0 + ", \"oom\": {\"signature\": 7}}", "/oom/signature");
    heartbeat.put(w0 + ", \"message\": 5}", "/message");
    heartbeat.forEach((body, field) -> assertRefusedNaming("/heartbeat", body, field));
  }

  /** {@code body} posted to {@code path} is refused (400, nothing changes) with an error that names {@code field}. */
  private void assertRefusedNaming(String path, String body, String field) {
    assertRefused(400, () -> post(path, body));
    String error = post(path, body).json().path("error").asText();
    assertTrue(error.contains(field), body + " -> " + error);
  }

  /** A body that breaks its message's schema (messages.schema.json, from Python's runtime.amclient) is refused
   * (400), changing nothing, with the schema's word for the field: its JSON pointer and what it must be. */
  @Test
  void aBodyThatBreaksItsMessageSchemaIs400NamingTheField() throws IOException {
    start(1);
    String cid = ", \"container_id\": \"" + containers.get("worker:0").getId() + "\"";
    Map<String, String> register = Map.of(
        registration(0, 70000), "/port: must have a maximum value of 65535",
        registration(0, 5000).replace("\"mps\": false", "\"mps\": \"no\""), "/mps",
        registration(0, 5000).replace("\"pid\"", "\"surprise\": 1, \"pid\""), "surprise");
    register.forEach((body, named) -> assertRefusedNaming("/register", body, named));
    String beat = "{\"role\": \"worker\", \"index\": 0" + cid + ", ";
    Map<String, String> heartbeat = Map.of(
        beat + "\"total\": 0}", "/total",
        beat + "\"step\": 1.5}", "/step",
        beat + "\"gpu_memory_peak_mb\": 900, \"gpu_memory_peak_source\": \"guess\"}", "/gpu_memory_peak_source",
        beat + "\"oom\": {\"cap_mb\": 1024, \"peak_source\": \"nvml\"}}", "/oom/peak_source",
        beat + "\"tensorboard_url\": \"ftp://host:6006\"}", "/tensorboard_url");
    heartbeat.forEach((body, named) -> assertRefusedNaming("/heartbeat", body, named));
    assertEquals(200, post("/heartbeat", beat + "\"total\": 1, \"step\": 1}").code(), "the same, right");
  }

  @Test
  void unknownTasksAre404() throws IOException {
    start(2);
    for (String path : List.of("/register", "/heartbeat")) {
      assertRefused(404, () -> post(path, "{\"role\": \"chief\", \"index\": 0, \"port\": 1}"));
      assertRefused(404, () -> post(path, "{\"role\": \"worker\", \"index\": 2, \"port\": 1}"));
      assertRefused(404, () -> post(path, "{\"role\": \"worker\", \"index\": -1, \"port\": 1}"));
      assertRefused(404, () -> post(path, "{\"role\": \"Worker\", \"index\": 0, \"port\": 1}"));
    }
  }

  @Test
  void otherPathsAre404AndOtherMethods405() throws IOException {
    start(1);
    assertRefused(404, () -> call("GET", "/nope", null, null));
    assertRefused(404, () -> post("/register/", registration(0, 1)));
    assertRefused(405, () -> call("GET", "/register", SECRET, null));
    assertRefused(405, () -> call("PUT", "/heartbeat", SECRET, "{}"));
    assertRefused(405, () -> call("POST", "/status", SECRET, "{}"));
    assertRefused(405, () -> call("DELETE", "/", null, null));
  }

  // ---------------------------------------------------------------- body size

  @Test
  void aBodyOfExactlyTheCapIsAcceptedOneByteMoreIs413() throws IOException {
    start(1);
    String head = "{\"role\": \"worker\", \"index\": 0, \"message\": \"";
    String tail = "\"}";
    String fits = head + "x".repeat(AmHttp.MAX_BODY - head.length() - tail.length()) + tail;
    assertEquals(AmHttp.MAX_BODY, fits.getBytes(StandardCharsets.UTF_8).length);
    String over = head + "x".repeat(AmHttp.MAX_BODY + 1 - head.length() - tail.length()) + tail;
    assertRefused(413, () -> post("/heartbeat", over));
    assertEquals(200, post("/heartbeat", fits).code());
    assertEquals(AmHttp.MAX_BODY - head.length() - tail.length(), book.task("worker", 0).message.length());
  }

  @Test
  void aDeclaredOversizedBodyIsRefusedWithoutReadingIt() throws IOException {
    start(1);
    String before = status();
    // 1 GiB announced, nothing sent: an answer at all shows that the AM did not wait for the body
    assertStatus(413,
        raw(postHead("/heartbeat", "Content-Length: 1073741824\r\n"), new byte[0]));
    assertStatus(413,
        raw(postHead("/register", "Content-Length: " + (AmHttp.MAX_BODY + 1) + "\r\n"), new byte[0]));
    assertEquals(before, status());
  }

  @Test
  void aChunkedBodyIsReadNoFurtherThanTheCap() throws IOException {
    start(1);
    String before = status();
    // one chunk of cap + 1 bytes and no last chunk: the AM answers after cap + 1 bytes instead of reading on
    byte[] chunk = ("{\"role\": \"worker\", \"index\": 0, \"message\": \"" + "x".repeat(AmHttp.MAX_BODY)).substring(0,
        AmHttp.MAX_BODY + 1).getBytes(StandardCharsets.US_ASCII);
    byte[] body = concat(concat((Integer.toHexString(chunk.length) + "\r\n").getBytes(StandardCharsets.US_ASCII),
        chunk), "\r\n".getBytes(StandardCharsets.US_ASCII));
    assertStatus(413,
        raw(postHead("/heartbeat", "Transfer-Encoding: chunked\r\n"), body));
    assertEquals(before, status());
  }

  @Test
  void aCallerThatHangsUpMidBodyLeavesTheServerAnswering() throws IOException {
    start(1);
    String before = status();
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
      s.getOutputStream().write((postHead("/register", "Content-Length: 100\r\n") + "{\"role\": \"wor")
          .getBytes(StandardCharsets.US_ASCII));
      s.getOutputStream().flush();
    }
    assertEquals(before, status());
    assertEquals(200, post("/register", registration(0, 5000)).code(), "the next call is served");
  }

  private static void assertStatus(int code, String statusLine) {
    assertTrue(statusLine != null && statusLine.startsWith("HTTP/1.1 " + code + " "), statusLine);
  }

  private static byte[] concat(byte[] a, byte[] b) {
    byte[] r = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, r, a.length, b.length);
    return r;
  }

  // ---------------------------------------------------------------- duplicates and conflicts

  @Test
  void aRepeatedRegistrationFromTheSameContainerIsIdempotent() throws IOException {
    start(2);
    Answer first = post("/register", registration(0, 5000));
    assertEquals(202, first.code());
    String after = status();
    for (int i = 0; i < 3; i++) {
      Answer again = post("/register", registration(0, 5000));
      assertEquals(first, again);
      assertEquals(after, status(), "nothing changes");
    }
    // also without a container id (an older executor)
    Answer legacy = post("/register", "{\"role\": \"worker\", \"index\": 0, \"host\": \"10.0.0.0\", \"port\": 5000}");
    assertEquals(first, legacy);
    assertEquals(after, status());
    Answer complete = post("/register", registration(1, 5001));
    assertEquals(200, complete.code());
    assertEquals(complete, post("/register", registration(0, 5000)), "every poll after the gang: the cluster");
  }

  @Test
  void aConflictingRegistrationIs409AndChangesNothing() throws IOException {
    start(2);
    assertEquals(202, post("/register", registration(0, 5000)).code());
    // the same task at another address: its peers may already have been told the first one
    assertRefused(409, () -> post("/register", registration(0, 5999)));
    assertRefused(409, () -> post("/register", registration(0, 5000).replace("10.0.0.0", "10.9.9.9")));
    // a container that is not the task's (a stale attempt, or another task's)
    String otherContainer = registration(1, 5001).replace("\"index\": 1", "\"index\": 0");
    assertRefused(409, () -> post("/register", otherContainer));
    String stale = registration(1, 5001).replace(containers.get("worker:1").getId().toString(),
        "container_1700000000000_0007_01_999999");
    assertRefused(409, () -> post("/register", stale));
    assertRefused(409, () -> post("/heartbeat", "{\"role\": \"worker\", \"index\": 1, \"step\": 3, \"container_id\": "
        + "\"container_1700000000000_0007_01_999999\"}"));
    assertFalse(book.task("worker", 1).registered);
    JsonNode w0 = json(status()).path("tasks").path(0);
    assertEquals("10.0.0.0", w0.path("host").asText());
    assertEquals(5000, w0.path("port").asInt());
  }

  @Test
  void aRestartedTaskRegistersAnewAndItsOldContainerIsRefused() throws IOException {
    start(1);
    Task w0 = book.task("worker", 0);
    Container old = containers.get("worker:0");
    assertEquals(200, post("/register", registration(0, 5000)).code());
    synchronized (book) {
      w0.role.restarts = 1;
      book.completed(old.getId(), 1, t -> "");
      containers.put("worker:0", place(book, w0, "node-1"));
    }
    String fromOld = registration(0, 5000).replace(containers.get("worker:0").getId().toString(),
        old.getId().toString());
    assertRefused(409, () -> post("/register", fromOld));
    Answer fresh = post("/register", registration(0, 6000));
    assertEquals(200, fresh.code(), "a new attempt, a new address");
    assertEquals(json("{cluster: {worker: ['10.0.0.0:6000']}}"), fresh.json());
  }

  // ---------------------------------------------------------------- concurrency

  @Test
  void concurrentRegistrationsCountTheGangExactlyOnce() throws Exception {
    int n = 32;
    start(n);
    ExecutorService pool = Executors.newFixedThreadPool(n);
    try {
      CountDownLatch go = new CountDownLatch(1);
      List<Future<Answer>> answers = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int index = i;
        answers.add(pool.submit(() -> {
          go.await();
          return post("/register", registration(index, 7000 + index));
        }));
      }
      go.countDown();
      List<Integer> codes = new ArrayList<>();
      List<Integer> waiting = new ArrayList<>();
      for (Future<Answer> f : answers) {
        Answer a = f.get();
        codes.add(a.code());
        if (a.code() == 202) {
          waiting.add(a.json().path("waiting").asInt());
        }
      }
      // registrations are serialized: each saw a different number of missing tasks, the last one the cluster
      assertEquals(1, codes.stream().filter(c -> c == 200).count(), codes.toString());
      assertEquals(n - 1, codes.stream().filter(c -> c == 202).count(), codes.toString());
      assertEquals(IntStream.range(1, n).boxed().collect(Collectors.toList()),
          waiting.stream().sorted().collect(Collectors.toList()));
      JsonNode expected = JSON.valueToTree(Map.of("cluster", Map.of("worker",
          IntStream.range(0, n).mapToObj(i -> "10.0.0." + i + ":" + (7000 + i)).collect(Collectors.toList()))));
      List<Future<Answer>> polls = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int index = i;
        polls.add(pool.submit(() -> post("/register", registration(index, 7000 + index))));
      }
      for (Future<Answer> f : polls) {
        Answer a = f.get();
        assertEquals(200, a.code());
        assertEquals(expected, a.json());
      }
      for (JsonNode t : json(status()).path("tasks")) {
        assertEquals("REGISTERED", t.path("state").asText());
        assertEquals(7000 + t.path("index").asInt(), t.path("port").asInt());
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void concurrentBadAndGoodCallsDoNotDisturbEachOther() throws Exception {
    int n = 8;
    start(n);
    ExecutorService pool = Executors.newFixedThreadPool(16);
    try {
      CountDownLatch go = new CountDownLatch(1);
      List<Future<Answer>> good = new ArrayList<>();
      List<Future<Answer>> bad = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int index = i;
        good.add(pool.submit(() -> {
          go.await();
          return post("/register", registration(index, 8000 + index));
        }));
        bad.add(pool.submit(() -> {
          go.await();
          return call("POST", "/register", "wrong", registration(index, 1));
        }));
        bad.add(pool.submit(() -> {
          go.await();
          return post("/register", "{\"role\": \"worker\", \"index\": " + index);
        }));
      }
      go.countDown();
      for (Future<Answer> f : bad) {
        assertNotEquals(200, f.get().code());
        assertNotEquals(202, f.get().code());
      }
      assertEquals(1, good.stream().filter(f -> code(f) == 200).count());
      for (JsonNode t : json(status()).path("tasks")) {
        assertEquals(8000 + t.path("index").asInt(), t.path("port").asInt());
      }
    } finally {
      pool.shutdownNow();
    }
  }

  private static int code(Future<Answer> f) {
    try {
      return f.get().code();
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  // ---------------------------------------------------------------- slow clients

  /** The gang's registration, each call answered within the raw socket's 30 s guard (else it throws). */
  private void registerTheGang(int workers) throws IOException {
    for (int round = 0; round < 2; round++) {
      for (int i = 0; i < workers; i++) {
        byte[] body = registration(i, 7000 + i).getBytes(StandardCharsets.UTF_8);
        String line = raw(postHead("/register", "Content-Length: " + body.length + "\r\nConnection: close\r\n"),
            body);
        assertTrue(line.startsWith(round == 1 || i == workers - 1 ? "HTTP/1.1 200" : "HTTP/1.1 202"),
            "register worker:" + i + " (round " + round + "): " + line);
      }
    }
  }

  @Test
  void clientsThatSendHalfARequestDoNotStallGangRegistration() throws Exception {
    start(2);
    List<Socket> stalled = new ArrayList<>();
    try {
      for (int i = 0; i < 24; i++) { // three times the pool the AM had, well under FRONT_THREADS
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        s.getOutputStream().write("GET /status HTTP/1.1\r\nHost: am\r\nX-Half: ".getBytes(StandardCharsets.US_ASCII));
        s.getOutputStream().flush();
        stalled.add(s);
      }
      registerTheGang(2);
    } finally {
      for (Socket s : stalled) {
        s.close();
      }
    }
  }

  @Test
  void aTensorBoardThatDoesNotAnswerHoldsOnlyItsOwnPool() throws Exception {
    start(2);
    CountDownLatch release = new CountDownLatch(1);
    CountDownLatch arrived = new CountDownLatch(AmHttp.TENSORBOARD_THREADS);
    com.sun.net.httpserver.HttpServer tb = com.sun.net.httpserver.HttpServer.create(
        new java.net.InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 64);
    tb.setExecutor(Executors.newCachedThreadPool());
    tb.createContext("/tensorboard/", ex -> {
      arrived.countDown();
      try {
        release.await();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      ex.sendResponseHeaders(204, -1);
      ex.close();
    });
    tb.start();
    ExecutorService browsers = Executors.newCachedThreadPool();
    try {
      String beat = "{\"role\": \"worker\", \"index\": 0, \"container_id\": \"" + containers.get("worker:0").getId()
          + "\", \"tensorboard_url\": \"http://127.0.0.1:" + tb.getAddress().getPort() + "\"}";
      assertEquals(200, post("/heartbeat", beat).code());
      int browsersCount = AmHttp.TENSORBOARD_THREADS + AmHttp.TENSORBOARD_QUEUE + 4;
      List<Future<Answer>> pages = new ArrayList<>();
      for (int i = 0; i < browsersCount; i++) {
        pages.add(browsers.submit(() -> call("GET", "/tensorboard/data/runs", null, null)));
      }
      arrived.await(); // the TensorBoard pool is full, each of its threads waiting on TensorBoard
      registerTheGang(2);
      // the 4 that fit neither the pool nor its queue are answered while TensorBoard still hangs (bounded wait)
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (pages.stream().filter(Future::isDone).count() < 4 && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      assertEquals(4, pages.stream().filter(Future::isDone).count(), "answered before TensorBoard did");
      release.countDown();
      List<Integer> codes = new ArrayList<>();
      for (Future<Answer> f : pages) {
        codes.add(f.get().code());
      }
      // what did not fit the pool and its queue was told so at once; the rest got TensorBoard's answer
      assertEquals(browsersCount - 4, codes.stream().filter(c -> c == 204).count(), codes.toString());
      assertEquals(4, codes.stream().filter(c -> c == 503).count(), codes.toString());
    } finally {
      release.countDown();
      browsers.shutdownNow();
      tb.stop(0);
    }
  }
}
