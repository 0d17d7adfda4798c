"""Provider metadata for Airflow's discovery (entry point group ``apache_airflow_provider``).

The YARN connection's form (``conn-fields`` / ``ui-field-behaviour``, Airflow ≥ 3.2) is the RM client's fields
(hooks/yarn.py, which also serves them to older 3.x through the hook's classmethods) plus MelonHook's extras.
"""

from __future__ import annotations

from airflow_provider_melon import __version__

#: Extras of the ``yarn`` connection that MelonHook reads (the RM client's own are in hooks/yarn.py).
MELON_CONN_FIELDS = {
    "fs_default_fs": {
        "label": "fs.defaultFS",
        "description": "HDFS URI that YARN localizes staged files from, e.g. hdfs://namenode:8020",
        "schema": {"type": ["string", "null"]},
    },
    "am_classpath": {
        "label": "AM classpath",
        "description": "CLASSPATH for the ApplicationMaster (<CPS>-separated; default: YARN's application classpath)",
        "schema": {"type": ["string", "null"]},
    },
    "python": {
        "label": "Container Python",
        "description": "Interpreter on the NodeManagers when a job names no environment (default python3)",
        "schema": {"type": ["string", "null"]},
    },
    "container_env": {
        "label": "Container environment",
        "description": "JSON object of variables set in every task container (e.g. MELON_LEDGER_DIR)",
        "schema": {"type": ["object", "null"]},
    },
}


def get_provider_info() -> dict:
    from airflow_provider_melon.hooks.yarn import CONN_FIELDS, UI_FIELD_BEHAVIOUR

    return {
        "package-name": "airflow-provider-melon",
        "name": "MeLoN (distributed deep learning on YARN with GPU sharing)",
        "description": "Runs distributed TensorFlow/PyTorch training on Hadoop YARN and over-provisions GPUs "
        "by expected GPU memory (MeLoN).",
        "versions": [__version__],
        "integrations": [
            {"integration-name": "Apache Hadoop YARN (MeLoN)", "external-doc-url": "https://hadoop.apache.org/",
             "tags": ["apache"]},
        ],
        "hooks": [
            {"integration-name": "Apache Hadoop YARN (MeLoN)",
             "python-modules": ["airflow_provider_melon.hooks.yarn", "airflow_provider_melon.hooks.melon"]},
        ],
        "connection-types": [
            {
                "connection-type": "yarn",
                "hook-class-name": "airflow_provider_melon.hooks.yarn.YarnHook",
                "hook-name": "YARN ResourceManager",
                "conn-fields": {**CONN_FIELDS, **MELON_CONN_FIELDS},
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            },
        ],
        "config": {
            "melon": {
                "description": "Defaults of the MeLoN provider.",
                "options": {
                    "poll_interval": {
                        "description": "Seconds between RM polls of a running application (minimum 5).",
                        "version_added": "0.1.0", "type": "integer", "example": None, "default": "10",
                    },
                    "staging_dir": {
                        "description": "HDFS folder for content-addressed staging; {user} is the submitting user.",
                        "version_added": "0.1.0", "type": "string", "example": None,
                        "default": "/user/{user}/.melon",
                    },
                    "am_jar": {
                        "description": "Local path of the MeLoN ApplicationMaster jar (built by `make build`).",
                        "version_added": "0.1.0", "type": "string", "example": "/opt/melon/melon-appmaster.jar",
                        "default": None,
                    },
                },
            }
        },
    }
