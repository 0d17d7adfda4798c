"""Provider metadata for Airflow's discovery (entry point group ``apache_airflow_provider``).

Kept free of heavy imports: Airflow reads it while discovering providers. The YARN connection's form
(``conn-fields`` / ``ui-field-behaviour``, Airflow ≥ 3.2) is declared here and reused by the hook's older
``get_connection_form_widgets`` / ``get_ui_field_behaviour`` methods.
"""

from __future__ import annotations

from airflow_provider_melon import __version__

YARN_CONN_FIELDS = {
    "auth": {
        "label": "Authentication",
        "description": "simple: user.name on every call (Login is the user); kerberos: SPNEGO via requests-kerberos",
        "schema": {"type": ["string", "null"], "default": "simple", "enum": ["simple", "kerberos"]},
    },
    "kerberos_principal": {"label": "Kerberos principal", "schema": {"type": ["string", "null"]}},
    "connect_timeout": {"label": "Connect timeout (s)", "schema": {"type": ["number", "null"], "default": 5}},
    "read_timeout": {"label": "Read timeout (s)", "schema": {"type": ["number", "null"], "default": 30}},
    "retries": {"label": "Retries on connection errors / 5xx", "schema": {"type": ["integer", "null"], "default": 3}},
    "verify": {"label": "Verify TLS certificates", "schema": {"type": ["boolean", "null"], "default": True}},
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
}

YARN_UI_FIELD_BEHAVIOUR = {
    "hidden-fields": ["schema", "port"],
    "relabeling": {"host": "ResourceManager URL(s)", "login": "User"},
    "placeholders": {
        "host": "http://rm1:8088,http://rm2:8088",
        "login": "hadoop",
        "extra": '{"auth": "simple", "fs_default_fs": "hdfs://namenode:8020"}',
    },
}


def get_provider_info() -> dict:
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
                "conn-fields": YARN_CONN_FIELDS,
                "ui-field-behaviour": YARN_UI_FIELD_BEHAVIOUR,
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
