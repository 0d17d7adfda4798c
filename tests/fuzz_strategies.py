"""Hypothesis strategies shared by the property tests (tests/unit/test_fuzz_*.py): job specs and hostile text.

``nasty_text()`` mixes ordinary text with what a shell, YARN's launch script or a YAML/JSON reader treats
specially; ``valid_job()`` builds spec dicts that ``JobSpec`` must accept, with such text wherever a spec allows
free text (entrypoint arguments, env values, queue, outputs, paths, the interpreter path).
"""

from __future__ import annotations

import re
import shlex

from hypothesis import strategies as st

from airflow_provider_melon.spec import INT32_MAX, RESERVED_LINKS, TF_ROLES, TORCH_ROLES

#: what shells and YARN's launch script read specially, and what breaks naive quoting
SHELL_SPECIALS = [
    ";",
    "&&",
    "||",
    "|",
    "&",
    "$(touch pwned)",
    "`touch pwned`",
    "$((1+1))",
    "${HOME}",
    "$HOME",
    "$",
    "$$",
    "$?",
    "'",
    '"',
    "\\",
    '\\"',
    "\n",
    "\r",
    "\t",
    " ",
    "*",
    "?",
    "[a-z]",
    "~",
    "#",
    "!",
    "!!",
    "<",
    ">",
    ">>",
    "2>&1",
    "(",
    ")",
    "{",
    "}",
    "{{HOME}}",
    "{{",
    "}}",
    "<CPS>",
    "<LOG_DIR>",
    "<ADD_OPENS>",
    "%PATH%",
    "=",
    "--",
    "-",
    "é",
    "日本",
    "\u2028",
    "\x85",
    "\x1b[31m",
    "\x7f",
    "\x01",
]

# Any Unicode but NUL and lone surrogates (the spec refuses those; tested on their own).
_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
plain_text = st.text(_CHARS, max_size=12)


def nasty_text(min_size: int = 0, max_parts: int = 6) -> st.SearchStrategy[str]:
    return st.lists(st.one_of(st.sampled_from(SHELL_SPECIALS), plain_text), min_size=min_size, max_size=max_parts).map(
        "".join
    )


#: ``$NAME``, ``${NAME}`` and ``{{NAME}}`` are live variable references in a job's env values (documented);
#: this turns each into a command substitution attempt instead, so the value must arrive exactly as written.
_REFERENCE = re.compile(r"\$(?=[A-Za-z_{])|\{\{(?=[A-Za-z_])|<(?=(?:CPS|LOG_DIR)>)")


def without_references(text: str) -> str:
    return _REFERENCE.sub(lambda m: {"$": "$(", "{{": "{{(", "<": "<("}[m.group(0)], text)


literal_text = nasty_text().map(without_references)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
job_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,24}", fullmatch=True)
link_names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.+@=,~-]{0,15}", fullmatch=True).filter(
    lambda n: n not in RESERVED_LINKS
)
ascii_tags = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=100).filter(str.strip)
sizes = st.one_of(st.integers(1, 64 * 1024), st.sampled_from(["512m", "2g", "1.5g", "6GiB", "4096Mi", "1t"]))


@st.composite
def roles(draw, framework: str) -> dict:
    def role(single: bool = False) -> dict:
        out = {}
        if not single and draw(st.booleans()):
            out["instances"] = draw(st.integers(1, 8))
        if draw(st.booleans()):
            out["memory"] = draw(sizes)
        if draw(st.booleans()):
            out["vcores"] = draw(st.integers(1, 16))
        gpu = draw(st.sampled_from(["none", "gpus", "gpu_memory"]))
        if gpu == "gpus":
            out["gpus"] = draw(st.integers(1, 8))
        elif gpu == "gpu_memory":
            out["gpu_memory"] = draw(sizes)
        if draw(st.booleans()):
            out["restarts"] = draw(st.integers(0, 5))
        if draw(st.booleans()):
            out["large"] = draw(st.booleans())
        return out

    if framework == "tensorflow":
        names = draw(
            st.lists(st.sampled_from(TF_ROLES), min_size=1, unique=True).filter(lambda n: "chief" in n or "worker" in n)
        )
    elif framework == "pytorch":
        names = draw(st.lists(st.sampled_from(TORCH_ROLES), min_size=1, unique=True))
    else:
        names = draw(st.lists(job_names, min_size=1, max_size=3, unique=True))
    out = {name: role(single=name in ("chief", "master")) for name in names}
    # ps is untracked by default: keep one tracked role
    if all(name == "ps" for name in out):
        out["worker"] = {}
    return out


@st.composite
def environments(draw) -> dict:
    kind = draw(st.sampled_from(["none", "python", "archive", "docker"]))
    if kind == "python":
        return {"python": draw(nasty_text(min_size=1).filter(lambda t: t.strip()))}
    if kind == "archive":
        return {"archive": "hdfs:///envs/" + draw(link_names) + ".tar.gz", "python": draw(link_names) + "/bin/python"}
    if kind == "docker":
        return {
            "docker_image": draw(st.from_regex(r"[a-z0-9][a-z0-9._/-]{0,20}(:[A-Za-z0-9._-]{1,10})?", fullmatch=True))
        }
    return {}


@st.composite
def valid_job(draw) -> dict:
    """A spec dict that JobSpec must accept (no local code folder: code is absent or in HDFS)."""
    framework = draw(st.sampled_from(["tensorflow", "pytorch", "generic"]))
    args = draw(st.lists(nasty_text(), min_size=1, max_size=5))
    job = {
        "name": draw(job_names),
        "framework": framework,
        "entrypoint": shlex.join(["python", *args]),
        "roles": draw(roles(framework)),
    }
    optional = {
        "code": st.just("hdfs://nn:8020/user/alice/code.zip"),
        "env": st.dictionaries(env_names, nasty_text(), max_size=4),
        "queue": nasty_text(min_size=1).filter(str.strip),
        "priority": st.one_of(st.just("auto"), st.integers(-INT32_MAX, INT32_MAX)),
        "max_attempts": st.integers(1, 10),
        "tags": st.lists(ascii_tags, max_size=3),
        "environment": environments(),
        "inputs": st.lists(
            st.fixed_dictionaries(
                {"path": link_names.map(lambda n: "hdfs:///data/" + n)},
                optional={
                    "type": st.sampled_from(["FILE", "ARCHIVE"]),
                    "visibility": st.sampled_from(["PUBLIC", "PRIVATE", "APPLICATION"]),
                },
            ),
            max_size=3,
            unique_by=lambda i: i["path"],
        ),
        "outputs": st.dictionaries(
            st.from_regex(r"[A-Za-z0-9_]{1,10}", fullmatch=True), nasty_text().filter(str.strip), max_size=3
        ),
        "tensorboard_log_dir": nasty_text(),
        "register_timeout_s": st.integers(1, INT32_MAX),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            job[key] = draw(strategy)
    # inputs named after the env archive's folder would clash (refused; tested as an invalid spec)
    if "inputs" in job and "archive" in job.get("environment", {}):
        folder = job["environment"]["python"].split("/", 1)[0]
        job["inputs"] = [i for i in job["inputs"] if i["path"].rsplit("/", 1)[-1] != folder]
    return job
