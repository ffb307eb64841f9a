# One image for every MedHELM door: `medhelm serve scenarios|jury|metrics|dashboard`, `medhelm job`,
# `medhelm collect`. Multi-stage: wheels are built in the first stage, the runtime has no compiler.
# No secrets are baked in: API keys come from env vars named in model_deployments.yaml, via Secrets.
#
#   docker build -t medhelm-k8s:0.1.0 .                    # services, job, jury, metrics (ROUGE)
#   docker build --build-arg EXTRAS=dashboard,postgres,bertscore -t medhelm-k8s:0.1.0 .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG VERSION=0.1.0

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=dashboard,postgres
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services/ services/
COPY dashboard/ dashboard/
RUN pip wheel --wheel-dir /wheels ".[${EXTRAS}]"

FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=dashboard,postgres
ARG VERSION
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp MEDHELM_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
RUN groupadd --system --gid 10001 medhelm \
 && useradd --system --uid 10001 --gid medhelm --home-dir /nonexistent --shell /usr/sbin/nologin medhelm
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels "medhelm-k8s[${EXTRAS}]==${VERSION}" && rm -rf /wheels
WORKDIR /data
USER 10001:10001
EXPOSE 50051 9090 8501
# gRPC services answer the standard health service; the Job and the dashboard have their own probes.
HEALTHCHECK NONE
ENTRYPOINT ["medhelm"]
CMD ["--help"]
