#!/usr/bin/env bash
# `make docker-test`: build the images (cached after the first time), then run tests/docker against the stack once
# per Hadoop line in HADOOP_VERSION (space-separated; default below), each on its own Java (the tests start the
# stack with compose, check it from 127.0.0.1 only, and tear it down). Prints the time each step took.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/engine.sh"
# 3.3.6 (Java 11) by default: the oldest supported line, while the embedded mini cluster of `make test` runs 3.5.0
# (both lines in CI's budget; HADOOP_VERSION="3.3.6 3.5.0" runs the stack on both, ~20 min more)
lines="${HADOOP_VERSION:-3.3.6}"
t0=$(date +%s)
HADOOP_VERSION="$lines" bash "$here/build.sh"
t1=$(date +%s)
export MELON_COMPOSE_CMD="${MELON_COMPOSE[*]}"
status=0
summary="build $((t1 - t0)) s"
for line in $lines; do
  ts=$(date +%s)
  line_status=0
  HADOOP_VERSION="$line" "$repo/.venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=1800 "$repo/tests/docker" "$@" \
    || line_status=$?
  [ "$line_status" = 0 ] || status=$line_status
  summary="$summary, Hadoop $line stack tests $(( $(date +%s) - ts )) s (exit $line_status)"
done
echo "[docker-test] $summary, total $(( $(date +%s) - t0 )) s (exit $status)"
exit $status
