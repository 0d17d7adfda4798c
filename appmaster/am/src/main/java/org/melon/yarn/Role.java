package org.melon.yarn;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;

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
  /** A task of this role lost ends and restarts every live task of every role so marked, with a new registration
   * round (the plan's {@code restart_gang}: TensorFlow's collective roles, which need the whole cluster back). */
  boolean restartGang;
  /** The GPU models its tasks accept (the plan's {@code gpu_models}); empty: any node. See {@link GpuModels}. */
  final List<String> gpuModels;

  /** A role of the plan, which passed its schema check (every field there, within its bounds). */
  Role(JsonNode r) {
    name = r.path(PlanFields.ROLE_NAME).asText();
    instances = r.path(PlanFields.ROLE_INSTANCES).asInt();
    memoryMb = r.path(PlanFields.ROLE_MEMORY_MB).asInt();
    vcores = r.path(PlanFields.ROLE_VCORES).asInt();
    gpus = r.path(PlanFields.ROLE_GPUS).asInt();
    gpuMemoryMb = r.path(PlanFields.ROLE_GPU_MEMORY_MB).asInt();
    gpuContextMb = r.path(PlanFields.ROLE_GPU_CONTEXT_MB).asInt();
    gpuSlotMb = r.path(PlanFields.ROLE_GPU_SLOT_MB).asInt();
    restarts = r.path(PlanFields.ROLE_RESTARTS).asInt();
    minInstances = Math.min(instances, r.path(PlanFields.ROLE_MIN_INSTANCES).asInt());
    tracked = r.path(PlanFields.ROLE_TRACKED).asBoolean();
    optional = r.path(PlanFields.ROLE_OPTIONAL).asBoolean();
    oomGrowth = r.path(PlanFields.ROLE_OOM_GROWTH).asDouble();
    oomMaxGrowths = r.path(PlanFields.ROLE_OOM_MAX_GROWTHS).asInt();
    restartGang = r.path(PlanFields.ROLE_RESTART_GANG).asBoolean();
    List<String> models = new ArrayList<>();
    r.path(PlanFields.ROLE_GPU_MODELS).forEach(m -> models.add(m.asText()));
    gpuModels = Collections.unmodifiableList(models);
  }

  /** MeLoN's shared mode: the task states an expected GPU memory, which the executor caps it at. */
  boolean shared() {
    return gpus == 0 && gpuMemoryMb > 0;
  }
}
