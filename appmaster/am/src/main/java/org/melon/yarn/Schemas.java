package org.melon.yarn;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.networknt.schema.Error;
import com.networknt.schema.Schema;
import com.networknt.schema.SchemaRegistry;
import com.networknt.schema.SpecificationVersion;

/**
 * The JSON Schemas the AM checks what it is sent against, copies in its jar of the files Python generates into
 * {@code airflow_provider_melon/am/}: the plan ({@code plan.schema.json}, from {@code submission.Plan}) and the
 * executor's messages ({@code messages.schema.json}, from {@code runtime.protocol}'s {@code RegisterBody} and
 * {@code HeartbeatBody}). Loaded once; networknt's validator, shaded.
 */
final class Schemas {
  private Schemas() {}

  private static final SchemaRegistry REGISTRY = SchemaRegistry.withDefaultDialect(SpecificationVersion.DRAFT_2020_12);

  static final Schema PLAN = REGISTRY.getSchema(Schemas.class.getResourceAsStream("/plan.schema.json"));
  /** {@code POST /register} and {@code POST /heartbeat}: the messages file's {@code $defs}, entered at each. */
  static final Schema REGISTER = message("register");
  static final Schema HEARTBEAT = message("heartbeat");

  private static Schema message(String name) {
    try (InputStream in = Schemas.class.getResourceAsStream("/messages.schema.json")) {
      ObjectMapper json = new ObjectMapper();
      ObjectNode entry = json.createObjectNode();
      entry.set("$defs", json.readTree(in).path("$defs"));
      entry.put("$ref", "#/$defs/" + name);
      return REGISTRY.getSchema(entry);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Where {@code doc} breaks {@code schema}, one entry per problem naming the field (e.g.
   * {@code /roles/0/oom_growth: must have a maximum value of 4.0 (is 9.0)}); empty: it is valid. */
  static List<String> violations(Schema schema, JsonNode doc) {
    List<String> out = new ArrayList<>();
    for (Error e : schema.validate(doc)) {
      String where = e.getInstanceLocation().toString();
      JsonNode value = e.getInstanceNode();
      out.add((where.isEmpty() ? "" : where + ": ") + e.getMessage()
          + (value != null && value.isValueNode() ? " (is " + value + ")" : ""));
    }
    return out;
  }
}
