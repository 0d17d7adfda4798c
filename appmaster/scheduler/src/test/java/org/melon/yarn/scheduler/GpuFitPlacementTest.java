package org.melon.yarn.scheduler;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The allocator picks its code path from the ResourceManager's own class: Hadoop 3.3+ calls
 * {@code precheckNode(node, mode, diagnostics)}, Hadoop 3.1/3.2 only {@code precheckNode(node, mode)}.
 */
class GpuFitPlacementTest {

  /** The shape of Hadoop 3.1.4's and 3.2.4's LocalityAppPlacementAllocator (javap): the two-argument check only. */
  public static class Allocator32 {
    public boolean precheckNode(Object node, Object mode) {
      return true;
    }
  }

  /** Hadoop 3.3.6's: both, the two-argument one calling the three-argument one. */
  public static class Allocator33 extends Allocator32 {
    public boolean precheckNode(Object node, Object mode, java.util.Optional<Object> diagnostics) {
      return true;
    }
  }

  @Test
  void choosesTheTwoArgumentCheckWhereTheRmHasNoOther() {
    assertFalse(GpuFitPlacement.hasDiagnosticsApi(Allocator32.class));
    assertTrue(GpuFitPlacement.hasDiagnosticsApi(Allocator33.class));
  }

  @Test
  void theCompiledAgainstLineHasTheDiagnosticsApi() {
    // compiled against Hadoop 3.3.6: its allocator has the three-argument check
    assertTrue(GpuFitPlacement.DIAGNOSTICS_API);
  }
}
