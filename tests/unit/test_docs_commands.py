"""Every `melon <command> [--option]` and every `make <target>` that the README, the docs and the provider's own
messages name exists: commands and options are checked against the real argparse parser (`melon ... --help`),
targets against the Makefile. A renamed option or a dropped target fails here, not in an operator's shell.

Mentions are read from code only (inline `code` and fenced blocks), where a reader copies commands from: one
mention is a code span or a block line (with its `\\` continuations), cut at `|`, `;`, `&&` and `#` comments, that
starts with the command (after a `$ ` prompt or `VAR=value` assignments)."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: where commands are named for people: the README, the docs, the other READMEs, and the package's messages
SOURCES = [
    "README.md",
    "docs/*.md",
    "docker/README.md",
    "appmaster/README.md",
    "benchmarks/README.md",
    "airflow_provider_melon/**/*.py",
    "scripts/*.py",
]

FENCE = re.compile(r"^(```+|~~~+)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
#: a command at the start of a mention, after an optional prompt and VAR=value assignments
LEAD = r"^(?:\$\s*)?(?:[A-Za-z_]\w*=\S*\s+)*"
MELON = re.compile(LEAD + r"melon\s+([a-z][\w-]*)(.*)")
MAKE = re.compile(LEAD + r"make\s+([a-z][\w-]*)")
OPTION = re.compile(r"(?<![\w/=:.-])(--?[a-zA-Z][\w-]*)")
CHOICES = re.compile(r"\{([\w,-]+)\}")


@dataclass(frozen=True)
class Mention:
    where: str
    text: str


def mentions(text: str, where: str) -> list[Mention]:
    """The code pieces of ``text`` (fenced blocks line by line, then inline spans), cut into single commands."""
    pieces: list[str] = []
    for block in FENCE.finditer(text):
        pieces += block.group(2).replace("\\\n", " ").splitlines()
    prose = FENCE.sub("", text)
    pieces += SPAN.findall(prose)
    out = []
    for piece in pieces:
        piece = re.split(r"\s#", piece, maxsplit=1)[0]
        for part in re.split(r"\||;|&&", piece):
            if part.strip():
                out.append(Mention(where, part.strip()))
    return out


@functools.lru_cache(maxsize=None)
def melon_help(*argv: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "airflow_provider_melon.cli", *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, f"melon {' '.join(argv)} --help: {result.stderr}"
    return result.stdout


def melon_commands() -> set[str]:
    usage = melon_help().split("positional arguments", 1)[0]
    [choices] = CHOICES.findall(usage)
    return set(choices.split(","))


def make_targets(makefile: Path = REPO / "Makefile") -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile.read_text(), re.M))


def problems(found: list[Mention], targets: set[str]) -> list[str]:
    """What does not exist, one line per bad mention."""
    bad = []
    commands = melon_commands()
    for m in found:
        for target in MAKE.findall(m.text):
            if target not in targets:
                bad.append(f"{m.where}: `{m.text}`: no make target {target!r} in the Makefile")
        hit = MELON.search(m.text)
        if not hit:
            continue
        command, rest = hit.group(1), hit.group(2)
        if command not in commands:
            bad.append(f"{m.where}: `{m.text}`: no melon command {command!r} (melon has {sorted(commands)})")
            continue
        help_text = melon_help(command)
        known = set(OPTION.findall(help_text))
        action = re.match(r"\s+([a-z]+)\b(?![./=:-])", rest)
        usage_choices = CHOICES.findall(help_text.split("\n\n", 1)[0])
        if action and usage_choices:
            allowed = {c for group in usage_choices for c in group.split(",")}
            if action.group(1) not in allowed:
                bad.append(
                    f"{m.where}: `{m.text}`: melon {command} has no {action.group(1)!r} (one of {sorted(allowed)})"
                )
        for option in OPTION.findall(rest):
            if option not in known:
                bad.append(f"{m.where}: `{m.text}`: melon {command} has no option {option} (`melon {command} --help`)")
    return bad


def collect() -> list[Mention]:
    found = []
    for pattern in SOURCES:
        for path in sorted(REPO.glob(pattern)):
            found += mentions(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    return found


def test_every_command_option_and_make_target_the_docs_name_exists():
    found = collect()
    # the extraction works: these are named in the README and the docs
    texts = " ".join(m.text for m in found)
    for expected in ("make demo", "make test", "melon doctor", "melon submit", "melon minicluster start"):
        assert expected in texts, expected
    assert sum(1 for m in found if MELON.search(m.text)) > 30
    assert not problems(found, make_targets()), "\n".join(problems(found, make_targets()))


def test_the_readme_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    [first] = FENCE.findall(text)[:1]
    lines = [line.split("#")[0].strip() for line in first[1].splitlines() if line.strip()]
    assert lines == ["make demo", "make test"], lines
    assert text.index("```") < text.index("\n## "), "the two commands come before any section"


@pytest.mark.parametrize(
    "made_up, says",
    [
        ("`melon submit job.yaml --no-such-option 3`", "melon submit has no option --no-such-option"),
        ("`melon frobnicate --now`", "no melon command 'frobnicate'"),
        ("```bash\nmelon minicluster explode\n```", "melon minicluster has no 'explode'"),
        ("```bash\nmelon logs APP \\\n  --follow-forever\n```", "melon logs has no option --follow-forever"),
        ("Run `make build` first.", "no make target 'build'"),
        ("`melon ls --state RUNNING | make no-such-target`", "no make target 'no-such-target'"),
        ("```text\n$ MELON_X=1 melon doctor --no-such-check\n```", "melon doctor has no option --no-such-check"),
    ],
)
def test_a_made_up_command_option_or_target_is_caught(made_up, says):
    found = mentions(made_up, "made-up.md")
    reported = problems(found, make_targets())
    assert any(says in line for line in reported), (says, reported)


@pytest.mark.parametrize(
    "real",
    [
        "`melon submit job.yaml --rm http://rm1:8088,http://rm2:8088 --webhdfs http://nn:9870 --user alice --wait`",
        "```bash\nmelon minicluster start --secure --tenants   # a Kerberos cluster\n```",
        "`melon plan --params 25e6 --per-sample-ms 2 --workers 4 --bandwidth-gbps 10 --gpu-memory 16GiB`",
        "`melon logs APP -f`",
        "`make test-unit`",
        "`melon.io/gpu-memory`",
        "`/user/alice/.melon writable`",
        "`does not make it, the plan keeps`",
    ],
)
def test_real_commands_and_lookalikes_pass(real):
    assert problems(mentions(real, "real.md"), make_targets()) == []
