package org.melon.yarn.scheduler;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import org.apache.hadoop.yarn.api.records.NodeId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.resourcemanager.rmnode.RMNode;
import org.apache.hadoop.yarn.server.resourcemanager.scheduler.common.fica.FiCaSchedulerNode;
import org.junit.jupiter.api.Test;

/**
 * The node order the policy hands the CapacityScheduler, on real scheduler nodes ({@link FiCaSchedulerNode}) over
 * a minimal {@link RMNode}: the fields a scheduler node reads at construction, nothing else.
 */
class GpuPackingPolicyTest {

  private static FiCaSchedulerNode node(String host, int port) {
    NodeId id = NodeId.newInstance(host, port);
    Resource total = Resource.newInstance(8192, 8);
    RMNode rmNode = (RMNode) Proxy.newProxyInstance(RMNode.class.getClassLoader(), new Class<?>[] {RMNode.class},
        (proxy, method, args) -> {
          switch (method.getName()) {
            case "getNodeID":
              return id;
            case "getHostName":
            case "getNodeAddress":
              return host;
            case "getRackName":
              return "/default-rack";
            case "getTotalCapability":
              return total;
            case "getHttpAddress":
              return host + ":8042";
            case "getNodeLabels":
              return Collections.emptySet();
            case "hashCode":
              return System.identityHashCode(proxy);
            case "equals":
              return proxy == args[0];
            case "toString":
              return id.toString();
            default:
              Class<?> type = method.getReturnType();
              if (type == boolean.class) {
                return false;
              }
              if (type == int.class || type == long.class) {
                return type == int.class ? (Object) 0 : (Object) 0L;
              }
              return null;
          }
        });
    return new FiCaSchedulerNode(rmNode, false);
  }

  private static List<FiCaSchedulerNode> order(GpuPackingPolicy<FiCaSchedulerNode> policy,
      List<FiCaSchedulerNode> nodes) {
    policy.addAndRefreshNodesSet(nodes, "");
    List<FiCaSchedulerNode> out = new ArrayList<>();
    for (Iterator<FiCaSchedulerNode> it = policy.getPreferredNodeIterator(nodes, ""); it.hasNext();) {
      out.add(it.next());
    }
    return out;
  }

  @Test
  void aNodeThatRegistersAgainWithTheSameIdIsOfferedAgain() {
    GpuPackingPolicy<FiCaSchedulerNode> policy = new GpuPackingPolicy<>();
    FiCaSchedulerNode a = node("127.0.0.1", 1001);
    FiCaSchedulerNode b = node("127.0.0.1", 1002);
    assertEquals(2, order(policy, Arrays.asList(a, b)).size());
    // the NodeManager restarts on its fixed port: the scheduler holds a new node object with the same id, idle as
    // the old one was (nothing tells the two apart but their identity)
    FiCaSchedulerNode again = node("127.0.0.1", 1002);
    List<FiCaSchedulerNode> offered = order(policy, Arrays.asList(a, again));
    assertEquals(2, offered.size(), "offered: " + offered);
    assertEquals(Arrays.asList(a, again), offered);
    // and it stays offered on the passes after
    assertEquals(Arrays.asList(a, again), order(policy, Arrays.asList(a, again)));
  }
}
