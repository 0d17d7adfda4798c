"""``melon doctor --submit-test``: a tiny job through the real path (stage, submit, the AM, its containers, a
declared output, the job's logs), one finding per step."""

from __future__ import annotations

import json
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import tenacity

from airflow_provider_melon.cli.findings import Finding, one_line
from airflow_provider_melon.hadoop.app_state import TERMINAL_STATES
from airflow_provider_melon.hadoop.rm_json import as_list


def _am_java() -> int:
    """The oldest Java the AM's class files load on (hadoop_compat: the jar is Java 8 bytecode)."""
    from airflow_provider_melon.hadoop import compat as hc

    return hc.java_for_major(hc.AM_MAX_CLASS_MAJOR)


# ---- --submit-test: a tiny job through the real path ------------------------------------------------------------
PROBE_MARK = "MELON_DOCTOR_PROBE "

#: run in each task of the probe job by the job's Python: what only a container on the node can tell (stdlib only)
PROBE_SCRIPT = r"""
import importlib.util, json, os, platform, shutil, subprocess, sys
out = {"node": "%s:%s" % (os.environ.get("NM_HOST", "?"), os.environ.get("NM_PORT", "?")),
       "container": os.environ.get("CONTAINER_ID"), "python": sys.executable,
       "python_version": platform.python_version()}
java_home = os.environ.get("JAVA_HOME")
java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
out["java_home"] = java_home
try:
    run = subprocess.run([java or "java", "-version"], capture_output=True, text=True, timeout=120)
    out["java"] = ((run.stderr or run.stdout).strip().splitlines() or ["?"])[0]
except Exception as exc:
    out["java_error"] = "%s: %s" % (java, exc)
try:
    import pynvml
    out["pynvml"] = getattr(pynvml, "__file__", "?")
    try:
        pynvml.nvmlInit()
        out["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        out["nvml_error"] = "%s: %s" % (type(exc).__name__, exc)
except ImportError as exc:
    out["pynvml_error"] = str(exc)
from importlib import metadata
frameworks = {}
for module, dist in (("tensorflow", "tensorflow"), ("torch", "torch")):
    if importlib.util.find_spec(module) is not None:
        try:
            frameworks[module] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            frameworks[module] = "?"
out["frameworks"] = frameworks
print("MELON_DOCTOR_PROBE " + json.dumps(out), flush=True)
folder = os.environ.get("MELON_OUTPUT_PROBE")
if folder:
    with open(os.path.join(folder, "probe.json"), "w") as fh:
        json.dump(out, fh)
"""


def _java_major(line: str) -> Optional[int]:
    """``openjdk version "17.0.9" 2023-10-17`` → 17; ``java version "1.8.0_392"`` → 8."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', line or "")
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def poll(look: Callable[[], Any], timeout_s: float, every_s: float) -> Any:
    """``look()`` every ``every_s`` seconds until it answers something other than None, for ``timeout_s`` at most
    (tenacity); None when the time ran out. An exception from ``look`` ends the wait with it."""
    return tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(every_s),
        retry=tenacity.retry_if_result(lambda answer: answer is None),
        retry_error_callback=lambda state: None,
    )(look)


class SubmitTest:
    """One tiny job (a probe task per RUNNING node, no GPU asked) through what a DAG's train task does: stage,
    submit, the AM, its containers, a declared output, the job's logs read from the NodeManagers. One finding
    per step, then what the tasks saw on their nodes (Java, the job Python, pynvml, the framework).

    :param hook: a :class:`~airflow_provider_melon.hooks.melon.MelonHook`.
    :param nodes: the cluster's RUNNING nodes (the RM's ``nodes``): one probe task per node.
    :param queue: the queue the job goes to.
    :param python: the job Python (None: the connection's, as for a job naming none).
    :param timeout: bound of each wait, seconds (the app's start, its end)."""

    def __init__(self, hook: Any, nodes: list[dict], *, queue: str, python: Optional[str], timeout: float):
        self.hook = hook
        self.nodes = nodes
        self.queue = queue
        self.python = python
        self.timeout = timeout
        self.findings: list[Finding] = []

    def _step(self, status: str, check: str, detail: str, fix: str = "") -> bool:
        self.findings.append(Finding(f"submit-test:{check}", status, detail, fix))
        return status != "fail"

    def run(self) -> list[Finding]:
        from airflow_provider_melon.spec import JobSpec

        hook = self.hook
        nodes = max(len(self.nodes), 1)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        output = f"{hook.staging_dir}/doctor/{run_id}"
        with tempfile.TemporaryDirectory(prefix="melon-doctor-") as code:
            Path(code, "probe.py").write_text(PROBE_SCRIPT)
            job = {
                "name": "melon-doctor-probe",
                "framework": "generic",
                "code": code,
                "entrypoint": "python probe.py",
                "queue": self.queue,
                "max_attempts": 1,
                "roles": {"probe": {"instances": nodes, "memory": "256m", "vcores": 1, "restarts": 0}},
                "outputs": {"probe": hook.hdfs_uri(output)},
            }
            if self.python:
                job["environment"] = {"python": self.python}
            spec = JobSpec.from_dict(job)
            try:
                result = hook.submit(spec, tags=["melon-doctor"])
            except Exception as exc:  # noqa: BLE001 - the step that broke is the finding
                from airflow_provider_melon.hadoop.hdfs_io import MelonHdfsError

                if isinstance(exc, (MelonHdfsError, FileNotFoundError)):
                    self._step(
                        "fail",
                        "stage",
                        f"staging to {hook.staging_dir} failed: {one_line(exc)}",
                        "see the hdfs and am-jar checks; the fix named in the error",
                    )
                else:
                    self._step("ok", "stage", "code, runtime and AM jar staged")
                    self._step(
                        "fail",
                        "submit",
                        f"the RM refused the application: {one_line(exc)}",
                        "see the error: the queue's ACLs (acl_submit_applications), its limits, the RM's "
                        "maximum allocation",
                    )
                return self.findings
        app_id, report = result["app_id"], result["staging"]
        self._step(
            "ok",
            "stage",
            f"{len(report.files)} files staged under {hook.staging_dir} "
            f"({report.uploaded_bytes} bytes uploaded, the rest cached)",
        )
        self._step(
            "ok",
            "submit",
            f"{app_id} accepted by the RM (queue {self.queue}, job Python {self.python or hook.default_python})",
        )
        try:
            app = self._wait_am(app_id) and self._wait_end(app_id)
            if app:
                self._output(output)
                self._logs(app_id, app)
        finally:
            try:
                if hook.yarn.get_application(app_id).get("state") not in TERMINAL_STATES:
                    hook.yarn.kill_application(app_id)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
            try:
                hook.hdfs.delete(output, recursive=True)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass
        return self.findings

    def _picture(self, app_id: str) -> str:
        try:
            app = self.hook.yarn.get_application(app_id)
        except Exception as exc:  # noqa: BLE001 - a message must not fail
            return f"(RM unreadable: {one_line(exc)})"
        diag = " ".join(str(app.get("diagnostics") or "").split())[:400]
        return f"state {app.get('state')}/{app.get('finalStatus')}" + (f", diagnostics: {diag}" if diag else "")

    def _wait_am(self, app_id: str) -> bool:
        """The app RUNNING with its AM serving /status (or already ended), within the timeout."""
        found = poll(lambda: self._am_seen(app_id), self.timeout, 1)
        if found is not None:
            return found
        return self._step(
            "fail",
            "am",
            f"{app_id}: no AM serving after {self.timeout:g} s: {self._picture(app_id)}",
            "an app ACCEPTED but not RUNNING waits for room for its AM: the queue's "
            "maximum-am-resource-percent, the nodes' free memory",
        )

    def _am_seen(self, app_id: str) -> Optional[bool]:
        """One look at the app for :meth:`_wait_am`: its step once decided, else None (look again)."""
        app = self.hook.yarn.get_application(app_id)
        if app.get("state") in TERMINAL_STATES:
            if app.get("finalStatus") == "SUCCEEDED":
                return self._step("ok", "am", f"{app_id}: the AM ran (the app ended before its status was read)")
            return self._step(
                "fail",
                "am",
                f"{app_id} ended before its AM served a status: {self._picture(app_id)}",
                "`melon logs " + app_id + " --container am`: the AM's log says why (a Java older "
                f"than {_am_java()} on the NodeManagers, a wrong am_classpath, HADOOP_* not in "
                "yarn.nodemanager.env-whitelist)",
            )
        if app.get("state") == "RUNNING" and self.hook.am_status(app_id):
            return self._step(
                "ok",
                "am",
                f"{app_id}: the AM runs on {app.get('amHostHttpAddress')} and serves its status through the RM proxy",
            )
        return None

    def _wait_end(self, app_id: str) -> Optional[dict]:
        """The app watched to its end (any RM error ends the check), the AM's task list read while it runs."""
        from airflow_provider_melon.hadoop.watch import IO, Watch, WatchPolicy, drive, watch

        deadline = time.monotonic() + self.timeout
        policy = WatchPolicy(1, deadline, transient=lambda exc: False, look_at_deadline=True, follow_tasks=True)
        io: IO = {
            "now": time.monotonic,
            "get": lambda: self.hook.yarn.get_application(app_id),
            "status": lambda: self.hook.am_status(app_id),
            "sleep": time.sleep,
        }
        outcome = drive(watch(Watch(app_id, policy)), io)
        app = outcome.app
        if outcome.verdict == "timeout" or app is None:
            self._step(
                "fail",
                "containers",
                f"{app_id} still running after {self.timeout:g} s: {self._picture(app_id)}",
                "the queue may lack room for the tasks; see `melon status " + app_id + "`",
            )
            return None
        tasks = as_list(outcome.tasks)
        shown = (
            ", ".join(
                f"{t.get('role')}:{t.get('index')} on {t.get('node_id') or t.get('host') or '?'}"
                for t in tasks
                if isinstance(t, dict)
            )
            or "tasks as in the AM log"
        )
        if app.get("finalStatus") == "SUCCEEDED":
            self._step("ok", "containers", f"the probe task(s) ran and the app SUCCEEDED ({shown})")
            return app
        self._step(
            "fail",
            "containers",
            f"{app_id} {app.get('finalStatus')}: {self._picture(app_id)}",
            f"`melon logs {app_id}`: the tasks' stderr says why (the job Python missing on a node, "
            "the runtime unable to start)",
        )
        return app

    def _output(self, output: str) -> bool:
        try:
            with self.hook.hdfs.read(f"{output}/probe.json") as reader:
                body = json.loads(reader.read())
        except Exception as exc:  # noqa: BLE001 - reported
            return self._step(
                "fail",
                "output",
                f"declared output {output}/probe.json not readable: {one_line(exc)}",
                "the output task publishes over WebHDFS from the NodeManagers: they must reach the "
                "NameNode and DataNodes (MELON_WEBHDFS_URL in container_env if they see it elsewhere)",
            )
        return self._step("ok", "output", f"declared output published to {output} (task on {body.get('node')})")

    def _logs(self, app_id: str, app: dict) -> None:
        from airflow_provider_melon.hadoop import nodemanager as nm_logs

        expected = max(len(self.nodes), 1)

        def read_probes() -> tuple:
            logs = nm_logs.NodeLogs(self.hook.yarn, app_id)
            probes, read = [], 0
            for ref in logs.discover(False):
                if ref.label in ("am", "container") or ref.label.startswith("am#"):
                    continue
                got = logs.fetch(ref, "stdout")
                if got is None:
                    continue
                read += 1
                for line in got[1].decode("utf-8", "replace").splitlines():
                    if line.startswith(PROBE_MARK):
                        probes.append(json.loads(line[len(PROBE_MARK) :]))
            return logs, probes, read

        # an NM that answers slowly once (a read timeout) is asked again, twice at most; the last reading stands
        logs, probes, read = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(3),
            wait=tenacity.wait_fixed(2),
            retry=tenacity.retry_if_result(lambda got: len(got[1]) < expected),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else ((), [], 0),
        )(read_probes)
        if not probes:
            causes = []
            for url in sorted(logs.unreachable):
                try:
                    resp = self.hook.yarn.get_url(f"{url}/ws/v1/node/info", headers={"Accept": "application/json"})
                    causes.append(f"{url} (now answers HTTP {resp.status_code})")
                except Exception as exc:  # noqa: BLE001 - the cause is the finding
                    causes.append(f"{url} ({one_line(exc)})")
            where = (
                f"NodeManager(s) unreachable: {', '.join(causes)}"
                if causes
                else f"{read} task log(s) read, none with the probe's line"
            )
            self._step(
                "fail",
                "logs",
                f"the tasks' stdout not read from the NodeManagers: {where}",
                "see the nodemanagers check; with log aggregation off an NM keeps logs "
                "yarn.nodemanager.log.retain-seconds",
            )
            return
        self._step("ok", "logs", f"stdout of {len(probes)} task(s) read from the NodeManagers' REST API")
        self._node_findings(probes)

    def _node_findings(self, probes: list[dict]) -> None:
        seen = {p.get("node") for p in probes}
        missing = [str(n.get("id")) for n in self.nodes if str(n.get("id")) not in seen]
        note = f" (YARN placed no probe on {', '.join(missing)}: not checked there)" if missing else ""
        java_bad, java_ok = [], []
        for p in probes:
            major = _java_major(p.get("java", ""))
            if major is None or major < _am_java():
                java_bad.append(f"{p.get('node')}: {p.get('java') or p.get('java_error')}")
            else:
                java_ok.append(f"{p.get('node')}: {p.get('java')}")
        if java_bad:
            self._step(
                "fail",
                "java",
                f"the containers' Java is older than {_am_java()} or missing: {'; '.join(java_bad)}{note}",
                f"the AM's class files need Java {_am_java()}: install it on "
                "the NodeManagers and point their JAVA_HOME at it (yarn.nodemanager.env-whitelist passes it)",
            )
        else:
            self._step("ok", "java", "; ".join(java_ok) + note)
        python = {f"{p.get('node')}: {p.get('python')} {p.get('python_version')}" for p in probes}
        no_nvml = [
            f"{p.get('node')}: {p.get('python')}: {p.get('pynvml_error')}" for p in probes if "pynvml_error" in p
        ]
        if no_nvml:
            self._step(
                "fail",
                "pynvml",
                f"the job Python has no pynvml: {'; '.join(sorted(no_nvml))}{note}",
                "install nvidia-ml-py into the job Python on every GPU node (or into the job's "
                "environment.archive): without it tasks run with no GPU",
            )
        else:
            nvml = "; ".join(
                sorted(
                    f"{p.get('node')}: "
                    + (f"{p['nvml_gpus']} GPU(s)" if "nvml_gpus" in p else f"NVML {p.get('nvml_error', '?')}")
                    for p in probes
                )
            )
            self._step("ok", "pynvml", f"{'; '.join(sorted(python))}; pynvml present ({nvml}){note}")
        none = [f"{p.get('node')}: {p.get('python')}" for p in probes if not p.get("frameworks")]
        if none:
            self._step(
                "fail",
                "framework",
                f"neither TensorFlow nor PyTorch in the job Python: {'; '.join(none)}{note}",
                "install tensorflow or torch into the job Python on every node, or ship one "
                "with the job (environment.archive from `melon pack-env`)",
            )
        else:
            found = sorted(
                {f"{p.get('node')}: " + ", ".join(f"{k} {v}" for k, v in p["frameworks"].items()) for p in probes}
            )
            self._step("ok", "framework", "; ".join(found) + note)


__all__ = ["PROBE_MARK", "PROBE_SCRIPT", "SubmitTest"]
