package org.melon.yarn;

/** A role from the plan plus its restart budget. */
final class Role {
  String name;
  int instances;
  int memoryMb;
  int vcores;
  int gpus;
  int gpuMemoryMb;
  /** Reserved besides each task's expected GPU memory in shared mode: the CUDA context / driver (plan's
   * {@code gpu_context_mb}); the in-process cap stays the expected memory. */
  int gpuContextMb;
  /** What each task holds at least in shared mode, a fair share of the cluster's largest GPU (plan's
   * {@code gpu_slot_mb}, 0: none): YARN is asked for the larger of this and the expected memory plus context. */
  int gpuSlotMb;
  int restarts;
  /** The role's elastic minimum ({@code min_instances}); {@link #instances} when it has no bounds: see
   * {@link Elastic}. */
  int minInstances;
  /** Whether the role's tasks decide the application's outcome (a ps role does not). */
  boolean tracked;
  /** An untracked role whose failure past its budget is only logged (an evaluator); else it fails the job. */
  boolean optional;
  /** After an OOM (exit 76) in shared mode a task's expected GPU memory is multiplied by this (at least 1) ... */
  double oomGrowth;
  /** ... at most this many times per task (0: an OOM fails the application). Not the restart budget. */
  int oomMaxGrowths;
  int restartsUsed;

  /** MeLoN's shared mode: the task states an expected GPU memory, which the executor caps it at. */
  boolean shared() {
    return gpus == 0 && gpuMemoryMb > 0;
  }
}
