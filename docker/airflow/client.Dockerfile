# A MeLoN client on another supported Airflow line: Airflow 3.0.6 (Python 3.11) with airflow-provider-melon installed
# from the same wheel as the stack's Airflow 3.3 image, its dependencies resolved under the 3.0 line's constraints
# (compat/constraints-3.0.txt, standing in for Airflow's published constraints-3.0.6/constraints-3.11.txt). No
# Airflow services: the docker tests run `melon doctor --submit-test` in it, on the stack's compose network.
# Build context: docker/airflow/ after docker/build.sh has put the wheel, requirements-core.txt (the wheel's
# Requires-Dist, no extras) and constraints-3.0.txt into dist/.
ARG BASE=localhost/melon-base:bookworm

# 1. a venv with Airflow 3.0.6 and the provider (the same build stage as Dockerfile's: its layers are shared)
FROM ${BASE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-dev gcc libkrb5-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY certs/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# the wheel's requirements under the 3.0 constraints in a layer of their own (cached while neither changes), with
# pip's cache shared with Dockerfile's (a build cache mount, id melon-pip): 195 of the 3.0 constraints' 215 pins are
# the 3.3 image's too, and the sdists it built (gssapi, krb5, ...) are not compiled again ...
COPY dist/requirements-core.txt dist/constraints-3.0.txt /opt/airflow/dist/
RUN --mount=type=cache,id=melon-pip,target=/root/.cache/pip python3 -m venv /opt/airflow/venv \
 && /opt/airflow/venv/bin/pip install -q -c /opt/airflow/dist/constraints-3.0.txt \
      -r /opt/airflow/dist/requirements-core.txt
# ... then the wheel as a user installs it: `pip install -c <constraints> <wheel>`, its dependencies resolved again
# under those constraints (already satisfied by the layer above, so nothing is downloaded), then `pip check`
COPY dist/*.whl /opt/airflow/dist/
RUN /opt/airflow/venv/bin/pip install -q --no-cache-dir -c /opt/airflow/dist/constraints-3.0.txt \
      /opt/airflow/dist/airflow_provider_melon-*.whl \
 && /opt/airflow/venv/bin/pip check \
 && /opt/airflow/venv/bin/python -c "import airflow; assert airflow.__version__ == '3.0.6', airflow.__version__"

# 2. the runtime: Python, the Kerberos libraries, the venv (the same packages as Dockerfile's runtime)
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 libgssapi-krb5-2 krb5-user ca-certificates curl procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/airflow/venv /opt/airflow/venv
ENV AIRFLOW_HOME=/opt/airflow PATH=/opt/airflow/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN ln -s /opt/airflow/venv/bin/melon /opt/airflow/venv/bin/airflow /usr/local/bin/ \
 && python -c "from airflow_provider_melon.hooks.melon import packaged_am_jar as j; assert j().is_file(), j()"
WORKDIR /opt/airflow
CMD ["melon", "doctor"]
