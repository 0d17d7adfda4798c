# Sourced by docker/build.sh and the docker tests' driver: which container engine and compose to use, and the
# podman settings these machines need (field notes, "Containers"): a containers.conf given through
# CONTAINERS_CONF with ulimits derived from this shell's hard limits, and runc as the runtime.
#   MELON_ENGINE=podman|docker (default: podman if installed, else docker)
here_engine="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MELON_ENGINE="${MELON_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}"
if [ "$MELON_ENGINE" = podman ]; then
  conf_dir="$here_engine/../.podman"
  mkdir -p "$conf_dir"
  nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
  nproc=$(ulimit -Hu); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
  cat > "$conf_dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF="$conf_dir/containers.conf"
  MELON_COMPOSE=(podman-compose)
  # else the venv's, run as a module: the venv's bin/podman-compose script names the interpreter by the absolute
  # path the venv was made at, and fails with "required file not found" once the venv has been moved
  command -v podman-compose >/dev/null || MELON_COMPOSE=("$here_engine/../.venv/bin/python" -m podman_compose)
else
  MELON_COMPOSE=(docker compose)
fi
export MELON_ENGINE
