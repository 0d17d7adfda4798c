#!/usr/bin/env bash
# End-to-end smoke test of the mini cluster + MelonApplicationMaster using only curl and python3 (stdlib).
#
#   appmaster/smoke.sh                  # starts its own launcher on ports 28xxx under /tmp, stops it at the end
#   CLUSTER_JSON=/path/cluster.json appmaster/smoke.sh   # use an already running cluster
#
# Needs `mvn -q -B package -DskipTests` in appmaster/ first (appmaster/build.sh --dev). Exits non-zero on the first failed check.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
JAR=$HERE/am/target/melon-appmaster.jar
[ -f "$JAR" ] || { echo "build first: appmaster/build.sh --dev" >&2; exit 1; }

LAUNCHER_PID=""
cleanup() {
  if [ -n "$LAUNCHER_PID" ]; then
    local start=$SECONDS rc=0
    kill "$LAUNCHER_PID" 2>/dev/null || true
    wait "$LAUNCHER_PID" 2>/dev/null || rc=$?
    echo "launcher stopped (exit $rc) in $((SECONDS - start)) s"
  fi
}
trap cleanup EXIT

if [ -z "${CLUSTER_JSON:-}" ]; then
  WORK=${SMOKE_WORK_DIR:-/tmp/melon-smoke-$$}
  BASE=${SMOKE_PORT_BASE:-28000}
  rm -rf "$WORK"; mkdir -p "$WORK"
  CLUSTER_JSON=$WORK/cluster.json
  echo "starting launcher in $WORK (log $WORK/launcher.log)"
  java -Xmx1g -cp "$HERE/launcher/target/classes:$(cat "$HERE/launcher/target/classpath.txt")" org.melon.yarn.MiniClusterLauncher \
    --work-dir "$WORK" --rm-port $((BASE + 32)) --rm-web-port $((BASE + 88)) --nn-port $((BASE + 20)) \
    --nn-http-port $((BASE + 70)) > "$WORK/launcher.log" 2>&1 &
  LAUNCHER_PID=$!
  for _ in $(seq 1 1200); do
    [ -f "$CLUSTER_JSON" ] && break
    kill -0 "$LAUNCHER_PID" 2>/dev/null || { tail -5 "$WORK/launcher.log"; exit 1; }
    sleep 0.1
  done
  [ -f "$CLUSTER_JSON" ] || { echo "launcher not ready after 120 s" >&2; exit 1; }
fi

field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$CLUSTER_JSON" "$1"; }
RM=$(field rm_web_url); WEBHDFS=$(field webhdfs_url); FS=$(field fs_default_fs)
AM_CP=$(field am_classpath); USER_NAME=$(field user)
U="user.name=$USER_NAME"
echo "cluster: RM $RM, WebHDFS $WEBHDFS"

echo "== nodes"
curl -sf "$RM/ws/v1/cluster/nodes?$U" | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["nodes"]["node"]
for n in nodes:
    # Hadoop 3.1 lists no totalResource: an idle node lists its total as availableResource
    total = n.get("totalResource") or n["availableResource"]
    res = {r["name"]: r["value"] for r in total["resourceInformations"]["resourceInformation"]}
    print(" ", n["id"], n["state"], res)
    assert n["state"] == "RUNNING", n
    assert res.get("yarn.io/gpu", 0) > 0 and res.get("melon.io/gpu-memory", 0) > 0, res
'

DIR=/user/$USER_NAME/.melon-smoke/$$
# upload FILE to HDFS path; print "size timestamp"
upload() {
  local loc
  loc=$(curl -sf -o /dev/null -w '%{redirect_url}' -X PUT "$WEBHDFS$2?op=CREATE&overwrite=true&$U")
  curl -sf -X PUT -T "$1" -H 'Content-Type: application/octet-stream' "$loc" > /dev/null
  curl -sf "$WEBHDFS$2?op=GETFILESTATUS&$U" |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["FileStatus"]; print(s["length"], s["modificationTime"])'
}
read -r JAR_SIZE JAR_TS < <(upload "$JAR" "$DIR/melon-appmaster.jar")
read -r TASK_SIZE TASK_TS < <(upload "$HERE/smoke/smoke_task.py" "$DIR/smoke_task.py")
echo "uploaded jar ($JAR_SIZE bytes) and task script to $DIR"

# submit NAME COMMAND SUCCESS_ROLE ROLES_JSON ENV_JSON TIMEOUT -> prints the application id
submit() {
  local plan=/tmp/melon-smoke-plan-$$.json
  python3 - "$plan" "$@" "$FS$DIR/smoke_task.py" "$TASK_SIZE" "$TASK_TS" <<'EOF'
import json, sys
out, name, command, success, roles, env, timeout, url, size, ts = sys.argv[1:]
roles = json.loads(roles)
for role in roles:
    role.setdefault("gpu_models", [])  # any node (plan.schema.json requires the field)
    role.setdefault("restart_gang", False)  # a lost task is restarted alone
json.dump({"app_name": name, "roles": roles, "success_role": None if success == "null" else success,
           "command": command, "env": json.loads(env),
           "local_resources": [{"name": "smoke_task.py", "url": url, "type": "FILE", "visibility": "APPLICATION",
                                "size": int(size), "timestamp": int(ts)}],
           "register_timeout_s": int(timeout), "output_role": None, "gang_hold_s": 0, "queue_timeout_s": 0,
           "elastic_grace_s": 60, "labels": {}, "staged": [], "status_file": None,
           "rendezvous_store": None, "stall_timeout_s": 0}, open(out, "w"))
EOF
  read -r PLAN_SIZE PLAN_TS < <(upload "$plan" "$DIR/$1-plan.json")
  local app
  app=$(curl -sf -X POST "$RM/ws/v1/cluster/apps/new-application?$U" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["application-id"])')
  SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  python3 - "$app" "$1" "$FS$DIR" "$JAR_SIZE" "$JAR_TS" "$PLAN_SIZE" "$PLAN_TS" "$AM_CP" "$SECRET" \
    > /tmp/melon-smoke-submit-$$.json <<'EOF'
import base64, json, sys
app, name, base, js, jt, ps, pt, cp, secret = sys.argv[1:]
def res(url, size, ts):
    return {"resource": url, "type": "FILE", "visibility": "APPLICATION", "size": int(size), "timestamp": int(ts)}
print(json.dumps({
    "application-id": app, "application-name": "melon-smoke-" + name, "application-type": "MELON",
    "max-app-attempts": 1, "resource": {"memory": 512, "vCores": 1},
    "am-container-spec": {
        "local-resources": {"entry": [
            {"key": "melon-appmaster.jar", "value": res(base + "/melon-appmaster.jar", js, jt)},
            {"key": "melon-plan.json", "value": res(base + "/" + name + "-plan.json", ps, pt)}]},
        # as submission.build_submission: the scheduler plug-in's allocator for the app's asks, where the RM has it
        "environment": {"entry": [{"key": "CLASSPATH", "value": "./melon-appmaster.jar<CPS>" + cp},
                                  {"key": "APPLICATION_PLACEMENT_TYPE_CLASS",
                                   "value": "org.melon.yarn.scheduler.GpuFitPlacement"}]},
        # the AM's secret, in the application's credentials: the AM hands it to its tasks in their token files
        "credentials": {"secrets": {"entry": [{"key": "melon.am.secret",
                                               "value": base64.b64encode(secret.encode()).decode()}]}},
        "commands": {"command": "{{JAVA_HOME}}/bin/java -Xmx256m org.melon.yarn.MelonApplicationMaster "
                                "melon-plan.json 1><LOG_DIR>/AppMaster.stdout 2><LOG_DIR>/AppMaster.stderr"}}}))
EOF
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data @/tmp/melon-smoke-submit-$$.json "$RM/ws/v1/cluster/apps?$U")
  rm -f /tmp/melon-smoke-submit-$$.json "$plan"
  [ "$code" = 202 ] || { echo "submit returned HTTP $code" >&2; exit 1; }
  echo "$app"
}

# wait APP EXPECTED_FINAL_STATUS [DIAGNOSTIC_SUBSTRING]
wait_app() {
  local start=$SECONDS out
  while :; do
    out=$(curl -sf "$RM/ws/v1/cluster/apps/$1?$U" | python3 -c '
import json, sys
a = json.load(sys.stdin)["app"]
print(a["state"], a["finalStatus"], json.dumps(a.get("diagnostics", "")))')
    case "$out" in FINISHED*|FAILED*|KILLED*) break ;; esac
    [ $((SECONDS - start)) -lt 180 ] || { echo "timeout waiting for $1: $out" >&2; exit 1; }
    sleep 1
  done
  echo "  $1: $out ($((SECONDS - start)) s)"
  [[ "$out" == *" $2 "* ]] || { echo "FAIL: expected final status $2" >&2; exit 1; }
  if [ -n "${3:-}" ] && [[ "$out" != *"$3"* ]]; then echo "FAIL: diagnostics lack '$3'" >&2; exit 1; fi
}

# role NAME INSTANCES GPUS GPU_MEMORY_MB RESTARTS TRACKED: a whole plan role (the AM refuses a plan that breaks its schema)
ROLE='{"name": "%s", "instances": %d, "memory_mb": 256, "vcores": 1, "gpus": %d, "gpu_memory_mb": %d, "restarts": %d,
 "tracked": %s, "min_instances": %d, "optional": false, "oom_growth": 1.5, "oom_max_growths": 0, "gpu_context_mb": 0, "gpu_slot_mb": 0}'
role() { printf "$ROLE" "$@" "$2"; }

echo "== 1. gang of chief + 2 workers (GPU requests), success_role=chief -> SUCCEEDED"
APP=$(submit ok "python3 smoke_task.py" chief "[$(role chief 1 1 4096 0 true), $(role worker 2 1 8192 0 true)]" '{}' 60)
wait_app "$APP" SUCCEEDED

echo "== 2. floor: command 'true', success_role=null -> SUCCEEDED"
APP=$(submit floor "true" null "[$(role worker 2 0 0 0 true)]" '{}' 60)
wait_app "$APP" SUCCEEDED

echo "== 3. chief exits 1 with restarts=1 -> restarted once, then FAILED with its stderr"
APP=$(submit fail "python3 smoke_task.py" chief "[$(role chief 1 0 0 1 true)]" '{"SMOKE_EXIT": "1"}' 60)
wait_app "$APP" FAILED "task chief:0 on localhost exited 1: smoke: chief:0 failing on purpose"

echo "== 4. tasks never register -> gang timeout"
APP=$(submit gang "sleep 60" chief "[$(role chief 1 0 0 0 true)]" '{}' 5)
wait_app "$APP" FAILED "gang registration timed out: missing chief:0"

echo "== 5. exit 75 (no GPU fits) is retried 3 times outside the restart budget, then fails; optional untracked ps ignored"
APP=$(submit nofit "python3 smoke_task.py" chief "[$(role chief 1 0 0 0 true), $(role ps 1 0 0 0 false | sed "s/\"optional\": false/\"optional\": true/")]" \
  '{"SMOKE_EXIT": "75"}' 60)
wait_app "$APP" FAILED "task chief:0 on localhost exited 75"

echo "== 6. GPUs are scheduled: 3 workers x 2 GPUs on 2 nodes x 2 GPUs -> one never starts -> gang timeout"
APP=$(submit gpus "python3 smoke_task.py" null "[$(role worker 3 2 0 0 true)]" '{}' 8)
wait_app "$APP" FAILED "gang registration timed out: missing worker:"

echo "== 7. a role above the maximum allocation fails cleanly"
APP=$(submit toobig "true" null "[$(role worker 1 3 0 0 true)]" '{}' 60)
wait_app "$APP" FAILED "more than the cluster's maximum allocation"

echo "== 8. AM /status through the RM proxy, then kill via PUT /state -> KILLED"
APP=$(submit kill "sleep 600" chief "[$(role chief 1 0 0 0 true)]" '{}' 600)
for _ in $(seq 1 60); do
  STATUS=$(curl -s "$RM/proxy/$APP/status?$U" || true)
  [[ "$STATUS" == *'"state":"RUNNING"'* && "$STATUS" == *'"container_id":"container_'* ]] && break
  sleep 1
done
echo "  AM status: $STATUS"
[[ "$STATUS" == *'"app_id":"'$APP'"'* ]] || { echo "FAIL: no AM status via the RM proxy" >&2; exit 1; }
CODE=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
  --data '{"state": "KILLED"}' "$RM/ws/v1/cluster/apps/$APP/state?$U")
[ "$CODE" = 202 ] || [ "$CODE" = 200 ] || { echo "FAIL: kill returned $CODE" >&2; exit 1; }
wait_app "$APP" KILLED

echo "smoke: all checks passed"
