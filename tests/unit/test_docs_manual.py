"""The manual keeps up with the code: every exit code the executor sets and every `melon doctor` check is on the
troubleshooting page, the yarn connection's form fields are written out in plain text (readable outside the built
site) as provider_info declares them, and no page of docs/ or the README carries work-log words."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_provider_melon.provider_info import get_provider_info
from airflow_provider_melon.runtime import config as runtime_config

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def page(name: str) -> str:
    return (DOCS / f"{name}.md").read_text(encoding="utf-8")


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
    checks = set(re.findall(r"""_(?:fail|warn)\(\s*["']([\w-]+)["']""", doctor))
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


def test_no_page_of_the_manual_carries_work_log_words():
    pattern = re.compile(r"\bstop [0-9]+\b|\bissue [0-9]+\b|this session")
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()[:80]}"
        for p in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "work-log words in the manual:\n" + "\n".join(found)
