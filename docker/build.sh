#!/usr/bin/env bash
# Build everything the docker/ stack runs, from this checkout, without a container registry:
#   1. localhost/melon-base:bookworm  a Debian base made by debootstrap (skipped if it exists, or with
#                                     MELON_BASE=<image> to build FROM a registry image instead, e.g. debian:bookworm)
#   2. docker/hadoop/dist/<version>/  Hadoop from Maven Central in the binary distribution's layout, for each line
#                                     in HADOOP_VERSION (space-separated; default 3.5.0; 3.3.6, 3.4.2 and 3.5.0)
#   3. docker/airflow/dist/           the provider's wheel (carrying the AM jar and the scheduler plug-in, which goes
#                                     into each Hadoop line's share/hadoop/yarn/lib), its requirements with the
#                                     [celery] extra (the stack runs the CeleryExecutor) and constraints.txt; for the
#                                     3.0 client, its requirements without extras and compat/constraints-3.0.txt
#   4. the images melon-hadoop:<version> (each on its line's Java: 3.5 → 17, 3.3/3.4 → 11), melon-airflow,
#      melon-postgres, melon-redis, and melon-airflow-client:3.0.6 (the same wheel installed with
#      `pip install -c compat/constraints-3.0.txt <wheel>` on Airflow 3.0.6: a client on another supported line,
#      which the docker tests run `melon doctor --submit-test` from); both Airflow images from airflow/Dockerfile,
#      `--target airflow` and `--target client` (layer cache makes a rebuild quick)
#   5. docker/.env                    random passwords/secrets for compose (kept once written; missing ones added)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
source "$here/engine.sh"
base="${MELON_BASE:-localhost/melon-base:bookworm}"
t0=$(date +%s)

if [ "$base" = localhost/melon-base:bookworm ] && ! $MELON_ENGINE image exists "$base" 2>/dev/null \
   && ! $MELON_ENGINE image inspect "$base" >/dev/null 2>&1; then
  echo "[docker] debootstrap Debian bookworm (minbase) -> $base"
  root=$(mktemp -d /tmp/melon-base.XXXXXX)
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | $MELON_ENGINE import - "$base" >/dev/null
  rm -rf "$root"
fi

# Extra CA certificates of this host (a TLS-intercepting proxy's, say): the images' pip must trust them too.
for name in hadoop airflow; do
  rm -rf "$here/$name/certs" && mkdir -p "$here/$name/certs"
  cp /usr/local/share/ca-certificates/*.crt "$here/$name/certs/" 2>/dev/null || true
done

hadoop_versions="${HADOOP_VERSION:-3.5.0}"
java_of() { case "$1" in 3.5.*) echo 17 ;; 3.3.*|3.4.*) echo 11 ;; *) echo "no Java known for Hadoop $1" >&2; exit 2 ;; esac; }
for v in $hadoop_versions; do
  java_of "$v" >/dev/null
  HADOOP_VERSION="$v" bash "$here/hadoop/assemble.sh" "$here/hadoop/dist/$v"
done
cp "$repo/constraints.txt" "$here/hadoop/constraints.txt"

rm -rf "$here/airflow/dist" && mkdir -p "$here/airflow/dist"
"$repo/.venv/bin/python" -m pip wheel -q --no-deps -w "$here/airflow/dist" "$repo"
cp "$repo/constraints.txt" "$repo/compat/constraints-3.0.txt" "$here/airflow/dist/"
# the wheel's own requirements (Requires-Dist without extras), installed in a layer of their own
"$repo/.venv/bin/python" - "$here/airflow/dist" <<'PY'
import glob, sys, zipfile
from email.parser import Parser
dist = sys.argv[1]
[whl] = glob.glob(f"{dist}/airflow_provider_melon-*.whl")
with zipfile.ZipFile(whl) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
# the [celery] extra's too (the stack's executor), without its marker
wanted = [r if "extra ==" not in r else r.split(";")[0].strip() for r in reqs
          if "extra ==" not in r or 'extra == "celery"' in r]
open(f"{dist}/requirements.txt", "w").write("".join(r + "\n" for r in wanted))
# the 3.0 client's: the wheel's own requirements only (no extras), as `pip install <wheel>` resolves them
open(f"{dist}/requirements-core.txt", "w").write("".join(r + "\n" for r in reqs if "extra ==" not in r))
PY
# the scheduler plug-in, as an admin installs it: the wheel's jar into each line's share/hadoop/yarn/lib
# (docs/scheduler-plugin.md)
for v in $hadoop_versions; do
  "$repo/.venv/bin/python" - "$here/airflow/dist" "$here/hadoop/dist/$v/share/hadoop/yarn/lib" <<'PY'
import glob, shutil, sys, zipfile
[whl] = glob.glob(f"{sys.argv[1]}/airflow_provider_melon-*.whl")
with zipfile.ZipFile(whl) as zf, zf.open("airflow_provider_melon/rm/melon-scheduler.jar") as src, \
        open(f"{sys.argv[2]}/melon-scheduler.jar", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
done

for v in $hadoop_versions; do
  echo "[docker] build localhost/melon-hadoop:$v (Java $(java_of "$v"))"
  $MELON_ENGINE build -q --build-arg BASE="$base" --build-arg HADOOP_VERSION="$v" \
    --build-arg JAVA_VERSION="$(java_of "$v")" -t "localhost/melon-hadoop:$v" "$here/hadoop" >/dev/null
done
# the two Airflow images: one Dockerfile, one target each (the client second, reusing the first's layers and pip cache)
airflow_image() {  # <target> <image> <what>
  echo "[docker] build localhost/$2 ($3)"
  local ts=$(date +%s)
  $MELON_ENGINE build -q --build-arg BASE="$base" --target "$1" -t "localhost/$2" "$here/airflow" >/dev/null
  echo "[docker] $2 built in $(( $(date +%s) - ts )) s"
}
airflow_image airflow melon-airflow:3.3.2 "the stack's Airflow, the wheel under constraints.txt"
for image in postgres:15 redis:7; do
  name=${image%%:*}
  echo "[docker] build localhost/melon-$image"
  $MELON_ENGINE build -q --build-arg BASE="$base" -t "localhost/melon-$image" "$here/$name" >/dev/null
done
airflow_image client melon-airflow-client:3.0.6 "the wheel under compat/constraints-3.0.txt"

secret() { python3 -c "import secrets; print(secrets.token_urlsafe(24))"; }
touch "$here/.env" && chmod 600 "$here/.env"
for key in MELON_JWT_SECRET MELON_DB_PASSWORD MELON_ADMIN_PASSWORD MELON_REDIS_PASSWORD; do
  grep -q "^$key=" "$here/.env" || echo "$key=$(secret)" >> "$here/.env"
done
echo "[docker] images ready in $(( $(date +%s) - t0 )) s:"
$MELON_ENGINE images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep melon- || true
