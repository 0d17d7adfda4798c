"""runtime.executor as a real subprocess against an in-test AM (http.server), with a real ledger."""

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from airflow_provider_melon.gpu.devices import DeviceInfo
from airflow_provider_melon.gpu.ledger import Ledger
from airflow_provider_melon.runtime import executor, workdir
from tests.fake_am import SECRET, FakeAM

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def am_factory():
    made = []

    def make(*args, **kwargs):
        am = FakeAM(*args, **kwargs)
        made.append(am)
        return am

    yield make
    for am in made:
        am.close()


@pytest.fixture
def inventory(tmp_path):
    def write(*totals):
        path = tmp_path / "inventory.json"
        path.write_text(
            json.dumps({"gpus": [{"index": i, "total_mb": t, "name": "virtual"} for i, t in enumerate(totals)]})
        )
        return str(path)

    return write


PRINT_ENV = (
    "import json, os; print('ENV=' + json.dumps({k: os.environ.get(k) for k in ("
    "'TF_CONFIG', 'CUDA_VISIBLE_DEVICES', 'MELON_SECRET', 'MELON_CAP_MB', 'MELON_CLUSTER', 'MASTER_ADDR', "
    "'MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'PYTHONPATH', 'MELON_PROGRESS_FILE', "
    "'TORCH_NCCL_ASYNC_ERROR_HANDLING')}))"
)


def entry(code):
    return "python -c " + json.dumps(code)


def exec_env(tmp_path, am, role, index, python=None, **extra):
    """The executor's environment. NVML is hidden from it (a ``pynvml`` that fails to import comes first on its
    path), so these tests see the virtual GPUs of their inventory, or none, on a GPU host too."""
    no_nvml = tmp_path / "no-nvml"
    no_nvml.mkdir(exist_ok=True)
    (no_nvml / "pynvml.py").write_text('raise ImportError("NVML hidden by the test: virtual GPUs only")\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MELON_", "TF_CONFIG", "CUDA_", "PYTHONPATH"))}
    env.update(
        {
            "PYTHONPATH": f"{no_nvml}{os.pathsep}{REPO}",
            "MELON_ROLE": role,
            "MELON_INDEX": str(index),
            "MELON_AM_URL": am.url,
            "MELON_SECRET": SECRET,
            "MELON_APP_ID": "application_1_0001",
            "MELON_TASK_ATTEMPT": "0",
            "MELON_ENTRYPOINT": entry(PRINT_ENV),
            "MELON_FRAMEWORK": "generic",
            "MELON_LEDGER_DIR": str(tmp_path / "ledger"),
            "MELON_HOST": "127.0.0.1",
            "MELON_BIND_HOST": "127.0.0.1",
            "MELON_MPS": "0",
            "MELON_HEARTBEAT_S": "0.2",
            "MELON_REGISTER_TIMEOUT_S": "30",
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(tmp_path, env, cwd=None, python=None):
    return subprocess.Popen(
        [python or sys.executable, "-m", "airflow_provider_melon.runtime.executor"],
        env=env,
        cwd=cwd or str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def seen_env(out):
    lines = [l for l in out.splitlines() if l.startswith("ENV=")]
    assert len(lines) == 1, out
    return json.loads(lines[0][4:])


def test_tensorflow_gang_of_two_shares_a_gpu(tmp_path, am_factory, inventory):
    am = am_factory(["chief:0", "worker:0"])
    inv = inventory(16384)
    procs = {
        t: start(
            tmp_path,
            exec_env(
                tmp_path, am, t, 0, MELON_FRAMEWORK="tensorflow", MELON_GPU_INVENTORY=inv, MELON_GPU_MEMORY_MB=4096
            ),
        )
        for t in ("chief", "worker")
    }
    results = {t: finish(p) for t, p in procs.items()}
    for t, (rc, out, err) in results.items():
        assert rc == 0, err
        assert "[melon-executor] gang complete" in err
    chief_addr, worker_addr = am.addresses["chief:0"], am.addresses["worker:0"]
    for t, (rc, out, err) in results.items():
        env = seen_env(out)
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"chief": [chief_addr], "worker": [worker_addr]},
            "task": {"type": t, "index": 0},
        }
        assert env["CUDA_VISIBLE_DEVICES"] == "0"  # both on the node's one GPU
        assert env["MELON_SECRET"] is None  # the secret is not handed to user code
        assert env["MELON_CAP_MB"] == "4096" and "melon-cap-" in env["PYTHONPATH"].split(os.pathsep)[0]
        assert json.loads(env["MELON_CLUSTER"]) == {"chief": [chief_addr], "worker": [worker_addr]}
    # every task heard 202 before 200, and registered its GPU with the AM
    for t in ("chief:0", "worker:0"):
        assert [c for k, c in am.answers if k == t][-1] == 200
        assert 202 in [c for k, c in am.answers if k == t]
    assert {r["gpu"] for r in am.registrations} == {"0"}
    assert {r["gpu_memory_mb"] for r in am.registrations} == {4096}
    assert all(int(r["port"]) > 0 for r in am.registrations)
    assert Ledger(str(tmp_path / "ledger")).entries() == []  # released on exit


TRAIN = textwrap.dedent(
    """
    import json, os, sys, time
    assert os.path.basename(os.getcwd()) == "melon-work", os.getcwd()
    assert open("data.bin").read() == "localized input"  # an input beside the code, as YARN localized it
    p = os.environ["MELON_PROGRESS_FILE"]
    with open(p + ".tmp", "w") as f:
        json.dump({"step": 5, "loss": 0.5}, f)
    os.replace(p + ".tmp", p)
    time.sleep(1.0)
    print("argv", sys.argv[1:])
    sys.exit(7)
    """
)


def test_exit_code_heartbeats_and_code_dir(tmp_path, am_factory):
    # As YARN lays a container out: ./code and ./data.bin are links into the NodeManager's caches.
    cache = tmp_path / "filecache"
    (cache / "13" / "code.zip").mkdir(parents=True)
    (cache / "13" / "code.zip" / "train.py").write_text(TRAIN)
    (cache / "11").mkdir()
    (cache / "11" / "data.bin").write_text("localized input")
    (tmp_path / "code").symlink_to(cache / "13" / "code.zip")
    (tmp_path / "data.bin").symlink_to(cache / "11" / "data.bin")
    am = am_factory(["worker:0", "worker:1"], preregistered={"worker:1": "127.0.0.1:1"})
    # The entrypoint travels base64-encoded (as submission.py sends it), quotes and all.
    env = exec_env(
        tmp_path, am, "worker", 0, MELON_ENTRYPOINT_B64=base64.b64encode(b"python train.py --epochs '2 3'").decode()
    )
    env.pop("MELON_ENTRYPOINT")
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 7, err
    assert "argv ['--epochs', '2 3']" in out
    # the periodic loop (every 0.2 s here) sent the progress while the process ran, before the final beat
    periodic = [h for h in am.heartbeats[:-1] if "message" not in h]
    progress = [h for h in periodic if h.get("step") == 5]
    assert progress and progress[0]["loss"] == 0.5 and progress[0]["role"] == "worker", am.heartbeats
    assert am.heartbeats[-1]["message"] == "user process exited 7"
    assert "user process exited 7" in err


REPORTER = textwrap.dedent(
    """
    import time
    from airflow_provider_melon.runtime import report
    report(step=1, total=3, loss=0.9, accuracy=0.1)
    report(step=2, total=3, loss=0.6, accuracy=0.5)
    time.sleep(2.0)
    report(step=3, total=3, loss=0.3, accuracy=0.9)  # then exits at once, before any periodic heartbeat
    """
)


def test_each_report_reaches_the_am_promptly_and_the_last_one_after_the_exit(tmp_path, am_factory):
    """The last report must reach the AM. A period of 60 s: no periodic beat while the process runs; a new
    report is sent at once (the job's step 2, within its 2 s pause), and the final heartbeat after the exit carries
    step 3 of 3 with its metrics, the last thing the AM hears."""
    (tmp_path / "reporter.py").write_text(REPORTER)
    am = am_factory(["worker:0"])
    rc, out, err = finish(
        start(
            tmp_path, exec_env(tmp_path, am, "worker", 0, MELON_HEARTBEAT_S="60", MELON_ENTRYPOINT="python reporter.py")
        )
    )
    assert rc == 0, err
    prompt = [h for h in am.heartbeats if "message" not in h]
    steps = [h.get("step") for h in prompt]  # step 3 may go out promptly too, before the exit's final beat
    assert 2 in steps and set(steps) <= {1, 2, 3}, am.heartbeats
    last = am.heartbeats[-1]
    assert last["message"] == "user process exited 0", am.heartbeats
    assert (last["step"], last["total"], last["loss"], last["metrics"]) == (3, 3, 0.3, {"accuracy": 0.9})


def test_pytorch_env(tmp_path, am_factory):
    am = am_factory(["chief:0", "worker:0"], preregistered={"chief:0": "10.0.0.5:29500"})
    env = exec_env(tmp_path, am, "worker", 0, MELON_FRAMEWORK="pytorch")
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    seen = seen_env(out)
    assert (seen["MASTER_ADDR"], seen["MASTER_PORT"], seen["RANK"], seen["WORLD_SIZE"], seen["LOCAL_RANK"]) == (
        "10.0.0.5",
        "29500",
        "1",
        "2",
        "0",
    )
    assert seen["TF_CONFIG"] is None
    # NCCL's watchdog ends a process whose collective failed or timed out (docs/elastic.md, "NCCL")
    assert seen["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert seen["CUDA_VISIBLE_DEVICES"] == ""  # no GPU asked for: GPUs hidden from this task
    assert "no GPU requested" in err


def test_pytorch_env_of_a_member_of_an_elastic_gang_formed_at_its_minimum(tmp_path, am_factory):
    # an elastic role (instances 3, min_instances 2) whose gang forms with worker:0 and worker:2: the AM's cluster
    # lists the members registered so far, in order, so worker:2 is the second member, rank 1 of 2
    am = am_factory(["worker:0", "worker:2"], preregistered={"worker:0": "10.0.0.5:29500"})
    env = exec_env(tmp_path, am, "worker", 2, MELON_FRAMEWORK="pytorch")
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    seen = seen_env(out)
    assert (seen["MASTER_ADDR"], seen["MASTER_PORT"], seen["RANK"], seen["WORLD_SIZE"]) == (
        "10.0.0.5",
        "29500",
        "1",
        "2",
    )


def test_wrong_secret_is_a_clear_error(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"], secret="another-secret")
    env = exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inventory(8000), MELON_GPU_MEMORY_MB=1000)
    rc, out, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_AM_REFUSED == 3
    assert "403" in err and "MELON_SECRET does not match" in err
    assert "ENV=" not in out  # the user's code never ran
    assert Ledger(str(tmp_path / "ledger")).entries() == []  # its GPU reservation was released


def test_no_gpu_fits_exits_75(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    inv = inventory(8000)
    # a live process (this test) holds 6000 of the 8000 MiB
    led = Ledger(str(tmp_path / "ledger"))
    assert led.reserve("someone-else", os.getpid(), 6000, [DeviceInfo(0, "v", "v", 8000)]) == 0
    env = exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inv, MELON_GPU_MEMORY_MB=4000, MELON_GPU_WAIT_S=1)
    t0 = time.monotonic()
    rc, out, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_NO_GPU_FITS == 75, err
    assert time.monotonic() - t0 >= 1.0  # it waited before giving up
    assert "no GPU fits 4000 MiB" in err
    assert am.registrations == []  # it never joined the gang
    assert [r["task_id"] for r in led.entries()] == ["someone-else"]


def test_waiting_for_a_gpu_succeeds_when_one_frees(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    inv = inventory(8000)
    led = Ledger(str(tmp_path / "ledger"))
    assert led.reserve("someone-else", os.getpid(), 6000, [DeviceInfo(0, "v", "v", 8000)]) == 0
    proc = start(
        tmp_path,
        exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inv, MELON_GPU_MEMORY_MB=4000, MELON_GPU_WAIT_S=30),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60  # the event, not a fixed sleep: on a busy host the start alone takes seconds
    while not any("waiting up to 30s" in line for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    assert am.registrations == []  # still waiting
    led.release("someone-else")
    out = proc.stdout.read()
    rc = proc.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(lines)
    assert rc == 0, err
    assert seen_env(out)["CUDA_VISIBLE_DEVICES"] == "0"


def test_larger_than_any_gpu_exits_75_at_once(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inventory(8000), MELON_GPU_MEMORY_MB=9000, MELON_GPU_WAIT_S=60
    )
    t0 = time.monotonic()
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 75 and time.monotonic() - t0 < 30
    assert "largest GPU here has 8000 MiB" in err


def test_exclusive_gpu(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    led = Ledger(str(tmp_path / "ledger"))
    devs = [DeviceInfo(0, "v0", "v", 16384), DeviceInfo(1, "v1", "v", 16384)]
    assert led.reserve("shared", os.getpid(), 1000, devs) == 0
    env = exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inventory(16384, 16384), MELON_GPUS=1)
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    seen = seen_env(out)
    assert seen["CUDA_VISIBLE_DEVICES"] == "1"  # GPU 0 is not free
    assert seen["MELON_CAP_MB"] is None  # a whole GPU is not capped
    assert am.registrations[-1]["gpu"] == "1"


def test_cpu_fallback(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_GPU_MEMORY_MB=4096, MELON_FRAMEWORK="tensorflow")
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert "[melon-executor] no GPU: NVML found no device (pynvml not importable: NVML hidden by the test" in err
    assert "running on CPU" in err
    assert "[melon-executor] no GPU: memory cap not applied" in err
    assert am.registrations[-1]["gpu"] is None
    seen = seen_env(out)
    assert seen["CUDA_VISIBLE_DEVICES"] == "" and seen["MELON_CAP_MB"] is None


SLEEPER = textwrap.dedent(
    """
    import os, signal, sys, time
    def on_term(signum, frame):
        open(os.environ["TERM_FILE"], "w").write("got SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    open(os.environ["TERM_FILE"] + ".started", "w").close()
    time.sleep(120)
    """
)


def test_sigterm_is_forwarded_and_gpu_released(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    term = tmp_path / "term"
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(8000),
        MELON_GPU_MEMORY_MB=1000,
        MELON_ENTRYPOINT=f"python {script}",
        TERM_FILE=term,
    )
    proc = start(tmp_path, env)
    deadline = time.monotonic() + 30
    while not os.path.exists(str(term) + ".started") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(str(term) + ".started")
    assert len(Ledger(str(tmp_path / "ledger")).entries()) == 1
    proc.send_signal(signal.SIGTERM)
    rc, out, err = finish(proc)
    assert rc == executor.EXIT_TERMINATED == 143
    assert term.read_text() == "got SIGTERM"
    assert "forwarding it to the user's process" in err
    assert Ledger(str(tmp_path / "ledger")).entries() == []


def test_sigterm_while_waiting_for_the_gang(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0", "worker:1"])  # worker:1 never comes
    env = exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=inventory(8000), MELON_GPU_MEMORY_MB=1000)
    proc = start(tmp_path, env)
    deadline = time.monotonic() + 30
    while not am.registrations and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    rc, out, err = finish(proc)
    assert rc == 143
    assert "terminated before the user's process started" in err
    assert Ledger(str(tmp_path / "ledger")).entries() == []


def test_gang_timeout(tmp_path, am_factory):
    am = am_factory(["worker:0", "worker:1"])
    env = exec_env(tmp_path, am, "worker", 0, MELON_REGISTER_TIMEOUT_S=1)
    rc, out, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_REGISTER == 4
    assert "registration did not complete within 1s" in err


def test_missing_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MELON_")}
    env["PYTHONPATH"] = REPO
    p = subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.runtime.executor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "[melon-executor] ERROR: missing environment: MELON_ROLE" in p.stderr


def test_read_progress_tolerates_bad_files(tmp_path):
    p = tmp_path / "progress.json"
    assert executor.read_progress(str(p)) == {}
    p.write_text('{"step": 3, "loss": "nan?", "extra": 1}')
    assert executor.read_progress(str(p)) == {"step": 3}
    p.write_text('{"step": 1')
    assert executor.read_progress(str(p)) == {}


def test_runs_in_a_bare_venv_without_airflow(tmp_path, am_factory, inventory):
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    check = subprocess.run(
        [
            py,
            "-c",
            textwrap.dedent(
                """
            import importlib.util, sys
            assert importlib.util.find_spec("airflow") is None, "the bare venv must not see Airflow"
            import airflow_provider_melon.runtime.executor, airflow_provider_melon.runtime.framework
            import airflow_provider_melon.gpu.ledger, airflow_provider_melon.gpu.policy
            bad = sorted(m for m in sys.modules if m.split(".")[0] in
                         ("airflow", "requests", "pydantic", "pynvml", "yaml", "tenacity"))
            print("BAD", bad)
            """
            ),
        ],
        env={"PYTHONPATH": REPO, "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "BAD []"
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(8000),
        MELON_GPU_MEMORY_MB=1000,
        MELON_FRAMEWORK="tensorflow",
        MELON_ENTRYPOINT=entry(
            "import sys, os; print('ENV=' + __import__('json').dumps("
            "{'exe': sys.executable, 'TF_CONFIG': os.environ['TF_CONFIG']}))"
        ),
    )
    rc, out, err = finish(start(tmp_path, env, python=py))
    assert rc == 0, err
    seen = seen_env(out)
    assert seen["exe"] == py  # "python" in the entrypoint ran under the job's interpreter
    assert json.loads(seen["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}


def test_large_flag_from_env():
    base = {
        "MELON_ROLE": "chief",
        "MELON_INDEX": "0",
        "MELON_AM_URL": "http://x:1",
        "MELON_SECRET": "s",
        "MELON_ENTRYPOINT": "python t.py",
    }
    assert not executor.Config.from_env(base).large
    assert executor.Config.from_env({**base, "MELON_LARGE": "1"}).large
    assert executor.Config.from_env({**base, "MELON_LARGE_ROLES": "ps, chief"}).large
    assert not executor.Config.from_env({**base, "MELON_ROLE": "worker", "MELON_LARGE_ROLES": "chief"}).large
    with pytest.raises(executor.Fatal, match="MELON_FRAMEWORK"):
        executor.Config.from_env({**base, "MELON_FRAMEWORK": "jax"})


@pytest.mark.parametrize("mps, expected_gpu", [("0", "1"), ("1", "0")])
def test_small_task_avoids_a_gpu_with_large_and_small_without_mps(tmp_path, am_factory, inventory, mps, expected_gpu):
    am = am_factory(["worker:0"])
    led = Ledger(str(tmp_path / "ledger"))
    devs = [DeviceInfo(0, "v0", "v", 141000), DeviceInfo(1, "v1", "v", 141000)]
    assert led.reserve("r50", os.getpid(), 5000, devs, large=True) == 0
    assert led.reserve("r18", os.getpid(), 1600, devs[:1]) == 0  # beside the large one (GPU 1 is not offered)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(141000, 141000),
        MELON_GPU_MEMORY_MB=1600,
        MELON_MPS=mps,
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert seen_env(out)["CUDA_VISIBLE_DEVICES"] == expected_gpu


def test_malformed_inventory_is_a_config_error(tmp_path, am_factory):
    am = am_factory(["worker:0"])
    bad = tmp_path / "inv.json"
    bad.write_text('{"gpus": [{"index": 0}]}')
    rc, out, err = finish(
        start(tmp_path, exec_env(tmp_path, am, "worker", 0, MELON_GPU_INVENTORY=bad, MELON_GPU_MEMORY_MB=1000))
    )
    assert rc == executor.EXIT_CONFIG
    assert "[melon-executor] ERROR: cannot read the GPU inventory" in err and "malformed" in err
    assert "Traceback" not in err


def test_workdir_places_big_code_files_at_their_paths(tmp_path):
    # As YARN lays it out: ./code links to the unpacked archive (shared, not to be written), and each big file
    # of the code folder is its own link, named melon-code-file-<n>.
    cache = tmp_path / "filecache"
    archive = cache / "13" / "code.zip"
    (archive / "data" / "deep").mkdir(parents=True)
    (archive / "train.py").write_text("train")
    (archive / "data" / "small.txt").write_text("small")
    (archive / "data" / "deep" / "x.txt").write_text("x")
    (cache / "14").mkdir()
    (cache / "14" / "code-file").write_text("big one")
    (cache / "15").mkdir()
    (cache / "15" / "code-file").write_text("big two")
    box = tmp_path / "container"
    box.mkdir()
    (box / "code").symlink_to(archive)
    (box / "melon-code-file-0").symlink_to(cache / "14" / "code-file")
    (box / "melon-code-file-1").symlink_to(cache / "15" / "code-file")
    links = {"melon-code-file-0": "data/deep/big.bin", "melon-code-file-1": "models/top.bin"}
    env = {"MELON_CODE_FILES_B64": base64.b64encode(json.dumps(links).encode()).decode()}
    work = workdir.prepare_workdir(str(box), workdir.code_files(env))
    assert open(os.path.join(work, "data", "deep", "big.bin")).read() == "big one"
    assert open(os.path.join(work, "data", "deep", "x.txt")).read() == "x"
    assert open(os.path.join(work, "data", "small.txt")).read() == "small"
    assert open(os.path.join(work, "models", "top.bin")).read() == "big two"
    assert open(os.path.join(work, "train.py")).read() == "train"
    assert not os.path.exists(os.path.join(work, "melon-code-file-0"))  # only at its path
    assert sorted(os.listdir(archive / "data" / "deep")) == ["x.txt"]  # the shared archive is not written to


def test_code_files_refuses_paths_that_leave_the_folder():
    for rel in ("../etc/passwd", "/abs", "a//b", "a/./b"):
        env = {"MELON_CODE_FILES_B64": base64.b64encode(json.dumps({"melon-code-file-0": rel}).encode()).decode()}
        with pytest.raises(ValueError, match="not a plain relative path"):
            workdir.code_files(env)
    assert workdir.code_files({}) == {}


def test_a_ledger_directory_others_may_write_is_refused_before_the_task_starts(tmp_path, am_factory, inventory):
    am = am_factory(["worker:0"])
    open_dir = tmp_path / "open-ledger"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=1024,
        MELON_LEDGER_DIR=str(open_dir),
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 2, err
    assert f"ERROR: refusing the GPU ledger: GPU ledger directory {open_dir} is writable by others (owner " in err
    assert "mode drwxrwxrwx (0777))" in err, err
    assert "install -d -m 2770" in err and "docs/ledger.md" in err, err
    assert "ENV=" not in out and not am.registrations, "the user's process never ran, nothing registered"
    assert os.listdir(open_dir) == []


def test_a_node_that_hides_its_gpus_keeps_them_hidden_from_the_job(tmp_path, am_factory, inventory):
    """The embedded cluster on a host whose GPUs it cannot split gives every container CUDA_VISIBLE_DEVICES=-1
    (minicluster.gpu_layout): the task reserves a virtual GPU, and the user's process still sees no real one."""
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=4096,
        CUDA_VISIBLE_DEVICES="-1",
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert seen_env(out)["CUDA_VISIBLE_DEVICES"] == "-1"
    assert am.registrations[-1]["gpu"] == "0"  # the virtual GPU's reservation still counts on the node


def test_the_cuda_context_is_reserved_beside_the_capped_memory(tmp_path, am_factory, inventory):
    """MELON_GPU_CONTEXT_MB: the ledger holds and the AM hears the expected memory plus the context's,
    while the process is capped at the expected memory; a GPU that cannot hold both does not fit (exit 75)."""
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=4096,
        MELON_GPU_CONTEXT_MB=400,
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert seen_env(out)["MELON_CAP_MB"] == "4096"
    assert {r["gpu_memory_mb"] for r in am.registrations} == {4496}
    assert "reserved for worker:0: 4496 MiB held (4096 + 400 for the CUDA context)" in err  # above its slot, 4096
    env = exec_env(
        tmp_path,
        am_factory(["worker:0"]),
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=16000,
        MELON_GPU_CONTEXT_MB=400,
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == executor.EXIT_NO_GPU_FITS, err
    assert "no GPU fits: 16400 MiB (16000 + 400 for the CUDA context) wanted, the largest GPU here has 16384" in err


def test_a_shared_task_holds_its_slot_caps_its_expected_memory_and_registers_what_it_holds(
    tmp_path, am_factory, inventory
):
    """1000 MiB expected + 200 for the CUDA context on a 16384 MiB GPU: the ledger holds the slot, a quarter of the
    GPU (4096 MiB), the AM hears 4096, and the process is capped at its expected 1000 MiB."""
    am = am_factory(["worker:0"])
    env = exec_env(
        tmp_path,
        am,
        "worker",
        0,
        MELON_GPU_INVENTORY=inventory(16384),
        MELON_GPU_MEMORY_MB=1000,
        MELON_GPU_CONTEXT_MB=200,
    )
    env["MELON_ENTRYPOINT"] = entry(
        PRINT_ENV + "; import json, os; from airflow_provider_melon.gpu.ledger import Ledger; "
        "print('ROWS=' + json.dumps(Ledger(os.environ['MELON_LEDGER_DIR']).entries()))"
    )
    rc, out, err = finish(start(tmp_path, env))
    assert rc == 0, err
    assert seen_env(out)["MELON_CAP_MB"] == "1000"
    rows = json.loads(next(l for l in out.splitlines() if l.startswith("ROWS="))[5:])
    assert [(r["expected_mb"], r["held_mb"]) for r in rows] == [(1200, 4096)]
    assert {r["gpu_memory_mb"] for r in am.registrations} == {4096}
    assert (
        "reserved for worker:0: 4096 MiB held (1000 + 200 for the CUDA context, its slot a quarter of the GPU)" in err
    )
