"""Code that runs inside YARN containers under the job's own Python. Imports nothing from Airflow."""
