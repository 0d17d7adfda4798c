#!/usr/bin/env bash
# Build everything the docker/ stack runs, from this checkout, without a container registry:
#   1. localhost/melon-base:bookworm  a Debian base made by debootstrap (skipped if it exists, or with
#                                     MELON_BASE=<image> to build FROM a registry image instead, e.g. debian:bookworm)
#   2. docker/hadoop/dist/            Hadoop 3.5.0 from Maven Central in the binary distribution's layout
#   3. docker/airflow/dist/           the provider's wheel (carrying the AM jar) and constraints.txt
#   4. the images melon-hadoop, melon-airflow, melon-postgres (layer cache makes a rebuild quick)
#   5. docker/.env                    random passwords/secrets for compose (kept once written)
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

bash "$here/hadoop/assemble.sh" "$here/hadoop/dist"
cp "$repo/constraints.txt" "$here/hadoop/constraints.txt"

rm -rf "$here/airflow/dist" && mkdir -p "$here/airflow/dist"
"$repo/.venv/bin/python" -m pip wheel -q --no-deps -w "$here/airflow/dist" "$repo"
cp "$repo/constraints.txt" "$here/airflow/dist/"
# the wheel's own requirements (Requires-Dist without extras), installed in a layer of their own
"$repo/.venv/bin/python" - "$here/airflow/dist" <<'PY'
import glob, sys, zipfile
from email.parser import Parser
dist = sys.argv[1]
[whl] = glob.glob(f"{dist}/airflow_provider_melon-*.whl")
with zipfile.ZipFile(whl) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
open(f"{dist}/requirements.txt", "w").write("".join(r + "\n" for r in reqs if "extra ==" not in r))
PY

for image in hadoop:3.5.0 airflow:3.3.2 postgres:15; do
  name=${image%%:*}
  echo "[docker] build localhost/melon-$image"
  $MELON_ENGINE build -q --build-arg BASE="$base" -t "localhost/melon-$image" "$here/$name" >/dev/null
done

if [ ! -f "$here/.env" ]; then
  secret() { python3 -c "import secrets; print(secrets.token_urlsafe(24))"; }
  printf 'MELON_JWT_SECRET=%s\nMELON_DB_PASSWORD=%s\nMELON_ADMIN_PASSWORD=%s\n' "$(secret)" "$(secret)" "$(secret)" \
    > "$here/.env"
  chmod 600 "$here/.env"
fi
echo "[docker] images ready in $(( $(date +%s) - t0 )) s:"
$MELON_ENGINE images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep melon- || true
