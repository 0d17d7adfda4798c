package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;
import static org.melon.yarn.Fixtures.place;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;

import org.apache.hadoop.yarn.api.records.Container;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/** The AM's /tensorboard/ reverse proxy, in-process: a tiny HTTP server plays TensorBoard. */
class TensorBoardProxyTest {

  private static final String SECRET = "s3cret-0123456789abcdef";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final HttpClient CLIENT = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
      .proxy(HttpClient.Builder.NO_PROXY).followRedirects(HttpClient.Redirect.NEVER).build();

  private final Map<String, Container> containers = new HashMap<>();
  /** What the fake TensorBoard saw: "METHOD raw-path?raw-query body accept-encoding". */
  private final List<String> seen = new CopyOnWriteArrayList<>();
  private TaskBook book;
  private AmHttp am;
  private int amPort;
  private HttpServer tb;
  private String tbUrl;

  @BeforeEach
  void start() throws IOException {
    book = new TaskBook(plan("{roles: [{name: 'chief', instances: 1}, {name: 'worker', instances: 1}]}"),
        new FakeYarn(), new Clock());
    for (Task t : book.tasks) {
      containers.put(t.name(), place(book, t, "node-0"));
    }
    am = new AmHttp(book, SECRET, "application_1700000000000_0009", null);
    amPort = am.start(InetAddress.getLoopbackAddress().getHostAddress());
    tb = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 8);
    tb.createContext("/tensorboard/", ex -> {
      URI u = ex.getRequestURI();
      String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
      seen.add(ex.getRequestMethod() + " " + u.getRawPath() + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery())
          + " " + body + " " + ex.getRequestHeaders().getFirst("Accept-Encoding")
          + ("POST".equals(ex.getRequestMethod()) ? " " + ex.getRequestHeaders().getFirst("Content-Type") : ""));
      byte[] out;
      if (u.getRawPath().equals("/tensorboard/data/runs")) {
        out = "[\"train\"]".getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        ex.sendResponseHeaders(200, out.length);
      } else if (u.getRawPath().equals("/tensorboard/missing")) {
        out = "nope".getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", "text/plain");
        ex.sendResponseHeaders(404, out.length);
      } else if (u.getRawPath().equals("/tensorboard/big.js")) {
        out = new byte[300_000];
        for (int i = 0; i < out.length; i++) {
          out[i] = (byte) (i % 251);
        }
        ex.getResponseHeaders().set("Content-Type", "text/javascript");
        ex.getResponseHeaders().set("Content-Encoding", "gzip");
        ex.sendResponseHeaders(200, 0); // chunked
      } else {
        out = "<!doctype html><title>TensorBoard</title>".getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Encoding", "identity");
        ex.getResponseHeaders().set("Content-Type", "text/html; charset=utf-8");
        ex.sendResponseHeaders(200, out.length);
      }
      try (OutputStream o = ex.getResponseBody()) {
        o.write(out);
      }
    });
    tb.start();
    tbUrl = "http://127.0.0.1:" + tb.getAddress().getPort();
  }

  @AfterEach
  void stop() {
    am.stop();
    if (tb != null) {
      tb.stop(0);
    }
  }

  private HttpResponse<byte[]> call(String method, String path, String secret, String body, String... headers)
      throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + amPort + path))
        .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
            : HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
    if (secret != null) {
      b.header("X-Melon-Secret", secret);
    }
    for (int i = 0; i < headers.length; i += 2) {
      b.header(headers[i], headers[i + 1]);
    }
    return CLIENT.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
  }

  private static String b64(String s) {
    return Base64.getUrlEncoder().withoutPadding().encodeToString(s.getBytes(StandardCharsets.UTF_8));
  }

  private static String text(HttpResponse<byte[]> r) {
    return new String(r.body(), StandardCharsets.UTF_8);
  }

  private String beat(String task, String fields) {
    String[] rn = task.split(":");
    return "{\"role\": \"" + rn[0] + "\", \"index\": " + rn[1] + ", \"container_id\": \""
        + containers.get(task).getId() + "\"" + fields + "}";
  }

  private int heartbeat(String secret, String body) throws Exception {
    return call("POST", "/heartbeat", secret, body).statusCode();
  }

  private JsonNode status() throws Exception {
    return JSON.readTree(call("GET", "/status", null, null).body()).path("tensorboard");
  }

  @Test
  void withoutATensorBoard503SaysWhy() throws Exception {
    HttpResponse<byte[]> r = call("GET", "/tensorboard/", null, null);
    assertEquals(503, r.statusCode());
    assertTrue(text(r).contains("no TensorBoard has registered"), text(r));
    assertEquals(json("{url: null, task: null, error: null}"), status());
    assertFalse(text(call("GET", "/", null, null)).contains("href=\"tensorboard/\""));

    assertEquals(200, heartbeat(SECRET, beat("chief:0",
        ", \"tensorboard_error\": \"tensorboard is not installed in the job's Python\"")));
    r = call("GET", "/tensorboard/data/runs", null, null);
    assertEquals(503, r.statusCode());
    assertTrue(text(r).contains("TensorBoard is not running: tensorboard is not installed"), text(r));
    assertEquals("chief:0", status().path("task").asText());
    assertTrue(seen.isEmpty());
  }

  @Test
  void proxiesPagesDataAndPostsWithPathQueryAndTypeKept() throws Exception {
    assertEquals(200, heartbeat(SECRET, beat("chief:0", ", \"step\": 1, \"tensorboard_url\": \"" + tbUrl + "\"")));
    assertEquals(tbUrl, status().path("url").asText());
    assertTrue(text(call("GET", "/", null, null)).contains("<a href=\"tensorboard/\">TensorBoard</a>"));

    HttpResponse<byte[]> page = call("GET", "/tensorboard/", null, null, "Accept-Encoding", "gzip");
    assertEquals(200, page.statusCode());
    assertEquals("text/html; charset=utf-8", page.headers().firstValue("Content-Type").orElse(""));
    // the page loads the POST-as-GET script first, right after the doctype
    assertEquals("<!doctype html><script src=\"__melon/post-as-get.js\"></script><title>TensorBoard</title>",
        text(page));
    HttpResponse<byte[]> shim = call("GET", "/tensorboard/__melon/post-as-get.js", null, null);
    assertEquals(200, shim.statusCode());
    assertTrue(shim.headers().firstValue("Content-Type").orElse("").startsWith("text/javascript"));
    assertTrue(text(shim).contains("XMLHttpRequest.prototype") && text(shim).contains("__melon_form="));

    HttpResponse<byte[]> runs = call("GET", "/tensorboard/data/runs?experiment=&x=a%20b", null, null,
        "Accept-Encoding", "gzip");
    assertEquals(200, runs.statusCode());
    assertEquals("application/json", runs.headers().firstValue("Content-Type").orElse(""));
    assertEquals("[\"train\"]", text(runs));

    HttpResponse<byte[]> post = call("POST", "/tensorboard/data/plugin/scalars/scalars_multirun", null,
        "tag=loss&runs=train", "Content-Type", "application/x-www-form-urlencoded");
    assertEquals(200, post.statusCode());

    // what the page sends through the RM proxy instead of a POST: TensorBoard gets the POST it was
    HttpResponse<byte[]> asGet = call("GET", "/tensorboard/__melon/post/data/plugin/scalars/scalars_multirun"
        + "?experiment=e1&__melon_form=" + b64("tag=acc é&runs=train"), null, null);
    assertEquals(200, asGet.statusCode());
    assertEquals(400, call("GET", "/tensorboard/__melon/post/data/x?a=1", null, null).statusCode());
    HttpResponse<byte[]> json = call("GET", "/tensorboard/__melon/post/data/plugin/hparams/experiment?__melon_form="
        + b64("{\"experimentName\":\"e\"}") + "&__melon_type=" + b64("application/json"), null, null);
    assertEquals(200, json.statusCode());
    assertEquals(400, call("GET", "/tensorboard/__melon/post/data/x?__melon_form=&__melon_type=" + b64("a\r\nb"), null,
        null).statusCode());
    assertEquals(400, call("GET", "/tensorboard/__melon/post/data/x?__melon_form=not*base64", null, null)
        .statusCode());

    HttpResponse<byte[]> missing = call("GET", "/tensorboard/missing", null, null);
    assertEquals(404, missing.statusCode());
    assertEquals("nope", text(missing));

    HttpResponse<byte[]> big = call("GET", "/tensorboard/big.js", null, null);
    assertEquals(200, big.statusCode());
    assertEquals("gzip", big.headers().firstValue("Content-Encoding").orElse(""));
    assertEquals(300_000, big.body().length);
    assertEquals((byte) (299_999 % 251), big.body()[299_999]);

    // the page is asked for plain (it is rewritten), the rest as the caller asked
    assertEquals(List.of("GET /tensorboard/  null", "GET /tensorboard/data/runs?experiment=&x=a%20b  gzip",
        "POST /tensorboard/data/plugin/scalars/scalars_multirun tag=loss&runs=train null "
            + "application/x-www-form-urlencoded",
        "POST /tensorboard/data/plugin/scalars/scalars_multirun?experiment=e1 tag=acc é&runs=train null "
            + "application/x-www-form-urlencoded",
        "POST /tensorboard/data/plugin/hparams/experiment {\"experimentName\":\"e\"} null application/json",
        "GET /tensorboard/missing  null", "GET /tensorboard/big.js  null"), seen);
  }

  @Test
  void theBarePrefixRedirectsRelativelySoItWorksUnderTheRmProxy() throws Exception {
    HttpResponse<byte[]> r = call("GET", "/tensorboard?a=1", null, null);
    assertEquals(301, r.statusCode());
    assertEquals("tensorboard/?a=1", r.headers().firstValue("Location").orElse(""));
  }

  @Test
  void registeringNeedsTheSecretAValidOriginAndTheCurrentContainer() throws Exception {
    String good = ", \"tensorboard_url\": \"" + tbUrl + "\"";
    assertEquals(403, heartbeat(null, beat("chief:0", good)));
    assertEquals(403, heartbeat("wrong", beat("chief:0", good)));
    for (String bad : List.of("\"ftp://127.0.0.1:1\"", "\"http://127.0.0.1\"", "\"http://127.0.0.1:5/x\"",
        "\"http://u:p@127.0.0.1:5\"", "\"not a url\"", "42", "\"http://127.0.0.1:5/?q=1\"")) {
      assertEquals(400, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_url\": " + bad)), bad);
    }
    assertEquals(400, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_error\": 7")));
    // a stale container (409) changes nothing
    String stale = "{\"role\": \"chief\", \"index\": 0, \"container_id\": \"" + containers.get("worker:0").getId()
        + "\"" + good + "}";
    assertEquals(409, heartbeat(SECRET, stale));
    assertNull(status().path("url").textValue());
    assertEquals(503, call("GET", "/tensorboard/", null, null).statusCode());
    assertTrue(seen.isEmpty());

    assertEquals(200, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_url\": \"" + tbUrl + "/\"")));
    assertEquals(tbUrl, status().path("url").asText(), "a trailing slash is dropped");
    assertEquals(200, call("GET", "/tensorboard/", null, null).statusCode());
  }

  @Test
  void anEmptyUrlUnregistersAndADeadTensorBoardIs502() throws Exception {
    assertEquals(200, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_url\": \"" + tbUrl + "\"")));
    tb.stop(0);
    tb = null;
    HttpResponse<byte[]> dead = call("GET", "/tensorboard/", null, null);
    assertEquals(502, dead.statusCode());
    assertTrue(text(dead).contains("is not answering"), text(dead));
    assertEquals(200, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_url\": \"\"")));
    HttpResponse<byte[]> gone = call("GET", "/tensorboard/", null, null);
    assertEquals(503, gone.statusCode());
    assertTrue(text(gone).contains("TensorBoard of chief:0 stopped"), text(gone));
    assertEquals(json("{url: null, task: 'chief:0', error: 'TensorBoard of chief:0 stopped'}"), status());
  }

  @Test
  void otherMethodsAndOversizedPostsAreRefused() throws Exception {
    assertEquals(200, heartbeat(SECRET, beat("chief:0", ", \"tensorboard_url\": \"" + tbUrl + "\"")));
    assertEquals(405, call("DELETE", "/tensorboard/", null, null).statusCode());
    assertEquals(405, call("PATCH", "/tensorboard/x", null, "a").statusCode());
    // announced, not sent: an answer at all shows the AM did not wait for the body
    try (Socket s = new Socket(InetAddress.getLoopbackAddress(), amPort)) {
      s.setSoTimeout(30_000);
      s.getOutputStream().write(("POST /tensorboard/data/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
          + (TensorBoardProxy.MAX_POST_BODY + 1) + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      String line = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.US_ASCII))
          .readLine();
      assertTrue(line.startsWith("HTTP/1.1 413"), line);
    }
    assertEquals(200, call("POST", "/tensorboard/data/x", null, "x".repeat(TensorBoardProxy.MAX_POST_BODY))
        .statusCode());
    assertEquals(1, seen.size());
  }
}
