package org.melon.yarn;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.hadoop.yarn.api.records.ExecutionType;
import org.apache.hadoop.yarn.api.records.ExecutionTypeRequest;
import org.apache.hadoop.yarn.api.records.NodeAttribute;
import org.apache.hadoop.yarn.api.records.NodeAttributeOpCode;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.ResourceSizing;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.AbstractConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints;
import org.apache.hadoop.yarn.api.resource.PlacementConstraints.PlacementTargets;

/**
 * A role's accepted GPU models (the plan's {@code gpu_models}) as YARN placement: its tasks are asked for with a
 * {@link SchedulingRequest} whose placement constraint accepts a node whose {@code gpu-model} node attribute is one of
 * the models; a role without models keeps asking with plain container requests.
 *
 * <p>What the ResourceManager's {@code scheduler} placement handler (the CapacityScheduler's
 * {@code SingleConstraintAppPlacementAllocator} and {@code PlacementConstraintsUtil}, the same in Hadoop 3.3.6 and
 * 3.5.0) does with it decides its shape:
 * <ul>
 *   <li>a node-attribute target is compared with its <em>first</em> value only, so several models are an OR of one
 *       constraint per model, each {@code gpu-model = <model>};</li>
 *   <li>the attribute is matched with its prefix: a NodeManager's own ({@code yarn.nodemanager.node-attributes
 *       .provider}) are always {@code nm.yarn.io/}, those an admin sets centrally ({@code yarn nodeattributes}) always
 *       {@code rm.yarn.io/}; either is accepted;</li>
 *   <li>the RM keeps one scheduling request per (priority, allocation request id) and lets a later one with that key
 *       change only its count; a task whose expected GPU memory grew after an OOM asks with a new id
 *       ({@link #allocationRequestId}), which still names the task ({@link TaskBook#allocated}).</li>
 * </ul>
 */
final class GpuModels {
  private GpuModels() {}

  /** The node attribute's name; its prefixes: a NodeManager's, then the RM's. */
  static final String ATTRIBUTE = "gpu-model";
  static final List<String> PREFIXES = Collections.unmodifiableList(java.util.Arrays.asList(
      NodeAttribute.PREFIX_DISTRIBUTED, NodeAttribute.PREFIX_CENTRALIZED));

  /** A node whose {@code gpu-model} attribute (either prefix) is one of {@code models}. */
  static PlacementConstraint constraint(List<String> models) {
    List<AbstractConstraint> any = new ArrayList<>();
    for (String model : models) {
      for (String prefix : PREFIXES) {
        any.add(PlacementConstraints.targetNodeAttribute(PlacementConstraints.NODE, NodeAttributeOpCode.EQ,
            PlacementTargets.nodeAttribute(prefix + "/" + ATTRIBUTE, model)));
      }
    }
    return PlacementConstraints.build(PlacementConstraints.or(any.toArray(new AbstractConstraint[0])));
  }

  /** The allocation request id of {@code t}'s next ask: its number, plus the task count once per OOM growth (a new
   * size needs a new scheduling request key). Below the task count for every task that never grew, as for the
   * container requests of roles without models. */
  static long allocationRequestId(Task t, int taskCount) {
    return t.number + (long) taskCount * t.oomGrowths;
  }

  /** One container of {@code resource} for {@code t}, on a node of its role's models (any node without). */
  static SchedulingRequest request(Task t, Resource resource, int taskCount) {
    return SchedulingRequest.newBuilder()
        .allocationRequestId(allocationRequestId(t, taskCount))
        .priority(Priority.newInstance(1))
        .executionType(ExecutionTypeRequest.newInstance(ExecutionType.GUARANTEED, true))
        .resourceSizing(ResourceSizing.newInstance(1, resource))
        .placementConstraintExpression(t.role.gpuModels.isEmpty() ? null : constraint(t.role.gpuModels))
        .build();
  }

  /** Whether the application asks for every task with scheduling requests: when a role names models. The
   * CapacityScheduler (3.3.6 to 3.5.0, {@code allocate}) takes a heartbeat's scheduling requests only when its
   * resource requests changed nothing ({@code updateResourceRequests(ask) || updateSchedulingRequests(...)}), so
   * mixing both drops the former: a role without models is then asked for by a request without a constraint. */
  static boolean byConstraint(List<Task> tasks) {
    return tasks.stream().anyMatch(t -> !t.role.gpuModels.isEmpty());
  }

  /**
   * Why the cluster of {@code hadoopVersion} cannot place a plan whose roles name GPU models, or null where it can:
   * node attributes ({@code NodeAttribute}, {@code PlacementConstraints.targetNodeAttribute}) date from Hadoop 3.2.0
   * (YARN-3409), so on 3.1 this class's constraints cannot even be built. The AM's run-time choice from the
   * cluster's version (its classpath's {@code VersionInfo}); pre-flight refuses such a job before submission.
   */
  static String unsupportedOn(String hadoopVersion) {
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("^\\s*(\\d+)\\.(\\d+)").matcher(
        String.valueOf(hadoopVersion));
    if (!m.find()) {
      return null;  // an unknown version: try, as before
    }
    int major = Integer.parseInt(m.group(1));
    int minor = Integer.parseInt(m.group(2));
    if (major > 3 || (major == 3 && minor >= 2)) {
      return null;
    }
    return "roles name GPU models (gpu_models), which YARN places by node attributes: Hadoop " + hadoopVersion
        + " has none (they came in Hadoop 3.2.0)";
  }

  /** {@code request} withdrawn: the same request asking for no container (how the RM takes a cancellation). */
  static SchedulingRequest withdrawn(SchedulingRequest request) {
    return SchedulingRequest.newBuilder()
        .allocationRequestId(request.getAllocationRequestId())
        .priority(request.getPriority())
        .executionType(request.getExecutionType())
        .allocationTags(request.getAllocationTags())
        .resourceSizing(ResourceSizing.newInstance(0, request.getResourceSizing().getResources()))
        .placementConstraintExpression(request.getPlacementConstraint())
        .build();
  }
}
