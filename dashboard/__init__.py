"""The MedHELM leaderboard (Streamlit). ``medhelm serve`` runs ``launch.main``; the app reads the
results store written by ``medhelm summarize`` (pre-aggregated tables only, plus one page of instances
at a time for drill-down)."""
