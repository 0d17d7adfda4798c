package org.melon.yarn;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.Proxy;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;

/**
 * The job's TensorBoard, served by the AM under {@code /tensorboard/} (docs/protocol.md section 2), so that the RM
 * web proxy reaches it at {@code <rm>/proxy/<app>/tensorboard/} like the AM's own pages.
 *
 * <p>The executor of the TensorBoard task starts TensorBoard with {@code --path_prefix=/tensorboard} and reports its
 * origin ({@code http://host:port}) in the {@code tensorboard_url} field of its heartbeats ({@code ""}: stopped), or
 * why it could not start it in {@code tensorboard_error}. Requests are forwarded with their path and query unchanged:
 * GET (and HEAD) for pages and data, POST because TensorBoard's dashboards fetch some data by POST (the scalar
 * charts). The answer keeps TensorBoard's status, type and encoding; the body is streamed.
 *
 * <p>Hadoop's RM web proxy forwards only GET and PUT (a POST gets its 405; a PUT's body loses its line breaks, and
 * a form body is consumed by the proxy's servlet container). So the page is served with one script added first,
 * {@link #SHIM_PATH} ({@code post-as-get.js}), which sends the page's POSTs as GETs of {@link #POST_PREFIX} with
 * the body in the query ({@link #FORM_PARAM}), and the AM hands them to TensorBoard as the POSTs they were.
 *
 * <p>Without a registered TensorBoard: 503 with the reason; when it does not answer: 502.
 */
final class TensorBoardProxy {

  static final String PREFIX = "/tensorboard";
  /** POST bodies TensorBoard's plugins send are small forms; a larger one is refused unread (413). */
  static final int MAX_POST_BODY = 1024 * 1024;
  /** Served by the AM: makes the page send its POSTs as GETs of {@link #POST_PREFIX} (the RM proxy refuses POST). */
  static final String SHIM_PATH = PREFIX + "/__melon/post-as-get.js";
  /** {@code GET <this><path>?<query>&__melon_form=<body>} is forwarded as {@code POST /tensorboard/<path>?<query>}
   * with that body (base64url of UTF-8 in the query: the RM proxy decodes a query and fails on some characters). */
  static final String POST_PREFIX = PREFIX + "/__melon/post/";
  static final String FORM_PARAM = "__melon_form";
  /** The Content-Type (base64url) of a text body (e.g. JSON) in {@link #FORM_PARAM}; a form goes without it. */
  static final String TYPE_PARAM = "__melon_type";
  private static final Pattern DOCTYPE = Pattern.compile("\\s*<!doctype html>", Pattern.CASE_INSENSITIVE);

  private static final List<String> REQUEST_HEADERS = Collections.unmodifiableList(Arrays.asList("Accept",
      "Accept-Encoding", "Accept-Language", "Content-Type", "If-None-Match", "If-Modified-Since"));
  private static final List<String> RESPONSE_HEADERS = Collections.unmodifiableList(Arrays.asList("Content-Type",
      "Content-Encoding", "Cache-Control", "ETag", "Expires", "Last-Modified", "Content-Security-Policy",
      "X-Content-Type-Options"));
  private static final List<String> METHODS = Collections.unmodifiableList(Arrays.asList("GET", "HEAD", "POST"));
  /** Connecting to TensorBoard / waiting for its answer (HttpURLConnection: no proxy, no redirects followed). */
  static final int CONNECT_TIMEOUT_MS = 5_000;
  static final int READ_TIMEOUT_MS = 60_000;

  // guarded by this
  private String url;
  private String task;
  private String error;

  /** Whether heartbeat field {@code tensorboard_url} is acceptable: "" or an origin {@code http://host:port}. */
  static boolean validUrl(JsonNode value) {
    return value.isTextual() && (value.asText().isEmpty() || origin(value.asText()) != null);
  }

  /** {@code http://host:port} of {@code text}, or null unless it is exactly that (a trailing "/" allowed). */
  static String origin(String text) {
    try {
      URI u = new URI(text);
      boolean bare = u.getRawPath() == null || u.getRawPath().isEmpty() || "/".equals(u.getRawPath());
      if ("http".equals(u.getScheme()) && u.getHost() != null && u.getPort() > 0 && u.getRawUserInfo() == null
          && bare && u.getRawQuery() == null && u.getRawFragment() == null) {
        return "http://" + u.getRawAuthority();
      }
    } catch (URISyntaxException e) {
      // not a URL
    }
    return null;
  }

  /** A heartbeat the task book accepted (200) from {@code taskName}: take its TensorBoard fields, if any. */
  synchronized void update(String taskName, JsonNode body) {
    JsonNode u = body.path("tensorboard_url");
    JsonNode e = body.path("tensorboard_error");
    if (u.isTextual()) {
      String was = url;
      url = u.asText().isEmpty() ? null : origin(u.asText());
      task = taskName;
      if (url != null) {
        error = null;
      } else if (was != null && !e.isTextual()) {
        error = "TensorBoard of " + taskName + " stopped";
      }
      if (!Objects.equals(was, url)) {
        MelonApplicationMaster.log("TensorBoard of " + taskName + ": " + (url == null ? "stopped" : url));
      }
    }
    if (e.isTextual()) {
      String why = e.asText().length() > 2000 ? e.asText().substring(0, 2000) : e.asText();
      if (!why.equals(error)) {
        MelonApplicationMaster.log("TensorBoard of " + taskName + ": " + why);
      }
      task = taskName;
      error = why;
      url = null;
    }
  }

  /** {@code {"url", "task", "error"}} for {@code /status}. */
  synchronized void describe(ObjectNode into) {
    into.put("url", url);
    into.put("task", task);
    into.put("error", error);
  }

  synchronized String url() {
    return url;
  }

  static boolean handles(String path) {
    return PREFIX.equals(path) || path.startsWith(PREFIX + "/");
  }

  /** Answer one request under {@link #PREFIX}; an error before the answer starts is thrown for the AM to send. */
  void handle(HttpExchange ex) throws IOException, AmHttp.HttpError {
    String method = ex.getRequestMethod();
    if (!METHODS.contains(method)) {
      throw new AmHttp.HttpError(405, "method not allowed");
    }
    URI in = ex.getRequestURI();
    if (SHIM_PATH.equals(in.getRawPath()) && "GET".equals(method)) {
      byte[] js = shim();
      ex.getResponseHeaders().set("Content-Type", "text/javascript; charset=utf-8");
      ex.sendResponseHeaders(200, js.length);
      try (OutputStream out = ex.getResponseBody()) {
        out.write(js);
      }
      return;
    }
    if (PREFIX.equals(in.getRawPath())) {
      // relative, so that it resolves under the RM proxy's /proxy/<app>/ too
      ex.getResponseHeaders().set("Location", "tensorboard/" + (in.getRawQuery() == null ? "" : "?" + in.getRawQuery()));
      ex.sendResponseHeaders(301, -1);
      return;
    }
    String base;
    String why;
    synchronized (this) {
      base = url;
      why = error;
    }
    if (base == null) {
      throw new AmHttp.HttpError(503, why != null ? "TensorBoard is not running: " + why
          : "no TensorBoard has registered with this application master (yet): the job asks for none "
            + "(`tensorboard` in its spec), or it is still starting");
    }
    String path = in.getRawPath();
    String query = in.getRawQuery();
    String forward = method;
    byte[] body = null;
    String formType = null;
    if ("POST".equals(method)) {
      body = readBody(ex);
    } else if (path.startsWith(POST_PREFIX) && "GET".equals(method)) {
      // a POST the page had to send as GET through the RM proxy (post-as-get.js): make it a POST again
      path = PREFIX + "/" + path.substring(POST_PREFIX.length());
      List<String> kept = new ArrayList<>();
      String fields = null;
      for (String param : query == null ? new String[0] : query.split("&")) {
        if (param.startsWith(FORM_PARAM + "=")) {
          fields = base64url(param.substring(FORM_PARAM.length() + 1), FORM_PARAM);
        } else if (param.startsWith(TYPE_PARAM + "=")) {
          formType = base64url(param.substring(TYPE_PARAM.length() + 1), TYPE_PARAM);
          if (!formType.matches("[\\x21-\\x7e][\\x20-\\x7e]*")) {
            throw new AmHttp.HttpError(400, TYPE_PARAM + " is not a content type");
          }
        } else {
          kept.add(param);
        }
      }
      if (fields == null) {
        throw new AmHttp.HttpError(400, "a " + POST_PREFIX + " request needs its form in " + FORM_PARAM);
      }
      query = kept.isEmpty() ? null : String.join("&", kept);
      forward = "POST";
      body = fields.getBytes(StandardCharsets.UTF_8);
      formType = formType != null ? formType : "application/x-www-form-urlencoded";
    }
    boolean page = (PREFIX + "/").equals(path) || (PREFIX + "/index.html").equals(path);
    HttpURLConnection conn = (HttpURLConnection) new URL(base + path + (query == null ? "" : "?" + query))
        .openConnection(Proxy.NO_PROXY);
    conn.setInstanceFollowRedirects(false);
    conn.setUseCaches(false);
    conn.setConnectTimeout(CONNECT_TIMEOUT_MS);
    conn.setReadTimeout(READ_TIMEOUT_MS);
    conn.setRequestMethod(forward);
    conn.setRequestProperty("Accept", "*/*"); // else HttpURLConnection sends its own list; the caller's replaces it
    for (String h : REQUEST_HEADERS) {
      String v = ex.getRequestHeaders().getFirst(h);
      if (v != null && !(page && "Accept-Encoding".equals(h)) && !(formType != null && "Content-Type".equals(h))) {
        conn.setRequestProperty(h, v); // the page is rewritten: it is asked for plain
      }
    }
    if (formType != null) {
      conn.setRequestProperty("Content-Type", formType);
    }
    int code;
    try {
      if (body != null) {
        conn.setDoOutput(true);
        conn.setFixedLengthStreamingMode(body.length);
        try (OutputStream to = conn.getOutputStream()) {
          to.write(body);
        }
      }
      code = conn.getResponseCode();
    } catch (IOException e) {
      conn.disconnect();
      throw new AmHttp.HttpError(502, "TensorBoard at " + base + " is not answering: " + e);
    }
    InputStream stream = code >= 400 ? conn.getErrorStream() : conn.getInputStream();
    try (InputStream from = stream != null ? stream : new ByteArrayInputStream(new byte[0])) {
      for (String h : RESPONSE_HEADERS) {
        String v = conn.getHeaderField(h);
        if (v != null) {
          ex.getResponseHeaders().set(h, v);
        }
      }
      boolean empty = "HEAD".equals(method) || code == 204 || code == 304;
      String type = conn.getHeaderField("Content-Type");
      String encoding = conn.getHeaderField("Content-Encoding");
      if (page && !empty && code == 200 && type != null && type.startsWith("text/html")
          && "identity".equals(encoding == null ? "identity" : encoding)) {
        byte[] html = withShim(IO.readAll(from));
        ex.sendResponseHeaders(code, html.length);
        try (OutputStream out = ex.getResponseBody()) {
          out.write(html);
        }
        return;
      }
      // the JDK's server: -1 no body, 0 chunked, n exactly n bytes
      long declared = conn.getHeaderFieldLong("Content-Length", -1L);
      ex.sendResponseHeaders(code, empty || declared == 0 ? -1 : Math.max(0, declared));
      if (!empty) {
        try (OutputStream out = ex.getResponseBody()) {
          IO.copy(from, out);
        }
      }
    }
  }

  /** TensorBoard's page with {@link #SHIM_PATH} loaded first (right after the doctype: no quirks mode). */
  static byte[] withShim(byte[] html) {
    String text = new String(html, StandardCharsets.UTF_8);
    String tag = "<script src=\"" + SHIM_PATH.substring(PREFIX.length() + 1) + "\"></script>";
    Matcher m = DOCTYPE.matcher(text);
    int at = m.lookingAt() ? m.end() : 0;
    return (text.substring(0, at) + tag + text.substring(at)).getBytes(StandardCharsets.UTF_8);
  }

  private static byte[] shim() throws IOException {
    try (InputStream in = TensorBoardProxy.class.getResourceAsStream("post-as-get.js")) {
      if (in == null) {
        throw new IOException("post-as-get.js missing from the AM's jar");
      }
      return IO.readAll(in);
    }
  }

  private static String base64url(String value, String name) throws AmHttp.HttpError {
    try {
      return new String(Base64.getUrlDecoder().decode(value), StandardCharsets.UTF_8);
    } catch (IllegalArgumentException e) {
      throw new AmHttp.HttpError(400, name + " is not base64url");
    }
  }

  /** The POST body, read no further than {@link #MAX_POST_BODY} + 1 bytes (AmHttp.boundedBody). */
  private static byte[] readBody(HttpExchange ex) throws IOException, AmHttp.HttpError {
    return AmHttp.boundedBody(ex, MAX_POST_BODY);
  }
}
