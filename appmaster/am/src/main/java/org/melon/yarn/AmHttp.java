package org.melon.yarn;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

/**
 * The AM's HTTP API (docs/protocol.md section 2), also its YARN tracking page. {@code GET /status} (JSON) and
 * {@code GET /} (HTML) are open and read-only. {@code POST /register} and {@code POST /heartbeat} need the
 * application's secret in {@code X-Melon-Secret} and are checked in this order, each failure changing nothing:
 * <ul>
 *   <li>403: missing or wrong secret (also when the AM has none); the body is not read. 403 and not 401: the
 *       executor exits 3 on exactly 403, and there is no authentication scheme to offer;</li>
 *   <li>413: a body over {@link #MAX_BODY} bytes (a declared Content-Length is refused unread; otherwise at most
 *       MAX_BODY + 1 bytes are read);</li>
 *   <li>400: not one JSON object, {@code role} not a string or {@code index} not an integer;</li>
 *   <li>404: no task {@code role:index} in the plan;</li>
 *   <li>400: a body that breaks its message's schema ({@link Schemas#REGISTER}, {@link Schemas#HEARTBEAT}:
 *       {@code airflow_provider_melon/am/messages.schema.json}, generated from Python's {@code runtime.protocol}),
 *       each problem naming its field, e.g. {@code /port: must have a maximum value of 65535 (is 70000)};</li>
 *   <li>409: a conflicting registration or a call from a stale container ({@link TaskBook#register}).</li>
 * </ul>
 * {@code /tensorboard/...} is the job's TensorBoard, reverse-proxied by {@link TensorBoardProxy} once the
 * TensorBoard task's heartbeats carry its {@code tensorboard_url} (open, like {@code /status}).
 * Open means: with {@code yarn.acl.enable} ({@link ViewAcl}), only to the RM web proxy, for a user it names who
 * may view the application (else 403 saying why, before anything else is looked at); without it, to anyone.
 * Other paths: 404; other methods: 405; anything unexpected: 500 (logged).
 *
 * <p>Threads: the server's own pool ({@link #FRONT_THREADS}, grows on demand) reads every request and answers all
 * but TensorBoard's, which are in-memory and quick. A TensorBoard request, which waits on TensorBoard and streams
 * to a client of any speed, is handed to its own pool ({@link #TENSORBOARD_THREADS}, queue
 * {@link #TENSORBOARD_QUEUE}; full: 503), so slow TensorBoard traffic cannot hold up gang registration. A client
 * that sends half a request holds a front thread until the JDK server closes it ({@link #REQUEST_TIMEOUT_S}); an
 * answer not taken within {@link #RESPONSE_TIMEOUT_S} is cut off the same way.
 */
final class AmHttp {

  static final int MAX_BODY = 64 * 1024;
  /** The server's pool: at most this many requests read at once (each one more is refused: connection closed). */
  static final int FRONT_THREADS = 64;
  static final int TENSORBOARD_THREADS = 4;
  static final int TENSORBOARD_QUEUE = 32;
  /** sun.net.httpserver.maxReqTime / maxRspTime (a value set on the command line wins). */
  static final int REQUEST_TIMEOUT_S = 20;
  static final int RESPONSE_TIMEOUT_S = 120;

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ObjectReader READER = JSON.reader().with(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  static {
    // An answer goes out as headers, then body: without TCP_NODELAY the body waits for the caller's delayed ACK
    // (~40 ms a call). Read once, when the JDK's server is first used; a value set on the command line wins.
    if (System.getProperty("sun.net.httpserver.nodelay") == null) {
      System.setProperty("sun.net.httpserver.nodelay", "true");
    }
    if (System.getProperty("sun.net.httpserver.maxReqTime") == null) {
      System.setProperty("sun.net.httpserver.maxReqTime", String.valueOf(REQUEST_TIMEOUT_S));
    }
    if (System.getProperty("sun.net.httpserver.maxRspTime") == null) {
      System.setProperty("sun.net.httpserver.maxRspTime", String.valueOf(RESPONSE_TIMEOUT_S));
    }
  }

  private final TaskBook book;
  private final String secret;
  private final String appId;
  private final JsonNode labels;
  /** Who may read the pages when the RM proxy names the caller; null: anyone (yarn.acl.enable off). */
  private final ViewAcl viewers;
  private final TensorBoardProxy tensorboard = new TensorBoardProxy();
  private HttpServer server;
  private ThreadPoolExecutor front;
  private ThreadPoolExecutor tensorboardPool;

  AmHttp(TaskBook book, String secret, String appId, JsonNode labels) {
    this(book, secret, appId, labels, null);
  }

  AmHttp(TaskBook book, String secret, String appId, JsonNode labels, ViewAcl viewers) {
    this.book = book;
    this.secret = secret == null ? "" : secret;
    this.appId = appId;
    this.labels = labels != null && labels.isObject() ? labels : JSON.createObjectNode();
    this.viewers = viewers;
  }

  /** Serve on {@code bindHost} (the AM: all interfaces; tests: loopback), on an ephemeral port. */
  synchronized int start(String bindHost) throws IOException {
    return start(bindHost, null);
  }

  /** Serve on {@code bindHost}, on a free port of {@code ports} (null: an ephemeral port). */
  synchronized int start(String bindHost, PortRange ports) throws IOException {
    server = ports == null ? HttpServer.create(new InetSocketAddress(bindHost, 0), 64)
        : ports.bind(port -> HttpServer.create(new InetSocketAddress(bindHost, port), 64), bindHost);
    front = new ThreadPoolExecutor(8, FRONT_THREADS, 30, TimeUnit.SECONDS, new SynchronousQueue<>(),
        daemon("melon-am-http"));
    tensorboardPool = new ThreadPoolExecutor(TENSORBOARD_THREADS, TENSORBOARD_THREADS, 0, TimeUnit.SECONDS,
        new ArrayBlockingQueue<>(TENSORBOARD_QUEUE), daemon("melon-am-tensorboard"));
    server.setExecutor(front);
    server.createContext("/", this::handle);
    server.start();
    return server.getAddress().getPort();
  }

  synchronized void stop() {
    server.stop(0);
    front.shutdownNow();
    tensorboardPool.shutdownNow();
  }

  private static ThreadFactory daemon(String name) {
    return r -> {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      return t;
    };
  }

  /** An answer other than 2xx, with its reason. */
  static final class HttpError extends Exception {
    final int code;

    HttpError(int code, String message) {
      super(message, null, false, false);
      this.code = code;
    }
  }

  private void handle(HttpExchange ex) throws IOException {
    boolean handedOff = false;
    try {
      String path = ex.getRequestURI().getPath();
      boolean tensorboardPath = TensorBoardProxy.handles(path);
      boolean read = "/status".equals(path) || "/".equals(path);
      if ((tensorboardPath || read) && viewers != null) {
        viewers.check(ex.getRemoteAddress().getAddress(), ex.getRequestHeaders());
      }
      if (tensorboardPath) {
        try {
          tensorboardPool.execute(() -> proxyTensorBoard(ex));
        } catch (RejectedExecutionException e) {
          throw new HttpError(503, "the TensorBoard proxy is busy (" + TENSORBOARD_THREADS + " requests running, "
              + TENSORBOARD_QUEUE + " waiting): try again");
        }
        handedOff = true;
        return;
      }
      boolean write = "/register".equals(path) || "/heartbeat".equals(path);
      if (!read && !write) {
        throw new HttpError(404, "not found");
      }
      if (!ex.getRequestMethod().equals(read ? "GET" : "POST")) {
        throw new HttpError(405, "method not allowed");
      }
      if ("/status".equals(path)) {
        send(ex, 200, "application/json", JSON.writeValueAsString(statusJson()));
        return;
      }
      if ("/".equals(path)) {
        send(ex, 200, "text/html; charset=utf-8", html());
        return;
      }
      authenticate(ex);
      JsonNode body = readBody(ex);
      Task t = task(body);
      boolean register = "/register".equals(path);
      List<String> bad = Schemas.violations(register ? Schemas.REGISTER : Schemas.HEARTBEAT, body);
      if (!bad.isEmpty()) {
        throw new HttpError(400, String.join("; ", bad));
      }
      // beyond the schema's pattern: the origin as java.net.URI parses it, which is what the proxy connects to
      if (body.has("tensorboard_url") && !TensorBoardProxy.validUrl(body.path("tensorboard_url"))) {
        throw new HttpError(400, "/tensorboard_url: must be \"\" or http://host:port");
      }
      TaskBook.Reply reply = register ? book.register(t, body) : book.heartbeat(t, body);
      if (!register && reply.code() == 200) {
        tensorboard.update(t.name(), body);
      }
      send(ex, reply.code(), "application/json", JSON.writeValueAsString(reply.body()));
    } catch (HttpError e) {
      send(ex, e.code, "application/json", JSON.writeValueAsString(Collections.singletonMap("error", e.getMessage())));
    } catch (IOException e) {
      // the caller went away mid-request: nobody to answer
    } catch (RuntimeException e) {
      MelonApplicationMaster.log("HTTP " + ex.getRequestMethod() + " " + ex.getRequestURI() + " failed: " + e);
      send(ex, 500, "application/json", JSON.writeValueAsString(Collections.singletonMap("error", "internal error")));
    } finally {
      if (!handedOff) {
        ex.close();
      }
    }
  }

  /** One TensorBoard request, in the TensorBoard pool. */
  private void proxyTensorBoard(HttpExchange ex) {
    try {
      tensorboard.handle(ex);
    } catch (HttpError e) {
      try {
        send(ex, e.code, "application/json", JSON.writeValueAsString(Collections.singletonMap("error", e.getMessage())));
      } catch (IOException gone) {
        // the caller went away
      }
    } catch (IOException e) {
      // the caller went away mid-request: nobody to answer
    } catch (RuntimeException e) {
      MelonApplicationMaster.log("HTTP " + ex.getRequestMethod() + " " + ex.getRequestURI() + " failed: " + e);
    } finally {
      ex.close();
    }
  }

  private void authenticate(HttpExchange ex) throws HttpError {
    String given = ex.getRequestHeaders().getFirst("X-Melon-Secret");
    if (given == null || secret.isEmpty() || !MessageDigest.isEqual(
        given.getBytes(StandardCharsets.UTF_8), secret.getBytes(StandardCharsets.UTF_8))) {
      throw new HttpError(403, "bad or missing X-Melon-Secret");
    }
  }

  /**
   * The request body, refused (413) when its Content-Length or its bytes pass {@code max}; read no further than
   * {@code max} + 1 bytes. Not InputStream.readNBytes: on a chunked body it asks for 0 more bytes once it has them
   * all, and the JDK's chunked stream then waits for the next chunk's header.
   */
  static byte[] boundedBody(HttpExchange ex, int max) throws IOException, HttpError {
    String declared = ex.getRequestHeaders().getFirst("Content-Length");
    if (declared != null) {
      try {
        if (Long.parseLong(declared.trim()) > max) {
          throw new HttpError(413, "request body over " + max + " bytes");
        }
      } catch (NumberFormatException e) {
        throw new HttpError(400, "bad Content-Length");
      }
    }
    byte[] bytes = new byte[max + 1];
    int n = 0;
    InputStream in = ex.getRequestBody();
    for (int r; n < bytes.length && (r = in.read(bytes, n, bytes.length - n)) != -1; ) {
      n += r;
    }
    if (n > max) {
      throw new HttpError(413, "request body over " + max + " bytes");
    }
    return java.util.Arrays.copyOf(bytes, n);
  }

  /** The body as one JSON object, read no further than {@link #MAX_BODY} + 1 bytes. */
  private static JsonNode readBody(HttpExchange ex) throws IOException, HttpError {
    byte[] bytes = boundedBody(ex, MAX_BODY);
    int n = bytes.length;
    JsonNode body;
    try {
      body = READER.readTree(bytes, 0, n);
    } catch (JsonProcessingException e) {
      throw new HttpError(400, "malformed JSON: " + e.getOriginalMessage());
    }
    if (body == null || !body.isObject()) {
      throw new HttpError(400, "the body must be a JSON object");
    }
    return body;
  }

  private Task task(JsonNode body) throws HttpError {
    JsonNode role = body.path("role");
    JsonNode index = body.path("index");
    if (!role.isTextual() || !index.isIntegralNumber() || !index.canConvertToInt()) {
      throw new HttpError(400, "\"role\" (a string) and \"index\" (an integer) are required");
    }
    Task t = book.task(role.asText(), index.asInt());
    if (t == null) {
      throw new HttpError(404, "unknown task " + role.asText() + ":" + index.asInt());
    }
    return t;
  }

  private static void send(HttpExchange ex, int code, String type, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", type);
    ex.sendResponseHeaders(code, bytes.length);
    try (OutputStream out = ex.getResponseBody()) {
      out.write(bytes);
    }
  }

  // ---------------------------------------------------------------- read-only pages

  ObjectNode statusJson() {
    synchronized (book) {
      ObjectNode root = JSON.createObjectNode();
      root.put("app_id", appId);
      root.put("state", book.state().name());
      root.put("diagnostics", book.diagnostics());
      root.set("labels", labels);
      root.set("gang", JSON.valueToTree(book.gangStatus()));
      root.set("stall", JSON.valueToTree(book.stallStatus()));
      root.set("rendezvous", JSON.valueToTree(book.rendezvousStatus()));
      tensorboard.describe(root.putObject("tensorboard"));
      root.putArray("events").addAll(book.events());
      ArrayNode arr = root.putArray("tasks");
      for (Task t : book.tasks) {
        ObjectNode o = arr.addObject();
        o.put("role", t.role.name);
        o.put("index", t.index);
        o.put("state", t.state.name());
        o.put("container_id", t.container == null ? null : t.container.getId().toString());
        o.put("host", t.host);
        o.put("node_id", t.container == null ? null : t.container.getNodeId().toString());
        o.put("port", t.port);
        o.put("attempt", t.attempt);
        o.putArray("containers").addAll(book.containers(t));
        o.put("exit_code", t.exitCode);
        o.put("gpu", t.gpu);
        o.put("gpu_memory_mb", t.gpuMemoryMb);
        o.put("expected_gpu_memory_mb", t.expectedMb);
        o.put("initial_gpu_memory_mb", t.role.gpuMemoryMb);
        o.put("gpu_memory_peak_mb", t.gpuMemoryPeakMb);
        o.put("gpu_memory_peak_source", t.gpuMemoryPeakSource);
        o.put("gpu_context_mb", t.contextMb);
        o.put("initial_gpu_context_mb", t.role.gpuContextMb);
        o.put("oom_growths", t.oomGrowths);
        if (t.oom == null) {
          o.putNull("oom");
        } else {
          o.set("oom", t.oom.deepCopy());
        }
        o.put("gpus", t.role.gpus);
        o.put("gpu_memory_used_mb", t.gpuMemoryUsedMb);
        o.put("mps", t.mps);
        o.put("step", t.step);
        o.put("total", t.total);
        o.put("loss", t.loss);
        ObjectNode metrics = o.putObject("metrics");
        t.metrics.forEach(metrics::put);
        o.put("message", t.message);
        o.put("updated", t.updated);
        ArrayNode h = o.putArray("history");
        for (double[] p : t.history) {
          ArrayNode point = h.addArray();
          point.add((long) p[0]);
          point.add((long) p[1]);
          if (Double.isNaN(p[2])) {
            point.addNull();
          } else {
            point.add(p[2]);
          }
        }
      }
      return root;
    }
  }

  private String html() {
    ObjectNode s = statusJson();
    StringBuilder b = new StringBuilder("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>MeLoN ")
        .append(esc(appId)).append("</title></head><body><h1>MeLoN ").append(esc(appId)).append(": ")
        .append(esc(s.path("state").asText())).append("</h1><p>").append(esc(s.path("diagnostics").asText()))
        .append("</p>").append(tensorboard.url() == null ? ""
            : "<p><a href=\"tensorboard/\">TensorBoard</a></p>")
        .append("<table border=\"1\" cellpadding=\"4\"><tr>");
    String[] cols = {"role", "index", "state", "container_id", "host", "port", "attempt", "exit_code", "gpu",
        "gpu_memory_mb", "expected_gpu_memory_mb", "gpu_memory_used_mb", "gpu_memory_peak_mb", "oom_growths", "step",
        "total", "loss", "message", "updated"};
    for (String c : cols) {
      b.append("<th>").append(c).append("</th>");
    }
    b.append("</tr>");
    for (JsonNode t : s.path("tasks")) {
      b.append("<tr>");
      for (String c : cols) {
        b.append("<td>").append(t.path(c).isNull() ? "" : esc(t.path(c).asText())).append("</td>");
      }
      b.append("</tr>");
    }
    return b.append("</table></body></html>").toString();
  }

  private static String esc(String s) {
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
  }
}
