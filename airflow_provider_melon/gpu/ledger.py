"""Node-local ledger of MeLoN GPU reservations: a JSON file changed only under an exclusive lock. Stdlib only.

YARN packs tasks onto a node by ``melon.io/gpu-memory``; which GPU of the node a task gets is decided here, by the
executors of that node, one at a time. :func:`reserve`, :func:`reserve_many` and :func:`release` are the entry
points; :func:`check_directory` refuses a ledger folder that another OS user could change (:class:`UnsafeLedger`),
and :func:`overrun` names a neighbour that used more than its reservation. A task that shares a GPU holds its slot
there (``held_mb``, see :meth:`Ledger.reserve`); its need (``expected_mb``) stays the yardstick of :func:`overrun`.

A reservation is keyed by its task (the container) and lives while its owner holds the lease: an exclusive
``flock`` on ``lease-<task>.lock`` in the ledger's folder, taken before the reservation is written and kept open
by the executor and the user's process it starts; the kernel releases it when the last of them dies, in whatever
pid namespace it ran. A pid means nothing across containers' pid namespaces, so it is not what keeps a
reservation alive. ``docs/internals.md``, "The GPU ledger", describes a reservation and the directory rules;
``docs/ledger.md`` is the admin's guide.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import json
import os
import pwd
import re
import stat
import tempfile
import time
from typing import Any, Container, Iterable, Iterator, List, Mapping, Optional

from airflow_provider_melon.gpu import policy
from airflow_provider_melon.gpu.devices import DeviceInfo, host_pids

__all__ = [
    "Ledger",
    "UnsafeLedger",
    "check_directory",
    "default_dir",
    "reserve",
    "reserve_many",
    "release",
    "pid_alive",
    "taken_mb",
    "driver_mb",
    "holder_of",
    "overrun",
    "FOREIGN",
]

DEFAULT_DIR = "/var/lib/melon/ledger"
#: a reservation's lease file, ``lease-<task>-<hash>.lock`` in the ledger's folder
LEASE_PREFIX = "lease-"
#: NVML "used" on an idle GPU (driver/context reserve) below which a GPU still counts as free for exclusive use.
DEFAULT_IDLE_MB = 1024


def default_dir(env: Optional[Mapping[str, str]] = None) -> str:
    """``$MELON_LEDGER_DIR`` (default ``/var/lib/melon/ledger``).

    ``{nm}`` in it is replaced by ``<NM_HOST>_<NM_PORT>`` (YARN sets both in every container): the mini cluster
    runs several NodeManagers on one host, each advertising its own GPUs, and needs one ledger per NodeManager.
    """
    env = os.environ if env is None else env
    d = env.get("MELON_LEDGER_DIR") or DEFAULT_DIR
    if "{nm}" in d:
        d = d.replace("{nm}", f"{env.get('NM_HOST', 'localhost')}_{env.get('NM_PORT', '0')}")
    return d


class UnsafeLedger(ValueError):
    """The ledger directory (or a file in it, or a folder above it) could be changed by another OS user."""


def _who(st: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"owner {user}:{group}, mode {stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})"


def _fix(directory: str) -> str:
    me = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() != 0 else "<the NodeManager's user>"
    return (
        f"fix (as root on this node): rm -rf {directory} && install -d -m 2770 -o {me} "
        f"-g <the NodeManager's group> {directory} (see docs/ledger.md)"
    )


def check_directory(directory: str, create: bool = True) -> None:
    """Raise :class:`UnsafeLedger` unless ``directory`` follows the rule of the module's docstring; create it
    (0o770) when it is missing and its parent is writable by root or this user only."""
    me = os.geteuid()
    trusted = (0, me)
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        if not create:
            raise UnsafeLedger(f"GPU ledger directory {directory} does not exist; {_fix(directory)}") from None
        try:
            pst = os.lstat(parent)
        except FileNotFoundError:
            raise UnsafeLedger(
                f"GPU ledger directory {directory} does not exist (nor {parent}); {_fix(directory)}"
            ) from None
        if (
            not stat.S_ISDIR(pst.st_mode)
            or pst.st_uid not in trusted
            or stat.S_IMODE(pst.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            raise UnsafeLedger(
                f"GPU ledger directory {directory} does not exist, and the executor does not create "
                f"it in {parent} ({_who(pst)}): others may write there and could have made it "
                f"first; {_fix(directory)}"
            )
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o770)
        st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeLedger(
            f"GPU ledger directory {directory} is not a directory ({stat.filemode(st.st_mode)}, "
            f"a symlink is refused too); {_fix(directory)}"
        )
    if st.st_uid not in trusted:
        raise UnsafeLedger(
            f"GPU ledger directory {directory} belongs to another user ({_who(st)}): it could "
            f"erase or forge reservations; {_fix(directory)}"
        )
    if stat.S_IMODE(st.st_mode) & stat.S_IWOTH:
        raise UnsafeLedger(
            f"GPU ledger directory {directory} is writable by others ({_who(st)}): any user's "
            f"process could erase or forge reservations; {_fix(directory)}"
        )
    up = parent
    while True:
        ust = os.stat(up)
        mode = stat.S_IMODE(ust.st_mode)
        if ust.st_uid not in trusted or (mode & stat.S_IWOTH and not mode & stat.S_ISVTX):
            raise UnsafeLedger(
                f"GPU ledger directory {directory} lies in {up} ({_who(ust)}), which another user "
                f"could change (rename the ledger away); {_fix(directory)}"
            )
        if up == os.path.dirname(up):
            break
        up = os.path.dirname(up)
    for name in ("ledger.json", "ledger.lock"):
        path = os.path.join(directory, name)
        try:
            fst = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(fst.st_mode) or stat.S_IMODE(fst.st_mode) & stat.S_IWOTH:
            raise UnsafeLedger(
                f"GPU ledger file {path} is not a regular file only its owner and group may write "
                f"({_who(fst)}); {_fix(directory)}"
            )


def _proc_start(pid: int) -> Optional[int]:
    """Start time of ``pid`` in clock ticks since boot (Linux /proc), or None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        return int(fields[19])  # field 22 overall
    except (OSError, ValueError, IndexError):
        return None


def _proc_state(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat[stat.rindex(")") + 2 :].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int, start: Optional[int] = None) -> bool:
    """True while ``pid`` runs; False when it is gone, a zombie, or a new process reusing the pid."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    if _proc_state(pid) == "Z":
        return False
    if start is not None:
        now = _proc_start(pid)
        if now is not None and now != start:
            return False
    return True


def _ppid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return int(stat[stat.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


#: :func:`holder_of`'s answer for a process of this pid namespace that holds no reservation
FOREIGN = 0


def holder_of(pid: int, holders: Container[int]) -> Optional[int]:
    """The pid in ``holders`` that ``pid`` is or descends from (an executor holds the reservation, its user's process
    is what NVML lists); :data:`FOREIGN` for a process of this pid namespace that holds none; None when whose it is
    cannot be told: NVML's host pids in a container's own pid namespace (:func:`devices.host_pids`), where a host
    pid is another process's number or none, or a pid not visible here."""
    seen = 0
    p: Optional[int] = int(pid)
    if not host_pids() or not os.path.exists(f"/proc/{p}"):
        return None
    while p and p > 1 and seen < 64:
        if p in holders:
            return p
        p, seen = _ppid(p), seen + 1
    return FOREIGN


def taken_mb(reserved_mb: int, device: DeviceInfo, holders: set[int]) -> int:
    """Memory of ``device`` no new reservation may have, MiB: ``reserved_mb`` (MeLoN's reservations on it) or
    what MeLoN's processes use where that is more, plus what processes the ledger does not know use, plus the
    driver's own (NVML's used beyond every process's). ``holders``: the pids holding reservations.

    NVML's ``usedGpuMemory`` is a process's whole footprint, its context included. A pid not visible here (a
    container's view of the host's pids) cannot be told MeLoN's or not: it counts with MeLoN's processes, as the
    used memory of the device did before per-process figures were known. Without a per-process list (an inventory,
    NVML giving no per-process memory): ``max(reserved_mb, used)``."""
    used = int(device.used_mb or 0)
    if device.processes is None:
        return max(reserved_mb, used)
    ours = foreign = 0
    for pid, mb in device.processes:
        if holder_of(pid, holders) == FOREIGN:
            foreign += mb
        else:
            ours += mb
    driver = max(0, used - ours - foreign)
    return max(reserved_mb, ours) + foreign + driver


def driver_mb(device: DeviceInfo) -> int:
    """The driver's own memory on ``device``, MiB: NVML's used beyond every process's (0 without a per-process list).
    No task can have it, so a GPU's memory for tasks, what its slots divide, is ``total_mb`` less this."""
    if device.processes is None:
        return 0
    return max(0, int(device.used_mb or 0) - sum(mb for _, mb in device.processes))


def overrun(device: DeviceInfo, entries: Iterable[dict[str, Any]], own_task: str) -> Optional[dict[str, Any]]:
    """Who holds memory of ``device`` beyond what the ledger gave them, seen by the task ``own_task`` that has just
    run out of GPU memory there: ``{"oversubscribed": True, "culprit": <text>, "excess_mb": N}`` when a neighbour's
    processes use more than its reservation or a process the ledger does not know uses any (the culprit named is
    the one with the largest excess), None when nobody does or NVML gives no per-process memory. ``entries``: the
    ledger's reservations (:meth:`Ledger.entries`)."""
    if device.processes is None:
        return None
    mine = {int(r["pid"]): r for r in entries if r["gpu"] == device.index}
    use: dict[int, int] = {}
    culprits = []
    for pid, mb in device.processes:
        holder = holder_of(pid, mine)
        if holder == FOREIGN:
            if mb > 0:
                culprits.append((mb, f"pid {pid}, which the GPU ledger does not know, uses {mb} MiB"))
        elif holder is not None:
            use[holder] = use.get(holder, 0) + mb
    for pid, r in mine.items():  # against its need, not its slot: a task using its slot's headroom starves no one
        over = use.get(pid, 0) - int(r["expected_mb"])
        if r["task_id"] != own_task and over > 0:
            culprits.append(
                (
                    over,
                    f"task {r['task_id']} (pid {pid}) uses {use[pid]} MiB of its "
                    f"{int(r['expected_mb'])} MiB reservation",
                )
            )
    if not culprits:
        return None
    culprits.sort(key=lambda c: -c[0])
    return {"oversubscribed": True, "culprit": culprits[0][1], "excess_mb": sum(c[0] for c in culprits)}


def _held(r: Mapping[str, Any]) -> int:
    """What reservation ``r`` takes on its GPU: ``held_mb``, or ``expected_mb`` in a ledger written before slots."""
    return int(r.get("held_mb", r["expected_mb"]))


def _same_file(fd: int, path: str) -> bool:
    """Whether the open ``fd`` is the file ``path`` names now (not one unlinked or replaced since it was opened)."""
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def lease_name(task_id: str) -> str:
    """The lease file of ``task_id``'s reservation: ``lease-<the id's safe characters>-<8 hex of its hash>.lock``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)[:100]
    return f"{LEASE_PREFIX}{safe}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}.lock"


class Ledger:
    def __init__(self, directory: Optional[str] = None, idle_mb: int = DEFAULT_IDLE_MB):
        self.directory = directory or default_dir()
        self.path = os.path.join(self.directory, "ledger.json")
        self.lock_path = os.path.join(self.directory, "ledger.lock")
        self.idle_mb = idle_mb
        self._checked = False
        self._leases: dict[str, int] = {}  # task id -> the open, locked fd of its lease

    # ---- leases -----------------------------------------------------------------------------------------------
    def _take_lease(self, task_id: str) -> str:
        """Open and lock ``task_id``'s lease (kept open: held while this process or a child it passes the fd to
        lives); its file's name. ValueError when another live process holds it (the same task twice)."""
        name = lease_name(task_id)
        if task_id in self._leases:
            return name
        path = os.path.join(self.directory, name)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o660)
            with contextlib.suppress(OSError):  # past the umask, for the group
                os.fchmod(fd, 0o660)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise ValueError(f"task {task_id} holds a GPU reservation in another live process ({path})") from None
            if _same_file(fd, path):
                break
            # another executor's sweep of unheld leases took this file between our open and our lock, and unlinked
            # it: a lock on it would hold nothing the folder names. Take the lease again.
            os.close(fd)
        self._leases[task_id] = fd
        return name

    def _drop_lease(self, task_id: str) -> None:
        fd = self._leases.pop(task_id, None)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, lease_name(task_id)))
        os.close(fd)

    def lease_fd(self, task_id: str) -> Optional[int]:
        """The fd of ``task_id``'s lease while this ledger holds it: pass it to the process the task runs (it keeps
        the reservation alive while that process lives, should its parent die first)."""
        return self._leases.get(task_id)

    def _alive(self, r: Mapping[str, Any]) -> bool:
        """Whether reservation ``r``'s owner lives: its lease is locked. A lease found unlocked is its dead owner's
        (the kernel released the lock): it is removed with the reservation. A reservation written before leases
        falls back to its pid (same pid namespace only)."""
        lease = r.get("lease")
        if not isinstance(lease, str) or not lease.startswith(LEASE_PREFIX) or "/" in lease:
            return pid_alive(r["pid"], r.get("pid_start"))
        path = os.path.join(self.directory, lease)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: kept (a GPU counted taken is safer than one overpacked)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True  # held: its owner lives
            with contextlib.suppress(OSError):
                os.unlink(path)
            return False
        finally:
            os.close(fd)

    # ---- storage -----------------------------------------------------------------------------------------
    def _ensure_dir(self) -> None:
        if not self._checked:
            check_directory(self.directory)
            self._checked = True

    @contextlib.contextmanager
    def _locked(self, write: bool = True) -> Iterator[dict[str, Any]]:
        self._ensure_dir()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o660)
        with contextlib.suppress(OSError):  # past the umask, for the group (another user's file: not ours to set)
            os.fchmod(fd, 0o660)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._load()
            yield state
            if write:
                self._store(state)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as f:
                state = json.load(f)
            if not isinstance(state, dict) or not isinstance(state.get("reservations"), list):
                raise ValueError("not a ledger")
            return state
        except FileNotFoundError:
            return {"version": 1, "reservations": []}
        except (ValueError, OSError):
            # Unreadable ledger: start afresh (NVML's used memory still protects running tasks on real GPUs).
            return {"version": 1, "reservations": []}

    def _store(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".ledger-", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(state, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o660)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # ---- policy inputs -----------------------------------------------------------------------------------
    def _reclaim(self, state: dict[str, Any]) -> List[dict[str, Any]]:
        keep: List[dict[str, Any]] = []
        dropped: List[dict[str, Any]] = []
        for r in state["reservations"]:
            (keep if self._alive(r) else dropped).append(r)
        state["reservations"] = keep
        # a lease with no reservation: its owner died before it wrote one (or one that holds it is on its way: then
        # the lease is locked, and _alive keeps it)
        held = {r.get("lease") for r in keep}
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                if name.startswith(LEASE_PREFIX) and name not in held:
                    self._alive({"lease": name, "pid": 0})
        return dropped

    @staticmethod
    def _policy_gpus(state: dict[str, Any], gpus: Iterable[DeviceInfo]) -> List[policy.Gpu]:
        out = []
        holders = {int(r["pid"]) for r in state["reservations"]}
        for d in gpus:
            mine = [r for r in state["reservations"] if r["gpu"] == d.index]
            reserved = sum(_held(r) for r in mine)
            driver = min(driver_mb(d), d.total_mb - 1)  # the GPU as its tasks see it: slots divide the rest
            out.append(
                policy.Gpu(
                    index=d.index,
                    total_mb=d.total_mb - driver,
                    reserved_mb=taken_mb(reserved, d, holders) - driver,
                    tasks=[policy.Task(r["task_id"], int(r["expected_mb"]), bool(r.get("large"))) for r in mine],
                )
            )
        return out

    # ---- API ---------------------------------------------------------------------------------------------
    def reserve(
        self,
        task_id: str,
        pid: int,
        expected_mb: int,
        gpus: Iterable[DeviceInfo],
        exclusive: bool = False,
        large: bool = False,
        mps: bool = False,
    ) -> Optional[int]:
        """Reserve a GPU for ``task_id`` (held while its lease is: this process, or the one it passes
        :meth:`lease_fd` to, lives; ``pid`` is the process NVML's readings are matched with); its index, or None when
        none fits.

        Shared mode: ``expected_mb`` is the task's need on the GPU (its expected memory plus the CUDA context
        reserve); it holds ``policy.slot_mb(expected_mb, G, large=large)``, with MPS too, where ``G`` is that GPU's
        memory for tasks (NVML's total less the driver's own, :func:`driver_mb`; the total for an inventory), and goes
        where :func:`policy.place_default` with ``slots=True`` puts it (memory and the interference rule refuse; least
        fragmentation, then the largest throughput gain, then best fit choose). The AM asks YARN for
        ``max(expected + context, slot_mb(expected, the cluster's largest GPU))``, which equals
        ``slot_mb(expected + context, largest GPU)``: never less than what is held here, YARN's per-GPU figure being
        at least ``G`` (``melon.io/gpu-memory`` is advertised as GPUs x (total - the idle GPU's used memory)). The
        record keeps both, ``expected_mb`` (the need) and ``held_mb``. Exclusive mode: a GPU nobody holds
        (``expected_mb`` is ignored and the whole GPU is recorded, no slot). A task that already holds a reservation
        gets the same GPU back (idempotent retry).
        """
        got = self.reserve_many(task_id, pid, expected_mb, gpus, count=1, exclusive=exclusive, large=large, mps=mps)
        return got[0] if got else None

    def reserve_many(
        self,
        task_id: str,
        pid: int,
        expected_mb: int,
        gpus: Iterable[DeviceInfo],
        count: int = 1,
        exclusive: bool = True,
        large: bool = False,
        mps: bool = False,
    ) -> Optional[List[int]]:
        """Like :meth:`reserve`; ``count`` > 1 is for exclusive mode (``gpus: N``): all N or nothing."""
        gpus = list(gpus)
        if count > 1 and not exclusive:
            raise ValueError("several GPUs per task are only given in exclusive mode")
        self._ensure_dir()
        lease = self._take_lease(task_id)  # before the reservation exists: nobody sees it without its lease held
        try:
            got = self._reserve(task_id, pid, expected_mb, gpus, count, exclusive, large, mps, lease)
        except BaseException:
            self._drop_lease(task_id)
            raise
        if not got:
            self._drop_lease(task_id)
        return got

    def _reserve(
        self,
        task_id: str,
        pid: int,
        expected_mb: int,
        gpus: List[DeviceInfo],
        count: int,
        exclusive: bool,
        large: bool,
        mps: bool,
        lease: str,
    ) -> Optional[List[int]]:
        with self._locked() as state:
            self._reclaim(state)
            held = sorted(r["gpu"] for r in state["reservations"] if r["task_id"] == task_id)
            if held:
                return held
            pgs = self._policy_gpus(state, gpus)
            by_index = {d.index: d for d in gpus}
            for_tasks = {g.index: g.total_mb for g in pgs}
            if exclusive:
                chosen = policy.exclusive_set(pgs, count, idle_mb=self.idle_mb)
            else:
                one = policy.place_default(pgs, int(expected_mb), large=large, mps=mps, slots=True)
                chosen = None if one is None else [one]
            if not chosen:
                return None
            start = _proc_start(pid)
            for idx in chosen:
                need = int(by_index[idx].total_mb if exclusive else expected_mb)
                state["reservations"].append(
                    {
                        "task_id": task_id,
                        "lease": lease,
                        "pid": int(pid),
                        "pid_start": start,
                        "gpu": idx,
                        "expected_mb": need,
                        "held_mb": need if exclusive else policy.slot_mb(need, for_tasks[idx], large=large),
                        "exclusive": bool(exclusive),
                        "large": bool(large),
                        "since": time.time(),
                    }
                )
            return chosen

    def held_mb(self, task_id: str) -> int:
        """What ``task_id``'s reservations hold, MiB (0 when it holds none)."""
        with self._locked(write=False) as state:
            return sum(_held(r) for r in state["reservations"] if r["task_id"] == task_id)

    def release(self, task_id: str) -> int:
        """Drop every reservation of ``task_id``, then its lease; returns how many were dropped."""
        try:
            with self._locked() as state:
                before = len(state["reservations"])
                state["reservations"] = [r for r in state["reservations"] if r["task_id"] != task_id]
                return before - len(state["reservations"])
        finally:
            self._drop_lease(task_id)

    def entries(self, reclaim: bool = False) -> List[dict[str, Any]]:
        """Current reservations (after dropping stale ones when ``reclaim``)."""
        with self._locked(write=reclaim) as state:
            if reclaim:
                self._reclaim(state)
            return [dict(r) for r in state["reservations"]]


def reserve(
    task_id: str,
    pid: int,
    expected_mb: int,
    gpus: Iterable[DeviceInfo],
    exclusive: bool = False,
    large: bool = False,
    mps: bool = False,
    directory: Optional[str] = None,
) -> Optional[int]:
    """Module-level shortcut for :meth:`Ledger.reserve` on the default ledger."""
    return Ledger(directory).reserve(task_id, pid, expected_mb, gpus, exclusive=exclusive, large=large, mps=mps)


def reserve_many(
    task_id: str,
    pid: int,
    expected_mb: int,
    gpus: Iterable[DeviceInfo],
    count: int = 1,
    exclusive: bool = True,
    large: bool = False,
    mps: bool = False,
    directory: Optional[str] = None,
) -> Optional[List[int]]:
    return Ledger(directory).reserve_many(
        task_id, pid, expected_mb, gpus, count=count, exclusive=exclusive, large=large, mps=mps
    )


def release(task_id: str, directory: Optional[str] = None) -> int:
    """Module-level shortcut for :meth:`Ledger.release` on the default ledger."""
    return Ledger(directory).release(task_id)
