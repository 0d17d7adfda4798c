"""Generated job specs: every invalid one is refused with a one-line JobSpecError naming the field,
before anything touches the network (also through MelonTrainOperator.execute); every valid one round-trips
through dict, JSON and YAML unchanged.

The network guard makes socket connects and name lookups raise ``NetworkTouched`` (a BaseException, so no
``except Exception`` on the way can swallow it) and records them; a positive control shows that it does catch
the operator's first RM call once the spec is valid.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_melon.spec import INT32_MAX, RESERVED_LINKS, JobSpec, JobSpecError
from tests.fuzz_strategies import SHELL_SPECIALS, ascii_tags, job_names, link_names, nasty_text, valid_job


class NetworkTouched(BaseException):
    """A socket connect or a name lookup happened where none may."""


@contextlib.contextmanager
def no_network():
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise NetworkTouched(f"network use: {args!r}")

    with (
        mock.patch.object(socket.socket, "connect", refuse),
        mock.patch.object(socket.socket, "connect_ex", refuse),
        mock.patch.object(socket, "create_connection", refuse),
        mock.patch.object(socket, "getaddrinfo", refuse),
    ):
        yield attempts


# ------------------------------------------------------------------------------------------------ invalid specs

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
bad_job_names = st.one_of(
    st.text(max_size=20).filter(lambda t: not _NAME_RE.fullmatch(t)),
    job_names.map(lambda n: n + "\n"),  # `$` in a regex lets a final newline through
    job_names.map(lambda n: n + "; touch pwned"),
)
bad_sizes = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=INT32_MAX + 1),
    st.sampled_from(
        ["two gigs", "", "-4g", "0", "0g", "1e3", "nan", "inf", "4 GiB extra", "4x", "$(echo 4)g", "4g\x00"]
    ),
    st.just(float("nan")),
    st.just(float("inf")),
    st.just(-1.0),
    st.just(True),
    st.just([4]),
    st.just({"g": 4}),
)
bad_counts = st.one_of(
    st.integers(max_value=0), st.integers(min_value=INT32_MAX + 1), st.sampled_from(["many", "1.5", "", None, [1], 1.5])
)
with_nul = nasty_text().map(lambda t: t + "\x00" + t)
unbalanced = st.one_of(
    nasty_text().map(lambda t: "python 'unterminated " + t.replace("'", "")),
    nasty_text().map(lambda t: 'python "unterminated ' + t.replace('"', "").replace("\\", "")),
    st.just("python train.py \\"),
)


def _role(job) -> str:
    return next(iter(job["roles"]))


@st.composite
def invalid_job(draw):
    """A valid job with one thing broken, and the field the error must name."""
    job = draw(valid_job())
    kind = draw(st.sampled_from(sorted(_BREAKERS)))
    field = _BREAKERS[kind](draw, job)
    return kind, job, field


def _set(job, key, value):
    job[key] = value


def _role_field(name, values):
    def breaker(draw, job):
        role = _role(job)
        job["roles"][role][name] = draw(values)
        return f"roles.{role}.{name}"

    return breaker


def _tf_two_chiefs(draw, job):
    job["framework"] = "tensorflow"
    job["roles"] = {"chief": {"instances": draw(st.integers(2, 10))}, "worker": {}}
    return "roles.chief.instances"


def _torch_two_masters(draw, job):
    job["framework"] = "pytorch"
    job["roles"] = {"master": {"instances": draw(st.integers(2, 10))}}
    return "roles.master.instances"


def _env_key(draw, job):
    key = draw(st.text(min_size=0, max_size=12).filter(lambda k: not _ENV_RE.fullmatch(k) and "\x00" not in k))
    job["env"] = {key: "1"}
    return "env."


def _env_value(draw, job):
    job["env"] = {"GOOD_NAME": draw(with_nul)}
    return "env.GOOD_NAME"


def _tags(draw, job):
    bad = draw(
        st.one_of(
            st.text(min_size=101, max_size=120).filter(str.isascii),
            st.text(min_size=1).filter(lambda t: not t.isascii()),
            st.sampled_from(["", "   "]),
        )
    )
    good = draw(st.lists(ascii_tags, max_size=2))
    job["tags"] = [*good, bad]
    return f"tags.{len(good)}"


def _input_path(draw, job):
    job["inputs"] = [
        {"path": draw(st.text(max_size=20).filter(lambda p: not p.startswith(("/", "hdfs://")) and "\x00" not in p))}
    ]
    return "inputs.0.path"


def _input_name(draw, job):
    name = draw(
        st.one_of(
            st.sampled_from(RESERVED_LINKS),
            st.sampled_from(["", ".", "..", "-rf", ".hidden"]),
            st.sampled_from([s for s in SHELL_SPECIALS if s.strip()]).map(lambda s: "data" + s),
            st.just("a/b"),
            st.just("../../etc/passwd"),
        )
    )
    job["inputs"] = [{"path": "hdfs:///data/x.npz", "name": name}]
    return "inputs.0.name"


def _input_derived_name(draw, job):
    last = draw(
        st.one_of(
            st.sampled_from(RESERVED_LINKS),
            st.just("a b"),
            st.just('a"b'),
            st.just("$(id)"),
            st.just(".."),
            st.just("x;y"),
        )
    )
    job["inputs"] = [{"path": "hdfs:///data/" + last}]
    return "inputs.0.path"


def _input_duplicate(draw, job):
    name = draw(link_names)
    job["inputs"] = [{"path": "hdfs:///a/" + name}, {"path": "hdfs:///b/" + name}]
    return "inputs.1.name"


def _input_clashes_with_env_archive(draw, job):
    folder = draw(link_names)
    job["environment"] = {"archive": "hdfs:///envs/e.tar.gz", "python": folder + "/bin/python"}
    job["inputs"] = [{"path": "hdfs:///data/x", "name": folder}]
    return "inputs.0.name"


def _outputs(draw, job):
    key = draw(st.text(max_size=10).filter(lambda k: not re.fullmatch(r"[A-Za-z0-9_]+", k) and "\x00" not in k))
    job["outputs"] = {key: "hdfs:///out"}
    return "outputs."


def _archive_python(draw, job):
    python = draw(
        st.one_of(
            st.just(None),
            st.just(""),
            st.just("/usr/bin/python3"),
            st.just("python"),
            st.just("../env/bin/python"),
            st.just("code/bin/python"),
            st.just("a b/bin/python"),
        )
    )
    env = {"archive": "hdfs:///envs/e.tar.gz"}
    if python is not None:
        env["python"] = python
    job["environment"] = env
    return "environment.python"


def _archive_path(draw, job):
    job["environment"] = {
        "archive": draw(st.sampled_from(["envs/e.tar.gz", "file://host/e.tar.gz", "e.tgz", "http://x/e.tgz"])),
        "python": "env/bin/python",
    }
    return "environment.archive"


def _docker_image(draw, job):
    job["environment"] = {
        "docker_image": draw(
            st.sampled_from(["tf:2.21; rm -rf /", "$(id)", "tf 2.21", "", "-tf", "tf\n:2", 'a"b', "`id`"])
        )
    }
    return "environment.docker_image"


def _unknown_key(draw, job):
    key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in JobSpec.model_fields))
    job[key] = 1
    return key if key.isprintable() else repr(key)


_BREAKERS = {
    "name": lambda draw, job: _set(job, "name", draw(bad_job_names)) or "name",
    "name-type": lambda draw, job: _set(job, "name", draw(st.sampled_from([None, 3, ["a"], {"a": 1}]))) or "name",
    "framework": lambda draw, job: (
        _set(
            job, "framework", draw(st.text(max_size=10).filter(lambda t: t not in ("tensorflow", "pytorch", "generic")))
        )
        or "framework"
    ),
    "entrypoint-empty": lambda draw, job: (
        _set(job, "entrypoint", draw(st.sampled_from(["", " ", "\n\t"]))) or "entrypoint"
    ),
    "entrypoint-unbalanced": lambda draw, job: _set(job, "entrypoint", draw(unbalanced)) or "entrypoint",
    "entrypoint-nul": lambda draw, job: _set(job, "entrypoint", "python " + draw(with_nul)) or "entrypoint",
    "entrypoint-surrogate": lambda draw, job: _set(job, "entrypoint", "python \ud800x") or "entrypoint",
    "env-key": _env_key,
    "env-value": _env_value,
    "env-type": lambda draw, job: (
        _set(job, "env", draw(st.sampled_from([["A=1"], "A=1", {"A": 1}, {"A": None}]))) or "env"
    ),
    "queue": lambda draw, job: _set(job, "queue", draw(st.one_of(st.sampled_from(["", "  "]), with_nul))) or "queue",
    "priority": lambda draw, job: (
        _set(
            job,
            "priority",
            draw(
                st.one_of(st.integers(min_value=INT32_MAX + 1), st.integers(max_value=-INT32_MAX - 1), st.just("high"))
            ),
        )
        or "priority"
    ),
    "max_attempts": lambda draw, job: _set(job, "max_attempts", draw(bad_counts)) or "max_attempts",
    "register_timeout_s": lambda draw, job: _set(job, "register_timeout_s", draw(bad_counts)) or "register_timeout_s",
    "tags": _tags,
    "roles-empty": lambda draw, job: _set(job, "roles", draw(st.sampled_from([{}, [], "worker", None]))) or "roles",
    "role-name": lambda draw, job: (
        _set(
            job,
            "roles",
            {draw(st.text(max_size=12).filter(lambda t: not _NAME_RE.fullmatch(t) and "\x00" not in t)): {}},
        )
        or "roles"
    ),
    "role-type": lambda draw, job: (
        _set(job, "roles", {_role(job): draw(st.sampled_from([3, "big", [1]]))}) or f"roles.{_role(job)}"
    ),
    "instances": _role_field("instances", bad_counts),
    "vcores": _role_field("vcores", bad_counts),
    "gpus": _role_field("gpus", st.one_of(st.integers(max_value=0), st.integers(min_value=INT32_MAX + 1))),
    "restarts": _role_field("restarts", st.one_of(st.integers(max_value=-1), st.integers(min_value=INT32_MAX + 1))),
    "memory": _role_field("memory", bad_sizes),
    "gpu_memory": _role_field("gpu_memory", bad_sizes),
    "role-unknown-key": lambda draw, job: job["roles"][_role(job)].update(gpu=1) or f"roles.{_role(job)}.gpu",
    "gpus-and-gpu-memory": lambda draw, job: (
        job["roles"][_role(job)].update(gpus=1, gpu_memory="4g") or f"roles.{_role(job)}"
    ),
    "tf-two-chiefs": _tf_two_chiefs,
    "torch-two-masters": _torch_two_masters,
    "input-path": _input_path,
    "input-name": _input_name,
    "input-derived-name": _input_derived_name,
    "input-duplicate": _input_duplicate,
    "input-env-archive-clash": _input_clashes_with_env_archive,
    "outputs": _outputs,
    "archive-python": _archive_python,
    "archive-path": _archive_path,
    "archive-and-docker": lambda draw, job: (
        _set(job, "environment", {"archive": "hdfs:///e.tgz", "python": "env/bin/python", "docker_image": "tf"})
        or "environment"
    ),
    "docker-image": _docker_image,
    "tensorboard_log_dir": lambda draw, job: _set(job, "tensorboard_log_dir", draw(with_nul)) or "tensorboard_log_dir",
    "unknown-key": _unknown_key,
}


def _assert_names_field(err: JobSpecError, field: str) -> None:
    text = str(err)
    assert text.startswith("invalid job spec: "), text
    assert "\n" not in text, f"not one line: {text!r}"
    assert field in text, f"{field!r} not named in {text!r}"


@settings(max_examples=200)
@given(invalid_job())
def test_invalid_spec_is_refused_naming_the_field_before_any_network_use(case):
    kind, job, field = case
    with no_network() as attempts:
        with pytest.raises(JobSpecError) as err:
            JobSpec.from_dict(job)
    assert attempts == []
    _assert_names_field(err.value, field)


@settings(max_examples=40)
@given(invalid_job())
def test_invalid_spec_in_json_and_yaml_is_refused_the_same_way(case):
    kind, job, field = case
    try:
        text = json.dumps(job)
    except (TypeError, ValueError):  # e.g. a surrogate: not JSON-serialisable, nothing to load from text
        return
    with no_network() as attempts:
        with pytest.raises(JobSpecError) as err:
            JobSpec.from_json(text)
        with pytest.raises(JobSpecError) as err_yaml:
            JobSpec.load(text)  # JSON is YAML: the operator's path for a templated string
    assert attempts == []
    _assert_names_field(err.value, field)
    assert "invalid job spec" in str(err_yaml.value) or "not valid YAML" in str(err_yaml.value)


@pytest.mark.parametrize("value", ["4g", 4096])
def test_sizes_above_int32_mib_and_nan_are_refused(value):
    job = {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {"memory": value}}}
    assert JobSpec.from_dict(job).roles["worker"].memory_mb in (4096,)
    for bad in (f"{INT32_MAX + 1}", INT32_MAX + 1, "3000000t", math.nan):
        job["roles"]["worker"]["memory"] = bad
        with pytest.raises(JobSpecError, match=r"roles\.worker\.memory"):
            JobSpec.from_dict(job)


# ------------------------------------------------------------------------------------------------- round trips


@settings(max_examples=150)
@given(valid_job())
def test_valid_spec_round_trips_through_dict_json_and_yaml(job):
    with no_network() as attempts:
        spec = JobSpec.from_dict(job)
        assert JobSpec.from_dict(spec.to_dict()) == spec
        assert JobSpec.from_json(spec.to_json()) == spec
        assert JobSpec.from_yaml(spec.to_yaml()) == spec
        assert JobSpec.load(spec.to_json()) == spec
    assert attempts == []
    # what the author wrote survives validation verbatim (only sizes are normalised to MiB)
    assert spec.env == job.get("env", {})
    assert spec.entrypoint == job["entrypoint"]
    assert spec.outputs == job.get("outputs", {})
    assert spec.queue == job.get("queue", "default")


# ------------------------------------------------------------------------- the operator: validation comes first

RM = "http://127.0.0.1:9"  # loopback discard port; the guard refuses the connect before it happens anyway


@pytest.fixture
def fuzz_conns(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_YARN_FUZZ", json.dumps({"conn_type": "yarn", "host": RM, "login": "alice"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_WEBHDFS_FUZZ", json.dumps({"conn_type": "webhdfs", "host": "127.0.0.1", "port": 9})
    )


def _context():
    ti = mock.Mock(dag_id="fuzz", task_id="train", run_id="manual__1", map_index=-1, stats_tags={})
    return {"ti": ti, "run_id": "manual__1"}


def _operator(job, **kw):
    from airflow_provider_melon.operators.train import MelonTrainOperator

    return MelonTrainOperator(
        task_id="train", job=job, yarn_conn_id="yarn_fuzz", webhdfs_conn_id="webhdfs_fuzz", poll_interval=5, **kw
    )


FIXTURE_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]  # fuzz_conns only sets env variables


@settings(max_examples=40, suppress_health_check=FIXTURE_OK)
@given(case=invalid_job(), deferrable=st.booleans())
def test_operator_refuses_an_invalid_job_before_any_network_use(fuzz_conns, case, deferrable):
    kind, job, field = case
    op = _operator(job, deferrable=deferrable)
    with no_network() as attempts:
        try:
            op.execute(_context())
        except JobSpecError as exc:
            error = exc
        except NetworkTouched:  # a BaseException: turned into a failure hypothesis can shrink
            error = None
    assert attempts == [], f"{kind}: the network was used before the job was refused"
    assert error is not None, f"{kind}: the job was not refused"
    _assert_names_field(error, field)


@settings(max_examples=10, suppress_health_check=FIXTURE_OK)
@given(override=st.sampled_from(["lots", "-1g", "0", "4g; rm -rf /", "\x00"]))
def test_operator_gpu_memory_override_is_validated_before_any_network_use(fuzz_conns, override):
    job = {"name": "j", "entrypoint": "python t.py", "roles": {"worker": {"gpu_memory": "4g"}}}
    op = _operator(job, gpu_memory=override)
    with no_network() as attempts:
        with pytest.raises(JobSpecError, match=r"roles\.worker\.gpu_memory"):
            op.execute(_context())
    assert attempts == []


def test_guard_catches_the_operators_first_rm_call_once_the_job_is_valid(fuzz_conns):
    """Positive control: with a valid job the operator does go to the network, and the guard sees it."""
    op = _operator({"name": "j", "entrypoint": "python t.py", "roles": {"worker": {}}})
    with no_network() as attempts:
        with pytest.raises(NetworkTouched):
            op.execute(_context())
    assert attempts, "the guard saw no network use"
