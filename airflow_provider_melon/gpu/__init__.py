"""GPU policy, ledger and profiling. Imports nothing from Airflow: runs inside YARN containers."""
