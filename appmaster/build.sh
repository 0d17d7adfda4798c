#!/usr/bin/env bash
# The jars the Python package ships, built when missing or older than their sources, put where importlib.resources
# finds them at run time:
#   airflow_provider_melon/am/melon-appmaster.jar   the ApplicationMaster (am/)
#   airflow_provider_melon/rm/melon-scheduler.jar   the scheduler plug-in for the ResourceManager (scheduler/)
#   appmaster/build.sh        the packaged jars only: what setup.py's build_py step calls, so `pip wheel .` and
#                             `python -m build` carry them (from an sdist that holds fresh jars, no Maven runs)
#   appmaster/build.sh --dev  also launcher/target/classes + launcher/target/classpath.txt, which the mini-cluster
#                             launcher needs (scripts/setup.sh)
# Three Maven modules (appmaster/pom.xml): am/ and scheduler/ (Java 8, Hadoop 3.3.6 API) and launcher/ (Java 17,
# Hadoop 3.5.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
package="$here/../airflow_provider_melon"
classpath="$here/launcher/target/classpath.txt"
# each jar: built by Maven here -> shipped in the package there
jars=("$here/am/target/melon-appmaster.jar:$package/am/melon-appmaster.jar"
      "$here/scheduler/target/melon-scheduler.jar:$package/rm/melon-scheduler.jar")
stale() {  # $1 is missing, or a source file (the JSON the jars carry too) is newer. Files only: the folders an
  # extracted sdist creates are newer than its jars, and would make every wheel built from it run Maven again
  [ ! -f "$1" ] || [ -n "$(find "$here/pom.xml" "$here/am/pom.xml" "$here/am/src" "$here/scheduler/pom.xml" "$here/scheduler/src" "$here/launcher/pom.xml" "$here/launcher/src" "$package/am/plan.schema.json" "$package/am/messages.schema.json" "$package/rm/ledger-rule.json" -type f -newer "$1" -print -quit)" ]
}
mvn_package() {
  echo "[appmaster] mvn package" >&2
  mvn -q -B -f "$here/pom.xml" package -DskipTests
}
any_stale=0
for pair in "${jars[@]}"; do
  built="${pair%%:*}" packaged="${pair#*:}"
  if stale "$packaged" && stale "$built"; then any_stale=1; fi
done
if [ "${1:-}" = "--dev" ]; then
  for pair in "${jars[@]}"; do stale "${pair%%:*}" && any_stale=1; done
  stale "$classpath" && any_stale=1
fi
if [ "$any_stale" = 1 ]; then mvn_package; fi
for pair in "${jars[@]}"; do
  built="${pair%%:*}" packaged="${pair#*:}"
  if [ -f "$built" ] && ! cmp -s "$built" "$packaged" && { stale "$packaged" || [ "$built" -nt "$packaged" ]; }; then
    mkdir -p "$(dirname "$packaged")"
    cp "$built" "$packaged"
  fi
  [ -f "$packaged" ] || { echo "[appmaster] no jar at $packaged" >&2; exit 1; }
done
