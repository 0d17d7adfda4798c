package org.melon.yarn;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The rendezvous store of an elastic torchrun job, served beside the AM (docs/elastic.md): the plan's
 * {@code rendezvous_store} command (Python's {@code runtime.framework.rendezvous_store_command}: the job's Python
 * serving a {@code torch.distributed.TCPStore}) started in the AM's container with the host and a free port in its
 * environment. It says {@link #READY} once it serves; every agent is then a client of it ({@code is_host=0}), so no
 * member's loss takes the store with it. Where it cannot start (no torch on the AM's node, no such Python) the AM
 * says why and task 0's agent hosts the store, as before. It lives as long as the AM's container.
 */
final class RendezvousStore {

  /** The line the store prints once it serves (Python: {@code framework.RDZV_STORE_READY}). */
  static final String READY = "melon-rdzv-store: serving";

  /** The end of its output (compared by identity). */
  @SuppressWarnings("StringOperationCanBeSimplified")
  private static final String END = new String("");

  /** {@code host:port} once it serves, else null. */
  final String endpoint;
  /** Why there is no store beside the AM (null when there is). */
  final String why;
  private final Process process;

  private RendezvousStore(String endpoint, String why, Process process) {
    this.endpoint = endpoint;
    this.why = why;
    this.process = process;
  }

  /** Run {@code command} with {@code MELON_RDZV_HOST} and {@code MELON_RDZV_PORT} (a free port of {@code ports},
   * null: any) in its environment; wait up to
   * {@code waitMs} for {@link #READY}. Its output goes to the AM's log. */
  static RendezvousStore start(String command, String host, PortRange ports, long waitMs) {
    int port;
    try {
      port = freePort(ports, host);
    } catch (IOException e) {
      return new RendezvousStore(null, "no free port for it: " + e, null);
    }
    Process p;
    try {
      ProcessBuilder b = new ProcessBuilder("bash", "-c", command).redirectErrorStream(true);
      b.environment().put("MELON_RDZV_HOST", host);
      b.environment().put("MELON_RDZV_PORT", String.valueOf(port));
      p = b.start();
    } catch (IOException e) {
      return new RendezvousStore(null, "it could not start: " + e, null);
    }
    BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    Thread reader = new Thread(() -> {
      try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = in.readLine()) != null; ) {
          MelonApplicationMaster.log("rendezvous store: " + line);
          lines.add(line);
        }
      } catch (IOException e) {
        // the process went away
      }
      MelonApplicationMaster.log("rendezvous store: its output ended"
          + (p.isAlive() ? "" : " (exited " + p.exitValue() + ")"));
      lines.add(END);
    }, "melon-rdzv-store");
    reader.setDaemon(true);
    reader.start();
    long deadline = System.currentTimeMillis() + waitMs;
    String last = "";
    try {
      while (true) {
        long left = deadline - System.currentTimeMillis();
        String line = left > 0 ? lines.poll(left, TimeUnit.MILLISECONDS) : null;
        if (line != null && line.startsWith(READY)) {
          return new RendezvousStore(host + ":" + port, null, p);
        }
        if (line == null || line == END) {
          p.destroyForcibly();
          return new RendezvousStore(null, (line == END ? "it exited" : "it did not serve within " + waitMs / 1000
              + " s") + (last.isEmpty() ? "" : ": " + last), null);
        }
        if (!line.trim().isEmpty()) {
          last = line.trim();
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      p.destroyForcibly();
      return new RendezvousStore(null, "interrupted", null);
    }
  }

  private static int freePort(PortRange ports, String host) throws IOException {
    if (ports == null) {
      try (ServerSocket s = new ServerSocket(0)) {
        return s.getLocalPort();
      }
    }
    ServerSocket s = ports.bind(port -> new ServerSocket(port, 1), host);
    int port = s.getLocalPort();
    s.close();
    return port;
  }

  boolean alive() {
    return process != null && process.isAlive();
  }

  void stop() {
    if (process != null) {
      process.destroy();
    }
  }

  /** For {@code GET /status}: where the agents' rendezvous store is. */
  java.util.Map<String, Object> status() {
    java.util.Map<String, Object> out = new java.util.LinkedHashMap<>();
    out.put("host", endpoint != null ? "am" : "task 0");
    out.put("endpoint", endpoint);
    out.put("alive", endpoint != null ? alive() : null);
    out.put("why", why);
    return out;
  }

  static RendezvousStore none(String why) {
    return new RendezvousStore(null, why, null);
  }
}
