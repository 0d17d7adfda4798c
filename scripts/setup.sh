#!/usr/bin/env bash
# One-shot, idempotent set-up for a fresh machine: system packages, the venv (pinned by constraints.txt),
# the package in editable mode, and the Maven build of the ApplicationMaster + mini-cluster launcher.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
want_apt=()
command -v krb5-config >/dev/null || need_apt+=(libkrb5-dev)   # requests-kerberos -> gssapi/krb5 build
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)   # the metadata DB of the local Airflow (e2e, demo)
# the UI plugin's browser tests drive Debian's Chromium (no downloaded browser builds); optional: they skip
# with the reason if it cannot be installed
command -v chromedriver >/dev/null || want_apt=(chromium chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ${#want_apt[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${want_apt[*]} (browser tests)"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${want_apt[@]}" >/dev/null; } \
    || echo "[setup] WARNING: could not install ${want_apt[*]}: the browser tests will skip"
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.melon-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  # [pytorch]: PyPI's torch wheel with the CUDA libraries it requires (5.3 GB; it runs on CPU without a GPU), so
  # every PyTorch test runs (docs/development.md, "PyTorch in the test environment")
  echo "[setup] pip install -e '.[tensorflow,pytorch,test,pack,docs]' -c constraints.txt (first time: several minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[tensorflow,pytorch,test,pack,docs]'
  touch "$stamp"
fi

# the AM jar (into the package, as wheels carry it) and the mini-cluster launcher's classes + classpath
bash appmaster/build.sh --dev
echo "[setup] ready"
