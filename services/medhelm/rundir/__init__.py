"""The run folder, owned here for every part: layout and atomic writes (``layout.py``), the one reader of
record lines (``lines.py``), the record writer and its ledger (``writer.py``) and ``RunDir`` (``folder.py``).

Base level: the pipeline writes through it (and finishes runs in ``pipeline/finish.py``, aggregates in
``pipeline/aggregate.py``); the store, the gRPC services and the CLI read through it. docs/output-format.md
describes the files.
"""

from medhelm.rundir.folder import RunDir
from medhelm.rundir.layout import (RECORDS, RUN_SPEC, SELECTION, SHARDS, STATS, STATUS, SUPERSEDED, access_file,
                                   compat_digest, dump_json, retries_file, selection_text, shard_file, write_atomic,
                                   write_atomic_lines)
from medhelm.rundir.lines import RecordHead, raw_lines, read_records, record_heads, record_lines
from medhelm.rundir.writer import Ledger, RecordWriter, Tally

__all__ = ["RECORDS", "RUN_SPEC", "SELECTION", "SHARDS", "STATS", "STATUS", "SUPERSEDED", "Ledger", "RecordHead",
           "RecordWriter", "RunDir", "Tally", "access_file", "compat_digest", "dump_json", "raw_lines", "read_records",
           "record_heads", "record_lines", "retries_file", "selection_text", "shard_file", "write_atomic",
           "write_atomic_lines"]
