"""gpu.devices against a fake NVML: the product's own calls (``nvml_gpus``, ``list_gpus``, ``process_memory``)
on a module that answers as pynvml (nvidia-ml-py 12) does — bytes or str names, a device the container's cgroup
denies, a driver that is not there — so the GPU host's code path runs without a GPU. What the real NVML answers is
checked on a GPU machine only (benchmarks/bench_gpu.py)."""

from __future__ import annotations

import os

import pytest

from airflow_provider_melon.gpu import devices
from airflow_provider_melon.hadoop.rm_json import GPU_MEMORY_RESOURCE
from tests.fake_nvml import fake_nvml

H200 = [
    {
        "uuid": "GPU-aaaa",
        "name": b"NVIDIA H200",
        "total_mb": 143771,
        "used_mb": 512,
        "util": 37,
        "procs": {101: 4096, 102: 1024},
    },
    {"uuid": "GPU-bbbb", "name": "NVIDIA H200", "total_mb": 143771, "used_mb": 0, "util": None},
    {"uuid": "GPU-cccc", "name": "NVIDIA H200", "total_mb": 143771, "used_mb": 0, "util": 0, "denied": True},
]


@pytest.fixture
def nvml(monkeypatch):
    def install(gpus=H200, **kw):
        mod = fake_nvml(gpus, **kw)
        monkeypatch.setattr(devices, "import_pynvml", lambda: mod)
        return mod

    return install


def test_nvml_lists_the_devices_it_may_open_and_always_shuts_down(nvml):
    mod = nvml()
    gpus = devices.nvml_gpus(env={})
    assert gpus.source == "nvml"
    assert [(g.index, g.uuid, g.name, g.total_mb, g.used_mb, g.sm_util) for g in gpus] == [
        (0, "GPU-aaaa", "NVIDIA H200", 143771, 512, 0.37),
        (1, "GPU-bbbb", "NVIDIA H200", 143771, 0, None),
    ]
    assert mod.calls == {"init": 1, "shutdown": 1}


@pytest.mark.parametrize("visible, want", [("1", [1]), ("GPU-aaaa", [0]), ("0,GPU-bbbb", [0, 1]), ("", [0, 1])])
def test_cuda_visible_devices_restricts_by_index_or_uuid(nvml, visible, want):
    nvml()
    assert [g.index for g in devices.nvml_gpus(env={"CUDA_VISIBLE_DEVICES": visible})] == want


def test_no_device_visible_or_no_driver_says_why_and_list_gpus_falls_back_to_the_inventory(nvml, tmp_path):
    nvml()
    empty = devices.nvml_gpus(env={"CUDA_VISIBLE_DEVICES": "2"})  # the one device left is denied by its cgroup
    assert not empty and empty.source == "none"
    assert empty.reason == "no GPU: NVML found no device (device 2: Insufficient Permissions)"
    mod = nvml(init_error="NVML Shared Library Not Found")
    none = devices.nvml_gpus(env={})
    assert none.reason == "no GPU: NVML found no device (NVML Shared Library Not Found)"
    assert mod.calls["shutdown"] == 0  # nothing to shut down after a failed init
    inventory = tmp_path / "gpus.json"
    inventory.write_text('{"gpus": [{"index": 0, "total_mb": 16384}]}')
    found = devices.list_gpus(env={"MELON_GPU_INVENTORY": str(inventory)})
    assert found.source == "inventory" and [g.total_mb for g in found] == [16384]
    missing = devices.list_gpus(env={"MELON_GPU_INVENTORY": str(tmp_path / "nope.json")})
    assert missing.source == "none" and "NVML Shared Library Not Found" in missing.reason
    assert "does not exist" in missing.reason


def test_process_memory_counts_only_the_given_pids(nvml):
    me, init = os.getpid(), os.getppid()  # pids of this namespace: NVML's pids are ours here
    mod = nvml([{**H200[0], "procs": {me: 4096, init: 1024}}, H200[1]])
    assert devices.process_memory(0, [me]) == (4096, devices.SOURCE_PROCESS)
    assert devices.process_memory(0, [me, init, 999999999]) == (5120, "nvml-process")
    assert devices.process_memory(0, [999999999]) is None  # none of ours on that GPU yet: unknown, not 0
    assert devices.process_memory(1, [me]) is None
    assert devices.process_memory(5, [me]) is None  # a bad index is no crash
    assert mod.calls["init"] == mod.calls["shutdown"] == 5
    nvml([{**H200[0], "procs": {me: None}}])  # NVML without per-process accounting (usedGpuMemory None)
    assert devices.process_memory(0, [me]) is None


def test_in_a_container_nvmls_pids_are_not_ours_and_the_figure_is_the_devices_rise(nvml):
    """YARN's Docker runtime: NVML answers with the host's pids, none of which exists in the container's pid
    namespace. The figure is then the device's rise in used memory over the baseline taken when the task started,
    and says so ("nvml-device", neighbours included), instead of a silent None; never the whole GPU's use."""
    gpu = {
        "uuid": "GPU-a",
        "name": "NVIDIA H200",
        "total_mb": 143771,
        "driver_mb": 600,
        "util": 0,
        "procs": {999999901: 4096},
    }  # a neighbour's host pid (no such pid here: above the kernel's pid_max)
    nvml([gpu])
    baseline = devices.device_used_mb(0)
    assert baseline == 600 + 4096
    gpu["procs"][999999902] = 2048  # the task's own process, by its host pid
    assert devices.process_memory(0, [os.getpid()], baseline_mb=baseline) == (2048, devices.SOURCE_DEVICE)
    assert devices.process_memory(0, [os.getpid()]) is None  # no baseline: no figure, not the GPU's whole use
    del gpu["procs"][999999901]  # the neighbour ended: the rise cannot go below 0
    assert devices.process_memory(0, [os.getpid()], baseline_mb=baseline) == (0, devices.SOURCE_DEVICE)
    assert devices.device_used_mb(7) is None  # a bad index is no crash


def test_a_mig_gpu_is_left_out_and_says_why(nvml):
    """nvmlDeviceGetMigMode: a GPU in MIG mode is not offered (MeLoN does not address MIG instances) and the reason
    names it and the fix; a GPU without MIG (NVML_ERROR_NOT_SUPPORTED) or with MIG off is offered."""
    nvml([{**H200[0], "mig": 1}, {**H200[1], "mig": 0}, {**H200[1], "uuid": "GPU-dddd"}])
    gpus = devices.nvml_gpus(env={})
    assert [g.index for g in gpus] == [1, 2] and gpus.mig == [0]
    assert "device 0 (NVIDIA H200) is in MIG mode" in gpus.reason and "nvidia-smi -i 0 -mig 0" in gpus.reason
    nvml([{**H200[0], "mig": 1}])
    none = devices.nvml_gpus(env={})
    assert not none and none.mig == [0] and "MIG mode" in none.reason and none.reason.startswith("no GPU")


def test_devices_carry_nvmls_process_list_or_none_when_it_gives_no_memory(nvml):
    me = os.getpid()
    nvml([{**H200[0], "procs": {me: 4096}}, {**H200[1], "procs": {me: None}}])
    gpus = devices.nvml_gpus(env={})
    assert gpus[0].processes == ((me, 4096),) and gpus[1].processes is None


def test_cuda_visible_devices_restricts_the_inventory_too(nvml, tmp_path):
    """The GPU plugin's coexistence (docs/gpu-plugin.md): container_env CUDA_VISIBLE_DEVICES names MeLoN's GPUs, and
    the inventory's others are not offered, as NVML's are not."""
    nvml(init_error="NVML Shared Library Not Found")  # no driver: the inventory is what the node has
    inventory = tmp_path / "gpus.json"
    inventory.write_text(
        '{"gpus": [{"index": 0, "total_mb": 16384}, {"index": 1, "total_mb": 8192, "uuid": "G1"},'
        ' {"index": 2, "total_mb": 4096}]}'
    )
    env = {"MELON_GPU_INVENTORY": str(inventory), "CUDA_VISIBLE_DEVICES": "1,2"}
    assert [g.index for g in devices.list_gpus(env=env)] == [1, 2]
    assert [g.index for g in devices.list_gpus(env=dict(env, CUDA_VISIBLE_DEVICES="G1"))] == [1]
    none = devices.list_gpus(env=dict(env, CUDA_VISIBLE_DEVICES="7"))
    assert not none and none.source == "none" and "CUDA_VISIBLE_DEVICES=7" in none.reason
    assert len(devices.list_gpus(env={"MELON_GPU_INVENTORY": str(inventory)})) == 3


# ---- the embedded cluster splits the host's GPUs between its NodeManagers (minicluster.gpu_layout) -------------

FOUR = [{"uuid": f"GPU-{i}", "name": "NVIDIA H200", "total_mb": 143771 - i, "used_mb": 0, "util": 0} for i in range(4)]


def _seen_by(layout, nm: int) -> list[int]:
    """What NM ``nm``'s containers find: the product's NVML call under the NM's forced environment, and the
    per-NM inventory the executor falls back to."""
    env = layout.env[nm]
    nvml_view = [g.index for g in devices.nvml_gpus(env=env)]
    assert [g.index for g in devices.inventory_gpus(env["MELON_GPU_INVENTORY"])] == nvml_view
    return nvml_view


@pytest.mark.parametrize(
    "gpus, nms, want, unused",
    [
        (FOUR, 2, [[0, 1], [2, 3]], ""),
        (FOUR[:2], 2, [[0], [1]], ""),
        (FOUR[:3], 2, [[0], [1]], "GPU 2 unused"),
        (FOUR, 1, [[0, 1, 2, 3]], ""),
    ],
)
def test_the_mini_cluster_gives_each_nodemanager_its_own_gpus(nvml, tmp_path, gpus, nms, want, unused):
    from airflow_provider_melon.dev import minicluster as mc

    nvml(gpus)
    layout = mc.gpu_layout(tmp_path, nms, 2, 32768)
    assert layout.source == "nvml" and [n["gpus"] for n in layout.nodes] == want
    assert [_seen_by(layout, i) for i in range(nms)] == want  # disjoint: no GPU claimed by two NMs
    assert layout.gpus == len(want[0]) and layout.gpu_memory_mb == len(want[0]) * min(g["total_mb"] for g in gpus)
    assert unused in layout.message and "split between" in layout.message


def test_no_gpu_or_too_few_to_split_says_no_gpu_and_hides_the_real_ones(nvml, tmp_path):
    from airflow_provider_melon.dev import minicluster as mc

    nvml(init_error="NVML Shared Library Not Found")
    none = mc.gpu_layout(tmp_path, 2, 2, 32768)
    assert (none.source, none.gpus, none.gpu_memory_mb, none.env) == ("virtual", 2, 32768, [{}, {}])
    assert none.message == (
        "no GPU: NVML found no device (NVML Shared Library Not Found); each NodeManager "
        "advertises 2 virtual GPU(s), 32768 MiB in all"
    )
    nvml(FOUR[:1])
    one = mc.gpu_layout(tmp_path, 2, 2, 32768)
    assert one.source == "virtual" and one.message.startswith("no GPU: this host's 1 GPU(s) cannot be split")
    for env in one.env:  # neither NM's containers see the one real GPU (else both would claim it)
        hidden = devices.nvml_gpus(env=env)
        assert (
            not hidden
            and hidden.reason == "no GPU: NVML found no device (CUDA_VISIBLE_DEVICES=-1 hides this node's 1 device(s))"
        )


def test_melon_doctor_refuses_a_gpu_node_in_mig_mode_and_says_nothing_without_a_gpu(nvml):
    """``melon doctor`` run on a GPU node: a GPU in MIG mode fails its gpu-mig finding with the fix; a node whose GPUs
    are not in MIG mode passes; a host without NVML (a client, the tests' machine) gets no such finding."""
    from types import SimpleNamespace

    from airflow_provider_melon.cli.doctor import Doctor

    doctor = Doctor(SimpleNamespace(yarn=None))
    nvml([{**H200[0], "mig": 1}, {**H200[1], "mig": 0}])
    found = doctor.check_gpu_mig()
    assert (found.check, found.status) == ("gpu-mig", "fail"), found
    assert "device 0 (NVIDIA H200) is in MIG mode" in found.detail and "nvidia-smi -i 0 -mig 0" in found.fix
    nvml([{**H200[1], "mig": 0}])
    assert doctor.check_gpu_mig().status == "ok"
    nvml(init_error="NVML Shared Library Not Found")
    assert doctor.check_gpu_mig() is None


def test_melon_doctor_compares_the_nodes_gpu_memory_with_what_its_gpus_hold(nvml):
    """``melon doctor`` run on a GPU node: the node's ``melon.io/gpu-memory`` at the RM against NVML's total less the
    driver's own per GPU (NVML's used beyond every process's: 618 MiB on the idle H200s here, the figure recorded in
    gpu/context.py). More fails (YARN grants memory the GPUs do not have), much less warns, and a host that runs no
    NodeManager, or has no GPU, gets no such finding."""
    import socket
    from types import SimpleNamespace

    from airflow_provider_melon.cli.doctor import Doctor

    idle = [{"uuid": "GPU-i", "name": "NVIDIA H200", "total_mb": 143771, "used_mb": 618, "procs": {}}] * 2
    usable = 2 * (143771 - 618)
    nvml(idle)

    def finding(advertised, host=socket.gethostname(), env=None):
        doctor = Doctor(SimpleNamespace(yarn=None, container_env=env or {}))
        doctor._nodes = [
            {
                "id": f"{host}:45454",
                "nodeHostName": host,
                "totalResource": {"resources": {GPU_MEMORY_RESOURCE: advertised}},
            }
        ]
        return doctor.check_gpu_memory()

    ok = finding(usable)
    assert (ok.check, ok.status) == ("gpu-memory", "ok"), ok
    assert f"advertises {usable} MiB" in ok.detail and "GPU 1: 143771 - 618" in ok.detail
    nominal = finding(2 * 143771)  # the nominal figure: the driver's own counted as the tasks'
    assert nominal.status == "fail" and "grants 1236 MiB the GPUs do not have" in nominal.detail, nominal
    assert f"melon.io/gpu-memory = {usable}Mi" in nominal.fix
    assert finding(usable // 2).status == "warn"
    assert finding(usable // 2, env={"CUDA_VISIBLE_DEVICES": "0"}).status == "ok"  # the plug-in keeps GPU 1
    assert finding(usable, host="another-host") is None
    nvml(init_error="NVML Shared Library Not Found")
    assert finding(usable) is None


def test_the_executor_refuses_a_node_whose_gpus_are_all_in_mig_mode(nvml, tmp_path, monkeypatch):
    """Exit 75 with the reason (the AM then asks for a container on another node), never "no GPU: run on CPU"."""
    from airflow_provider_melon.runtime import executor
    from airflow_provider_melon.runtime.config import Config, Fatal

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MELON_LEDGER_DIR", str(tmp_path / "ledger"))  # where a MIG GPU would be packed whole
    nvml([{**H200[0], "mig": 1}])
    cfg = Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_AM_URL": "http://am:1",
            "MELON_SECRET": "s",
            "MELON_ENTRYPOINT": "true",
            "MELON_GPU_MEMORY_MB": "4096",
        }
    )
    with pytest.raises(Fatal) as err:
        executor.Executor(cfg, env={}).choose_gpu()
    assert err.value.code == executor.EXIT_NO_GPU_FITS == 75
    assert "device 0 (NVIDIA H200) is in MIG mode" in str(err.value)
