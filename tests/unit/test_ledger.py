"""gpu.ledger and gpu.devices with real files, real locks and real processes."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_melon.gpu import devices, ledger
from airflow_provider_melon.gpu.devices import DeviceInfo
from airflow_provider_melon.gpu.ledger import Ledger

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def gpus(*totals, used=None):
    used = used or [0] * len(totals)
    return [DeviceInfo(i, f"virtual-{i}", "virtual", t, u) for i, (t, u) in enumerate(zip(totals, used))]


def sleeper():
    """A live process that holds a reservation until the test kills it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.fixture
def led(tmp_path):
    return Ledger(str(tmp_path / "ledger"))


def test_reserve_best_fit_and_release(led):
    me = os.getpid()
    devs = gpus(16000, 16000)
    assert led.reserve("a", me, 10000, devs) == 0
    assert led.reserve("b", me, 4000, devs) == 0  # best fit: GPU 0 has 6000 left, tighter than GPU 1
    assert led.reserve("c", me, 4000, devs) == 1  # GPU 0 has only 2000 left now
    assert led.reserve("d", me, 13000, devs) is None
    assert led.release("a") == 1
    assert led.reserve("d", me, 13000, devs) is None  # GPU 0: 16000 - 4000 = 12000 < 13000; GPU 1: 12000
    assert led.release("c") == 1
    assert led.reserve("d", me, 13000, devs) == 1
    rows = {r["task_id"]: r for r in led.entries()}
    assert set(rows) == {"b", "d"} and rows["d"]["gpu"] == 1 and rows["d"]["expected_mb"] == 13000
    with open(led.path) as f:  # it is a real JSON file on disk
        assert len(json.load(f)["reservations"]) == 2


def test_reserve_is_idempotent_per_task(led):
    devs = gpus(16000, 16000)
    assert led.reserve("a", os.getpid(), 1000, devs) == 0
    assert led.reserve("a", os.getpid(), 1000, devs) == 0
    assert len(led.entries()) == 1


def test_nvml_used_memory_counts(led):
    # a foreign process uses 12000 MiB of GPU 0: room there is total - max(reserved, used)
    devs = gpus(16000, 16000, used=[12000, 500])
    assert led.reserve("a", os.getpid(), 5000, devs) == 1
    assert led.reserve("b", os.getpid(), 4000, devs) == 0  # the 4000 MiB left on GPU 0 hold it (no MeLoN task there)


def test_exclusive_takes_the_whole_gpu(led):
    me = os.getpid()
    devs = gpus(16000, 16000)
    assert led.reserve("s", me, 1000, devs) == 0
    assert led.reserve("x", me, 0, devs, exclusive=True) == 1
    assert led.reserve("y", me, 0, devs, exclusive=True) is None
    assert led.reserve("t", me, 1000, devs) == 0  # nothing shares the exclusive GPU
    assert led.reserve("u", me, 15000, devs) is None
    assert [r["expected_mb"] for r in led.entries() if r["task_id"] == "x"] == [16000]


def test_exclusive_many_is_all_or_nothing(tmp_path):
    led = Ledger(str(tmp_path))
    devs = gpus(8000, 8000, 8000)
    assert led.reserve("s", os.getpid(), 100, devs) == 0
    assert led.reserve_many("m", os.getpid(), 0, devs, count=3) is None
    assert [r["task_id"] for r in led.entries()] == ["s"]
    assert led.reserve_many("m", os.getpid(), 0, devs, count=2) == [1, 2]


def test_interference_rule_applies_through_the_ledger(led):
    me = os.getpid()
    devs = gpus(141000)
    assert led.reserve("r50", me, 5000, devs, large=True) == 0
    assert led.reserve("r18a", me, 1600, devs) == 0
    assert led.reserve("r18b", me, 1600, devs) is None  # no MPS: the GPU already has R50 + one small
    assert led.reserve("r18c", me, 1600, devs, mps=True) == 0  # with MPS it packs


def test_the_ledger_places_by_the_default_policy(led):
    """The node's GPU choice is policy.place_default (the rule bench_policy scores), not best fit: a small task takes
    the idle GPU rather than stack beside another (it slows nobody there), and a second large one pairs with the
    large rather than close the small task's GPU to small tasks (admits: one small beside a large)."""
    me = os.getpid()
    devs = gpus(141000, 141000, 141000)
    assert led.reserve("s1", me, 35000, devs) == 0
    assert led.reserve("s2", me, 35000, devs) == 1  # best fit would stack it on GPU 0
    assert led.reserve("l1", me, 70000, devs, large=True) == 2
    assert led.reserve("l2", me, 70000, devs, large=True) == 2  # beside s1 or s2 would shut out small tasks
    pgs = [
        ledger.policy.Gpu(0, 141000, 35000, [("s1", 35000, False)]),
        ledger.policy.Gpu(1, 141000, 35000, [("s2", 35000, False)]),
        ledger.policy.Gpu(2, 141000, 140000, [("l1", 70000, True), ("l2", 70000, True)]),
    ]
    assert led.reserve("s3", me, 35000, devs) == ledger.policy.place_default(pgs, 35000) == 0


# An executor that holds a reservation: it reserves, optionally starts the user's process with its lease (as
# runtime/executor.py passes it), says so, and lives until killed.
OWNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from airflow_provider_melon.gpu.devices import DeviceInfo
    from airflow_provider_melon.gpu.ledger import Ledger
    d, name, mb, with_child = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "child"
    led = Ledger(d)
    got = led.reserve(name, os.getpid(), mb, [DeviceInfo(0, "v0", "v", 8000)])
    child = None
    if with_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=(led.lease_fd(name),))
    print(got, child.pid if child else "-", flush=True)
    time.sleep(600)
    """
)


def owner(tmp_path, led, name, mb=6000, with_child=False):
    """A live process holding a reservation (and its user's process, ``with_child``): (process, child pid)."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER.format(repo=REPO))
    proc = subprocess.Popen(
        [sys.executable, str(script), led.directory, name, str(mb), "child" if with_child else "-"],
        stdout=subprocess.PIPE,
        text=True,
    )
    got, child = proc.stdout.readline().split()
    assert got == "0", got
    return proc, None if child == "-" else int(child)


def test_a_sigkilled_owners_reservation_is_released_at_once(tmp_path, led):
    """The kernel releases a dead owner's lease: the next reservation finds it unlocked and drops the reservation
    and its lease file, with no wait for a lease to time out."""
    devs = gpus(8000)
    proc, _ = owner(tmp_path, led, "victim")
    try:
        assert led.reserve("other", os.getpid(), 6000, devs) is None  # the live owner holds it
        assert [r["task_id"] for r in led.entries()] == ["victim"]
        assert os.path.exists(os.path.join(led.directory, ledger.lease_name("victim")))
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.wait()
    assert led.reserve("other", os.getpid(), 6000, devs) == 0
    assert [r["task_id"] for r in led.entries()] == ["other"]
    assert not os.path.exists(os.path.join(led.directory, ledger.lease_name("victim")))


def test_the_reservation_lives_while_the_users_process_holds_its_lease(tmp_path, led):
    """The executor passes its lease to the user's process: should the executor die first, the process it started
    still uses the GPU, and its reservation stays until that process is gone too."""
    proc, child = owner(tmp_path, led, "task", with_child=True)
    try:
        proc.kill()
        proc.wait()
        assert [r["task_id"] for r in led.entries(reclaim=True)] == ["task"]
    finally:
        os.kill(child, 9)
    deadline = time.monotonic() + 10
    while led.entries(reclaim=True) and time.monotonic() < deadline:  # the orphan is reaped by init, not by us
        time.sleep(0.05)
    assert led.entries(reclaim=True) == []


def test_a_lease_left_without_its_reservation_is_cleared_unless_held(led):
    """An owner killed between taking its lease and writing its reservation leaves a lease file nobody holds: the
    next reservation removes it. A held one (an owner about to write its reservation) stays."""
    os.makedirs(led.directory)
    orphan = os.path.join(led.directory, ledger.lease_name("died-early"))
    open(orphan, "w").close()
    other = Ledger(led.directory)
    other._take_lease("on-its-way")  # locked, its reservation not written yet
    assert led.reserve("a", os.getpid(), 100, gpus(1000)) == 0
    assert not os.path.exists(orphan)
    assert os.path.exists(os.path.join(led.directory, ledger.lease_name("on-its-way")))


def test_a_lease_swept_between_its_open_and_its_lock_is_taken_again(led, monkeypatch):
    """Another executor's sweep of unheld leases can open, lock and unlink a lease file in the moment between its
    owner's open and its lock; the owner then locks a file no longer in the folder, and the next sweep would drop
    its live reservation (its lease gone). The owner must end up holding the file the folder names."""
    os.makedirs(led.directory)
    real_flock, swept = ledger.fcntl.flock, []

    def flock_after_a_sweep(fd, op):
        if not swept:  # the owner's first lock: another process's sweep gets there first
            swept.append(True)
            Ledger(led.directory)._alive({"lease": ledger.lease_name("a"), "pid": 0})
        return real_flock(fd, op)

    monkeypatch.setattr(ledger.fcntl, "flock", flock_after_a_sweep)
    assert led.reserve("a", os.getpid(), 100, gpus(1000)) == 0
    monkeypatch.setattr(ledger.fcntl, "flock", real_flock)
    assert swept
    assert [r["task_id"] for r in Ledger(led.directory).entries(reclaim=True)] == ["a"]  # the owner lives: kept


def test_a_reservation_written_before_leases_lives_by_its_pid(led):
    """A ledger file of an executor without leases (a node upgraded while tasks run): its pid still decides, as it
    did (pid_alive: gone, a zombie, or reused)."""
    proc = sleeper()
    os.makedirs(led.directory)
    record = {"task_id": "old", "pid": proc.pid, "pid_start": ledger._proc_start(proc.pid), "gpu": 0}
    record |= {"expected_mb": 6000, "held_mb": 6000, "exclusive": False, "large": False, "since": 0}
    with open(led.path, "w") as f:
        json.dump({"version": 1, "reservations": [record]}, f)
    try:
        assert led.reserve("other", os.getpid(), 6000, gpus(8000)) is None
    finally:
        proc.kill()
        proc.wait()
    assert led.reserve("other", os.getpid(), 6000, gpus(8000)) == 0


def test_a_zombie_pid_counts_as_dead():
    """pid_alive, for reservations written before leases: an exited process not yet reaped is gone."""
    proc = sleeper()
    proc.kill()
    deadline = time.time() + 10
    while ledger._proc_state(proc.pid) != "Z" and time.time() < deadline:  # not reaped yet: a zombie
        time.sleep(0.05)
    try:
        assert ledger._proc_state(proc.pid) == "Z"
        assert ledger.pid_alive(os.getpid()) and not ledger.pid_alive(proc.pid)
    finally:
        proc.wait()


def test_reused_pid_is_detected():
    me = os.getpid()
    start = ledger._proc_start(me)
    assert start is not None
    assert ledger.pid_alive(me, start)
    assert not ledger.pid_alive(me, start + 1)  # same pid, different process start time


def test_corrupt_ledger_is_replaced(led):
    os.makedirs(led.directory, exist_ok=True)
    with open(led.path, "w") as f:
        f.write("{half a fi")
    assert led.reserve("a", os.getpid(), 100, gpus(1000)) == 0
    assert [r["task_id"] for r in led.entries()] == ["a"]


def test_default_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MELON_LEDGER_DIR", str(tmp_path / "x"))
    assert ledger.reserve("a", os.getpid(), 100, gpus(1000)) == 0
    assert os.path.exists(tmp_path / "x" / "ledger.json")
    assert ledger.release("a") == 1
    monkeypatch.delenv("MELON_LEDGER_DIR")
    assert ledger.default_dir() == "/var/lib/melon/ledger"


WORKER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from airflow_provider_melon.gpu.devices import DeviceInfo
    from airflow_provider_melon.gpu.ledger import Ledger
    d, go, name = sys.argv[1], sys.argv[2], sys.argv[3]
    gpus = [DeviceInfo(0, "v0", "v", 10000), DeviceInfo(1, "v1", "v", 10000)]
    print("ready", flush=True)  # imported and set up: only the reservation itself is left
    while not os.path.exists(go):
        pass  # spin, no sleep: all start the reservation within microseconds of the go file
    got = Ledger(d).reserve(name, os.getpid(), 3000, gpus)
    print(got, flush=True)
    time.sleep(600)  # hold the reservation (alive) until killed
    """
)


def test_concurrent_reservations_never_overcommit(tmp_path):
    d = str(tmp_path / "ledger")
    go = str(tmp_path / "go")
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(repo=REPO))
    n = 12  # capacity: 3 x 3000 MiB per 10000 MiB GPU, 2 GPUs -> exactly 6 fit
    procs = [
        subprocess.Popen([sys.executable, str(script), d, go, f"t{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(n)
    ]
    try:
        # a ready barrier: every worker has imported and is spinning on the go file before it exists
        assert [p.stdout.readline().strip() for p in procs] == ["ready"] * n
        os.makedirs(d)  # made here, so no worker's first lock also has to create it
        open(go, "w").close()  # release them all at once
        answers = [p.stdout.readline().strip() for p in procs]
        granted = [a for a in answers if a != "None"]
        assert len(granted) == 6, answers
        rows = Ledger(d).entries()
        assert len(rows) == 6  # no lost update: every grant is recorded
        for gpu in (0, 1):
            assert sum(r["expected_mb"] for r in rows if r["gpu"] == gpu) == 9000
        assert sorted(granted) == sorted(str(r["gpu"]) for r in rows)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    # everyone is dead now: the next reservation reclaims all of them
    assert Ledger(d).reserve("after", os.getpid(), 9000, gpus(10000, 10000)) == 0
    assert len(Ledger(d).entries()) == 1


# ---- devices ---------------------------------------------------------------------------------------------


@pytest.fixture
def no_nvml(monkeypatch):
    """pynvml fails to import, as on a host without the NVIDIA driver (so these run the same on a GPU host)."""

    def hidden():
        raise ImportError("NVML hidden by the test")

    monkeypatch.setattr(devices, "import_pynvml", hidden)


def test_inventory_source(tmp_path, no_nvml):
    inv = tmp_path / "inv.json"
    inv.write_text(
        json.dumps(
            {
                "gpus": [
                    {"index": 0, "total_mb": 16384, "name": "virtual"},
                    {"index": 1, "total_mb": 8192, "used_mb": 100},
                ]
            }
        )
    )
    env = {"MELON_GPU_INVENTORY": str(inv)}
    found = devices.list_gpus(env)
    assert found.source == "inventory"
    assert [(g.index, g.total_mb, g.used_mb, g.name) for g in found] == [
        (0, 16384, 0, "virtual"),
        (1, 8192, 100, "virtual"),
    ]


def test_no_gpu_reason(tmp_path, no_nvml):
    found = devices.list_gpus({})
    assert found == [] and found.source == "none"
    assert found.reason == "no GPU: NVML found no device (pynvml not importable: NVML hidden by the test)"
    missing = devices.list_gpus({"MELON_GPU_INVENTORY": str(tmp_path / "nope.json")})
    assert missing == [] and "does not exist" in missing.reason


def test_malformed_inventory(tmp_path):
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"gpus": [{"index": 0}]}))
    with pytest.raises(ValueError, match="malformed"):
        devices.inventory_gpus(str(inv))


def test_mps_detection(tmp_path):
    proc_root = tmp_path / "proc"
    (proc_root / "42").mkdir(parents=True)
    (proc_root / "42" / "comm").write_text("python\n")
    pipe = tmp_path / "mps"
    pipe.mkdir()
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
    assert not devices.mps_active(env, proc_root=str(proc_root))
    os.mkfifo(pipe / "control")
    assert devices.mps_active(env, proc_root=str(proc_root))
    os.unlink(pipe / "control")
    (proc_root / "43").mkdir()
    (proc_root / "43" / "comm").write_text("nvidia-cuda-mps\n")  # the kernel's 15-char comm
    assert devices.mps_active(env, proc_root=str(proc_root))
    assert not devices.mps_active({**env, "MELON_MPS": "0"}, proc_root=str(proc_root))
    assert devices.mps_active({"MELON_MPS": "1"}, proc_root=str(tmp_path / "none"))


def test_default_dir_per_nodemanager():
    env = {"MELON_LEDGER_DIR": "/tmp/mini/ledger-{nm}", "NM_HOST": "h1", "NM_PORT": "4242"}
    assert ledger.default_dir(env) == "/tmp/mini/ledger-h1_4242"
    assert ledger.default_dir({"MELON_LEDGER_DIR": "/x"}) == "/x"


# ---- the ledger directory's rule (gpu.ledger.check_directory) ---------------------------------------------


@pytest.fixture
def shared(tmp_path):
    """A folder like /tmp: root's, world-writable and sticky; tmp_path's own 0700 is opened for other users."""
    os.chmod(tmp_path, 0o755)
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def test_the_documented_layout_is_accepted(tmp_path):
    d = tmp_path / "ledger"
    d.mkdir()
    os.chmod(d, 0o2770)  # install -d -m 2770 -o <nm user> -g <nm group>
    led = Ledger(str(d))
    assert led.reserve("a", os.getpid(), 100, gpus(1000)) == 0
    for name in ("ledger.json", "ledger.lock"):
        assert not os.stat(d / name).st_mode & 0o007, f"{name}: nothing for others"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o773])
def test_a_directory_others_may_write_is_refused(tmp_path, mode):
    d = tmp_path / "ledger"
    d.mkdir()
    os.chmod(d, mode)
    with pytest.raises(ledger.UnsafeLedger) as err:
        Ledger(str(d)).reserve("a", os.getpid(), 100, gpus(1000))
    msg = str(err.value)
    assert f"{d} is writable by others" in msg and f"({mode:04o})" in msg, msg
    assert "install -d -m 2770" in msg and "docs/ledger.md" in msg, msg
    assert not os.path.exists(d / "ledger.json"), "nothing was written"


def test_a_directory_of_another_user_or_a_symlink_is_refused(tmp_path):
    d = tmp_path / "ledger"
    d.mkdir(mode=0o750)
    os.chown(d, 65534, 65534)
    with pytest.raises(ledger.UnsafeLedger, match=r"belongs to another user \(owner nobody:nogroup"):
        ledger.check_directory(str(d))
    mine = tmp_path / "mine"
    mine.mkdir()
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(ledger.UnsafeLedger, match="is not a directory"):
        ledger.check_directory(str(link))


def test_it_is_not_created_where_others_could_have_made_it_first(shared):
    with pytest.raises(ledger.UnsafeLedger, match="does not exist, and the executor does not create it in"):
        ledger.check_directory(str(shared / "melon-ledger"))
    assert not (shared / "melon-ledger").exists()


def test_a_world_writable_non_sticky_folder_above_is_refused(tmp_path):
    above = tmp_path / "above"
    above.mkdir()
    (above / "ledger").mkdir(mode=0o750)
    os.chmod(above, 0o777)
    with pytest.raises(ledger.UnsafeLedger, match=f"lies in {above} .*which another user could change"):
        ledger.check_directory(str(above / "ledger"))


def test_a_ledger_file_others_may_write_is_refused(tmp_path):
    d = tmp_path / "ledger"
    d.mkdir(mode=0o750)
    (d / "ledger.json").write_text('{"version": 1, "reservations": []}')
    os.chmod(d / "ledger.json", 0o666)
    with pytest.raises(ledger.UnsafeLedger, match="ledger.json is not a regular file only its owner and group"):
        ledger.check_directory(str(d))


def test_a_process_the_ledger_does_not_know_counts_even_below_melons_reservations(tmp_path, monkeypatch):
    """Free memory is total - MeLoN's reservations - what processes the ledger does not know use - the driver's own,
    as NVML (the fake: tests/fake_nvml.py, NVML's documented semantics) reports them. A notebook's 3700 MiB count
    although MeLoN's 8000 MiB of reservations are more than NVML's whole used memory."""
    from tests.fake_nvml import fake_nvml

    task = sleeper()  # a MeLoN task's process, holding its reservation
    notebook = sleeper()  # another user's process: visible in /proc, in no reservation
    try:
        device = {
            "uuid": "GPU-a",
            "name": "NVIDIA H200",
            "total_mb": 16384,
            "driver_mb": 500,
            "util": 0,
            "procs": {task.pid: 3000},
        }
        monkeypatch.setattr(devices, "import_pynvml", lambda: fake_nvml([device]))
        led = Ledger(str(tmp_path / "ledger"))
        assert led.reserve("melon-a", task.pid, 8000, devices.nvml_gpus(env={})) == 0
        device["procs"][notebook.pid] = 3700  # the notebook starts: NVML used = 500 + 3000 + 3700 = 7200 < 8000
        devs = devices.nvml_gpus(env={})
        assert devs[0].used_mb == 7200
        # room: 16384 - 8000 (MeLoN) - 3700 (the notebook) - 500 (the driver) = 4184 MiB (slots: 4096 MiB)
        assert led.reserve("melon-b", os.getpid(), 4200, devs) is None
        assert led.reserve("melon-b", os.getpid(), 4100, devs) == 0
    finally:
        for p in (task, notebook):
            p.kill()
            p.wait()


def test_a_tasks_own_process_tree_is_not_foreign(tmp_path):
    """NVML lists the user's process, a child of the executor that holds the reservation: it is MeLoN's, counted by
    its reservation (and by its use where that is larger), never twice."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print(c.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child = int(parent.stdout.readline())
        led = Ledger(str(tmp_path / "ledger"))
        assert led.reserve("a", parent.pid, 8000, [DeviceInfo(0, "g", "g", 16384, 0, processes=())]) == 0
        seen = [DeviceInfo(0, "g", "g", 16384, 500 + 6000, processes=((child, 6000),))]
        assert led.reserve("b", os.getpid(), 7884, seen) == 0  # 16384 - 8000 - 500 (driver) = 7884
        led.release("b")
        over = [DeviceInfo(0, "g", "g", 16384, 500 + 9000, processes=((child, 9000),))]  # beyond its reservation
        assert led.reserve("b", os.getpid(), 7884, over) is None
        assert led.reserve("b", os.getpid(), 6884, over) == 0  # 16384 - 9000 - 500
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError, NameError):  # its child, orphaned by the kill: not left behind
            os.kill(child, signal.SIGKILL)


def test_the_reserve_default_covers_the_context_measured_on_the_h200():
    """The first-run reserves against the recorded H200 runs (benchmarks/data): ResNet-50's NVML used minus torch's
    max_memory_reserved is 618 MiB of the device's plus 768 MiB per process. Every framework's first-run figure must
    cover the per-process figure, and gpu/context.py's measured figure is the data's."""
    from airflow_provider_melon.gpu.context import CONTEXT_MB, MEASURED_CONTEXT_MB, first_run_mb

    sys.path.insert(0, REPO)
    from benchmarks import bench_ledger_replay as replay

    context, driver, residual = replay.fit_context(replay.load("h200-colocate.json"))
    assert residual < 5 and 500 < driver < 700, (context, driver, residual)
    assert abs(MEASURED_CONTEXT_MB - context) < 1
    assert min(CONTEXT_MB.values()) >= context and first_run_mb("pytorch") == CONTEXT_MB["pytorch"]
    assert first_run_mb("jax") == CONTEXT_MB["generic"] and first_run_mb("generic", nccl=True) == CONTEXT_MB["generic"]
    assert first_run_mb("pytorch", nccl=True) == CONTEXT_MB["pytorch+nccl"] > CONTEXT_MB["pytorch"]


def test_replaying_the_recorded_co_locations_through_the_ledger_never_oversubscribes():
    """k = 1...8 ResNet-18 and ResNet-50, the recorded mixes (ResNet-50 with 3 x ResNet-18, ...) and each kind packed
    until the ledger refuses, admitted as a gang through the real ledger with the default reserve: no scenario's
    true use (allocator peak + measured context, + the device's own) exceeds the GPU, nor any task its reservation.
    The slots stop packing at 4 a GPU, the driver's own 618 MiB on it notwithstanding (a slot divides the memory left
    for tasks). The old 400 MiB reserve fails the same replay: every task runs beyond its reservation."""
    from airflow_provider_melon.gpu.context import CONTEXT_MB

    sys.path.insert(0, REPO)
    from benchmarks import bench_ledger_replay as replay

    fit, *rows = replay.run([400, CONTEXT_MB["pytorch"]])
    names = {r["scenario"] for r in rows}
    assert {"8 x R18", "8 x R50", "mix r50+3r18", "R50 until full"} <= names, names
    default = [r for r in rows if r["reserve_mb"] == CONTEXT_MB["pytorch"]]
    assert default and all(r["ok"] for r in default), [r for r in default if not r["ok"]]
    full = next(r for r in default if r["scenario"] == "R50 until full")
    assert full["admitted"] == 4 < full["asked"] and full["use_mb"] <= replay.H200_TOTAL_MB
    old = [r for r in rows if r["reserve_mb"] == 400]
    assert all(r["over_reservation"] for r in old)


# ---- slots: what a shared reservation holds ------------------------------------------------------------------
H200 = 134465  # MiB, an H200's 141 GB (benchmarks/simulator.py's H200_MB)


def test_a_small_shared_task_holds_a_quarter_of_the_gpu_so_a_fifth_is_refused(led):
    """policy.slot_mb: a small task holds max(its memory, a quarter of the GPU); four fill an H200, a fifth waits
    (it would add 0.05 of a job, policy.max_colocated) although its 2076 MiB would fit many times over."""
    me = os.getpid()
    devs = gpus(H200)
    for t in ("s1", "s2", "s3", "s4"):
        assert led.reserve(t, me, 2076, devs) == 0
    assert led.reserve("s5", me, 2076, devs) is None
    rows = {r["task_id"]: r for r in led.entries()}
    assert {r["expected_mb"] for r in rows.values()} == {2076}  # what the task needs, the OOM culprit's yardstick
    assert {r["held_mb"] for r in rows.values()} == {H200 // 4}
    assert led.release("s2") == 1
    assert led.reserve("s5", me, 2076, devs) == 0


def test_the_fifth_small_task_goes_to_another_gpu(led):
    me = os.getpid()
    devs = gpus(H200, H200)
    placed = [led.reserve(f"s{i}", me, 2076, devs) for i in range(8)]
    assert sorted(placed) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert led.reserve("s8", me, 2076, devs) is None


def test_a_large_task_holds_half_and_a_task_above_its_slot_holds_its_own_memory(led):
    me = os.getpid()
    devs = gpus(H200)
    assert led.reserve("l1", me, 5653, devs, large=True) == 0
    assert led.reserve("l2", me, 5653, devs, large=True) == 0
    assert led.reserve("l3", me, 5653, devs, large=True) is None
    assert {r["held_mb"] for r in led.entries()} == {H200 // 2}
    led.release("l1")
    led.release("l2")
    assert led.reserve("big", me, 50000, devs) == 0  # above a quarter: it holds its own 50000
    assert [r["held_mb"] for r in led.entries()] == [50000]
    assert led.reserve("big2", me, 50000, devs) == 0
    assert led.reserve("s", me, 2076, devs) == 0  # 134465 - 100000 = 34465 MiB left >= a quarter, 33616
    assert led.reserve("s2", me, 2076, devs) is None  # 849 MiB left: the 2076 MiB would fit, its slot does not


def test_the_slot_is_sized_against_the_gpu_it_is_placed_on(led):
    """A node with a 16 GiB and an H200: a small task holds a quarter of whichever GPU it takes."""
    me = os.getpid()
    devs = gpus(16384, H200)
    got = {t: led.reserve(t, me, 2076, devs) for t in [f"s{i}" for i in range(8)]}
    held = {r["task_id"]: (r["gpu"], r["held_mb"]) for r in led.entries()}
    assert sorted(got.values()) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {held[t] for t in got} == {(0, 4096), (1, H200 // 4)}


def test_exclusive_reservations_hold_the_whole_gpu(led):
    assert led.reserve("x", os.getpid(), 0, gpus(H200), exclusive=True) == 0
    assert [(r["expected_mb"], r["held_mb"]) for r in led.entries()] == [(H200, H200)]


def test_the_slot_holds_with_mps_too(led):
    """MPS lifts the interference rule, not the slot: the speeds behind max_colocated were measured without MPS, and
    the AM asks YARN for the slot whatever the node runs."""
    devs = gpus(H200)
    for t in ("s1", "s2", "s3", "s4"):
        assert led.reserve(t, os.getpid(), 2076, devs, mps=True) == 0
    assert led.reserve("s5", os.getpid(), 2076, devs, mps=True) is None


def test_a_reservation_of_an_older_ledger_without_held_mb_counts_its_expected_memory(led):
    """A ledger file written before held_mb existed: its reservations hold their expected memory."""
    os.makedirs(led.directory, exist_ok=True)
    row = {"task_id": "old", "pid": os.getpid(), "pid_start": None, "gpu": 0, "expected_mb": 12000, "large": False}
    with open(led.path, "w") as f:
        json.dump({"version": 1, "reservations": [row]}, f)
    assert led.reserve("new", os.getpid(), 1000, gpus(16384)) == 0  # 4384 MiB left >= its slot, 4096
    assert led.reserve("new2", os.getpid(), 1000, gpus(16384)) is None  # 288 MiB left


def test_a_slot_divides_the_memory_left_for_tasks_so_the_drivers_own_keeps_no_slot_out(led):
    """NVML's total of an H200 is 143771 MiB, 618 of it the driver's own on an idle GPU (used with no process): slots
    of a quarter of the total would fit only 3; a quarter of the 143153 MiB left for tasks fits 4."""
    devs = [DeviceInfo(0, "GPU-h200", "NVIDIA H200", 143771, 618, processes=())]
    assert ledger.driver_mb(devs[0]) == 618
    for t in ("s1", "s2", "s3", "s4"):
        assert led.reserve(t, os.getpid(), 3232, devs) == 0
    assert led.reserve("s5", os.getpid(), 3232, devs) is None
    assert {r["held_mb"] for r in led.entries()} == {(143771 - 618) // 4}
    assert ledger.driver_mb(DeviceInfo(0, "v", "v", 16384, 500)) == 0  # no per-process list: not told apart


def test_a_neighbour_is_a_culprit_past_its_need_even_within_its_slot(led):
    """overrun measures a neighbour against its need (expected_mb), not its slot: a task expecting 2000 MiB holds
    4096 of a 16 GiB GPU, and using 3000 MiB it is named, though 3000 < 4096."""
    neighbour = sleeper()
    try:
        devs = gpus(16384)
        assert led.reserve("neighbour", neighbour.pid, 2000, devs) == 0
        assert led.reserve("victim", os.getpid(), 2000, devs) == 0
        assert {r["held_mb"] for r in led.entries()} == {4096}
        seen = DeviceInfo(0, "virtual-0", "virtual", 16384, 3500, processes=((neighbour.pid, 3000), (os.getpid(), 500)))
        got = ledger.overrun(seen, led.entries(), "victim")
        assert got is not None and got["excess_mb"] == 1000, got
        assert got["culprit"] == f"task neighbour (pid {neighbour.pid}) uses 3000 MiB of its 2000 MiB reservation"
    finally:
        neighbour.kill()
        neighbour.wait()
