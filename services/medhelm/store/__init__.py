"""The results store (SQLite | PostgreSQL) and the leaderboard math built on it.

``open_store(location, create=)`` -> ``Store``; ``summarize(store, sources, options)`` ingests finished
runs; ``read`` answers the dashboard and ``export``; ``leaderboard``/``tables`` hold the math.
"""

from medhelm.store.backends import Store
from medhelm.store.ingest import SummarizeOptions, SummaryReport, suite_sources, summarize
from medhelm.store.opening import open_store

__all__ = ["Store", "open_store", "SummarizeOptions", "SummaryReport", "suite_sources", "summarize"]
