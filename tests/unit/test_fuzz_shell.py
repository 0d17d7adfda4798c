"""Shell metacharacters in a job reach the training process inert.

The path a job's strings travel, and what each test executes for real:

1. ``submission.build_plan`` → the plan's ``env`` and ``command``. The AM (Java, MelonApplicationMaster
   ``launchContext``) copies both into each task container's launch context unchanged, adding MELON_ROLE etc.
2. The NodeManager writes ``launch_container.sh`` (Hadoop 3.5.0 ``ContainerLaunch``, checked with javap):
   ``export K="<value>"`` per variable and ``exec /bin/bash -c "<command> 1><LOG_DIR>/stdout ..."``, unescaped,
   after replacing ``<LOG_DIR>``, ``<CPS>`` (``:``), ``<ADD_OPENS>``, ``{{`` (``$``) and ``}}`` (nothing).
   :func:`launch_script` writes exactly that, and the tests run it with ``/bin/bash``.
3. The executor decodes ``MELON_ENTRYPOINT_B64``, splits it with ``shlex`` and starts it without a shell.

A probe stands in for the interpreter (``environment.python``) or the user's script and dumps its argv and
environment as JSON; the tests compare that with what the spec said. A leaked ``$(touch pwned)`` would also leave
a ``pwned`` file behind: the tests check that none appears.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_melon import submission
from airflow_provider_melon.runtime import executor
from airflow_provider_melon.spec import JobSpec
from airflow_provider_melon.submission import StagedFile, yarn_shell_value
from tests.fake_am import FakeAM
from tests.fuzz_strategies import SHELL_SPECIALS, env_names, literal_text, nasty_text, without_references

REPO = Path(__file__).resolve().parents[2]
BASH = "/bin/bash"
RUNTIME = StagedFile("hdfs://nn:8020/c/melon_runtime.zip", 10, 111)
pytestmark = pytest.mark.skipif(not os.access(BASH, os.X_OK), reason="needs /bin/bash (YARN's launch shell)")


def yarn_expand(text: str, log_dir: str) -> str:
    """Hadoop 3.5.0 ContainerLaunch: <LOG_DIR> first, then expandEnvironment (Unix, Java >= 17)."""
    text = text.replace("<LOG_DIR>", log_dir).replace("<CPS>", ":")
    text = text.replace("<ADD_OPENS>", "--add-opens=java.base/java.lang=ALL-UNNAMED")
    return text.replace("{{", "$").replace("}}", "")


def launch_script(plan: dict, container_env: dict[str, str], log_dir: str) -> str:
    """``launch_container.sh`` as the NodeManager writes it for a task of ``plan`` (env order: the AM's map)."""
    env = dict(plan["env"])
    env.update(container_env)  # what the AM adds (MELON_ROLE, ...) and the NM sets (HOME, ...)
    lines = ["#!/bin/bash", ""]
    lines += [f'export {key}="{yarn_expand(value, log_dir)}"' for key, value in env.items()]
    command = plan["command"] + " 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr"  # MelonApplicationMaster.launchContext
    lines.append(f'exec /bin/bash -c "{yarn_expand(command, log_dir)}"')
    return "\n".join(lines) + "\n"


def run_launch_script(plan: dict, workdir: Path, container_env: dict[str, str] | None = None) -> tuple[int, str]:
    logs = workdir / "logs"
    logs.mkdir()
    script = workdir / "launch_container.sh"
    script.write_text(launch_script(plan, container_env or {}, str(logs)), encoding="utf-8")
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/fuzz", "LANG": "C.UTF-8"}
    proc = subprocess.run([BASH, str(script)], cwd=workdir, env=base, timeout=60, capture_output=True)
    stderr = (logs / "stderr").read_text(errors="replace") if (logs / "stderr").exists() else ""
    out = (logs / "stdout").read_text(encoding="utf-8") if (logs / "stdout").exists() else ""
    assert proc.returncode == 0, f"launch script failed ({proc.returncode}): {proc.stderr!r} {stderr!r}"
    return proc.returncode, out


PROBE = """#!{python} -S
import json, os, sys
json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, sys.stdout)
"""


def write_probe(folder: Path, name: str = "python") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / name
    probe.write_text(PROBE.format(python=sys.executable))
    probe.chmod(probe.stat().st_mode | stat.S_IXUSR)
    return probe


def no_stray_files(workdir: Path) -> None:
    """``touch pwned`` (in SHELL_SPECIALS) would have created the file in the shell's folder."""
    stray = [name for name in ("pwned", "pwned2") if (workdir / name).exists()]
    assert not stray, f"a command ran: {stray}"


def spec_with(**fields) -> JobSpec:
    job = {"name": "probe", "entrypoint": "python train.py", "roles": {"worker": {}}}
    job.update(fields)
    return JobSpec.from_dict(job)


# ---------------------------------------------------------------------------------- yarn_shell_value on its own


def bash_reads(encoded: str, workdir: Path, env: dict[str, str] | None = None) -> str:
    """What bash makes of ``export V="<encoded, after YARN's replacements>"``."""
    script = f'export V="{yarn_expand(encoded, "/logs")}"\nprintf %s "$V"\n'
    proc = subprocess.run(
        [BASH, "-c", script],
        cwd=workdir,
        capture_output=True,
        timeout=30,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode("utf-8")


@settings(max_examples=60)
@given(value=nasty_text(max_parts=10))
def test_literal_values_come_out_of_yarns_double_quotes_unchanged(value):
    with tempfile.TemporaryDirectory() as tmp:
        assert bash_reads(yarn_shell_value(value), Path(tmp)) == value
        no_stray_files(Path(tmp))


@settings(max_examples=40)
@given(value=literal_text)
def test_expanding_values_without_references_come_out_unchanged(value):
    with tempfile.TemporaryDirectory() as tmp:
        assert bash_reads(yarn_shell_value(value, expand=True), Path(tmp)) == value
        no_stray_files(Path(tmp))


def test_expanding_values_keep_documented_references_live(tmp_path):
    value = '$HOME/a:${HOME}/b:{{HOME}}/c<CPS>d;$(touch pwned);`touch pwned2`;$$;${HOME:-x};"q"'
    got = bash_reads(yarn_shell_value(value, expand=True), tmp_path, env={"HOME": "/home/u"})
    assert got == '/home/u/a:/home/u/b:/home/u/c:d;$(touch pwned);`touch pwned2`;$$;${HOME:-x};"q"'
    no_stray_files(tmp_path)


def test_nul_cannot_be_encoded():
    with pytest.raises(ValueError, match="NUL"):
        yarn_shell_value("a\x00b")


# ------------------------------------------------------------------ the plan through YARN's launch script


@settings(max_examples=40)
@given(
    folder=nasty_text(min_size=1, max_parts=4).filter(
        lambda t: "/" not in t and t not in (".", "..") and len(t.encode()) < 120
    ),
    # a prefix: bash itself owns some names (UID, RANDOM, SHELLOPTS...), whatever YARN is given
    env=st.dictionaries(env_names.map(lambda k: "J_" + k), literal_text, max_size=5),
    outputs=st.dictionaries(
        st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True), nasty_text().filter(str.strip), max_size=2
    ),
    tensorboard=nasty_text(),
    args=st.lists(nasty_text(), max_size=4),
)
def test_plan_env_and_command_reach_the_container_verbatim(folder, env, outputs, tensorboard, args):
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        probe = write_probe(workdir / "interp" / folder)
        spec = spec_with(
            env=env,
            outputs=outputs,
            tensorboard_log_dir=tensorboard or None,
            entrypoint=shlex.join(["python", "train.py", *args]),
            environment={"python": str(probe)},
        )
        plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
        _, out = run_launch_script(plan, workdir, {"MELON_ROLE": "worker"})
        seen = json.loads(out)
        # the interpreter: the probe itself, with the executor's module arguments and nothing else
        assert seen["argv"] == [str(probe), "-m", "airflow_provider_melon.runtime.executor"]
        for key, value in env.items():
            assert seen["env"].get(key) == value, key
        if outputs:  # the declared outputs reach the executor (which publishes them) as given
            assert json.loads(base64.b64decode(seen["env"]["MELON_OUTPUTS_B64"])) == outputs
        if tensorboard:
            assert seen["env"]["MELON_TENSORBOARD_LOG_DIR"] == tensorboard
        assert seen["env"]["MELON_JOB_NAME"] == "probe"
        assert seen["env"]["PYTHONPATH"] == "./melon_runtime"
        # the entrypoint, as the executor reads it: its own argv once split
        cfg = executor.Config.from_env(
            {**seen["env"], "MELON_INDEX": "0", "MELON_AM_URL": "http://127.0.0.1:1", "MELON_SECRET": "s"}
        )
        assert shlex.split(cfg.entrypoint) == ["python", "train.py", *args]
        no_stray_files(workdir)


def test_variable_references_in_job_env_still_expand(tmp_path):
    probe = write_probe(tmp_path / "bin")
    spec = spec_with(
        env={
            "DATA": "$HOME/data:{{HOME}}/more<CPS>${HOME}",
            "PYTHONPATH": "$HOME/lib",
            "NOT_A_REF": '$(touch pwned)`touch pwned`"$HOME"',
        },
        environment={"python": str(probe)},
    )
    plan = submission.build_plan(
        spec, code=None, runtime=RUNTIME, inputs={}, container_env={"FROM_CONNECTION": "{{HOME}}/x"}
    )
    _, out = run_launch_script(plan, tmp_path)
    env = json.loads(out)["env"]
    assert env["DATA"] == "/home/fuzz/data:/home/fuzz/more:/home/fuzz"
    assert env["PYTHONPATH"] == "./melon_runtime:/home/fuzz/lib"
    assert env["NOT_A_REF"] == '$(touch pwned)`touch pwned`"/home/fuzz"'
    assert env["FROM_CONNECTION"] == "/home/fuzz/x"
    no_stray_files(tmp_path)


@pytest.mark.parametrize("key", ["A;touch pwned", "A B", "1A", "A-B", "$(x)", ""])
def test_plan_refuses_an_env_name_the_launch_script_would_run(key):
    spec = spec_with()
    with pytest.raises(ValueError, match="not an environment variable name"):
        submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={}, container_env={key: "1"})


# ---------------------------------------------------------------------- the executor starts argv, no shell


@settings(max_examples=30)
@given(args=st.lists(nasty_text(), max_size=6))
def test_executor_starts_the_entrypoint_with_exactly_the_spec_arguments(args):
    spec = spec_with(entrypoint=shlex.join(["python", "probe.py", *args]))
    env_b64 = base64.b64encode(spec.entrypoint.encode()).decode()
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        Path("probe.py").write_text("import json, sys\njson.dump(sys.argv[1:], open('argv.json', 'w'))\n")
        cfg = executor.Config.from_env(
            {
                "MELON_ROLE": "worker",
                "MELON_INDEX": "0",
                "MELON_SECRET": "s",
                "MELON_AM_URL": "http://127.0.0.1:1",
                "MELON_ENTRYPOINT_B64": env_b64,
            }
        )
        child = executor.Executor(cfg, env={}).start_child({"PATH": os.environ.get("PATH", "")})
        assert child.wait(timeout=60) == 0
        assert json.loads(Path("argv.json").read_text()) == args
        no_stray_files(Path(tmp))


def test_executor_refuses_an_unsplittable_entrypoint_as_a_config_error():
    cfg = executor.Config.from_env(
        {
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_SECRET": "s",
            "MELON_AM_URL": "http://127.0.0.1:1",
            "MELON_ENTRYPOINT": "python 'open",
        }
    )
    with pytest.raises(executor.Fatal) as err:
        executor.Executor(cfg, env={}).start_child({})
    assert err.value.code == executor.EXIT_CONFIG and "cannot be split" in str(err.value)


# -------------------------------------------- end to end: launch script → real executor → user process


def test_every_metacharacter_reaches_the_training_process_inert(tmp_path):
    """The whole chain once, with every special string at once in arguments, env values and the interpreter's
    folder: plan → launch_container.sh (bash) → the real executor → the user's process."""
    specials = [s for s in SHELL_SPECIALS if s]
    args = specials + [" ".join(specials), "".join(specials)]
    env = {f"V{i}": without_references(s) for i, s in enumerate(specials + ["".join(specials)])}
    env["INJECT"] = '"; touch pwned; echo "'
    # the container folder as YARN lays it out: the runtime archive localized as ./melon_runtime
    (tmp_path / "melon_runtime").mkdir()
    (tmp_path / "melon_runtime" / "airflow_provider_melon").symlink_to(REPO / "airflow_provider_melon")
    (tmp_path / "train.py").write_text(
        "import json, os, sys\njson.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, open('seen.json', 'w'))\n"
    )
    interp_dir = tmp_path / "py; $(touch pwned) `touch pwned` 'q' \"dq\" {{HOME}} <CPS> & | *"
    interp_dir.mkdir()
    (interp_dir / "python").symlink_to(sys.executable)
    spec = spec_with(
        entrypoint=shlex.join(["python", "train.py", *args]),
        env=env,
        environment={"python": str(interp_dir / "python")},
    )
    plan = submission.build_plan(spec, code=None, runtime=RUNTIME, inputs={})
    am = FakeAM(["worker:0"], secret="s3cret")
    try:
        container = {  # what the AM adds per task (MelonApplicationMaster.launchContext)
            "MELON_ROLE": "worker",
            "MELON_INDEX": "0",
            "MELON_TASK_ATTEMPT": "0",
            "MELON_AM_URL": am.url,
            "MELON_SECRET": "s3cret",
            "MELON_APP_ID": "application_1_0001",
            "MELON_CONTAINER_ID": "c_1",
            "MELON_GPUS": "0",
            "MELON_GPU_MEMORY_MB": "0",
            # this machine, not a node: loopback only, and a ledger of its own
            "MELON_HOST": "127.0.0.1",
            "MELON_BIND_HOST": "127.0.0.1",
            "MELON_LEDGER_DIR": str(tmp_path / "ledger"),
        }
        run_launch_script(plan, tmp_path, container)
    finally:
        am.close()
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == args
    for key, value in env.items():
        assert seen["env"][key] == value, key
    assert "MELON_SECRET" not in seen["env"]
    no_stray_files(tmp_path)
