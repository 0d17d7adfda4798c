#!/usr/bin/env bash
# Start one Hadoop daemon by its own main class: namenode | datanode | resourcemanager | nodemanager.
# Configuration: $HADOOP_CONF_DIR (the etc/hadoop templates); a NodeManager also reads its node-resources.xml,
# mounted into that folder per node.
set -euo pipefail
role="${1:?namenode|datanode|resourcemanager|nodemanager}"
cp="$HADOOP_CONF_DIR:$HADOOP_HOME/share/hadoop/common/*:$HADOOP_HOME/share/hadoop/common/lib/*"
cp="$cp:$HADOOP_HOME/share/hadoop/hdfs:$HADOOP_HOME/share/hadoop/hdfs/*:$HADOOP_HOME/share/hadoop/hdfs/lib/*"
cp="$cp:$HADOOP_HOME/share/hadoop/yarn/*:$HADOOP_HOME/share/hadoop/yarn/lib/*"
java_opts=(-Xmx${HEAP:-512m} -Dhadoop.log.dir=/data/logs -Dhadoop.home.dir="$HADOOP_HOME" -Djava.net.preferIPv4Stack=true)
mkdir -p /data/logs
run() { exec "$JAVA_HOME/bin/java" "${java_opts[@]}" -cp "$cp" "$@"; }
fs() { "$JAVA_HOME/bin/java" -Xmx256m -cp "$cp" org.apache.hadoop.fs.FsShell "$@"; }

case "$role" in
  namenode)
    if [ ! -d /data/hdfs/name/current ]; then
      "$JAVA_HOME/bin/java" -Xmx256m -cp "$cp" org.apache.hadoop.hdfs.server.namenode.NameNode -format -nonInteractive
    fi
    # Home folders, once HDFS is up: /tmp for everyone, /user/<MELON_USERS> owned by each user.
    (
      until fs -test -d / 2>/dev/null && \
            "$JAVA_HOME/bin/java" -Xmx256m -cp "$cp" org.apache.hadoop.hdfs.tools.DFSAdmin -safemode wait >/dev/null 2>&1; do
        sleep 2
      done
      fs -mkdir -p /tmp && fs -chmod 1777 /tmp
      for user in ${MELON_USERS:-airflow}; do
        fs -mkdir -p "/user/$user" && fs -chown "$user" "/user/$user"
      done
      echo "[melon-hadoop] HDFS ready: /tmp, /user/{${MELON_USERS:-airflow}}"
    ) &
    run org.apache.hadoop.hdfs.server.namenode.NameNode ;;
  datanode)
    run org.apache.hadoop.hdfs.server.datanode.DataNode ;;
  resourcemanager)
    run org.apache.hadoop.yarn.server.resourcemanager.ResourceManager ;;
  nodemanager)
    # The virtual GPUs the executor's ledger sees where NVML finds none: from this node's node-resources.xml.
    python3 - <<'PY'
import json, os, xml.etree.ElementTree as ET
conf = {p.findtext("name"): p.findtext("value") for p in
        ET.parse(os.path.join(os.environ["HADOOP_CONF_DIR"], "node-resources.xml")).getroot().iter("property")}
gpus = int(conf.get("yarn.nodemanager.resource-type.yarn.io/gpu", "0"))
total = int(str(conf.get("yarn.nodemanager.resource-type.melon.io/gpu-memory", "0")).rstrip("Mi") or 0)
os.makedirs(os.path.dirname(os.environ["MELON_GPU_INVENTORY"]), exist_ok=True)
with open(os.environ["MELON_GPU_INVENTORY"], "w") as f:
    json.dump({"gpus": [{"index": i, "total_mb": total // max(gpus, 1), "name": "melon-virtual-gpu"}
                        for i in range(gpus)]}, f)
print(f"[melon-hadoop] {gpus} virtual GPU(s), {total} MiB in all")
PY
    run org.apache.hadoop.yarn.server.nodemanager.NodeManager ;;
  *)
    echo "unknown role $role" >&2; exit 2 ;;
esac
