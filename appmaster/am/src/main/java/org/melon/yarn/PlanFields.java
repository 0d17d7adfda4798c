package org.melon.yarn;

/**
 * The names of the plan fields the AM reads ({@code melon-plan.json}, written by Python's {@code submission.Plan},
 * whose JSON Schema is {@code airflow_provider_melon/am/plan.schema.json}). The AM reads the plan only through these
 * constants; {@code PlanSchemaTest} checks each is in the schema (top-level, {@code PlanRole} or {@code PlanResource}),
 * and that no plan read bypasses them. The AM checks the whole plan against that schema (a copy in its jar) before it
 * reads it: {@link Schemas#PLAN}.
 */
final class PlanFields {
  private PlanFields() {}

  // the plan itself
  static final String ROLES = "roles";
  static final String SUCCESS_ROLE = "success_role";
  static final String OUTPUT_ROLE = "output_role";
  static final String COMMAND = "command";
  static final String ENV = "env";
  static final String LOCAL_RESOURCES = "local_resources";
  static final String REGISTER_TIMEOUT_S = "register_timeout_s";
  static final String GANG_HOLD_S = "gang_hold_s";
  static final String QUEUE_TIMEOUT_S = "queue_timeout_s";
  static final String ELASTIC_GRACE_S = "elastic_grace_s";
  static final String STALL_TIMEOUT_S = "stall_timeout_s";
  static final String RENDEZVOUS_STORE = "rendezvous_store";
  static final String LABELS = "labels";
  static final String STATUS_FILE = "status_file";

  // one of its roles
  static final String ROLE_NAME = "name";
  static final String ROLE_INSTANCES = "instances";
  static final String ROLE_MEMORY_MB = "memory_mb";
  static final String ROLE_VCORES = "vcores";
  static final String ROLE_GPUS = "gpus";
  static final String ROLE_GPU_MEMORY_MB = "gpu_memory_mb";
  static final String ROLE_RESTARTS = "restarts";
  static final String ROLE_MIN_INSTANCES = "min_instances";
  static final String ROLE_TRACKED = "tracked";
  static final String ROLE_OPTIONAL = "optional";
  static final String ROLE_GPU_CONTEXT_MB = "gpu_context_mb";
  static final String ROLE_GPU_SLOT_MB = "gpu_slot_mb";
  static final String ROLE_OOM_GROWTH = "oom_growth";
  static final String ROLE_OOM_MAX_GROWTHS = "oom_max_growths";
  static final String ROLE_GPU_MODELS = "gpu_models";
  static final String ROLE_RESTART_GANG = "restart_gang";

  // one of its local resources
  static final String RES_NAME = "name";
  static final String RES_URL = "url";
  static final String RES_TYPE = "type";
  static final String RES_VISIBILITY = "visibility";
  static final String RES_SIZE = "size";
  static final String RES_TIMESTAMP = "timestamp";
}
