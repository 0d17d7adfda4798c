"""``python -m airflow_provider_melon.cli``: the ``melon`` command."""

import sys

from airflow_provider_melon.cli import main

sys.exit(main())
