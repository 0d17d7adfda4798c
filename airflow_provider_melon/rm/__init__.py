"""The scheduler plug-in for the ResourceManager ships here: ``melon-scheduler.jar`` (built by appmaster/build.sh; not
in git) and the ledger rule's numbers it carries (``ledger-rule.json``, written by :mod:`..gpu.node_view`). The names
below are the plug-in's, as the cluster's configuration and the RM's ``/jmx`` spell them (``docs/scheduler-plugin.md``).
"""

from pathlib import Path

#: The jar an admin puts on the ResourceManager's classpath.
SCHEDULER_JAR = Path(__file__).resolve().parent / "melon-scheduler.jar"
#: The CapacityScheduler's node order under multi-node placement (``...multi-node-sorting.policy.<name>.class``).
PACKING_POLICY = "org.melon.yarn.scheduler.GpuPackingPolicy"
#: The allocator an application asks for in its AM container's environment: nodes where no GPU holds the ask are
#: passed over.
FIT_PLACEMENT = "org.melon.yarn.scheduler.GpuFitPlacement"
#: The AM container environment variable (YARN's ``ApplicationSchedulingConfig``) that names it.
PLACEMENT_ENV = "APPLICATION_PLACEMENT_TYPE_CLASS"
#: The plug-in's MBean on the RM's ``/jmx``: there when the RM loaded it.
STATS_MBEAN = "Hadoop:service=ResourceManager,name=MelonScheduler"
