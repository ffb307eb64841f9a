# One image for every MedHELM door: `medhelm serve scenarios|jury|metrics|dashboard`, `medhelm job`,
# `medhelm collect`. Multi-stage: a virtual environment is built in the first stage and copied whole into
# the runtime (no wheels, no pip cache, no build tools left in any layer of the final image).
# No secrets are baked in: API keys come from env vars named in model_deployments.yaml, via Secrets.
#
#   podman build -t medhelm-k8s:0.2.0 .                    # services, job, jury, metrics (ROUGE), dashboard
#   podman build --build-arg EXTRAS=dashboard,postgres,bertscore -t medhelm-k8s:0.2.0 .
#
# Inside a hospital network (no Docker Hub, an internal package mirror with its own CA):
#   podman build --build-arg BASE_IMAGE=registry.hospital.internal/debian-python:bookworm \
#     --build-arg PIP_INDEX_URL=https://pypi.hospital.internal/simple \
#     --secret id=pip_ca,src=/etc/ssl/certs/hospital-ca.pem -t medhelm-k8s:0.2.0 .
# BASE_IMAGE needs Python 3.11+ with the venv module on PATH as python3 (python:3.11-slim-bookworm, or the
# Debian bookworm image scripts/container_base.sh makes with debootstrap). The CA is a build secret: it is
# mounted for the pip step only and never lands in a layer.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG EXTRAS=dashboard,postgres
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_INDEX_URL=${PIP_INDEX_URL} \
    PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first (from pyproject.toml alone), so a change to the sources reuses this layer.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && python3 -m venv /opt/medhelm \
 && python3 -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
extras = [e for e in sys.argv[1].split(",") if e]; \
print("\n".join(p["dependencies"] + [d for e in extras for d in p["optional-dependencies"][e]]))' "${EXTRAS}" \
    > /tmp/requirements.txt \
 && /opt/medhelm/bin/python -m pip install --no-compile -r /tmp/requirements.txt
COPY setup.py README.md ./
COPY services/ services/
COPY dashboard/ dashboard/
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && /opt/medhelm/bin/python -m pip install --no-compile --no-deps . \
 && /opt/medhelm/bin/python -m pip check \
 && /opt/medhelm/bin/python -m pip uninstall --yes pip \
 && /opt/medhelm/bin/python -m compileall -q /opt/medhelm/lib \
 && rm -rf /src /tmp/requirements.txt

FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="medhelm-k8s" org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/medhelm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8 \
    HOME=/tmp MEDHELM_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN groupadd --system --gid 10001 medhelm \
 && useradd --system --uid 10001 --gid medhelm --home-dir /nonexistent --shell /usr/sbin/nologin medhelm \
 && install -d -o 10001 -g 10001 /data
COPY --from=build /opt/medhelm /opt/medhelm
WORKDIR /data
USER 10001:10001
EXPOSE 50051 9090 8501
# gRPC services answer the standard health service; the Job and the dashboard have their own probes.
ENTRYPOINT ["medhelm"]
CMD ["--help"]
