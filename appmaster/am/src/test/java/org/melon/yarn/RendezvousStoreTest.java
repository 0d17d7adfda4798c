package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The rendezvous store beside the AM: started with the host and a free port appended, ready on its line; where it
 * cannot serve, why (and task 0 hosts the store). The real store (the job's Python, torch's TCPStore) is exercised
 * on the mini cluster (tests/faults/test_elastic_faults.py). */
class RendezvousStoreTest {

  @Test
  void aStoreThatSaysItServesGivesItsEndpointAndRunsUntilStopped() {
    RendezvousStore s = RendezvousStore.start("echo loading; echo \"" + RendezvousStore.READY
        + " on $MELON_RDZV_HOST:$MELON_RDZV_PORT\"; cat", "am-host", null, 10_000);
    assertTrue(s.endpoint.startsWith("am-host:"), s.endpoint);
    assertNull(s.why);
    assertTrue(s.alive());
    assertEquals("am", s.status().get("host"));
    s.stop();
  }

  @Test
  void aStoreThatExitsSaysWhyInItsLastLine() {
    RendezvousStore s = RendezvousStore.start("echo 'melon-rdzv-store: no torch here: No module named torch'; exit 3",
        "am-host", null, 10_000);
    assertNull(s.endpoint);
    assertEquals("it exited: melon-rdzv-store: no torch here: No module named torch", s.why);
    assertFalse(s.alive());
    assertEquals("task 0", s.status().get("host"));
  }

  @Test
  void aStoreThatNeverServesIsGivenUpAfterTheWait() {
    RendezvousStore s = RendezvousStore.start("echo importing; sleep 30", "am-host", null, 500);
    assertNull(s.endpoint);
    assertEquals("it did not serve within 0 s: importing", s.why);
  }
}
