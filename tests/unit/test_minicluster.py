"""Pure helpers of the mini-cluster wrapper (no cluster)."""

import json

from airflow_provider_melon.dev import minicluster as mc


def test_minicluster_start_prints_the_connections_to_export(tmp_path):
    details = mc.ClusterDetails(
        {
            "rm_web_url": "http://127.0.0.1:1",
            "webhdfs_url": "http://127.0.0.1:2/webhdfs/v1",
            "fs_default_fs": "hdfs://127.0.0.1:3",
            "conf_dir": "/c",
            "am_classpath": "/cp",
            "nn_http": "127.0.0.1:2",
            "user": "u",
        },
        tmp_path,
    )
    lines = mc.connection_exports(details, "/py")
    assert [line.split("=", 1)[0] for line in lines] == [
        "export AIRFLOW_CONN_YARN_DEFAULT",
        "export AIRFLOW_CONN_WEBHDFS_DEFAULT",
    ]
    yarn = json.loads(lines[0].split("=", 1)[1].strip("'"))
    assert (yarn["host"], yarn["extra"]["fs_default_fs"], yarn["extra"]["am_classpath"]) == (
        "http://127.0.0.1:1",
        "hdfs://127.0.0.1:3",
        "/cp",
    )
