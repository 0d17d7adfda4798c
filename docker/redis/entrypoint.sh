#!/bin/sh
# The Celery broker: Redis as Debian's redis user, password from $REDIS_PASSWORD (docker/.env), no persistence
# (a lost broker loses queued messages only; the scheduler re-queues what it does not see running).
set -eu
: "${REDIS_PASSWORD:?set REDIS_PASSWORD (compose passes MELON_REDIS_PASSWORD from docker/.env)}"
exec runuser -u redis -- redis-server --bind 0.0.0.0 --port 6379 --requirepass "$REDIS_PASSWORD" \
  --save "" --appendonly no --daemonize no --logfile ""
