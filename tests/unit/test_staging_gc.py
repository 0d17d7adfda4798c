"""The prune policy (pure) and its age parser: what goes, what stays and why."""

from __future__ import annotations

import pytest

from airflow_provider_melon.hadoop.staging_gc import Entry, decide, parse_age, staged_paths

C = "/user/u/.melon/cache"
DAY = 86_400_000
NOW = 100 * DAY
CUTOFF = NOW - 7 * DAY


def obj(digest: str, age_days: float, size: int = 10) -> Entry:
    return Entry("object", f"{C}/{digest}", size, int(NOW - age_days * DAY), digest)


def test_old_unused_objects_go_recent_or_used_ones_stay():
    entries = [obj("a", 30), obj("b", 1), obj("c", 30)]
    d = decide(entries, live_apps=["app_2"], in_use={f"{C}/c/code.zip": "app_2"}, cutoff_ms=CUTOFF)
    assert [e.key for e in d.delete] == ["a"]
    assert [(e.key, why) for e, why in d.kept] == [("c", "in use by app_2")]
    assert d.freed_bytes == 10


def test_plans_go_only_when_old_and_their_app_is_not_live():
    plans = [
        Entry("plan", f"/s/apps/{a}", 0, int(NOW - age * DAY), a)
        for a, age in [("app_1", 30), ("app_2", 30), ("app_3", 1)]
    ]
    d = decide(plans, live_apps=["app_2", "app_3"], in_use={}, cutoff_ms=CUTOFF)
    assert [e.key for e in d.delete] == ["app_1"]
    assert [(e.key, why) for e, why in d.kept] == [("app_2", "application live")]


def test_index_entries_follow_their_objects_and_an_emptied_index_folder_goes():
    idx = f"{C}/by-sample"
    entries = [
        obj("a", 30),
        obj("b", 30),
        Entry("index-dir", f"{idx}/k1", 0, CUTOFF - DAY, "k1"),
        Entry("index", f"{idx}/k1/a", 0, CUTOFF - DAY, "a"),
        Entry("index", f"{idx}/k1/gone", 0, CUTOFF - DAY, "gone"),  # its object was deleted by hand
        Entry("leftover", f"{idx}/k1/.lock", 0, CUTOFF - DAY),
        Entry("index-dir", f"{idx}/k2", 0, CUTOFF - DAY, "k2"),
        Entry("index", f"{idx}/k2/b", 0, CUTOFF - DAY, "b"),
        Entry("leftover", f"{idx}/k2/.x.tmp", 0, NOW),
    ]  # an upload in progress: its folder stays
    d = decide(entries, live_apps=[], in_use={f"{C}/b/env.tar.gz": "app_9"}, cutoff_ms=CUTOFF)
    gone = {e.path for e in d.delete}
    assert gone == {f"{C}/a", f"{idx}/k1", f"{idx}/k1/a", f"{idx}/k1/gone", f"{idx}/k1/.lock"}


def test_a_live_index_entry_keeps_its_folder():
    idx = f"{C}/by-sample"
    entries = [
        obj("a", 1),
        Entry("index-dir", f"{idx}/k", 0, CUTOFF - DAY, "k"),
        Entry("index", f"{idx}/k/a", 0, CUTOFF - DAY, "a"),
    ]
    assert decide(entries, live_apps=[], in_use={}, cutoff_ms=CUTOFF).delete == []


def test_staged_paths_reads_local_resources_and_the_staged_list():
    plan = {
        "local_resources": [{"url": "hdfs://nn:8020/s/cache/x/code.zip"}, {"name": "no url"}],
        "staged": ["hdfs://nn:8020/s/cache/y/melon-appmaster.jar", "s3a://bucket/elsewhere.zip"],
    }
    assert staged_paths(plan) == {"/s/cache/x/code.zip", "/s/cache/y/melon-appmaster.jar"}


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("7d", 7 * 86400),
        ("12h", 43200),
        ("60m", 3600),
        ("3600s", 3600),
        ("3600", 3600),
        ("1h", 3600),
        (" 1.5D ", 129600),
    ],
)
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    "text,says",
    [
        ("soon", "expected a number"),
        ("-1d", "must be 1h or more"),
        ("", "expected a number"),
        ("nan", "must be 1h or more"),
        ("0", "must be 1h or more"),
        ("59m", "must be 1h or more"),
        ("3599", "uploads in flight"),
    ],
)
def test_parse_age_names_the_option(text, says):
    with pytest.raises(ValueError, match="--older-than") as err:
        parse_age(text)
    assert says in str(err.value)


class _Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"the hook was used ({name}) although the cutoff was refused")


@pytest.mark.parametrize("seconds", [0, 59 * 60, -1])
def test_prune_refuses_a_cutoff_under_an_hour_before_touching_anything(seconds):
    from airflow_provider_melon.hadoop.staging_gc import prune

    with pytest.raises(ValueError, match="must be 1h or more"):
        prune(_Untouchable(), seconds)
