"""The Hadoop plumbing, Airflow-free: YARN application states, the ResourceManager's JSON, the NodeManager client,
WebHDFS, code bundles, queues, delegation tokens, staging clean-up. Nothing here imports Airflow."""
