"""Provider metadata for Airflow's discovery (entry point group ``apache_airflow_provider``).

The YARN connection's form (``conn-fields`` / ``ui-field-behaviour``, Airflow ≥ 3.2) is the RM client's fields
(hooks/yarn.py, which also serves them to older 3.x through the hook's classmethods) plus MelonHook's extras.
"""

from __future__ import annotations

from airflow_provider_melon import __version__
from airflow_provider_melon.gpu.learned import ALONE_AFTER_S

#: ``[melon] staging_retry_s``'s default, the one home of it: MelonHook (and so ``melon submit``) falls back to it.
STAGING_RETRY_S_DEFAULT = 120

#: ``conn-fields`` for the ``yarn`` connection type in provider info (extra fields, stored in ``extra``).
YARN_CONN_FIELDS: dict = {
    "auth": {
        "label": "Authentication",
        "description": "simple (user.name query parameter on every call) or kerberos (SPNEGO via requests-kerberos)",
        "schema": {"type": "string", "enum": ["simple", "kerberos"], "default": "simple"},
    },
    "kerberos_principal": {
        "label": "Kerberos principal",
        "description": "Client principal for SPNEGO (default: Airflow's [kerberos] principal)",
        "schema": {"type": ["string", "null"]},
    },
    "kerberos_keytab": {
        "label": "Kerberos keytab",
        "description": "Keytab of the principal: the hook obtains and renews its ticket itself (default: Airflow's "
        "[kerberos] keytab if that file exists, else the ticket `airflow kerberos` keeps)",
        "schema": {"type": ["string", "null"]},
    },
    "kerberos_ccache": {
        "label": "Kerberos ticket cache",
        "description": "Ticket cache file (default: Airflow's [kerberos] ccache)",
        "schema": {"type": ["string", "null"]},
    },
    "krb5_conf": {
        "label": "krb5.conf",
        "description": "Kerberos client configuration (exported as KRB5_CONFIG; default: the system's)",
        "schema": {"type": ["string", "null"]},
    },
    "connect_timeout": {
        "label": "Connect timeout (s)",
        "description": "TCP connect timeout of every RM call",
        "schema": {"type": ["number", "null"], "default": 5, "minimum": 0},
    },
    "read_timeout": {
        "label": "Read timeout (s)",
        "description": "Read timeout of every RM call",
        "schema": {"type": ["number", "null"], "default": 30, "minimum": 0},
    },
    "retries": {
        "label": "Retries",
        "description": "Retries after the first attempt, on connection errors, timeouts and 5xx only",
        "schema": {"type": ["integer", "null"], "default": 3, "minimum": 0},
    },
    "web_ui_url": {
        "label": "RM web UI URL for links",
        "description": "The RM as users' browsers reach it, for extra links (default: the RM URL above)",
        "schema": {"type": ["string", "null"]},
    },
    "verify": {
        "label": "Verify TLS",
        "description": "true, false, or the path of a CA bundle (https RM URLs)",
        "schema": {"type": ["string", "null"], "default": "true"},
    },
}

#: ``ui-field-behaviour`` for the ``yarn`` connection type.
YARN_UI_FIELD_BEHAVIOUR: dict = {
    "hidden-fields": ["schema", "password"],
    "relabeling": {"host": "ResourceManager URL(s)", "login": "User (simple auth)"},
    "placeholders": {
        "host": "http://rm1:8088,http://rm2:8088",
        "port": "8088",
        "login": "hadoop",
        "auth": "simple",
        "kerberos_principal": "airflow@EXAMPLE.COM",
        "connect_timeout": str(5),
        "read_timeout": str(30),
        "retries": "3",
        "verify": "true",
    },
}


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
    "tensorboard_url": {
        "label": "TensorBoard URL",
        "description": "Base URL of a TensorBoard serving HDFS logs; '{logdir}' is replaced by the job's log dir",
        "schema": {"type": ["string", "null"]},
    },
    "container_env": {
        "label": "Container environment",
        "description": "JSON object of variables set in every task container (e.g. MELON_LEDGER_DIR)",
        "schema": {"type": ["object", "null"]},
    },
}


#: The ``yarn`` connection's whole form: ``conn-fields`` in provider info (read by Airflow >= 3.2) and the same
#: fields from ``YarnHook.get_connection_form_widgets`` (what Airflow 3.0/3.1 read: version_compat.py).
CONN_FORM_FIELDS = {**YARN_CONN_FIELDS, **MELON_CONN_FIELDS}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-melon",
        "name": "MeLoN (distributed deep learning on YARN with GPU sharing)",
        "description": "Runs distributed TensorFlow/PyTorch training on Hadoop YARN and over-provisions GPUs "
        "by expected GPU memory (MeLoN).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Apache Hadoop YARN (MeLoN)",
                "external-doc-url": "https://hadoop.apache.org/",
                "tags": ["apache"],
            },
        ],
        "hooks": [
            {
                "integration-name": "Apache Hadoop YARN (MeLoN)",
                "python-modules": ["airflow_provider_melon.hooks.yarn", "airflow_provider_melon.hooks.melon"],
            },
        ],
        "operators": [
            {
                "integration-name": "Apache Hadoop YARN (MeLoN)",
                "python-modules": [
                    "airflow_provider_melon.operators.train",
                    "airflow_provider_melon.operators.profile",
                    "airflow_provider_melon.operators.plan",
                ],
            },
        ],
        "sensors": [
            {
                "integration-name": "Apache Hadoop YARN (MeLoN)",
                "python-modules": ["airflow_provider_melon.sensors.yarn"],
            },
        ],
        "triggers": [
            {
                "integration-name": "Apache Hadoop YARN (MeLoN)",
                "python-modules": ["airflow_provider_melon.triggers.yarn"],
            },
        ],
        "extra-links": [
            "airflow_provider_melon.links.YarnApplicationLink",
            "airflow_provider_melon.links.MelonAmStatusLink",
            "airflow_provider_melon.links.TensorBoardLink",
        ],
        "connection-types": [
            {
                "connection-type": "yarn",
                "hook-class-name": "airflow_provider_melon.hooks.yarn.YarnHook",
                "hook-name": "YARN ResourceManager",
                "conn-fields": CONN_FORM_FIELDS,
                "ui-field-behaviour": YARN_UI_FIELD_BEHAVIOUR,
            },
        ],
        "config": {
            "melon": {
                "description": "Defaults of the MeLoN provider.",
                "options": {
                    "poll_interval": {
                        "description": "Seconds between RM polls of a running application (minimum 5).",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "10",
                    },
                    "job_log_lines_per_poll": {
                        "description": "Most lines of the job's own output (the chief's and failing tasks' "
                        "stdout/stderr) MelonTrainOperator puts in the task log per poll.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "200",
                    },
                    "job_log_max_bytes": {
                        "description": "Most bytes of the job's own output in the log of one task run; then a line "
                        "links the full logs on the NodeManagers.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "5242880",
                    },
                    "staging_dir": {
                        "description": "HDFS folder for content-addressed staging; {user} is the submitting user.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "/user/{user}/.melon",
                        # not str.format()ed by Airflow: 3.0 formats every other default with its own variables
                        # and fails on '{user}' (KeyError: every `airflow` command, before anything else)
                        "is_template": True,
                    },
                    "staging_retry_s": {
                        "description": "Seconds an upload keeps retrying while the NameNode restarts, fails over or "
                        "is in safe mode.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": str(STAGING_RETRY_S_DEFAULT),
                    },
                    "gpu_context_mb": {
                        "description": "MiB each shared-mode task (gpu_memory) reserves on its GPU besides its "
                        "expected memory before its runs teach it more, for the CUDA context and the libraries' "
                        "buffers: asked of YARN (melon.io/gpu-memory) and held on the node's ledger, while the "
                        "process is capped at its expected memory. Unset: each framework's own first-run figure "
                        "(1024 MiB for PyTorch, 1792 with NCCL, 2048 for TensorFlow); an out-of-memory failure "
                        "outside the framework's allocator grows a task's reserve, and its history keeps it. The yarn "
                        "connection's extra gpu_context_mb overrides it; 0 for GPUs without a context (the embedded "
                        "cluster's virtual ones).",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "1024",
                        "default": None,
                    },
                    "alone_after_s": {
                        "description": "Seconds from which a run's learned run time (its task's recent runs) gives "
                        "each of its shared-mode tasks a whole GPU instead of a share: a neighbour would "
                        "stretch it by up to 1.7x. 0: never. The yarn connection's extra alone_after_s "
                        "overrides it.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "14400",
                        "default": str(ALONE_AFTER_S),
                    },
                    "deployment_id": {
                        "description": "This Airflow deployment's name in the identity tag of every application it "
                        "submits (melon-id:<hash of deployment, dag, task, run, map index>): a retry "
                        "reattaches only to an application with its own task instance's identity. "
                        "Give each Airflow that shares a cluster its own (dev, prod). Not set: a digest "
                        "of [core] execution_api_server_url (else [api] base_url), or 'default' "
                        "when neither is set.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "prod-eu",
                        "default": None,
                    },
                    "ui_conn_ids": {
                        "description": "Comma-separated yarn connection ids the MeLoN UI plugin may use (its conn_id "
                        "query parameter); empty: any connection of type yarn. The api-server reads "
                        "the cluster with that connection's credentials.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "yarn_default,yarn_gpu",
                        "default": None,
                    },
                    "admin_acl": {
                        "description": "Who besides the owner may view and kill every application this Airflow "
                        'submits: a Hadoop ACL "users groups" (" melon-admins": the group '
                        "melon-admins), set as the applications' VIEW_APP and MODIFY_APP ACLs. The "
                        "operator's admin_acl and the yarn connection's extra admin_acl win over it. "
                        "Empty: the owner only (and YARN's admins).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": " melon-admins",
                        "default": None,
                    },
                    "am_jar": {
                        "description": "Local path of an ApplicationMaster jar to use instead of the one shipped in the package.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/melon/melon-appmaster.jar",
                        "default": None,
                    },
                },
            }
        },
    }
