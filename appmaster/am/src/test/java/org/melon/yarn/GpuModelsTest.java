package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.melon.yarn.Fixtures.plan;

import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ExecutionType;
import org.apache.hadoop.yarn.api.records.NodeAttributeOpCode;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.SchedulingRequest;
import org.apache.hadoop.yarn.api.records.impl.pb.SchedulingRequestPBImpl;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.AbstractConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.Or;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.SingleConstraint;
import org.apache.hadoop.yarn.api.resource.PlacementConstraint.TargetExpression;
import org.junit.jupiter.api.Test;

import org.melon.yarn.Fixtures.Clock;
import org.melon.yarn.Fixtures.FakeYarn;

/** A role's GPU models as the AM asks YARN for them: a scheduling request whose constraint the RM's scheduler
 * handler can evaluate (see {@link GpuModels} for what it reads of it). */
class GpuModelsTest {

  private static TaskBook book(String roles) {
    return new TaskBook(plan("{roles: " + roles + "}"), new FakeYarn(), new Clock());
  }

  /** "prefix/name=value" of each alternative of an OR of single node-attribute constraints, checking their shape. */
  private static List<String> alternatives(PlacementConstraint constraint) {
    AbstractConstraint expr = constraint.getConstraintExpr();
    assertTrue(expr instanceof Or, "an OR of one constraint per model and prefix: " + expr);
    List<String> out = new ArrayList<>();
    for (AbstractConstraint child : ((Or) expr).getChildren()) {
      SingleConstraint single = (SingleConstraint) child;
      assertEquals("node", single.getScope());
      assertEquals(NodeAttributeOpCode.EQ, single.getNodeAttributeOpCode());
      assertEquals(1, single.getTargetExpressions().size());
      TargetExpression target = single.getTargetExpressions().iterator().next();
      assertEquals(TargetExpression.TargetType.NODE_ATTRIBUTE, target.getTargetType());
      // the scheduler compares a node-attribute target with its first value only: one value per constraint
      assertEquals(1, target.getTargetValues().size(), "one value per target: " + target);
      out.add(target.getTargetKey() + "=" + target.getTargetValues().iterator().next());
    }
    return out;
  }

  @Test
  void severalModelsAreOneConstraintEachOnTheAttributeAsNodeManagersAndTheRmPublishIt() {
    assertEquals(List.of("nm.yarn.io/gpu-model=A100", "rm.yarn.io/gpu-model=A100", "nm.yarn.io/gpu-model=H100",
        "rm.yarn.io/gpu-model=H100"), alternatives(GpuModels.constraint(List.of("A100", "H100"))));
    assertEquals(List.of("nm.yarn.io/gpu-model=T4", "rm.yarn.io/gpu-model=T4"),
        alternatives(GpuModels.constraint(List.of("T4"))));
  }

  @Test
  void aTaskOfARoleWithModelsAsksForOneGuaranteedContainerUnderItsNumber() {
    TaskBook book = book("[{name: 'chief', instances: 1}, {name: 'worker', instances: 2, gpus: 1,"
        + " gpu_models: ['A10']}]");
    Task w1 = book.task("worker", 1);
    assertEquals(List.of("A10"), w1.role.gpuModels);
    assertEquals(List.of(), book.task("chief", 0).role.gpuModels, "no models: asked for as before");
    Resource resource = Resource.newInstance(2048, 2);
    SchedulingRequest r = GpuModels.request(w1, resource, book.tasks.size());
    assertEquals(2, r.getAllocationRequestId());
    assertEquals(1, r.getPriority().getPriority());
    assertEquals(ExecutionType.GUARANTEED, r.getExecutionType().getExecutionType());
    assertEquals(1, r.getResourceSizing().getNumAllocations());
    assertEquals(resource, r.getResourceSizing().getResources());
    // as the RM reads it: through its protocol buffer
    SchedulingRequest sent = new SchedulingRequestPBImpl(((SchedulingRequestPBImpl) r).getProto());
    assertEquals(List.of("nm.yarn.io/gpu-model=A10", "rm.yarn.io/gpu-model=A10"),
        alternatives(sent.getPlacementConstraint()));
    assertEquals(r, sent);
    // in a job with models every task asks so (the scheduler drops a heartbeat's scheduling requests when its
    // resource requests changed something): a role without models with no constraint
    assertTrue(GpuModels.byConstraint(book.tasks));
    assertEquals(null, GpuModels.request(book.task("chief", 0), resource, 3).getPlacementConstraint());
    assertTrue(!GpuModels.byConstraint(book("[{name: 'chief', instances: 1, gpus: 1}]").tasks));
  }

  @Test
  void aWithdrawnRequestDiffersFromItsAskOnlyInItsCount() {
    TaskBook book = book("[{name: 'worker', instances: 1, gpus: 1, gpu_models: ['A10', 'T4']}]");
    SchedulingRequest asked = GpuModels.request(book.task("worker", 0), Resource.newInstance(1024, 1), 1);
    SchedulingRequest withdrawn = GpuModels.withdrawn(asked);
    assertEquals(0, withdrawn.getResourceSizing().getNumAllocations());
    assertEquals(1, asked.getResourceSizing().getNumAllocations(), "the ask itself is left as it was");
    // the RM takes a later request under the same key only if nothing but the count changed
    SchedulingRequest same = new SchedulingRequestPBImpl(((SchedulingRequestPBImpl) asked).getProto());
    same.getResourceSizing().setNumAllocations(0);
    assertEquals(same, withdrawn);
  }

  @Test
  void aTaskThatGrewAfterAnOomAsksUnderANewIdThatStillNamesIt() {
    TaskBook book = book("[{name: 'chief', instances: 1, gpu_memory_mb: 1000, gpu_models: ['T4']},"
        + " {name: 'worker', instances: 2, gpu_memory_mb: 1000, gpu_models: ['T4']}]");
    Task w0 = book.task("worker", 0);
    assertEquals(1, GpuModels.allocationRequestId(w0, 3));
    w0.oomGrowths = 2;
    long id = GpuModels.allocationRequestId(w0, 3);
    assertEquals(1 + 2 * 3, id);
    Container c = Fixtures.container(w0, "node-a");
    c.setAllocationRequestId(id);
    assertSame(w0, book.allocated(c), "the grant of the grown ask is the task's");
  }

  @Test
  void refusesModelsOnHadoopWithoutNodeAttributes() {
    String refused = GpuModels.unsupportedOn("3.1.4");
    assertTrue(refused != null && refused.contains("Hadoop 3.1.4") && refused.contains("3.2.0"), refused);
    assertTrue(GpuModels.unsupportedOn("3.1.1.7.1.9.0-387") != null, "Cloudera CDP 7.1's 3.1.1 build");
    for (String v : new String[] {"3.2.4", "3.3.6", "3.4.2", "3.5.0", "3.5.0-SNAPSHOT", "garbled"}) {
      assertEquals(null, GpuModels.unsupportedOn(v), v);
    }
  }
}
