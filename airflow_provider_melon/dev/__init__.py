"""The development tools: the embedded Hadoop cluster (``minicluster``) and a real local Airflow (``local_airflow``)."""
