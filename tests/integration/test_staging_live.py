"""Content-addressed staging against the real HDFS of the mini cluster."""

import pytest

from airflow_provider_melon.spec import JobSpec

pytestmark = pytest.mark.integration


def _spec(code_dir):
    return JobSpec.from_dict({"name": "staging", "code": str(code_dir), "entrypoint": "python train.py",
                              "roles": {"worker": {"instances": 1}}})


def test_second_submit_of_unchanged_code_uploads_nothing(melon_hook, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hello')\n")
    (code / "pkg").mkdir()
    (code / "pkg" / "util.py").write_text("X = 1\n")
    first = melon_hook.stage(_spec(code))
    second = melon_hook.stage(_spec(code))
    assert first.files["code"].uploaded_bytes == first.files["code"].size > 0
    assert second.uploaded_bytes == 0
    assert second.files["code"] == first.files["code"].__class__(
        first.files["code"].url, first.files["code"].size, first.files["code"].timestamp, 0)
    # The local resource carries HDFS's real length and modification time.
    status = melon_hook.hdfs.status(melon_hook.hdfs_path(first.files["code"].url))
    assert status["length"] == first.files["code"].size
    assert status["modificationTime"] == first.files["code"].timestamp
    assert "/.melon/cache/" in first.files["code"].url

    # A changed file is a new object: uploaded again, under another digest.
    (code / "train.py").write_text("print('changed')\n")
    third = melon_hook.stage(_spec(code))
    assert third.files["code"].url != first.files["code"].url
    assert third.files["code"].uploaded_bytes == third.files["code"].size
    assert third.files["runtime"].uploaded_bytes == 0


def test_missing_hdfs_input_is_a_clear_error(melon_hook, tmp_path):
    (tmp_path / "c").mkdir()
    spec = JobSpec.from_dict({"name": "x", "code": str(tmp_path / "c"), "entrypoint": "true",
                              "roles": {"worker": {}}, "inputs": [{"path": "/no/such/data.bin"}]})
    with pytest.raises(FileNotFoundError, match="/no/such/data.bin"):
        melon_hook.stage(spec)


def test_empty_code_folder_stages_no_archive(melon_hook, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "code" not in melon_hook.stage(_spec(tmp_path / "empty")).files
