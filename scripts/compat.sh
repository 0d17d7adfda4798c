#!/usr/bin/env bash
# `make compat [LINES="3.0 3.3"]`: the provider on each supported Airflow minor line, newest patch of each.
# For each line: a venv .venv-compat/<line> (git-ignored) with `apache-airflow==<version>` and this package
# (`-e '.[test,pack,docs]'`, no TensorFlow: the subset's jobs are `generic` ones) pinned by compat/constraints-<line>.txt,
# then the unit tests and the real-Airflow e2e subset (COMPAT_E2E below: a deferred train task held by the
# triggerer, a retry that reattaches, the UI plugin's pages) on the real mini cluster. Results (pytest's summary
# line per part) go to .venv-compat/results/<line>.txt and a table at the end; exit 1 if any part failed.
#
# 3.3, the line `make test` runs, reuses the project's constraints.txt (compat/constraints-3.3.txt is a link to it).
# INSTALL_ONLY=1 builds the venvs and runs nothing. PARTS="e2e" runs only the e2e subset (default "unit e2e": CI
# runs `PARTS=e2e make compat LINES=3.0`). RESOLVE=1 re-resolves a line's constraints (a fresh venv, pip's resolver,
# `pip freeze`) and rewrites compat/constraints-<line>.txt: Airflow's own published constraints (constraints-<version>/constraints-3.11.txt on
# GitHub) are not reachable from this machine, so the committed files stand in for them (their headers say so).
# Ports: MELON_TEST_PORT_BASE etc. as for `make test`; lines run one after another on the same ports.
set -uo pipefail
cd "$(dirname "$0")/.."

declare -A VERSION=([3.0]=3.0.6 [3.1]=3.1.8 [3.2]=3.2.2 [3.3]=3.3.2)
# Hints for RESOLVE only (the resolver otherwise backtracks for many minutes): Airflow 3.0 pins SQLAlchemy < 2,
# and the FAB provider's flask-sqlalchemy>=3.0.5 then needs flask-sqlalchemy 3.0.x (3.1 wants SQLAlchemy 2).
# Not for speed: Airflow 3.0.6 declares fastapi>=0.115 without a cap, and on what pip picks then (fastapi 0.165,
# cadwyn 9) its execution API refuses every task's PATCH /execution/task-instances/<id>/run (422 "Input should be a
# valid dictionary"): no task runs. The 3.0 line gets the caps 3.1.8 itself declares (fastapi<0.118; cadwyn<5.5 and
# starlette<0.49 follow from it).
# Airflow 3.1.8 pins fastapi<0.118: cadwyn 5.5+ needs fastapi>=0.119 and fastapi 0.117 needs starlette<0.49, so
# without those two hints pip walks back through every newer cadwyn and starlette release.
# Airflow 3.2.2 declares fastapi>=0.129 uncapped; on fastapi 0.165 its execution API's routes fail to build
# (pydantic "AttributeError: __pydantic_core_schema__" in fastapi/routing.py: the dag-processor dies at start).
# Capped at the fastapi below 0.137 that 3.3.2 runs on in constraints.txt; cadwyn 8+ needs fastapi 0.137.1+.
# Airflow 3.2.2 declares svcs>=25.1.0 uncapped; with svcs 26.x its in-process execution API (what `airflow tasks test`
# and `dags test` run tasks through) never gets its registry: every task's first PATCH answers 500
# (AttributeError: 'State' object has no attribute 'svcs_registry'), so nothing runs. 3.0, 3.1 and 3.3.2 run on 26.2.0.
declare -A HINTS=([3.0]="sqlalchemy<2 flask-sqlalchemy<3.1 fastapi<0.118 cadwyn<5.5 starlette<0.49" [3.1]="cadwyn<5.5 starlette<0.49" [3.2]="fastapi<0.137 cadwyn<8 svcs<26")
LINES=${LINES:-"3.0 3.1 3.2 3.3"}
PARTS=${PARTS:-"unit e2e"}
for part in $PARTS; do
  case $part in unit|e2e) ;; *) echo "[compat] PARTS: unknown part '$part' (known: unit e2e)"; exit 2;; esac
done
PY=${PYTHON:-python3}
# docs: tests/unit/test_docs.py builds the Sphinx site (part of the unit tests, as in `make test`)
EXTRAS='.[test,pack,docs]'
export MELON_TORCH_OPTIONAL=1  # no framework in these venvs: the PyTorch tests skip here (tests/conftest.py)
# The e2e subset: existing tests, each run as `make test` runs it.
COMPAT_E2E=(
  "tests/e2e/test_real_airflow.py::test_hpo_runs_in_parallel_with_trials_held_by_the_triggerer"
  "tests/e2e/test_reattach_and_kill.py::test_retry_after_a_crashed_worker_reattaches"
  "tests/e2e/test_ui_plugin.py"
)
PYTEST=(-m pytest -q -rs -p no:cacheprovider --timeout=900)
RESULTS=.venv-compat/results
mkdir -p "$RESULTS"

resolve() {  # $1 line: a fresh resolve of apache-airflow==<version> + this package -> compat/constraints-<line>.txt
  local line=$1 version=${VERSION[$1]} venv=.venv-compat/$1 out=compat/constraints-$1.txt
  local hints=.venv-compat/hints-$1.txt
  if [ -L "$out" ]; then  # 3.3: the project's own constraints.txt (`make constraints` refreshes it), not resolved here
    echo "$out is a link to $(readlink "$out"): refresh that with \`make constraints\`"; return 1
  fi
  rm -rf "$venv" && "$PY" -m venv "$venv" || return 1
  tr ' ' '\n' <<< "${HINTS[$1]:-}" > "$hints"
  "$venv/bin/python" -m pip install -q -c "$hints" "apache-airflow==$version" -e "$EXTRAS" || return 1
  {
    echo "# Stands in for Airflow's own constraints-$version/constraints-3.11.txt (not reachable from the machine"
    echo "# that made it). Made by \`RESOLVE=1 LINES=$line make compat\` on $(date -u +%F): pip's resolver on"
    echo "# \`pip install apache-airflow==$version -e '$EXTRAS'\` (resolver hints: ${HINTS[$1]:-none}) in a fresh Python $("$venv/bin/python" -c \
      'import platform; print(platform.python_version())') venv, then \`pip freeze\`."
    "$venv/bin/python" -m pip freeze --exclude-editable | grep -v '^airflow-provider-melon'
  } > "$out"
  echo "$EXTRAS" > "$venv/.melon-compat-installed"
}

install() {  # $1 line: the venv from the committed constraints (reused while setup.cfg and they are unchanged)
  local line=$1 version=${VERSION[$1]} venv=.venv-compat/$1 cons=compat/constraints-$1.txt
  local stamp=$venv/.melon-compat-installed
  if [ -f "$stamp" ] && [ ! setup.cfg -nt "$stamp" ] && [ ! "$cons" -nt "$stamp" ] \
    && [ "$(cat "$stamp")" = "$EXTRAS" ]; then return 0; fi
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install -q -c "$cons" "apache-airflow==$version" -e "$EXTRAS" || return 1
  echo "$EXTRAS" > "$stamp"
}

summary() {  # pytest's last line ("3 passed, 1 skipped in 12.3s") or why there is none
  local log=$1 rc=$2 last
  last=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran' "$log" | tail -1 | sed 's/=//g;s/^ *//;s/ *$//')
  echo "${last:-no pytest summary} (rc $rc)"
}

failed=0
for line in $LINES; do
  version=${VERSION[$line]:-}
  if [ -z "$version" ]; then echo "[compat] unknown line $line (known: ${!VERSION[*]})"; exit 2; fi
  venv=.venv-compat/$line
  log=$RESULTS/$line
  echo "[compat] Airflow $version: venv $venv"
  if [ "${RESOLVE:-0}" = 1 ] || [ ! -f "compat/constraints-$line.txt" ]; then
    resolve "$line" > "$log.install.log" 2>&1
  else
    install "$line" > "$log.install.log" 2>&1
  fi
  rc=$?
  if [ $rc != 0 ]; then
    tail -20 "$log.install.log"
    printf '%s\t%s\t%s\t%s\n' "$line" "$version" "install failed (rc $rc)" "-" > "$log.txt"
    failed=1
    continue
  fi
  if [ "${INSTALL_ONLY:-0}" = 1 ]; then echo "[compat] $venv ready (INSTALL_ONLY=1: no tests)"; continue; fi
  got=$("$venv/bin/python" -c 'import airflow; print(airflow.__version__)')
  urc=0 erc=0 usum="not run (PARTS)" esum="not run (PARTS)"
  if [[ " $PARTS " == *" unit "* ]]; then
    echo "[compat] Airflow $got: unit tests"
    "$venv/bin/python" "${PYTEST[@]}" tests/unit 2>&1 | tee "$log.unit.log"; urc=${PIPESTATUS[0]}
    usum=$(summary "$log.unit.log" "$urc")
  fi
  if [[ " $PARTS " == *" e2e "* ]]; then
    echo "[compat] Airflow $got: e2e subset"
    "$venv/bin/python" "${PYTEST[@]}" "${COMPAT_E2E[@]}" 2>&1 | tee "$log.e2e.log"; erc=${PIPESTATUS[0]}
    esum=$(summary "$log.e2e.log" "$erc")
  fi
  printf '%s\t%s\t%s\t%s\n' "$line" "$got" "$usum" "$esum" > "$log.txt"
  [ "$urc" = 0 ] && [ "$erc" = 0 ] || failed=1
done

echo
echo "[compat] $(date -u '+%F %H:%M UTC'), $(uname -m), Python $("$PY" -c 'import platform; print(platform.python_version())')"
printf '%-5s %-8s %-45s %s\n' line airflow "unit tests" "e2e subset"
for line in $LINES; do
  [ -f "$RESULTS/$line.txt" ] && awk -F'\t' '{printf "%-5s %-8s %-45s %s\n", $1, $2, $3, $4}' "$RESULTS/$line.txt"
done
exit $failed
