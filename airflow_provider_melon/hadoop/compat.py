"""One place for what differs between the Hadoop lines MeLoN supports: 3.1.x, 3.2.x, 3.3.x, 3.4.x and 3.5.x.

Stdlib only: the mini-cluster tools and ``melon doctor`` use it without Airflow (``version_compat.py`` is the
Airflow side). It holds the AM's bytecode limit (:data:`AM_MAX_CLASS_MAJOR`) and readers of the cluster's Java and
Hadoop versions (:func:`java_from_jmx`, :func:`hadoop_version`), and the features a line lacks
(:func:`missing_feature`). ``docs/hadoop-compat.md`` lists each difference, what MeLoN does about it and on which
lines it was checked.
"""

from __future__ import annotations

import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

#: Class-file major version of Java 8: the newest any class of the AM jar may be.
AM_MAX_CLASS_MAJOR = 52


@dataclass(frozen=True)
class HadoopLine:
    line: tuple[int, int]
    #: the Java versions the line's servers run on (its release notes)
    server_java: tuple[int, ...]


#: The supported lines. A cluster of another line gets a warning, not a refusal. Hadoop 3.0 to 3.2 support Java 8
#: only (Hadoop's "Java versions" page; 3.3 added the Java 11 runtime); scripts/compat-am.sh ran 3.1.4 and 3.2.4 on 11.
HADOOP_LINES = {
    (3, 1): HadoopLine((3, 1), (8,)),
    (3, 2): HadoopLine((3, 2), (8,)),
    (3, 3): HadoopLine((3, 3), (8, 11)),
    (3, 4): HadoopLine((3, 4), (8, 11)),
    (3, 5): HadoopLine((3, 5), (17,)),
}


def parse_version(text: Any) -> Optional[tuple[int, ...]]:
    """``"3.3.6"`` → ``(3, 3, 6)``; ``"3.5.0-SNAPSHOT from abc by x"`` → ``(3, 5, 0)``; None when no version."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def hadoop_version(cluster_info: dict[str, Any]) -> Optional[str]:
    """The RM's Hadoop version from its ``/ws/v1/cluster/info`` body (``clusterInfo`` or its content)."""
    info = cluster_info.get("clusterInfo", cluster_info) if isinstance(cluster_info, dict) else {}
    for key in ("hadoopVersion", "resourceManagerVersion"):
        value = info.get(key) if isinstance(info, dict) else None
        if value and parse_version(value):
            return str(value).split()[0]
    return None


#: Features MeLoN uses that not every supported line has: name → (the first Hadoop with it, what it is for).
FEATURES: dict[str, tuple[tuple[int, int, int], str]] = {
    # YARN-3409: NodeAttribute, PlacementConstraints.targetNodeAttribute, the NodeManagers' attribute providers
    "node-attributes": ((3, 2, 0), "node attributes (nm.yarn.io/gpu-model, by which a role's gpu_models is placed)"),
    # YARN-7494: CapacityScheduler multi-node placement, MultiNodeLookupPolicy (the scheduler plug-in's node order)
    "multi-node-placement": ((3, 2, 0), "multi-node placement in the CapacityScheduler (the plug-in's node order)"),
}


def missing_feature(version: Optional[str], feature: str) -> Optional[str]:
    """Why the cluster of ``version`` lacks ``feature`` (a :data:`FEATURES` name), e.g. ``"Hadoop 3.1.4 has no node
    attributes (...; added in Hadoop 3.2.0)"``; None where it has it or the version is unknown (not refused on a
    guess)."""
    since, what = FEATURES[feature]
    v = parse_version(version)
    if v is None or v + (0,) * (3 - len(v)) >= since:
        return None
    return f"Hadoop {str(version).split()[0]} has no {what[:-1]}; added in Hadoop {'.'.join(map(str, since))})"


#: Hadoop lines whose CapacityScheduler places an ask with placement constraints (a role's ``gpu_models``) only on
#: a single-node candidate set, a NodeManager's heartbeat, never under multi-node placement: seen on 3.3.6 in the
#: replay (``benchmarks/bench_scale.py`` on the gpuspec33 trace); 3.5.0 places them; 3.2 and 3.4 were not checked
CONSTRAINTS_ON_HEARTBEATS_ONLY = frozenset({(3, 3)})


def constraints_on_heartbeats_only(version: Optional[str]) -> Optional[str]:
    """Why the cluster of ``version`` would never place a constrained ask under multi-node placement; None where it
    does, or where that is not known."""
    v = parse_version(version)
    if v is None or tuple(v[:2]) not in CONSTRAINTS_ON_HEARTBEATS_ONLY:
        return None
    return (
        f"Hadoop {str(version).split()[0]}'s CapacityScheduler places asks with placement constraints only on "
        "NodeManager heartbeats, never under multi-node placement"
    )


def line_of(version: Optional[str]) -> Optional[HadoopLine]:
    v = parse_version(version)
    return HADOOP_LINES.get((v[0], v[1])) if v and len(v) >= 2 else None


def java_major(spec: Any) -> Optional[int]:
    """A Java version string → its feature release: ``"1.8"``/``"1.8.0_392"`` → 8, ``"11.0.13"`` → 11, ``17`` → 17."""
    v = parse_version(spec)
    if v is None:
        m = re.match(r"\s*(\d+)\s*$", str(spec or ""))
        return int(m.group(1)) if m else None
    return v[1] if v[0] == 1 and len(v) > 1 else v[0]


def java_from_jmx(body: dict[str, Any]) -> Optional[int]:
    """The JVM's Java feature release from a daemon's ``/jmx?qry=java.lang:type=Runtime`` answer
    (``SpecVersion``, else ``java.specification.version``/``java.version`` in ``SystemProperties``)."""
    beans = body.get("beans") if isinstance(body, dict) else None
    for bean in beans if isinstance(beans, list) else []:
        if not isinstance(bean, dict) or bean.get("name") != "java.lang:type=Runtime":
            continue
        found = java_major(bean.get("SpecVersion"))
        if found:
            return found
        props = {p.get("key"): p.get("value") for p in bean.get("SystemProperties") or [] if isinstance(p, dict)}
        for key in ("java.specification.version", "java.version"):
            found = java_major(props.get(key))
            if found:
                return found
    return None


#: a daemon's JMX servlet and the query of its Runtime bean
JMX_PATH = "/jmx"
JMX_RUNTIME_QUERY = {"qry": "java.lang:type=Runtime"}


def class_major(data: bytes) -> int:
    """The class-file major version of a ``.class`` file's bytes."""
    if len(data) < 8 or data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    major: int = struct.unpack(">H", data[6:8])[0]
    return major


def jar_class_majors(jar: Path) -> dict[str, int]:
    """Every class of ``jar`` (nested jars, if a shaded build ever adds them, included) → its major version."""
    majors: dict[str, int] = {}

    def walk(zf: zipfile.ZipFile, prefix: str) -> None:
        for name in zf.namelist():
            if name.endswith(".class") and not name.startswith("META-INF/versions/"):
                majors[prefix + name] = class_major(zf.read(name)[:8])
            elif name.endswith(".jar"):
                import io

                with zipfile.ZipFile(io.BytesIO(zf.read(name))) as inner:
                    walk(inner, f"{prefix}{name}!/")

    with zipfile.ZipFile(jar) as zf:
        walk(zf, "")
    return majors


def java_for_major(major: int) -> int:
    """The oldest Java that loads class files of ``major`` (52 → 8, 55 → 11, 61 → 17)."""
    return major - 44


def am_runs_on(jar_major: int, java: int) -> bool:
    return java_for_major(jar_major) <= java


__all__ = [
    "AM_MAX_CLASS_MAJOR",
    "CONSTRAINTS_ON_HEARTBEATS_ONLY",
    "FEATURES",
    "constraints_on_heartbeats_only",
    "HADOOP_LINES",
    "HadoopLine",
    "JMX_PATH",
    "JMX_RUNTIME_QUERY",
    "am_runs_on",
    "class_major",
    "hadoop_version",
    "jar_class_majors",
    "java_for_major",
    "java_from_jmx",
    "java_major",
    "line_of",
    "missing_feature",
    "parse_version",
]
