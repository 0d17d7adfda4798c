"""What the executor sends the ApplicationMaster, declared once (stdlib only): :class:`RegisterBody` for
``POST /register`` and :class:`HeartbeatBody` for ``POST /heartbeat`` (``docs/protocol.md`` section 2). The AM checks
each body against their JSON Schema (``am/messages.schema.json``, generated from these by ``am/messages.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Dict, Optional, TypedDict

from airflow_provider_melon.gpu.devices import SOURCE_DEVICE, SOURCE_PROCESS
from airflow_provider_melon.runtime.oom import CAP, OUTSIDE
from airflow_provider_melon.runtime.peak import SOURCES as PEAK_SOURCES

#: an OOM report's kinds (``runtime/oom.py``); a host OOM is not reported
OOM_KINDS = (CAP, OUTSIDE)
#: the most named metrics one report carries (``runtime/progress.py`` keeps the first ones)
MAX_METRICS = 32


class Schema:
    """JSON Schema keywords a message field carries beyond its type, ``Annotated[int, Schema(minimum=0)]``: bounds
    the AM enforces. Only the schema's generator reads them (pydantic's ``__get_pydantic_json_schema__`` hook, at
    development time); at run time they are inert."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core_schema)
        schema.update(self.keywords)
        return schema


Count = Annotated[int, Schema(minimum=0)]
MiB = Annotated[int, Schema(minimum=0)]
PeakSource = Annotated[str, Schema(enum=list(PEAK_SOURCES))]
#: TensorBoard's origin as the AM proxies it (``""``: stopped); the AM's URI parse is the finer check
TENSORBOARD_URL = r"^(http://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[1-9][0-9]{0,4}/?)?$"


class _Task(TypedDict):
    role: str
    index: Count


class _Address(_Task):
    port: Annotated[int, Schema(minimum=0, maximum=65535)]


class RegisterBody(_Address, total=False):
    """``POST /register``: the task's framework address, polled until the gang is complete."""

    host: str
    gpu: Optional[str]  # the GPU indices it holds ("0", "0,1"); None without a GPU
    gpu_memory_mb: MiB  # what the ledger holds for it (shared mode: its slot, the CUDA context included)
    pid: int
    mps: bool
    container_id: str  # "" outside YARN; the AM refuses (409) a container that is no longer the task's


class Progress(TypedDict, total=False):
    """What the job reports (``runtime/progress.py``), as a heartbeat carries it."""

    step: int
    total: Annotated[int, Schema(exclusiveMinimum=0)]
    loss: float
    metrics: Annotated[Dict[str, float], Schema(maxProperties=MAX_METRICS)]


class OomReport(TypedDict, total=False):
    """A final heartbeat's ``oom``: the user's process ran out of GPU memory (the executor exits 76)."""

    cap_mb: Optional[MiB]  # None: not capped (exclusive mode, or no GPU)
    peak_mb: Optional[MiB]
    largest_gpu_mb: Optional[MiB]
    signature: str
    peak_source: PeakSource
    oversubscribed: bool
    culprit: str
    #: which memory ran out (runtime/oom.py): the allocator at its cap (grow the expected memory), or memory outside
    #: it, the CUDA context and the libraries' (grow the context reserve)
    kind: Annotated[str, Schema(enum=list(OOM_KINDS))]
    need_mb: MiB  # what the allocator needed when it failed (its use then plus its request), where that is known


class HeartbeatBody(_Task, Progress, total=False):
    """``POST /heartbeat``: progress, GPU memory, and how the task ended (the final one)."""

    gpu: Optional[str]
    container_id: str
    gpu_memory_used_mb: MiB
    gpu_memory_used_source: Annotated[str, Schema(enum=[SOURCE_PROCESS, SOURCE_DEVICE])]
    gpu_memory_peak_mb: MiB
    gpu_memory_peak_source: PeakSource
    oom: OomReport
    message: str
    tensorboard_url: Annotated[str, Schema(pattern=TENSORBOARD_URL)]
    tensorboard_error: str
