#!/usr/bin/env bash
# Initialise (once) and run PostgreSQL as the postgres user, listening on the compose network only.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
data=/var/lib/postgresql/data
mkdir -p "$data" /run/postgresql && chown -R postgres:postgres "$data" /run/postgresql
if [ ! -s "$data/PG_VERSION" ]; then
  runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$data/pg_hba.conf"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -o "-c listen_addresses=''" -w start >/dev/null
  runuser -u postgres -- psql -q -c "CREATE USER ${POSTGRES_USER:-airflow} PASSWORD '${POSTGRES_PASSWORD:?}'"
  runuser -u postgres -- psql -q -c "CREATE DATABASE ${POSTGRES_DB:-airflow} OWNER ${POSTGRES_USER:-airflow}"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
fi
exec runuser -u postgres -- "$bin/postgres" -D "$data" -c listen_addresses='*'
