package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

/**
 * The plan contract from the Java side: every field the AM reads ({@link PlanFields}) is declared in the JSON Schema
 * Python's {@code submission.Plan} writes ({@code airflow_provider_melon/am/plan.schema.json}, path given by the
 * build), and the AM's sources read the plan only through those constants.
 */
class PlanSchemaTest {

  static JsonNode schema() throws IOException {
    return new ObjectMapper().readTree(Paths.get(System.getProperty("melon.plan.schema")).toFile());
  }

  static JsonNode properties(JsonNode schema, String constant) {
    if (constant.startsWith("ROLE_")) {
      return schema.path("$defs").path("PlanRole").path("properties");
    }
    if (constant.startsWith("RES_")) {
      return schema.path("$defs").path("PlanResource").path("properties");
    }
    return schema.path("properties");
  }

  @Test
  void everyFieldTheAmReadsIsInTheSchema() throws Exception {
    JsonNode schema = schema();
    List<String> missing = new ArrayList<>();
    int checked = 0;
    for (Field f : PlanFields.class.getDeclaredFields()) {
      if (Modifier.isStatic(f.getModifiers()) && f.getType() == String.class) {
        f.setAccessible(true);
        String name = (String) f.get(null);
        checked++;
        if (!properties(schema, f.getName()).has(name)) {
          missing.add(f.getName() + "=" + name);
        }
      }
    }
    assertTrue(checked >= 20, "PlanFields declares the fields the AM reads");
    assertEquals(new ArrayList<String>(), missing,
        "fields the AM reads that submission.Plan does not declare (plan.schema.json)");
  }

  @Test
  void theSchemaCheckCatchesAnUndeclaredField() throws Exception {
    JsonNode schema = schema();
    assertFalse(properties(schema, "RES_SURPRISE").has("surprise"));
    assertTrue(properties(schema, "ROLE_GPUS").has("gpus"));
    assertFalse(properties(schema, "GPUS").has("gpus"), "a role field is not a top-level field");
  }

  /** A plan as build_plan writes it (every required field). */
  static final String VALID = "{app_name: 'job', roles: [{name: 'worker', instances: 2, memory_mb: 256, vcores: 1,"
      + " gpus: 0, gpu_memory_mb: 0, restarts: 0, min_instances: 2, tracked: true, optional: false, oom_growth: 1.5,"
      + " oom_max_growths: 2, gpu_context_mb: 0, gpu_slot_mb: 0, gpu_models: [], restart_gang: false}], success_role: null, output_role: null, command: 'run', env: {},"
      + " local_resources: [], register_timeout_s: 300, gang_hold_s: 0, queue_timeout_s: 0, elastic_grace_s: 60, stall_timeout_s: 0, rendezvous_store: null,"
      + " labels: {}, staged: [], status_file: null}";

  @Test
  void aPlanAsPythonWritesItPassesTheAmsCheck() {
    assertEquals(List.of(), Schemas.violations(Schemas.PLAN, Fixtures.json(VALID)));
  }

  @Test
  void aPlanBreakingTheSchemaIsRefusedNamingEachField() {
    ObjectNode plan = (ObjectNode) Fixtures.json(VALID);
    ((ObjectNode) plan.path("roles").get(0)).put("oom_growth", 0.5);
    plan.remove("command");
    plan.put("surprise", 1);
    String found = String.join("; ", Schemas.violations(Schemas.PLAN, plan));
    assertTrue(found.contains("/roles/0/oom_growth: must have a minimum value of") && found.contains("(is 0.5)"),
        found);
    assertTrue(found.contains("command"), found);
    assertTrue(found.contains("surprise"), found);
  }

  @Test
  void theAmReadsThePlanOnlyThroughPlanFields() throws IOException {
    Pattern literal = Pattern.compile("\\b(plan|r)\\.path\\(\"([^\"]*)\"\\)");
    List<String> bypass = new ArrayList<>();
    List<Path> sources;
    try (Stream<Path> walk = Files.walk(Paths.get(System.getProperty("melon.am.sources")))) {
      sources = walk.filter(p -> p.toString().endsWith(".java")).collect(Collectors.toList());
    }
    assertFalse(sources.isEmpty());
    for (Path source : sources) {
      Matcher m = literal.matcher(new String(Files.readAllBytes(source), StandardCharsets.UTF_8));
      while (m.find()) {
        bypass.add(source.getFileName() + ": " + m.group());
      }
    }
    assertEquals(new ArrayList<String>(), bypass, "plan reads with a literal field name instead of PlanFields");
  }
}
