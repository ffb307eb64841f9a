# Two images from one file (build both with scripts/build_images.sh, which pins the base by digest):
#   --target service    the gRPC services (`medhelm serve scenarios|jury|metrics`), the Job (`medhelm job`),
#                       `collect` and `summarize`: no dashboard stack (no streamlit, pandas, pyarrow, altair, pydeck)
#   --target dashboard  the leaderboard (`medhelm serve dashboard`): the service venv plus the dashboard extra
# Multi-stage: the virtual environments are built in build stages and copied whole into the runtimes (no
# wheels, no pip, no pip cache, no build tools left in any layer of either final image). Each image carries its
# CycloneDX SBOM (Python packages of its venv + the base's Debian packages) at /usr/share/doc/medhelm-k8s/.
# No secrets are baked in: API keys come from files mounted from Secrets (the chart's apiKeys).
#
#   bash scripts/build_images.sh                       # both images + their SBOMs, base pinned by digest
#   podman build --target service --build-arg BASE_IMAGE=<name>@sha256:<digest> -t medhelm-k8s:0.2.0 .
#   podman build --build-arg EXTRAS=postgres,bertscore ...   # the metrics service with BERTScore
#
# BASE_IMAGE has no default, on purpose: it must be a digest-pinned reference (<name>@sha256:<digest>) to a
# Python 3.11+ image with the venv module on PATH as python3 (python:3.11-slim-bookworm, your registry's copy
# of it, or the Debian bookworm image scripts/container_base.sh makes with debootstrap). Inside a hospital
# network (no Docker Hub, an internal package mirror with its own CA):
#   --build-arg PIP_INDEX_URL=https://pypi.hospital.internal/simple --secret id=pip_ca,src=/etc/ssl/hospital-ca.pem
# The CA is a build secret: it is mounted for the pip steps only and never lands in a layer.

ARG BASE_IMAGE

# -- The service venv's dependencies (base install + EXTRAS), from pyproject.toml alone: a change to the
#    sources reuses this layer, and the dashboard's venv starts from it.
FROM ${BASE_IMAGE} AS deps
ARG EXTRAS=postgres
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_INDEX_URL=${PIP_INDEX_URL} \
    PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml scripts/image_venv.sh ./
RUN --mount=type=secret,id=pip_ca sh image_venv.sh deps "${EXTRAS}"

# -- The dashboard's extra on top of the service venv.
FROM deps AS deps-dashboard
ARG DASHBOARD_EXTRAS=dashboard
RUN --mount=type=secret,id=pip_ca sh image_venv.sh deps "${DASHBOARD_EXTRAS}"

# -- The SBOM tool (cyclonedx-bom, the CycloneDX project's own generator) in a venv of its own: it reads the
#    image's venv from outside and never lands in an image.
FROM ${BASE_IMAGE} AS sbom-tool
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=""
ARG CYCLONEDX_BOM_VERSION=7.5.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_INDEX_URL=${PIP_INDEX_URL} \
    PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL}
RUN --mount=type=secret,id=pip_ca \
    if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && python3 -m venv /opt/sbom \
 && /opt/sbom/bin/python -m pip install --no-compile "cyclonedx-bom==${CYCLONEDX_BOM_VERSION}"

# -- The package itself, installed into each venv; then pip check, pip removed, bytecode, the SBOM.
FROM ${BASE_IMAGE} AS sources
WORKDIR /src
COPY setup.py README.md pyproject.toml ./
COPY scripts/image_venv.sh scripts/image_sbom.py ./scripts/
COPY services/ services/
COPY dashboard/ dashboard/

FROM deps AS build-service
ARG BASE_IMAGE
COPY --from=sources /src /src
COPY --from=sbom-tool /opt/sbom /opt/sbom
RUN --mount=type=secret,id=pip_ca sh /src/scripts/image_venv.sh finish service "${BASE_IMAGE}"

FROM deps-dashboard AS build-dashboard
ARG BASE_IMAGE
COPY --from=sources /src /src
COPY --from=sbom-tool /opt/sbom /opt/sbom
RUN --mount=type=secret,id=pip_ca sh /src/scripts/image_venv.sh finish dashboard "${BASE_IMAGE}"

# -- What both runtimes share: the non-root user, the environment, nothing else.
FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.2.0
LABEL org.opencontainers.image.version="${VERSION}" org.opencontainers.image.licenses="Apache-2.0" \
      io.medhelm.sbom="/usr/share/doc/medhelm-k8s/sbom.cdx.json"
ENV PATH=/opt/medhelm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LANG=C.UTF-8 \
    HOME=/tmp MEDHELM_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN groupadd --system --gid 10001 medhelm \
 && useradd --system --uid 10001 --gid medhelm --home-dir /nonexistent --shell /usr/sbin/nologin medhelm \
 && install -d -o 10001 -g 10001 /data
WORKDIR /data
EXPOSE 50051 9090 8501
ENTRYPOINT ["medhelm"]
CMD ["--help"]

FROM runtime AS dashboard
LABEL org.opencontainers.image.title="medhelm-k8s-dashboard"
COPY --from=build-dashboard /opt/medhelm /opt/medhelm
COPY --from=build-dashboard /out/sbom.cdx.json /usr/share/doc/medhelm-k8s/sbom.cdx.json
# the commit the image was built from (scripts/build_images.sh: git rev-parse HEAD): a report made in it says so
ARG MEDHELM_CODE_COMMIT=""
LABEL org.opencontainers.image.revision="${MEDHELM_CODE_COMMIT}"
ENV MEDHELM_CODE_COMMIT=${MEDHELM_CODE_COMMIT}
USER 10001:10001

# The last stage is the default target: a plain `podman build` makes the slim service image.
FROM runtime AS service
LABEL org.opencontainers.image.title="medhelm-k8s"
COPY --from=build-service /opt/medhelm /opt/medhelm
COPY --from=build-service /out/sbom.cdx.json /usr/share/doc/medhelm-k8s/sbom.cdx.json
# the commit the image was built from (scripts/build_images.sh: git rev-parse HEAD): a report made in it says so
ARG MEDHELM_CODE_COMMIT=""
LABEL org.opencontainers.image.revision="${MEDHELM_CODE_COMMIT}"
ENV MEDHELM_CODE_COMMIT=${MEDHELM_CODE_COMMIT}
# gRPC services answer the standard health service; the Job has its own exit codes.
USER 10001:10001
