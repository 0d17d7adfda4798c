#!/usr/bin/env bash
# One Airflow component per container: api-server | scheduler | dag-processor | triggerer | celery worker.
# The api-server migrates the metadata DB first; the others wait until it answers (so they never race a
# migration), then start as `airflow <args>` (a Celery worker: `celery worker`).
set -euo pipefail
component="${1:?api-server|scheduler|dag-processor|triggerer|celery worker}"
wait_for() {  # $1: what, $2...: a command that succeeds when it is ready
  local what="$1"; shift
  for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 2; done
  echo "[melon-airflow] $what not ready after 600 s" >&2; exit 1
}
wait_for "postgres" python -c "import psycopg2, os; psycopg2.connect(os.environ['AIRFLOW__DATABASE__SQL_ALCHEMY_CONN'].replace('postgresql+psycopg2', 'postgresql')).close()"
if [ "$component" = "api-server" ]; then
  python -c "import json, os; json.dump({'admin': os.environ['MELON_ADMIN_PASSWORD']}, open('passwords.json', 'w'))"
  airflow db migrate
  exec airflow api-server --host 0.0.0.0 --port 8080
fi
wait_for "api-server" curl -sf "${AIRFLOW__CORE__EXECUTION_API_SERVER_URL%/execution/}/api/v2/version"
exec airflow "$@"
