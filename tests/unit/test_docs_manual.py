"""The manual keeps up with the code: every exit code the executor sets and every `melon doctor` check is on the
troubleshooting page, the yarn connection's form fields are written out in plain text (readable outside the built
site) as provider_info declares them, every job spec value a page recommends (a `key: value` in the text, a YAML or
JSON block of a job) is one the spec accepts, every sample output is marked as an example, the doctor's sample lists
the checks the doctor runs, and no page of docs/ or the README carries work-log words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from airflow_provider_melon.provider_info import get_provider_info
from airflow_provider_melon.runtime import config as runtime_config
from airflow_provider_melon.spec import JobSpec, JobSpecError, RoleSpec

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def page(name: str) -> str:
    return (DOCS / f"{name}.md").read_text(encoding="utf-8")


#: every page of the manual
PAGES = [*sorted(DOCS.glob("*.md")), REPO / "README.md"]
JOB_FIELDS, ROLE_FIELDS = set(JobSpec.model_fields), set(RoleSpec.model_fields)
#: a value in the text that stands for one (``gpus: N``, ``outputs: {model: …}``, ``auto:<size>``)
PLACEHOLDER = re.compile(r"…|<|\.\.\.|^[A-Z]$")
#: jobs of each framework, each role a minimal one: a recommended value is valid when some job accepts it
BASES = [
    {"framework": "generic", "roles": {"worker": {}}},
    {"framework": "tensorflow", "roles": {"chief": {}, "worker": {}, "ps": {}}},
    {"framework": "pytorch", "roles": {"master": {}, "worker": {}}},
    {"framework": "pytorch", "launcher": "torchrun", "roles": {"worker": {}}},
]


def _accepted(code: Path, job: dict | None = None, role: dict | None = None) -> str | None:
    """None when a job of :data:`BASES` takes ``job``'s fields (and ``role``'s in one of its roles), else why not."""
    why = ""
    for base in BASES:
        for name in base["roles"] if role else [None]:
            roles = {r: {"instances": 1, **(role if r == name else {})} for r in base["roles"]}
            data = {"name": "doc", "entrypoint": "python t.py", **base, "roles": roles, **(job or {})}
            data["code"] = str(code)  # the reader's own folder
            try:
                JobSpec.from_dict(data)
                return None
            except JobSpecError as exc:
                why = str(exc)
    return why


def _recommended() -> list[tuple[str, dict | None, dict | None]]:
    """``(where, job fields, role fields)`` of every value the manual gives: a code span ``key: value`` whose key is
    a field of a job or a role, and every YAML or JSON block whose keys are a job's."""
    found: list[tuple[str, dict | None, dict | None]] = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"`([a-z_.<>]+):\s+([^`]+)`", line):
                key, raw = m.group(1).split(".")[-1], m.group(2)
                if PLACEHOLDER.search(raw) or (key not in JOB_FIELDS and key not in ROLE_FIELDS):
                    continue
                value = yaml.safe_load(raw)
                where = f"{path.name}:{n}: {m.group(0)}"
                found.append((where, None, {key: value}) if key in ROLE_FIELDS else (where, {key: value}, None))
        for m in re.finditer(r"^```(?:yaml|json)\n(.*?)^```", text, re.M | re.S):
            try:
                data = yaml.safe_load(m.group(1))
            except yaml.YAMLError:
                continue  # not a job (a compose file, a plan with comments)
            if isinstance(data, dict) and data and set(data) <= JOB_FIELDS:
                line = text[: m.start()].count("\n") + 1
                found.append((f"{path.name}:{line}: a job", data, None))
    return found


def test_every_job_spec_value_the_manual_recommends_is_one_the_spec_accepts(tmp_path):
    found = _recommended()
    assert len(found) > 40 and any("oom_retry: false" in w for w, _, _ in found)  # the scan works
    refused = [f"{where}: {why}" for where, job, role in found if (why := _accepted(tmp_path, job, role))]
    assert not refused, "values the manual recommends that the job spec refuses:\n" + "\n".join(refused)


@pytest.mark.parametrize("text", ["`queue_timeout_s: 0`", "`oom_max_growths: 0`", "`oom_growth: 1.0`"])
def test_the_scan_catches_a_value_the_spec_refuses(tmp_path, text):
    m = re.search(r"`([a-z_.<>]+):\s+([^`]+)`", text)
    assert m and m.group(1) in JOB_FIELDS | ROLE_FIELDS
    value = {m.group(1): yaml.safe_load(m.group(2))}
    assert _accepted(tmp_path, *((None, value) if m.group(1) in ROLE_FIELDS else (value, None)))


def test_every_sample_output_is_marked_as_an_example():
    """A block that shows a command's output (its first line a ``$`` prompt) holds figures of one run: the sentence
    before it says it is an example (the output as a cluster of this shape gives it, not a measurement)."""
    unmarked = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```\w*\n\$ ", text, re.M):
            before = text[: m.start()].rstrip().rsplit("\n\n", 1)[-1]
            if "example" not in before.lower():
                unmarked.append(f"{path.name}:{text[: m.start()].count(chr(10)) + 1}")
    assert not unmarked, f"sample outputs not marked as an example: {unmarked}"


def test_the_doctors_sample_shows_the_checks_it_runs():
    """operations.md's `melon doctor` sample: the checks a healthy cluster gets from a host without GPUs, in the
    doctor's order, and a summary line that counts them."""
    import ast

    doctor = (REPO / "airflow_provider_melon" / "cli" / "doctor.py").read_text(encoding="utf-8")
    run = next(n for n in ast.walk(ast.parse(doctor)) if isinstance(n, ast.FunctionDef) and n.name == "run")
    calls = sorted(
        (a.lineno, a.col_offset, a.attr)
        for a in ast.walk(run)
        if isinstance(a, ast.Attribute) and a.attr.startswith("check_")
    )
    named = {"rm": "resourcemanager"}  # the finding's name where it is not the method's
    order = [named.get(n, n) for n in (a.removeprefix("check_").replace("_", "-") for *_, a in calls)]
    expected = [c for c in order if c not in ("gpu-mig", "gpu-memory")]  # only run on a GPU host
    sample = re.search(r"^```text\n\$ melon doctor.*?\n(.*?)^```", page("operations"), re.M | re.S)
    assert sample, "operations.md has no melon doctor sample"
    lines = sample.group(1).splitlines()
    shown = [line.split()[1] for line in lines if line.split() and line.split()[0] in ("OK", "WARN", "FAIL")]
    assert shown == expected, shown
    assert lines[-1] == f"{len(expected)} checks: {len(expected)} ok, 0 warning(s), 0 failed", lines[-1]


def test_every_exit_code_of_the_executor_is_on_the_troubleshooting_page():
    codes = {value for name, value in vars(runtime_config).items() if name.startswith("EXIT_")}
    assert {2, 5, 75, 76, 143} <= codes  # the scan works
    text = page("troubleshooting")
    missing = sorted(code for code in codes if f"| `{code}` |" not in text)
    assert not missing, f"executor exit codes docs/troubleshooting.md does not explain: {missing}"


def test_every_doctor_check_is_on_the_troubleshooting_page():
    cli = REPO / "airflow_provider_melon" / "cli"
    doctor = (cli / "doctor.py").read_text(encoding="utf-8")
    submit = (cli / "doctor_submit.py").read_text(encoding="utf-8")
    checks = set(re.findall(r"""\b(?:fail|warn)\(\s*["']([\w-]+)["']""", doctor))
    checks |= {
        f"submit-test:{s}" for s in re.findall(r"""_step\(\s*["'](?:fail|warn)["'],\s*["']([\w-]+)["']""", submit)
    }
    assert {"resourcemanager", "hdfs", "gpu-mig", "submit-test:pynvml"} <= checks  # the scan works
    text = page("troubleshooting")
    missing = sorted(c for c in checks if f"| `{c}` |" not in text)
    assert not missing, f"melon doctor checks docs/troubleshooting.md does not list: {missing}"


def test_the_yarn_connection_form_is_written_out_as_provider_info_declares_it():
    [conn] = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "yarn"]
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \| ([^|]+)\|", page("connections"), re.M)}
    wrong = {
        key: (field["label"], rows.get(key))
        for key, field in conn["conn-fields"].items()
        if rows.get(key) != field["label"]
    }
    assert not wrong, f"docs/connections.md's form table differs from provider_info (label, page): {wrong}"
    off_form = page("connections").split("### Extra keys not on the form", 1)[1].split("\n#", 1)[0]
    listed = {key for row in re.findall(r"^\|([^|]+)\|", off_form, re.M) for key in re.findall(r"`(\w+)`", row)}
    assert listed and not listed & set(conn["conn-fields"]), (
        f"on the form, yet listed as not: {listed & set(conn['conn-fields'])}"
    )


def test_no_page_of_the_manual_carries_work_log_words():
    pattern = re.compile(r"\bstop [0-9]+\b|\bissue [0-9]+\b|this session")
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()[:80]}"
        for p in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "work-log words in the manual:\n" + "\n".join(found)
