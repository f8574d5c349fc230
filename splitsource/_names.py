"""Every name splitsource gives a file or directory on disk, in one place: the output's records, a copy's
checkpoint, and the part files. docs/formats.md describes each (schema, version, writer, reader, sync, and what a
reader does when it is missing or corrupt); tests/test_formats.py holds the page and this module together."""

from __future__ import annotations

# -- the output's records: <output>.bucketing/ (or the sink's ``metadata`` option) ---------------------------------
RECORDS_SUFFIX = ".bucketing"  # <output>.bucketing, beside the output: nothing but data files inside the output
COMMIT_LOG_DIR = "log"  # <seq>.commit records and their <seq>.done markers
COMMIT_SUFFIX = ".commit"  # a commit record: what one commit makes visible, written before any rename
DONE_SUFFIX = ".done"  # a commit finished: every rename of its record made
QUERIES_DIR = "queries"  # <query>.json: the last batch each streaming query (or copy) committed
OWNER_FILE = "owner.json"  # the copy that owns the output
LOCK_FILE = "lock.json"  # the lease of the copy writing now (also in the checkpoint)
LOCK_BREAK = ".break-"  # lock.json.break-<lease>[-<generation>]: the one copy allowed to take an expired lease over
SINK_DESCRIPTION = "copy.json"  # how the output's files are laid out, for verify
TABLE_RECORD = "table.json"  # a table output's format and the log id its commits are tagged with
SUCCESS_FILE = "_SUCCESS"  # a bounded write is complete (the summary); also in the output with success_file

# -- a copy's checkpoint: <output>.checkpoint/ by default -----------------------------------------------------------
IDENTITY_FILE = "splitsource-copy.json"  # what this checkpoint copies, and the copy's token
FINISHED_FILE = "finished.json"  # the copy read its whole source
ERROR_LOG = "splitsource-copy-error.log"  # the whole text of the last failure
PLANS_DIR = "plans"  # <digest>.plan: the read's plan (its splits), written once
PLAN_SUFFIX = ".plan"
LEDGER_DIR = "splits"  # <batch>.json: rows per split of each committed batch, for verify
DELETED_PREFIX = "deleted-run"  # <N>.parquet: an incremental run's deleted keys, found at its first plan
DELETED_SUFFIX = ".parquet"
APPLIED_SUFFIX = "-applied.parquet"  # deleted-run<N>-applied.parquet: less the keys the run read again, at its end
KEYS_PREFIX = "keys-run"  # <N>.arrow: the keys an incremental copy's output holds after run N (finished.json names it)
KEYS_SUFFIX = ".arrow"
LOCAL_DIR = "local"  # the local engine's: offsets/, workers.log
SPARK_DIR = "spark"  # the Spark engine's: offsets/, progress/
OFFSETS_DIR = "offsets"  # in an engine's directory: <batch>, the offset after the batch, logged before it is read
WORKERS_LOG = "workers.log"  # in the local engine's directory: what its worker processes printed
PROGRESS_DIR = "progress"  # in the Spark engine's directory: <batch>-<task>.json, one per running read task

# -- part files, in the output (and its bucket directories) --------------------------------------------------------
PART_PREFIX = "part"  # <prefix>-<task>-<n><suffix>, finished (task: <partition>-<writer>-<attempt>); part_prefix
IN_PROGRESS = ".in-progress"  # _part-...<suffix>.in-progress: being written
PENDING = ".pending"  # _part-...<suffix>.pending: written, waiting for its commit
VALID_LENGTH = ".valid-length"  # _<part>.valid-length: the committed length of a file a store could not truncate
TEMPORARY = ".tmp-"  # .<name>.tmp-<hex>: a whole-file write in progress (Store.write), never read
