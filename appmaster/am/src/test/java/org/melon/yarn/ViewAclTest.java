package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.json;
import static org.melon.yarn.Fixtures.plan;
import static org.melon.yarn.Fixtures.place;

import java.io.IOException;
import java.io.OutputStream;
import java.net.Socket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpServer;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.Groups;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.webproxy.WebAppProxyServlet;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/**
 * The AM's pages for a user the RM web proxy names in its {@code proxy-user} cookie, in-process on loopback: the
 * tenants cluster's users and groups (alice and bob in tenants, ops also in melon-admins) from Hadoop's static group
 * mapping, as the AM gets them from the cluster's core-site.xml.
 */
class ViewAclTest {

  private static final String SECRET = "s3cret-0123456789abcdef";
  private static final String APP = "application_1700000000000_0011";
  /** What the submission sets for alice with admin_acl " melon-admins" (submission.application_acls). */
  private static final String VIEW = "alice melon-admins";
  /** The RM web proxy of these tests: loopback's 127.0.0.1, as on the mini cluster (the port is not looked at). */
  private static final List<String> PROXY = List.of("127.0.0.1:18088");
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final HttpClient CLIENT = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
      .proxy(HttpClient.Builder.NO_PROXY).followRedirects(HttpClient.Redirect.NEVER).build();

  private AmHttp am;
  private int port;
  private Container container;
  private HttpServer tb;
  private final List<String> tbSeen = new CopyOnWriteArrayList<>();

  @BeforeAll
  static void groups() {
    Configuration conf = new Configuration(false);
    conf.set("hadoop.user.group.static.mapping.overrides",
        "alice=tenants;bob=tenants;ops=tenants,melon-admins;yarnadm=;carol=auditors");
    // the mapping first, then UGI, which takes the mapping service that exists (as the mini cluster's launcher)
    Groups.getUserToGroupsMappingServiceWithLoadedConfiguration(conf);
    UserGroupInformation.setConfiguration(conf);
  }

  private void start(ViewAcl viewers) throws IOException {
    TaskBook book = new TaskBook(plan("{roles: [{name: 'chief', instances: 1}]}"), new FakeYarn(), new Clock());
    container = place(book, book.tasks.get(0), "node-0");
    am = new AmHttp(book, SECRET, APP, null, viewers);
    port = am.start(InetAddress.getLoopbackAddress().getHostAddress());
  }

  private void start() throws IOException {
    start(new ViewAcl(APP, "alice", VIEW, "yarnadm", PROXY));
  }

  @AfterEach
  void stop() {
    if (am != null) {
      am.stop();
    }
    if (tb != null) {
      tb.stop(0);
    }
  }

  private HttpResponse<String> call(String method, String path, String cookie, String body) throws Exception {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
        .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
            : HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
    if (cookie != null) {
      b.header("Cookie", cookie);
    }
    if ("POST".equals(method)) {
      b.header("X-Melon-Secret", SECRET);
    }
    return CLIENT.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  /** GET {@code path} as the RM proxy does for {@code user} (its exact header: proxy-user=URL-encoded name). */
  private HttpResponse<String> viewAs(String user, String path) throws Exception {
    return call("GET", path, WebAppProxyServlet.PROXY_USER_COOKIE_NAME + "=" + java.net.URLEncoder.encode(user,
        "ASCII"), null);
  }

  private static void assertDenied(HttpResponse<String> r, String user) throws IOException {
    assertEquals(403, r.statusCode(), r.body());
    JsonNode body = JSON.readTree(r.body());
    String error = body.path("error").asText();
    assertTrue(error.contains("user " + user + " may not view " + APP), error);
    assertTrue(error.contains("owner alice"), error);
  }

  private String beat(String fields) {
    return "{\"role\": \"chief\", \"index\": 0, \"container_id\": \"" + container.getId() + "\"" + fields + "}";
  }

  @Test
  void theCookieNameIsTheRmProxys() {
    assertEquals(WebAppProxyServlet.PROXY_USER_COOKIE_NAME, ViewAcl.COOKIE);
  }

  @Test
  void theOwnerMayViewEveryPage() throws Exception {
    start();
    HttpResponse<String> r = viewAs("alice", "/status");
    assertEquals(200, r.statusCode(), r.body());
    assertEquals(APP, JSON.readTree(r.body()).path("app_id").asText());
    assertEquals(200, viewAs("alice", "/").statusCode());
    // past the check: no TensorBoard registered, so TensorBoard's own 503
    assertEquals(503, viewAs("alice", "/tensorboard/").statusCode());
  }

  @Test
  void aGroupOfTheViewAclAndTheYarnAdminsMayView() throws Exception {
    start();
    assertEquals(200, viewAs("ops", "/status").statusCode(), "ops is in melon-admins, named by the VIEW ACL");
    assertEquals(200, viewAs("yarnadm", "/status").statusCode(), "yarn.admin.acl");
    assertEquals(200, viewAs("yarnadm", "/").statusCode());
  }

  @Test
  void anotherUserIs403NamingTheUserAndTheApplication() throws Exception {
    start();
    for (String path : List.of("/status", "/", "/tensorboard/", "/tensorboard", "/tensorboard/data/runs",
        TensorBoardProxy.SHIM_PATH)) {
      assertDenied(viewAs("bob", path), "bob");
    }
    assertDenied(viewAs("carol", "/status"), "carol");
    // also when the proxy's cookie comes among others, or is not the first of several
    assertDenied(call("GET", "/status", "theme=dark; proxy-user=bob", null), "bob");
    assertDenied(call("GET", "/status", "proxy-user=alice; proxy-user=bob", null), "bob");
  }

  @Test
  void theTensorBoardIsGuardedToo() throws Exception {
    start();
    tb = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 8);
    tb.createContext("/tensorboard/", ex -> {
      tbSeen.add(ex.getRequestURI().getRawPath());
      byte[] out = "[\"train\"]".getBytes(StandardCharsets.UTF_8);
      ex.getResponseHeaders().set("Content-Type", "application/json");
      ex.sendResponseHeaders(200, out.length);
      try (OutputStream o = ex.getResponseBody()) {
        o.write(out);
      }
    });
    tb.start();
    String tbUrl = "http://127.0.0.1:" + tb.getAddress().getPort();
    assertEquals(200, call("POST", "/heartbeat", null, beat(", \"tensorboard_url\": \"" + tbUrl + "\"")).statusCode());

    assertDenied(viewAs("bob", "/tensorboard/data/runs"), "bob");
    assertDenied(call("POST", "/tensorboard/data/plugin/scalars/scalars_multirun", "proxy-user=bob", "runs=x"),
        "bob");
    assertTrue(tbSeen.isEmpty(), "TensorBoard never asked for bob: " + tbSeen);
    HttpResponse<String> r = viewAs("alice", "/tensorboard/data/runs");
    assertEquals(200, r.statusCode(), r.body());
    assertEquals("[\"train\"]", r.body());
    assertEquals(List.of("/tensorboard/data/runs"), tbSeen);
  }

  @Test
  void withoutTheCookieNothingChangesAndTheSecretEndpointsIgnoreIt() throws Exception {
    start();
    assertEquals(200, call("GET", "/status", null, null).statusCode());
    assertEquals(200, call("GET", "/", "theme=dark", null).statusCode());
    assertEquals(200, call("GET", "/status", "proxy-user=", null).statusCode(), "an empty name names nobody");
    // heartbeats carry the secret; a proxy-user cookie does not change what they get
    assertEquals(200, call("POST", "/heartbeat", null, beat(", \"step\": 3")).statusCode());
    assertEquals(200, call("POST", "/heartbeat", "proxy-user=bob", beat(", \"step\": 4")).statusCode());
    assertEquals(4, JSON.readTree(call("GET", "/status", null, null).body()).path("tasks").path(0).path("step")
        .asLong());
    // and the owner's cookie does not stand in for the secret
    HttpResponse<String> r = CLIENT.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/heartbeat"))
        .POST(HttpRequest.BodyPublishers.ofString(beat(""))).header("Cookie", "proxy-user=alice").build(),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(403, r.statusCode());
    assertTrue(r.body().contains("X-Melon-Secret"), r.body());
  }

  /** The status line and body of {@code request} sent from the loopback address {@code source}. */
  private String rawFrom(String source, String request) throws IOException {
    try (Socket s = new Socket()) {
      s.bind(new InetSocketAddress(source, 0));
      s.connect(new InetSocketAddress("127.0.0.1", port));
      s.setSoTimeout(30_000);
      s.getOutputStream().write(request.getBytes(StandardCharsets.UTF_8));
      return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    }
  }

  @Test
  void aReadNotFromTheRmProxyIs403WhateverCookieItForges() throws Exception {
    start();
    for (String path : List.of("/status", "/", "/tensorboard/", "/tensorboard/data/runs")) {
      String answer = rawFrom("127.0.0.2", "GET " + path + " HTTP/1.1\r\nHost: am\r\nCookie: proxy-user=alice\r\n"
          + "Connection: close\r\n\r\n");
      assertTrue(answer.startsWith("HTTP/1.1 403"), path + ": " + answer);
      assertTrue(answer.contains("served only through the RM web proxy [127.0.0.1:18088]")
          && answer.contains("not to 127.0.0.2 directly"), answer);
      assertFalse(answer.contains("\"tasks\""), "no status leaks: " + answer);
    }
    // the executors' calls come from any node: the secret is what counts
    String beat = beat(", \"step\": 5");
    String answer = rawFrom("127.0.0.2", "POST /heartbeat HTTP/1.1\r\nHost: am\r\nX-Melon-Secret: " + SECRET
        + "\r\nContent-Length: " + beat.length() + "\r\nConnection: close\r\n\r\n" + beat);
    assertTrue(answer.startsWith("HTTP/1.1 200"), answer);
    // and the proxy's address still reads
    assertEquals(5, JSON.readTree(viewAs("alice", "/status").body()).path("tasks").path(0).path("step").asLong());
  }

  @Test
  void theProxyHostsAreTheRmsWebappsOrTheWebProxy() {
    Configuration conf = new Configuration(false);
    conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
    conf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, "127.0.0.1:18088");
    ViewAcl acl = ViewAcl.fromEnvironment(APP, "alice", conf);
    assertTrue(acl.fromProxy(InetAddress.getLoopbackAddress()), acl.toString());
    assertTrue(acl.toString().contains(":18088]"), acl.toString()); // Hadoop names the host (localhost)
    conf.set(YarnConfiguration.PROXY_ADDRESS, "127.0.0.3:9099");
    ViewAcl proxied = ViewAcl.fromEnvironment(APP, "alice", conf);
    assertFalse(proxied.fromProxy(InetAddress.getLoopbackAddress()), "a separate web proxy: the RM is not it");
  }

  @Test
  void withoutAViewAclOnlyTheOwnerAndTheAdminsMayView() throws Exception {
    start(new ViewAcl(APP, "alice", null, "yarnadm", PROXY));
    assertEquals(200, viewAs("alice", "/status").statusCode());
    assertEquals(200, viewAs("yarnadm", "/status").statusCode());
    assertDenied(viewAs("ops", "/status"), "ops");
  }

  @Test
  void anAdminGroupOrStarAclWorksAsTheRmsDo() {
    assertTrue(new ViewAcl(APP, "alice", null, " melon-admins", PROXY).allows("ops"));
    assertTrue(new ViewAcl(APP, "alice", "*", "yarnadm", PROXY).allows("bob"));
    assertTrue(new ViewAcl(APP, "alice", null, "*", PROXY).allows("bob"), "yarn.admin.acl's default: everyone");
    assertFalse(new ViewAcl(APP, "alice", "carol", "yarnadm", PROXY).allows("bob"));
  }

  @Test
  void checkedOnlyWithYarnAclEnable() {
    Configuration conf = new Configuration(false);
    assertNull(ViewAcl.fromEnvironment(APP, "alice", conf), "off by default, as on the RM");
    conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
    conf.set(YarnConfiguration.YARN_ADMIN_ACL, "yarnadm");
    ViewAcl acl = ViewAcl.fromEnvironment(APP, "alice", conf);
    assertNotNull(acl);
    assertTrue(acl.allows("alice") && acl.allows("yarnadm"));
  }

  @Test
  void proxyUsersAreUrlDecoded() {
    Headers h = new Headers();
    h.add("Cookie", "proxy-user=dr%2Ewho; other=1");
    h.add("Cookie", "proxy-user=\"bob\"");
    assertEquals(List.of("dr.who", "bob"), ViewAcl.proxyUsers(h));
  }
}
