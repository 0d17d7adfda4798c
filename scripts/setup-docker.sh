#!/usr/bin/env bash
# Set-up for `make docker-test`: podman (4.3 from Debian), debootstrap and runc, podman-compose into the venv.
# Exits 3 with the reason on stdout when containers cannot run on this machine (.ci/run then skips the docker
# tests and prints why); any other failure is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
command -v podman >/dev/null || need_apt+=(podman)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v runc >/dev/null || need_apt+=(runc)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup-docker] apt-get install ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
.venv/bin/python -m pip install -q -c constraints.txt podman-compose   # the [docker] extra, pinned
source docker/engine.sh
# Can this machine run a container at all? (a throw-away busybox-like check on an empty rootfs image)
probe=$(mktemp -d /tmp/melon-probe.XXXXXX)
true_bin=$(type -P true)
mkdir -p "$probe/bin" && cp "$true_bin" "$probe/bin/true"
for lib in $(ldd "$true_bin" | grep -o '/[^ ]*'); do mkdir -p "$probe$(dirname "$lib")"; cp "$lib" "$probe$lib"; done
if ! out=$(tar -C "$probe" -c . | $MELON_ENGINE import - localhost/melon-probe:latest 2>&1 \
          && $MELON_ENGINE run --rm localhost/melon-probe:latest /bin/true 2>&1); then
  rm -rf "$probe"
  echo "containers cannot run here ($MELON_ENGINE): $(echo "$out" | tail -2 | tr '\n' ' ')"
  exit 3
fi
$MELON_ENGINE rmi -f localhost/melon-probe:latest >/dev/null 2>&1 || true
rm -rf "$probe"
echo "[setup-docker] $MELON_ENGINE runs containers"
