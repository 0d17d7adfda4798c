"""airflow-provider-melon: distributed deep-learning training on Hadoop YARN with MeLoN GPU sharing.

Kept import-light on purpose: ``python -m airflow_provider_melon.runtime.executor`` runs inside YARN
containers under the job's own interpreter, where Airflow is not installed.
"""

__version__ = "0.1.0"
