"""hadoop_compat: the shipped AM jar loads on Java 8 (every class major <= 52, nested jars included), and the
version probes `melon doctor` uses read what Hadoop 3.3 / 3.4 / 3.5 daemons answer."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import airflow_provider_melon
from airflow_provider_melon import rm
from airflow_provider_melon.hadoop import compat as hc

PACKAGED_JAR = Path(airflow_provider_melon.__file__).parent / "am" / "melon-appmaster.jar"


def _class(major: int) -> bytes:
    return b"\xca\xfe\xba\xbe" + struct.pack(">HH", 0, major) + b"\x00" * 16


def _jar(path: Path, classes: dict[str, int], nested: dict[str, dict[str, int]] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for name, major in classes.items():
            zf.writestr(name, _class(major))
        for name, inner in (nested or {}).items():
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z2:
                for n, m in inner.items():
                    z2.writestr(n, _class(m))
            zf.writestr(name, buf.getvalue())
    return path


@pytest.mark.parametrize(
    "jar, main_class",
    [
        (PACKAGED_JAR, "org/melon/yarn/MelonApplicationMaster.class"),
        # the scheduler plug-in runs inside the ResourceManager, on the cluster's Java as well
        (rm.SCHEDULER_JAR, rm.PACKING_POLICY.replace(".", "/") + ".class"),
    ],
)
def test_the_shipped_jars_are_java_8_bytecode(jar, main_class):
    # make test builds them first (scripts/setup.sh): a missing jar is a failure, not a skip
    assert jar.is_file(), f"{jar} not built (appmaster/build.sh)"
    majors = hc.jar_class_majors(jar)
    assert main_class in majors
    newer = {name: m for name, m in majors.items() if m > hc.AM_MAX_CLASS_MAJOR}
    assert newer == {}, f"classes newer than Java 8 in {jar.name}: {newer}"


def test_a_class_above_java_8_is_found_also_inside_a_nested_jar(tmp_path):
    jar = _jar(tmp_path / "am.jar", {"a/A.class": 52}, nested={"lib/dep.jar": {"d/D.class": 55}})
    majors = hc.jar_class_majors(jar)
    assert majors == {"a/A.class": 52, "lib/dep.jar!/d/D.class": 55}
    assert max(majors.values()) == 55 and hc.java_for_major(55) == 11
    assert not hc.am_runs_on(55, 8) and hc.am_runs_on(55, 11) and hc.am_runs_on(52, 8)


def test_a_non_class_file_named_class_is_an_error(tmp_path):
    jar = tmp_path / "bad.jar"
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr("x/X.class", b"not a class")
    with pytest.raises(ValueError, match="not a class file"):
        hc.jar_class_majors(jar)


@pytest.mark.parametrize(
    "spec, major",
    [
        ("1.8", 8),
        ("1.8.0_392", 8),
        ("11", 11),
        ("11.0.13", 11),
        ("17", 17),
        ("17.0.15", 17),
        (21, 21),
        ("", None),
        (None, None),
        ("java", None),
    ],
)
def test_java_major(spec, major):
    assert hc.java_major(spec) == major


def test_java_from_jmx_reads_the_runtime_bean():
    # the shape of Hadoop's JMXJsonServlet answer (/jmx?qry=java.lang:type=Runtime), trimmed
    body = {
        "beans": [
            {
                "name": "java.lang:type=Runtime",
                "modelerType": "sun.management.RuntimeImpl",
                "SpecVersion": "1.8",
                "VmVersion": "25.392-b08",
                "SystemProperties": [{"key": "java.version", "value": "1.8.0_392"}],
            }
        ]
    }
    assert hc.java_from_jmx(body) == 8
    no_spec = {
        "beans": [
            {
                "name": "java.lang:type=Runtime",
                "SystemProperties": [{"key": "java.specification.version", "value": "11"}],
            }
        ]
    }
    assert hc.java_from_jmx(no_spec) == 11
    assert hc.java_from_jmx({"beans": []}) is None
    assert hc.java_from_jmx({"beans": [{"name": "java.lang:type=Memory", "SpecVersion": "17"}]}) is None
    assert hc.java_from_jmx("not json") is None


def test_hadoop_version_and_line():
    assert hc.hadoop_version({"clusterInfo": {"hadoopVersion": "3.3.6", "resourceManagerVersion": "3.3.6"}}) == "3.3.6"
    assert hc.hadoop_version({"resourceManagerVersion": "3.5.0"}) == "3.5.0"  # hadoopVersion omitted (Jersey 2)
    assert hc.hadoop_version({"hadoopVersion": ""}) is None
    assert hc.line_of("3.4.2").server_java == (8, 11)
    assert hc.line_of("3.5.0").server_java == (17,)
    assert hc.line_of("3.2.4").server_java == hc.line_of("3.1.4").server_java == (8,)
    assert hc.line_of("3.0.3") is None and hc.line_of(None) is None


@pytest.mark.parametrize(
    "version, missing",
    [
        ("3.1.4", True),
        ("3.1.1.7.1.9.0-387", True),  # Cloudera CDP 7.1's build of 3.1.1
        ("3.1", True),
        ("3.2.0", False),
        ("3.2.4", False),
        ("3.3.6", False),
        ("3.5.0-SNAPSHOT from abc", False),
        (None, False),  # unknown: not refused on a guess
        ("garbled", False),
    ],
)
def test_node_attributes_and_multi_node_placement_are_missing_before_3_2(version, missing):
    for feature in ("node-attributes", "multi-node-placement"):
        said = hc.missing_feature(version, feature)
        assert (said is not None) == missing, (version, feature, said)
    if missing:
        said = hc.missing_feature(version, "node-attributes")
        assert said == (
            f"Hadoop {version} has no node attributes (nm.yarn.io/gpu-model, by which a role's gpu_models is placed; "
            "added in Hadoop 3.2.0)"
        )


class _Resp:
    def __init__(self, status: int, body):
        self.status_code, self._body = status, body

    def json(self):
        if isinstance(self._body, Exception):
            raise self._body
        return self._body


def _doctor(tmp_path, jar_major: int, node_java: dict[str, object], version: str = "3.3.6"):
    """A Doctor whose hook answers like a cluster of ``version`` whose NodeManagers run ``node_java`` (spec
    version, or an exception for a /jmx that does not answer)."""
    from airflow_provider_melon.cli.doctor import Doctor

    jar = _jar(tmp_path / "am.jar", {"org/melon/yarn/MelonApplicationMaster.class": jar_major})
    nodes = [{"id": f"{n}:1", "nodeHTTPAddress": f"{n}:8042"} for n in node_java]

    def get_url(url, params=None):
        assert params == {"qry": "java.lang:type=Runtime"} and url.endswith("/jmx")
        spec = node_java[url.split("://")[1].split(":")[0]]
        if isinstance(spec, Exception):
            raise spec
        return _Resp(200, {"beans": [{"name": "java.lang:type=Runtime", "SpecVersion": spec}]})

    yarn = SimpleNamespace(
        cluster_info=lambda: {"hadoopVersion": version, "resourceManagerVersion": version},
        nodes=lambda states=None: nodes,
        get_url=get_url,
        node_base_url=lambda http: f"http://{http}",
    )
    return Doctor(SimpleNamespace(yarn=yarn, am_jar=jar))


def test_doctor_hadoop_java_ok_fail_and_unknown(tmp_path):
    ok = _doctor(tmp_path, 52, {"nm1": "1.8", "nm2": "11"}).check_hadoop_java()
    assert ok.status == "ok", ok
    assert ok.detail == (
        "Hadoop 3.3.6; NodeManagers on Java 8, 11 (2 of 2 read from their /jmx); the AM jar is "
        "Java 8 bytecode (class major 52): runs there"
    )

    bad = _doctor(tmp_path, 61, {"nm1": "1.8", "nm2": "17"}, version="3.4.2").check_hadoop_java()
    assert bad.status == "fail" and "does not load on nm1:1" in bad.detail and "Java 17 bytecode" in bad.detail
    assert "nm2" not in bad.detail.split("does not load on")[1]

    unknown = _doctor(tmp_path, 52, {"nm1": ConnectionError("refused")}).check_hadoop_java()
    assert unknown.status == "ok" and "NodeManagers' Java unknown (no /jmx answered)" in unknown.detail

    risky = _doctor(tmp_path, 55, {"nm1": ConnectionError("refused")}, version="3.3.6").check_hadoop_java()
    assert risky.status == "warn" and "the AM jar needs Java 11" in risky.fix
