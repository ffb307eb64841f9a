"""Writes helm-charts/medhelm/files/grafana-dashboard.json, the platform team's Grafana dashboard (run from the
repo root: `python scripts/gen_grafana_dashboard.py`). Queries only metrics of medhelm/telemetry.py; the tests
check every name exists in a real scrape and every query runs on a real Prometheus (docs/observability.md).
Progress, ETA and cost use last_over_time over the dashboard's range so finished shards keep counting."""
import json
NS = '{namespace=~"$namespace"}'
def sel(extra=""):
    return '{namespace=~"$namespace"%s}' % ("," + extra if extra else "")
R = "[$__range]"
def last(m, extra=""):
    return f"sum(last_over_time({m}{sel(extra)}{R}))"
finished = f"({last('medhelm_instances_done_total')} + {last('medhelm_instances_failed_total')} + {last('medhelm_instances_resumed_total')})"
planned = last("medhelm_instances_planned_total")
rate_fin = f"(sum(rate(medhelm_instances_done_total{sel()}[10m])) + sum(rate(medhelm_instances_failed_total{sel()}[10m])))"
panels = []
y = 0
def panel(title, kind, targets, w=12, h=8, unit=None, desc=""):
    global y
    p = {"title": title, "type": kind, "description": desc,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "targets": [{"expr": e, "legendFormat": l, "refId": chr(65 + i),
                      "datasource": {"type": "prometheus", "uid": "${datasource}"}} for i, (e, l) in enumerate(targets)],
         "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
         "options": {}}
    panels.append(p)
    return p
panel("Suite progress", "gauge", [(f"{finished} / {planned}", "done")], w=6, unit="percentunit",
      desc="(done + failed + resumed) / planned instances, over every shard and run in the time range")
panel("ETA", "stat", [(f"({planned} - {finished}) / {rate_fin}", "ETA")], w=6, unit="s",
      desc="instances left / instances finished per second (10 min)")
panel("Instances", "stat", [(last("medhelm_instances_planned_total"), "planned"),
                            (last("medhelm_instances_done_total"), "done"),
                            (f"sum by (reason) (last_over_time(medhelm_instances_failed_total{sel()}{R}))", "failed: {{reason}}"),
                            (last("medhelm_instances_unscored_total"), "unscored")], w=12)
panel("Throughput (instances/s)", "timeseries",
      [(f"sum by (deployment, benchmark) (rate(medhelm_instances_done_total{sel()}[5m]))", "{{deployment}} {{benchmark}}")],
      unit="ops")
panel("Model requests/s by outcome", "timeseries",
      [(f"sum by (role, outcome) (rate(medhelm_model_requests_total{sel()}[5m]))", "{{role}} {{outcome}}")], unit="reqps")
panel("Attempt error rate (non-200 / all attempts)", "timeseries",
      [(f'sum by (deployment, code) (rate(medhelm_model_attempts_total{sel(chr(99)+"ode!=" + chr(34) + "200" + chr(34))}[5m])) / ignoring(code) group_left sum by (deployment) (rate(medhelm_model_attempts_total{sel()}[5m]))', "{{deployment}} {{code}}")],
      unit="percentunit")
panel("Retries/s", "timeseries",
      [(f"sum by (deployment, role) (rate(medhelm_model_retries_total{sel()}[5m]))", "{{deployment}} {{role}}")], unit="ops")
panel("Requests in flight", "timeseries",
      [(f"sum by (deployment) (medhelm_model_requests_in_flight{sel()})", "{{deployment}}")],
      desc="attempts being served by each model server: flat at the deployment's max_concurrency = the model server is the bottleneck")
panel("Tokens/s per model (reached a model)", "timeseries",
      [(f"sum by (deployment, kind) (rate(medhelm_tokens_total{sel()}[5m]))", "{{deployment}} {{kind}}"),
       (f"sum by (deployment, kind) (rate(medhelm_cached_tokens_total{sel()}[5m]))", "{{deployment}} {{kind}} (cache)")])
panel("Cost so far (USD)", "timeseries",
      [(f"sum by (deployment, role) (last_over_time(medhelm_cost_usd_total{sel()}{R}))", "{{role}} {{deployment}}")],
      unit="currencyUSD", desc="from the price table (prices.yaml); deployments without a price are not shown")
panel("Judge failure rate per criterion", "timeseries",
      [(f"sum by (judge, criterion) (rate(medhelm_judge_failures_total{sel()}[15m])) / ignoring(criterion) group_left sum by (judge) (rate(medhelm_judgements_total{sel()}[15m]))", "{{judge}} {{criterion}}")],
      unit="percentunit")
panel("Request latency (incl. retries) p50 / p95 / p99", "timeseries",
      [(f"histogram_quantile({q}, sum by (le, deployment) (rate(medhelm_model_request_duration_seconds_bucket{sel()}[5m])))", f"{{{{deployment}}}} p{int(q*100)}") for q in (0.5, 0.95, 0.99)],
      unit="s")
panel("Attempt latency p50 / p95", "timeseries",
      [(f"histogram_quantile({q}, sum by (le, deployment) (rate(medhelm_model_attempt_duration_seconds_bucket{sel()}[5m])))", f"{{{{deployment}}}} p{int(q*100)}") for q in (0.5, 0.95)],
      unit="s")
panel("Shard memory / CPU", "timeseries",
      [(f"sum by (pod) (process_resident_memory_bytes{sel()})", "{{pod}} RSS"),
       (f"sum by (pod) (rate(process_cpu_seconds_total{sel()}[5m]))", "{{pod}} CPU")])
x = 0
for p in panels:
    w = 6 if p["title"] in ("Suite progress", "ETA") else 12
    p["gridPos"] = {"x": x, "y": y, "w": w, "h": 8}
    x += w
    if x >= 24:
        x, y = 0, y + 8
for i, p in enumerate(panels):
    p["id"] = i + 1
dash = {
    "title": "MedHELM evaluation", "uid": "medhelm-evaluation", "schemaVersion": 39, "version": 1,
    "tags": ["medhelm"], "timezone": "utc", "refresh": "30s", "time": {"from": "now-12h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {"name": "namespace", "type": "query", "label": "namespace", "multi": True, "includeAll": True,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": "label_values(medhelm_build_info, namespace)", "refId": "ns"},
         "definition": "label_values(medhelm_build_info, namespace)", "refresh": 2},
    ]},
    "panels": panels, "annotations": {"list": []},
}
open("helm-charts/medhelm/files/grafana-dashboard.json", "w").write(json.dumps(dash, indent=1) + "\n")
