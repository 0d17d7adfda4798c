"""An elastic torchrun group on one host, started as the executor starts it (``framework.torchrun_argv`` and
``framework.torchrun_env``): one agent of three is lost with its whole process group (what YARN's kill of a container
amounts to), the two left re-form and resume from rank 0's checkpoint, and a replacement agent (the lost task's
environment, as the ApplicationMaster's replacement container gets it) joins the running group, which re-forms at
three and finishes. Real torchrun, real c10d rendezvous, gloo collectives on CPU."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from airflow_provider_melon.runtime import framework, ports

pytestmark = pytest.mark.slow

# each step all-reduces a one over the group; rank 0 appends "step world sum" to the log, then checkpoints the step,
# which every (re)started group resumes from (a step logged but not checkpointed is done again)
TRAIN = """\
import os, sys, time
import torch
import torch.distributed as dist

out, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with open(os.path.join(out, f"agent-{os.getppid()}"), "w") as f:  # this round's node rank of this worker's agent
    f.write(os.environ["GROUP_RANK"])
ckpt = os.path.join(out, "ckpt")
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
for step in range(start + 1, steps + 1):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        with open(os.path.join(out, "log"), "a") as f:
            f.write(f"step {step} world {world} sum {int(t.item())}\\n")
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.25)
dist.destroy_process_group()
"""
LINE = re.compile(r"^step (\d+) world (\d+) sum (\d+)$", re.M)


class Group:
    """Three torchrun agents, each in a session of its own (as the NodeManager starts a container's command)."""

    def __init__(self, tmp_path, steps: int, host: int = 0):
        self.tmp, self.steps, self.host = tmp_path, steps, host
        (tmp_path / "train.py").write_text(TRAIN)
        sock = ports.reserve("127.0.0.1", None)
        self.port = sock.getsockname()[1]
        sock.close()
        self.agents: dict[str, subprocess.Popen] = {}

    def start(self, name: str, index: int) -> None:
        """Agent ``name`` for task ``index``; the task given ``host`` is the rendezvous host (``RANK`` 0), the role's
        task 0 in the executor. Task ``i``'s agent has the address 127.0.0.<i+1> (``--local-addr``, as each container
        has its host's): torch's rendezvous ranks the nodes in the order of their descriptors, address first
        (``_NodeDesc``), so task 0's agent is node rank 0 whenever it is in the group. (On one address the order
        falls to the pids, which wrap.)"""
        members = [f"127.0.0.1:{self.port}", "127.0.0.1:1", "127.0.0.1:2"]  # the first: the rendezvous' address
        env = framework.torch_env({"worker": members}, "worker", (index - self.host) % 3)
        argv = framework.torchrun_argv(
            sys.executable,
            ["python", "train.py", str(self.tmp), str(self.steps)],
            env,
            1,
            "rejoin",
            local_addr=f"127.0.0.{index + 1}",
            nnodes="2:3",
            max_restarts=3,
        )
        log = open(self.tmp / f"{name}.log", "wb")
        self.agents[name] = subprocess.Popen(
            argv,
            env={**os.environ, **env, **framework.torchrun_env("2:3")},
            cwd=self.tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def lines(self) -> list[tuple[int, int, int]]:
        try:
            text = (self.tmp / "log").read_text()
        except FileNotFoundError:
            return []
        return [(int(s), int(w), int(t)) for s, w, t in LINE.findall(text)]

    def wait_for(self, what: str, cond, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n}\n{(self.tmp / f'{n}.log').read_text()[-2500:]}" for n in self.agents)
                raise AssertionError(f"{what}: not within {timeout} s; steps {self.lines()[-5:]}\n{tails}")
            time.sleep(0.1)

    def node_rank(self, name: str) -> int:
        """The node rank torch's rendezvous gave agent ``name`` in its latest round."""
        return int((self.tmp / f"agent-{self.agents[name].pid}").read_text())

    def kill(self, name: str) -> None:
        os.killpg(self.agents[name].pid, signal.SIGKILL)
        self.agents[name].wait(timeout=30)

    def close(self) -> None:
        for agent in self.agents.values():
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(timeout=30)


@pytest.mark.parametrize("lose", ["a member", "node rank 0"])
def test_a_replacement_joins_the_running_group_which_goes_on_at_three(tmp_path, lose):
    """``a member``: an agent that is neither the rendezvous host nor node rank 0. ``node rank 0``: the agent torch's
    rendezvous made node rank 0 (the rendezvous host is another task: torch ranks nodes in its own order)."""
    group = Group(tmp_path, steps=60, host=0 if lose == "a member" else 2)
    try:
        for i in range(3):
            group.start(f"a{i}", i)
        group.wait_for("the group at 3, step 4", lambda: any(s >= 4 and w == 3 for s, w, _ in group.lines()), 90)
        victim = next(
            (
                n
                for n in ("a0", "a1", "a2")
                if n != f"a{group.host}" and (group.node_rank(n) == 0) == (lose == "node rank 0")
            ),
            None,
        )
        assert victim is not None, {n: group.node_rank(n) for n in group.agents}  # task 0 (a0) is node rank 0
        group.kill(victim)
        killed_at = group.lines()[-1][0]
        # the two left re-form without it and go on from the checkpoint
        group.wait_for("the two left training", lambda: any(w == 2 for _, w, _ in group.lines()), 60)
        group.start("replacement", int(victim[1:]))
        group.wait_for("the replacement in the group", lambda: group.lines()[-1][1:] == (3, 3), 60)
        for name, agent in group.agents.items():
            if name != victim:
                assert agent.wait(timeout=90) == 0, (name, (tmp_path / f"{name}.log").read_text()[-3000:])
    finally:
        group.close()
    lines = group.lines()
    worlds = [w for _, w, _ in lines]
    assert all(t == w for _, w, t in lines), lines  # every step's all-reduce spanned the whole group it printed
    assert worlds[0] == 3 and 2 in worlds and worlds[-1] == 3 and lines[-1][0] == 60, lines
    # each re-formed group resumes from the checkpoint: no step skipped, at most the one in flight done again
    steps = [s for s, _, _ in lines]
    assert all(a <= b <= a + 1 for a, b in zip(steps, steps[1:])), steps
    assert min(s for s, w, _ in lines if w == 2) <= killed_at + 1, (killed_at, lines)


def test_only_elastic_bounds_turn_off_torchs_shared_worker_store():
    assert framework.torchrun_env("2:3") == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    assert framework.torchrun_env("3") == {} and framework.torchrun_env(None) == {}
