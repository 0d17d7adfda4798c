#!/usr/bin/env bash
# `make docker-test`: build the images (cached after the first time), then run tests/docker against the stack
# (the tests start it with compose, check it from 127.0.0.1 only, and tear it down). Prints the time each took.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/engine.sh"
t0=$(date +%s)
bash "$here/build.sh"
t1=$(date +%s)
export MELON_COMPOSE_CMD="${MELON_COMPOSE[*]}"
status=0
"$repo/.venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=1800 "$repo/tests/docker" "$@" || status=$?
t2=$(date +%s)
echo "[docker-test] build $((t1 - t0)) s, stack tests $((t2 - t1)) s, total $((t2 - t0)) s (exit $status)"
exit $status
