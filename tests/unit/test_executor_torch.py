"""The executor with real PyTorch (CPU): torchrun as the launcher (one agent, two gloo processes, every process of the
agent in the task's process tree), torch's own out-of-memory error type (exit 76) and the host's (its own exit
code). A real executor subprocess against the in-test AM of tests/unit/test_executor.py."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_melon.gpu import devices
from airflow_provider_melon.runtime import executor, framework, ports
from tests.unit.test_executor import am_factory, exec_env, finish, inventory, start  # noqa: F401 - fixtures
from tests.unit.test_executor_oom import run_logged

# make setup installs torch (a skip naming it fails there: tests/conftest.py); the compat venvs carry none
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

# Each process of the group: its ranks as torchrun set them, and a sum over the group (gloo, on CPU).
DDP = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    print("RANKS rank=%s world=%s local_rank=%s local_world=%s sum=%d" % (
        os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"],
        int(total.item())), flush=True)
    dist.destroy_process_group()
    """
)


@needs_torch
def test_torchrun_launcher_runs_nproc_per_node_gloo_processes(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    (tmp_path / "ddp.py").write_text(DDP)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_FRAMEWORK="pytorch",
        MELON_LAUNCHER="torchrun",
        MELON_NPROC_PER_NODE=2,
        MELON_ENTRYPOINT=f"python {tmp_path / 'ddp.py'}",
    )
    rc, out, err = finish(start(tmp_path, env), timeout=120)
    assert rc == 0, err
    # found anywhere in the output: the processes share the container's stdout, and their lines may interleave
    ranks = sorted(re.findall(r"RANKS rank=\d+ world=\d+ local_rank=\d+ local_world=\d+ sum=\d+", out))
    assert ranks == [
        "RANKS rank=0 world=2 local_rank=0 local_world=2 sum=1",
        "RANKS rank=1 world=2 local_rank=1 local_world=2 sum=1",
    ], out + err
    # the agent ran on the registered address and port (the c10d rendezvous endpoint), for this application
    started = [line for line in err.splitlines() if "starting [" in line]
    assert len(started) == 1, err
    address = am.addresses["worker:0"]
    for arg in (
        "'-m', 'torch.distributed.run'",
        "'--nnodes=1'",
        "'--nproc-per-node=2'",
        "'--rdzv-backend=c10d'",
        f"'--rdzv-endpoint={address}'",
        "'--rdzv-id=application_1_0001'",
        "'--rdzv-conf=is_host=1'",
        f"'{tmp_path / 'ddp.py'}'",
    ):
        assert arg in started[0], started[0]


def test_torchrun_needs_the_pytorch_framework(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_FRAMEWORK="generic", MELON_LAUNCHER="torchrun")
    rc, _, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_CONFIG
    assert "MELON_LAUNCHER=torchrun needs MELON_FRAMEWORK=pytorch, got 'generic'" in err


# Each process of the agent writes its pid, then waits (bounded) until the test has looked at the process tree.
HOLD = textwrap.dedent(
    """
    import os, sys, time
    folder = sys.argv[1]
    with open(os.path.join(folder, "pid-%s" % os.environ["LOCAL_RANK"]), "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)
    """
)


@needs_torch
def test_every_process_of_a_torchrun_agent_is_in_the_tasks_process_tree(tmp_path):
    """What NVML's per-process usage is matched against (the executor's heartbeat): the agent's workers are its
    children, so ``devices.process_tree`` of the user's process (the agent) holds them."""
    (tmp_path / "hold.py").write_text(HOLD)
    sock = ports.reserve("127.0.0.1", None)
    port = sock.getsockname()[1]
    sock.close()
    env = framework.torch_env({"worker": [f"127.0.0.1:{port}"]}, "worker", 0)
    argv = framework.torchrun_argv(
        sys.executable,
        ["python", str(tmp_path / "hold.py"), str(tmp_path)],
        env,
        3,
        "tree-test",
        local_addr="127.0.0.1",
    )
    agent = subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 90
        pids = []
        while len(pids) < 3 and agent.poll() is None and time.monotonic() < deadline:
            pids = [int(p.read_text()) for p in tmp_path.glob("pid-*") if p.read_text()]
            time.sleep(0.1)
        assert len(pids) == 3, agent.communicate(timeout=30)[0] if agent.poll() is not None else "timed out"
        tree = devices.process_tree(agent.pid)
        assert set(pids) <= set(tree) and agent.pid in tree
    finally:
        (tmp_path / "release").touch()
        out = agent.communicate(timeout=60)[0]
    assert agent.returncode == 0, out


# torch's own out-of-memory type (torch.OutOfMemoryError, on every build from 2.5; CUDA raises it from its caching
# allocator with this message), raised where a CPU cannot allocate GPU memory.
TORCH_OOM = textwrap.dedent(
    """
    import torch
    assert torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "15.77 GiB of which 1.02 GiB is free.")
    """
)

# A real allocation the host cannot give: torch's CPU allocator fails (host memory, not GPU memory).
TORCH_HOST_OOM = "import torch; torch.empty(2 ** 50, dtype=torch.uint8)"


@needs_torch
def test_a_real_torch_out_of_memory_error_exits_76(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    (tmp_path / "oom.py").write_text(TORCH_OOM)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_FRAMEWORK="pytorch",
        MELON_GPUS=1,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_ENTRYPOINT=f"python {tmp_path / 'oom.py'}",
    )
    rc, _, err = run_logged(tmp_path, env)
    assert rc == executor.EXIT_GPU_OOM == 76, err
    oom = am.heartbeats[-1]["oom"]
    assert oom["signature"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


@needs_torch
def test_a_real_torch_host_allocation_failure_keeps_its_exit_code(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    (tmp_path / "host.py").write_text(TORCH_HOST_OOM)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_FRAMEWORK="pytorch",
        MELON_GPUS=1,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_ENTRYPOINT=f"python {tmp_path / 'host.py'}",
    )
    rc, _, err = run_logged(tmp_path, env)
    assert rc == 1, err
    assert "DefaultCPUAllocator" in err  # torch's own message, as the user sees it
    assert "oom" not in am.heartbeats[-1]


@pytest.mark.parametrize(
    "argv, expected_tail",
    [
        (["python", "train.py", "--lr", "0.1"], ["/env/bin/python", "train.py", "--lr", "0.1"]),
        (["python3", "-m", "pkg.train", "x"], ["/env/bin/python", "-m", "pkg.train", "x"]),
        ([sys.executable, "train.py"], ["/env/bin/python", "train.py"]),
        (["bash", "run.sh"], ["bash", "run.sh"]),
    ],
)
def test_torchrun_argv_keeps_the_users_command(argv, expected_tail):
    env = framework.torch_env({"master": ["m0:4000"], "worker": ["w0:4001"]}, "worker", 0)
    got = framework.torchrun_argv("/env/bin/python", argv, env, 1, "app_1", local_addr="w0")
    assert got[:3] == ["/env/bin/python", "-m", "torch.distributed.run"]
    assert got[3:10] == [
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=m0:4000",
        "--rdzv-id=app_1",
        "--rdzv-conf=is_host=0",
        "--local-addr=w0",
    ]
    # every worker starts through the shim that binds it to its agent (runtime/worker.py)
    assert got[10:13] == ["--no-python", "/env/bin/python", framework.WORKER_SHIM]
    assert got[13:] == expected_tail


def test_torchrun_argv_hosts_the_store_on_rank_0_and_takes_elastic_bounds():
    env = framework.torch_env({"worker": ["[::1]:4000", "h1:4001"]}, "worker", 0)
    got = framework.torchrun_argv("py", ["python", "t.py"], env, 4, "app_2", local_addr="::1", nnodes="1:2")
    assert {
        "--nnodes=1:2",
        "--nproc-per-node=4",
        "--rdzv-endpoint=[::1]:4000",
        f"--rdzv-conf=is_host=1,{framework.ELASTIC_RDZV_CONF}",
    } <= set(got)
    # the store beside the AM (MELON_RDZV_ENDPOINT): rank 0's agent is its client like every other
    beside = framework.torchrun_argv(
        "py", ["python", "t.py"], env, 1, "app_2", local_addr="::1", nnodes="1:2", rdzv_endpoint="am:7000"
    )
    assert {"--rdzv-endpoint=am:7000", f"--rdzv-conf=is_host=0,{framework.ELASTIC_RDZV_CONF}"} <= set(beside)
    with pytest.raises(ValueError, match="nproc_per_node must be >= 1"):
        framework.torchrun_argv("py", ["python", "t.py"], env, 0, "a", local_addr="h")
    with pytest.raises(ValueError, match="script or -m module after python"):
        framework.torchrun_argv("py", ["python"], env, 1, "a", local_addr="h")


def test_nproc_per_node_above_one_needs_torchrun(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_FRAMEWORK="pytorch", MELON_NPROC_PER_NODE=2)
    rc, _, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_CONFIG
    assert "MELON_NPROC_PER_NODE=2: at least 1, and above 1 only with MELON_LAUNCHER=torchrun" in err
    assert json.dumps(am.registrations) == "[]"  # refused before registering
