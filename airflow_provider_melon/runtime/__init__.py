"""Code that runs inside YARN containers under the job's own Python. Imports nothing from Airflow.

``from airflow_provider_melon.runtime import report`` — progress from the job's code (see :mod:`.progress`).
"""

from airflow_provider_melon.runtime.progress import StepReporter, keras_callback, report

__all__ = ["StepReporter", "keras_callback", "report"]
