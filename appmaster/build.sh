#!/usr/bin/env bash
# The ApplicationMaster jar, built when missing or older than its sources, put where the Python package ships it:
# airflow_provider_melon/am/melon-appmaster.jar (found at run time with importlib.resources).
#   appmaster/build.sh        the packaged jar only: what setup.py's build_py step calls, so `pip wheel .` and
#                             `python -m build` carry the AM (from an sdist that holds a fresh jar, no Maven runs)
#   appmaster/build.sh --dev  also launcher/target/classes + launcher/target/classpath.txt, which the mini-cluster
#                             launcher needs (scripts/setup.sh)
# Two Maven modules (appmaster/pom.xml): am/ (the AM: Java 8, Hadoop 3.3.6 API) and launcher/ (Java 17, Hadoop 3.5.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
packaged="$here/../airflow_provider_melon/am/melon-appmaster.jar"
built="$here/am/target/melon-appmaster.jar"
classpath="$here/launcher/target/classpath.txt"
stale() {  # $1 is missing, or a source (the JSON Schemas too: they go into the jar) is newer
  [ ! -f "$1" ] || [ -n "$(find "$here/pom.xml" "$here/am/pom.xml" "$here/am/src" "$here/launcher/pom.xml" "$here/launcher/src" "$here/../airflow_provider_melon/am/plan.schema.json" "$here/../airflow_provider_melon/am/messages.schema.json" -newer "$1" -print -quit)" ]
}
mvn_package() {
  echo "[appmaster] mvn package" >&2
  mvn -q -B -f "$here/pom.xml" package -DskipTests
}
if [ "${1:-}" = "--dev" ]; then
  if stale "$built" || stale "$classpath"; then mvn_package; fi
elif stale "$packaged" && stale "$built"; then
  mvn_package
fi
if [ -f "$built" ] && ! cmp -s "$built" "$packaged" && { stale "$packaged" || [ "$built" -nt "$packaged" ]; }; then
  mkdir -p "$(dirname "$packaged")"
  cp "$built" "$packaged"
fi
[ -f "$packaged" ] || { echo "[appmaster] no AM jar at $packaged" >&2; exit 1; }
