"""The e2e tests' Airflow fixtures (``airflow_stack``, ``airflow``) are in tests/conftest.py, shared with the fault
suite."""
