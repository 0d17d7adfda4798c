#!/usr/bin/env bash
# The jars the Python package ships, built when missing or older than their sources, put where importlib.resources
# finds them at run time:
#   airflow_provider_melon/am/melon-appmaster.jar   the ApplicationMaster (am/)
#   airflow_provider_melon/rm/melon-scheduler.jar   the scheduler plug-in for the ResourceManager (scheduler/)
#   appmaster/build.sh        the packaged jars only: what setup.py's build_py step calls, so `pip wheel .` and
#                             `python -m build` carry them (from an sdist that holds fresh jars, no Maven runs)
#   appmaster/build.sh --dev  also launcher/target/classes + launcher/target/classpath.txt, which the mini-cluster
#                             launcher needs (scripts/setup.sh)
#   appmaster/build.sh --replay  only the trace replay harness (replay/, Maven profile `replay`, not shipped):
#                             replay/target/classes + replay/target/classpath.txt (benchmarks/bench_scale.py)
# Three Maven modules (appmaster/pom.xml): am/ and scheduler/ (Java 8, Hadoop 3.3.6 API) and launcher/ (Java 17,
# Hadoop 3.5.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
package="$here/../airflow_provider_melon"
classpath="$here/launcher/target/classpath.txt"
# each jar: its Maven module : built by Maven there : shipped in the package here
jars=("am:$here/am/target/melon-appmaster.jar:$package/am/melon-appmaster.jar"
      "scheduler:$here/scheduler/target/melon-scheduler.jar:$package/rm/melon-scheduler.jar")
stale() {  # $2 is missing, or a source file of module $1 is newer: the poms, its src/, the JSON its jar carries.
  # Files only: the folders an extracted sdist creates are newer than its jars. Per module: a jar whose own
  # sources did not change is not rebuilt by Maven, so it may be older than another module's sources.
  local carried=()
  case "$1" in
    am) carried=("$package/am/plan.schema.json" "$package/am/messages.schema.json") ;;
    scheduler) carried=("$package/rm/ledger-rule.json") ;;
  esac
  [ ! -f "$2" ] || [ -n "$(find "$here/pom.xml" "$here/$1/pom.xml" "$here/$1/src" ${carried[@]+"${carried[@]}"} -type f -newer "$2" -print -quit)" ]
}
mvn_package() {
  echo "[appmaster] mvn package" >&2
  mvn -q -B -f "$here/pom.xml" package -DskipTests
}
if [ "${1:-}" = "--replay" ]; then
  if [ ! -f "$here/replay/target/classpath.txt" ] || [ -n "$(find "$here/pom.xml" "$here/scheduler/pom.xml" \
      "$here/scheduler/src" "$here/replay/pom.xml" "$here/replay/src" "$package/rm/ledger-rule.json" -type f \
      -newer "$here/replay/target/classpath.txt" -print -quit)" ]; then
    echo "[appmaster] mvn package (replay)" >&2
    mvn -q -B -f "$here/pom.xml" -P replay -pl scheduler,replay package -DskipTests
    touch "$here/replay/target/classpath.txt"  # Maven leaves an unchanged classpath file as it was
  fi
  exit 0
fi
any_stale=0
for jar in "${jars[@]}"; do
  module="${jar%%:*}" rest="${jar#*:}"
  built="${rest%%:*}" packaged="${rest#*:}"
  if stale "$module" "$packaged" && stale "$module" "$built"; then any_stale=1; fi
done
if [ "${1:-}" = "--dev" ]; then
  for jar in "${jars[@]}"; do
    module="${jar%%:*}" rest="${jar#*:}"
    stale "$module" "${rest%%:*}" && any_stale=1
  done
  stale launcher "$classpath" && any_stale=1
fi
if [ "$any_stale" = 1 ]; then mvn_package; fi
for jar in "${jars[@]}"; do
  module="${jar%%:*}" rest="${jar#*:}"
  built="${rest%%:*}" packaged="${rest#*:}"
  if [ -f "$built" ] && ! cmp -s "$built" "$packaged" && { stale "$module" "$packaged" || [ "$built" -nt "$packaged" ]; }; then
    mkdir -p "$(dirname "$packaged")"
    cp "$built" "$packaged"
  fi
  [ -f "$packaged" ] || { echo "[appmaster] no jar at $packaged" >&2; exit 1; }
done
