"""OpenLineage for :class:`~airflow_provider_melon.operators.train.MelonTrainOperator`: the job's HDFS inputs and
outputs as datasets, the YARN application as facets. The OpenLineage provider calls the operator's
``get_openlineage_facets_on_complete`` after a run; this module is imported only then, so the provider (and the
``openlineage-python`` client it brings) stays optional.

Datasets follow OpenLineage's naming for HDFS: namespace ``hdfs://<namenode>:<port>``, name the absolute path.
Paths that cannot be qualified (``hdfs:///x`` without a known ``fs.defaultFS``) are left out.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

import attrs
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import JobFacet, RunFacet

from airflow_provider_melon.hadoop.hdfs_io import hdfs_asset_uri
from airflow_provider_melon.spec import JobSpec

#: the facets' key in an event's ``job.facets`` / ``run.facets``
JOB_FACET = "melon_yarnApplication"
RUN_FACET = "melon_yarnApplication"
_SCHEMA = "https://openlineage.io/spec/facets/1-0-0/BaseFacet.json"  # custom facets: fields of their own


@attrs.define
class MelonYarnApplicationJobFacet(JobFacet):
    """The YARN application a train task submits, as the same on every run: its name, type, queue, framework."""

    name: str
    applicationType: str  # noqa: N815 - OpenLineage facets are camelCase
    queue: str
    framework: str

    @staticmethod
    def _get_schema() -> str:
        return _SCHEMA


@attrs.define
class MelonYarnApplicationRunFacet(RunFacet):
    """This run's YARN application: its id and, when known, where the ResourceManager shows it."""

    applicationId: str  # noqa: N815
    trackingUrl: Optional[str] = None  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return _SCHEMA


def hdfs_dataset(path: str, fs_default_fs: Optional[str]) -> Optional[Dataset]:
    """``hdfs://nn:8020/data/x`` (or ``/data/x`` with ``fs_default_fs``) → Dataset(``hdfs://nn:8020``, ``/data/x``)."""
    uri = hdfs_asset_uri(path, fs_default_fs)
    if not uri:
        return None
    parts = urlsplit(uri)
    return Dataset(namespace=f"hdfs://{parts.netloc}", name=parts.path.rstrip("/") or "/")


def _datasets(paths: list[str], fs_default_fs: Optional[str]) -> list[Dataset]:
    found: dict[tuple[str, str], Dataset] = {}
    for path in paths:
        dataset = hdfs_dataset(path, fs_default_fs)
        if dataset is not None:
            found.setdefault((dataset.namespace, dataset.name), dataset)
    return list(found.values())


def train_lineage(
    spec: JobSpec, app_id: Optional[str], fs_default_fs: Optional[str], tracking_url: Optional[str] = None
) -> OperatorLineage:
    """The lineage of one train task's run: inputs (``spec.inputs``), outputs (``spec.outputs``), the
    application's job facet and, once submitted, its run facet."""
    job_facets: dict[str, Any] = {
        JOB_FACET: MelonYarnApplicationJobFacet(
            name=spec.name, applicationType="MELON", queue=spec.queue, framework=spec.framework
        ),
    }
    run_facets: dict[str, Any] = {}
    if app_id:
        run_facets[RUN_FACET] = MelonYarnApplicationRunFacet(applicationId=app_id, trackingUrl=tracking_url)
    return OperatorLineage(
        inputs=_datasets([i.path for i in spec.inputs], fs_default_fs),
        outputs=_datasets(list(spec.outputs.values()), fs_default_fs),
        job_facets=job_facets,
        run_facets=run_facets,
    )


__all__ = ["MelonYarnApplicationJobFacet", "MelonYarnApplicationRunFacet", "hdfs_dataset", "train_lineage"]
