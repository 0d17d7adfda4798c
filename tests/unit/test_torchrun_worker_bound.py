"""A torchrun worker dies with its agent (``runtime/worker.py``): torchrun starts workers in sessions of their own,
so killing a container's process group (what YARN does, and what a lost container amounts to) would leave them
running, still members of their training group. Real torchrun (CPU), real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from airflow_provider_melon.runtime import framework, ports, worker

HOLD = """\
import os, sys, time
open(os.path.join(sys.argv[1], "pid"), "w").write(str(os.getpid()))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"  # a zombie has died
    except OSError:
        return False


def test_a_worker_dies_when_its_agents_process_group_is_sigkilled(tmp_path):
    (tmp_path / "hold.py").write_text(HOLD)
    sock = ports.reserve("127.0.0.1", None)
    port = sock.getsockname()[1]
    sock.close()
    env = framework.torch_env({"worker": [f"127.0.0.1:{port}"]}, "worker", 0)
    argv = framework.torchrun_argv(
        sys.executable,
        ["python", str(tmp_path / "hold.py"), str(tmp_path)],
        env,
        1,
        "bound-test",
        local_addr="127.0.0.1",
    )
    # the agent in a group of its own, as the NodeManager starts a container's command (setsid)
    agent = subprocess.Popen(
        argv, env={**os.environ, **env}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    pid_file = tmp_path / "pid"
    try:
        deadline = time.monotonic() + 90
        while not (pid_file.exists() and pid_file.read_text()) and agent.poll() is None:
            assert time.monotonic() < deadline, "the worker never started"
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        assert os.getpgid(pid) != agent.pid, "torchrun starts its workers outside the agent's process group"
        os.killpg(agent.pid, signal.SIGKILL)  # the container's group: the agent, not its worker's session
        agent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"worker {pid} outlived its SIGKILLed agent"
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_shim_execs_the_program_bound_to_its_parent(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            worker.__file__,
            sys.executable,
            "-c",
            "import ctypes, sys; sig = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(sig));"
            " print(sig.value, sys.argv[1:])",
            "a b",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(" ", 1) == [str(int(signal.SIGKILL)), "['a b']\n"]  # PR_GET_PDEATHSIG: SIGKILL
    assert subprocess.run([sys.executable, worker.__file__], capture_output=True, text=True).returncode == 2
