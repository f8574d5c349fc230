"""Offsets of a bounded source read in batches of splits: the checkpoint of Spark's streaming reader and of the
local copy engine alike (step 1 of the batch protocol, see :mod:`splitsource.copyjob._protocol`).

An offset is a JSON dict that carries everything needed to replay its batch after a crash. Version 1:

- ``plan``: the digest of the read's *plan*, the enumerator's serialized state before its first split. The plan is
  written once, to ``<plan_location>/<digest>.plan`` (the framework option ``plan_location``; the copy job's is
  ``<checkpoint>/plans``), or, without a location, carried in every offset as ``plan_state``;
- ``taken``: splits handed out so far: the enumerator's state after this batch is the plan's enumerator after
  ``taken`` splits, so an offset's size does not grow with the source (a thousand-node ring's plan is megabytes);
- ``batch``: this batch's splits, serialized: a replay reads exactly them. Restoring the enumerator at an offset
  takes ``taken`` splits from the plan and checks that the last of them are this batch's (an enumerator that does
  not cut the same splits from the same state is refused, never trusted);
- ``state``: only for a source that ``resumes_from_state``: the enumerator's state after this batch, restored as
  it is after a restart, with no split cut again (its plan may have moved since: a table's boundaries);
- ``total``: the enumerator's estimate of all splits (for progress);
- ``instant``: where the source stood when the plan was made (:meth:`SplitEnumerator.instant`), carried by every
  offset after it, so that a run killed and resumed reports its first plan's instant (an incremental copy's next
  run reads what changed after it);
- ``source``: a fingerprint of the source's identity: a checkpoint of another source is refused.

Between batches the enumerator stays alive in the process that plans (Spark's long-lived Python worker of the
stream, the local engine's coordinator), so it is restored from the plan only after a restart.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serializers import SerializationError, read_envelope, write_envelope
from splitsource._api import FixedEnumeratorContext, Source, Split, SplitEnumerator
from splitsource._errors import CheckpointError
from splitsource._fs import Location
from splitsource._names import PLAN_SUFFIX
from splitsource._planning import BatchLimit
from splitsource._state import enumerator_state_from_bytes, enumerator_state_to_bytes

__all__ = [
    "OFFSET_VERSION",
    "PlanStore",
    "UNSIZED_SPLITS_PER_BATCH",
    "check_offset",
    "initial_offset",
    "next_offset",
    "offset_splits",
    "source_fingerprint",
    "unsized",
]

log = logging.getLogger(__name__)

OFFSET_VERSION = 1
INLINE_PLAN_WARNING_BYTES = 64 * 1024


START_OVER = "to start over, run the same copy with option 'overwrite' (it deletes what the output holds)"


def source_fingerprint(source: Source[Any, Any, Any, Any]) -> str:
    """A short digest of what the source reads (its identity, secrets excluded)."""
    identity = json.dumps(source.identity(), sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unreadable(exc: BaseException) -> CheckpointError:
    return CheckpointError(f"the checkpoint's offset cannot be read ({type(exc).__name__}: {exc}); it is corrupt or "
                           f"was written by an incompatible release; {START_OVER}")


class PlanStore:
    """Where plans are kept: ``<location>/<digest>.plan``, written once and atomically (content-addressed, so a
    second write of the same plan is harmless); no location: the plan goes into the offsets themselves."""

    def __init__(self, location: Location | None = None) -> None:
        self.location = location

    def put(self, offset: dict[str, Any], plan: bytes) -> None:
        if self.location is None:
            offset["plan_state"] = _b64(plan)
            if len(plan) > INLINE_PLAN_WARNING_BYTES:
                log.warning("the read's plan is %d KiB and travels in every offset: set the option "
                            "'plan_location' to a durable directory to store it once", len(plan) // 1024)
            return
        fs, base = self.location.store, self.location.path
        path = f"{base}/{offset['plan']}{PLAN_SUFFIX}"
        found = fs.info(path)
        if found is None or found.size != len(plan):
            fs.make_dirs(base)
            fs.write(path, plan)

    def get(self, offset: Mapping[str, Any]) -> bytes:
        digest = str(offset["plan"])
        if "plan_state" in offset:
            try:
                plan = base64.b64decode(offset["plan_state"], validate=True)
            except (ValueError, TypeError) as exc:
                raise _unreadable(exc) from None
        else:
            if self.location is None:
                raise CheckpointError("the checkpoint's offsets refer to a plan stored apart (option "
                                      "'plan_location'), and no plan_location is set: use the options the read was "
                                      "started with")
            fs, base = self.location.store, self.location.path
            path = f"{base}/{digest}{PLAN_SUFFIX}"
            try:
                plan = fs.read_bytes(path)
            except OSError:
                raise CheckpointError(f"the read's plan {self.location.child(digest + PLAN_SUFFIX).shown} is missing; "
                                      f"the checkpoint is incomplete; {START_OVER}") from None
        if _digest(plan) != digest:
            raise CheckpointError(f"the read's plan {digest} does not match its digest: it is corrupt; {START_OVER}")
        return plan

    def prune(self, keep: str) -> None:
        """Delete every stored plan but ``keep``'s (by digest): for a fresh start, when no offset refers to any
        other plan (an earlier start that stopped before its first offset left its plan behind, and a source
        whose size estimates changed plans differently). Best effort: a plan left over is only a small file."""
        if self.location is None:
            return
        fs, base = self.location.store, self.location.path
        try:
            for info in fs.list(base):
                if info.name.endswith(PLAN_SUFFIX) and info.name != f"{keep}{PLAN_SUFFIX}":
                    fs.delete(info.path)
        except OSError:
            pass


def _digest(plan: bytes) -> str:
    return hashlib.sha256(plan).hexdigest()[:32]


class _Live:
    """The enumerator of the last batch planned in this process, kept for the next one (one at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, str, int] | None = None
        self._enumerator: SplitEnumerator[Any, Any] | None = None

    def take(self, key: tuple[str, str, int]) -> SplitEnumerator[Any, Any] | None:
        with self._lock:
            if self._key != key:
                return None
            enumerator, self._key, self._enumerator = self._enumerator, None, None
            return enumerator

    def reader_options(self, key: tuple[str, str, int]) -> Mapping[str, str]:
        with self._lock:
            if self._key != key or self._enumerator is None:
                return {}
            return dict(self._enumerator.reader_options())

    def keep(self, key: tuple[str, str, int], enumerator: SplitEnumerator[Any, Any]) -> None:
        with self._lock:
            old, self._key, self._enumerator = self._enumerator, key, enumerator
        if old is not None:
            old.close()

    def end(self, fingerprint: str) -> None:
        """Close the enumerator kept for source ``fingerprint``, if it is the one kept."""
        with self._lock:
            if self._key is None or self._key[0] != fingerprint:
                return
            old, self._key, self._enumerator = self._enumerator, None, None
        if old is not None:
            old.close()


_LIVE = _Live()


def initial_offset(source: Source[Any, Any, Any, Any], fingerprint: str, parallelism: int,
                   store: PlanStore | None = None,
                   started: Callable[[SplitEnumerator[Any, Any]], None] | None = None) -> dict[str, Any]:
    """The offset before the first batch: the source planned (a fresh enumerator's state, stored once), no split
    taken; ``started``: called with the enumerator once it started (an incremental run finds its deletes)."""
    enumerator = source.create_enumerator(FixedEnumeratorContext(parallelism))
    enumerator.start()
    try:
        if started is not None:
            started(enumerator)
        total = enumerator.estimated_total_splits()
        plan = enumerator_state_to_bytes(source, enumerator.snapshot_state())
        offset: dict[str, Any] = {"version": OFFSET_VERSION, "source": fingerprint, "plan": _digest(plan),
                                  "taken": 0, "total": total if total is not None else -1, "batch": [],
                                  "instant": dict(enumerator.instant())}
        (store or PlanStore()).put(offset, plan)
    except BaseException:
        enumerator.close()
        raise
    # the planning enumerator serves the batches too: what it holds for its readers (a database snapshot) is
    # the one the plan was made at
    _LIVE.keep((fingerprint, offset["plan"], 0), enumerator)
    return offset


def end_plan(fingerprint: str) -> None:
    """The run of source ``fingerprint`` planned in this process is over (done, failed or stopped): close the
    enumerator kept for its next batch, and what it holds (PostgreSQL's session, idle in a transaction that holds
    back the server's vacuum and locks the table). A process that goes on (``copy()`` in Python, a Spark driver)
    would hold it until its next copy; a later batch of the same plan restores the enumerator, as after a
    restart."""
    _LIVE.end(fingerprint)


def reader_options(fingerprint: str, offset: Mapping[str, Any]) -> Mapping[str, str]:
    """What the enumerator that planned the batch ending at ``offset`` in this process hands its readers
    (:meth:`SplitEnumerator.reader_options`); nothing for a batch replayed from the log after a restart."""
    return _LIVE.reader_options((fingerprint, str(offset.get("plan")), int(offset.get("taken", -1))))


UNSIZED_SPLITS_PER_BATCH = 16
"""A batch limited by bytes takes at most this many splits that all estimate 0 bytes (unknown), so that a source
whose splits give no estimate is still copied in several batches, each committed on its own."""


def unsized(splits: Sequence[Split], limit: BatchLimit) -> bool:
    """Whether ``splits``, a batch limited by bytes, was cut by count instead: none of them estimates its size."""
    return bool(limit.max_bytes) and len(splits) > 1 and not any(s.estimated_size_bytes for s in splits)


def _take(enumerator: SplitEnumerator[Any, Any], limit: BatchLimit) -> list[Split]:
    """The next batch's splits: ``limit.max_splits`` of them, or as many as fit in ``limit.max_bytes`` of estimated
    size (at least one: a split larger than the limit is a batch of its own), as Spark's ``maxBytesPerTrigger``
    admits files: the limit bounds what a kill makes a copy read again. The split that would go over the limit is
    served first to the next batch, exactly where a restored enumerator cuts it again."""
    batch: list[Split] = []
    size = 0
    while True:
        if limit.max_splits and len(batch) >= limit.max_splits:
            break
        if limit.max_bytes and size == 0 and len(batch) >= UNSIZED_SPLITS_PER_BATCH:
            break
        split = enumerator.next_split()
        if split is None:
            break
        if limit.max_bytes and batch and size + split.estimated_size_bytes > limit.max_bytes:
            enumerator._serve_first(split)
            break
        batch.append(split)
        size += split.estimated_size_bytes
    return batch


def _restore_at(source: Source[Any, Any, Any, Any], start: Mapping[str, Any], parallelism: int,
                store: PlanStore) -> SplitEnumerator[Any, Any]:
    """The plan's enumerator after ``start["taken"]`` splits, checked against the splits of ``start``'s batch; or,
    for a source that ``resumes_from_state``, the enumerator restored from the state ``start`` carries."""
    if "state" in start:
        try:
            state = enumerator_state_from_bytes(source, base64.b64decode(start["state"], validate=True))
        except (SerializationError, ValueError, TypeError) as exc:
            raise _unreadable(exc) from None
        restored = source.restore_enumerator(FixedEnumeratorContext(parallelism), state)
        restored.start()
        return restored
    plan = store.get(start)
    try:
        state = enumerator_state_from_bytes(source, plan)
        taken = int(start["taken"])
        expected = [base64.b64decode(s, validate=True) for s in start.get("batch", [])]
    except (SerializationError, ValueError, KeyError, TypeError) as exc:
        raise _unreadable(exc) from None
    enumerator = source.restore_enumerator(FixedEnumeratorContext(parallelism), state)
    enumerator.start()
    serializer = source.split_serializer()
    last: list[bytes] = []
    for i in range(taken):
        split = enumerator.next_split()
        if split is None:
            enumerator.close()
            raise CheckpointError(f"the checkpoint says {taken} splits were taken, but the read's plan has only {i}: "
                                  f"the connector does not cut the same splits from the same plan; {START_OVER}")
        if i >= taken - len(expected):
            last.append(write_envelope(serializer, split))
    if last != expected:
        enumerator.close()
        raise CheckpointError("the splits the connector cuts again from the read's plan differ from those the "
                              "checkpoint's last batch read: its enumerator is not deterministic, so the copy cannot "
                              f"resume safely; {START_OVER}")
    return enumerator


def next_offset(source: Source[Any, Any, Any, Any], fingerprint: str, start: Mapping[str, Any], parallelism: int,
                limit: BatchLimit, store: PlanStore | None = None) -> dict[str, Any] | None:
    """The offset after the next batch: splits taken from the enumerator at ``start`` up to ``limit`` (at least
    one split). None when the enumerator has no split left: the bounded source is done."""
    check_offset(start, fingerprint)
    store = store or PlanStore()
    try:
        key = (fingerprint, str(start["plan"]), int(start["taken"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise _unreadable(exc) from None
    enumerator = _LIVE.take(key)
    if enumerator is None:  # a restart (or another process planned the last batch)
        enumerator = _restore_at(source, start, parallelism, store)
    try:
        batch = _take(enumerator, limit)
    except BaseException:
        enumerator.close()
        raise
    if not batch:
        _LIVE.keep(key, enumerator)  # asked again at the end: still nothing
        return None
    serializer = source.split_serializer()
    end: dict[str, Any] = {"version": OFFSET_VERSION, "source": fingerprint, "plan": key[1],
                           "taken": key[2] + len(batch), "total": start.get("total", -1),
                           "batch": [_b64(write_envelope(serializer, s)) for s in batch]}
    for carried in ("plan_state", "instant"):
        if carried in start:
            end[carried] = start[carried]
    if source.resumes_from_state:
        end["state"] = _b64(enumerator_state_to_bytes(source, enumerator.snapshot_state()))
    _LIVE.keep((fingerprint, key[1], end["taken"]), enumerator)
    return end


def offset_splits(source: Source[Any, Any, Any, Any], offset: Mapping[str, Any]) -> list[Split]:
    """The splits of the batch that ends at ``offset``, exactly as they were taken."""
    serializer = source.split_serializer()
    try:
        return [read_envelope(serializer, base64.b64decode(s)) for s in offset["batch"]]
    except (SerializationError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint's offset cannot be read ({exc}); it is corrupt or was written "
                              f"by an incompatible release; {START_OVER}") from None


def validated(offset: Any) -> dict[str, Any]:
    """``offset`` (parsed JSON) if its fields have the types splitsource writes; else a one-line CheckpointError."""
    try:
        if not isinstance(offset, Mapping):
            raise TypeError("not an object")
        int(offset["taken"])
        if offset.get("total") is not None:
            int(offset["total"])
        plan = offset["plan"]
        if not (isinstance(plan, str) and len(plan) == 32 and all(c in "0123456789abcdef" for c in plan)):
            raise ValueError(f"plan {plan!r} is not a digest")
        if not isinstance(offset.get("instant", {}), Mapping):
            raise TypeError("instant is not an object")
        for encoded in ("plan_state", "state"):
            if encoded in offset:
                base64.b64decode(offset[encoded], validate=True)
        return dict(offset)
    except (ValueError, KeyError, TypeError) as exc:
        raise _unreadable(exc) from None


def check_offset(offset: Any, fingerprint: str) -> None:
    if not isinstance(offset, Mapping) or offset.get("version") != OFFSET_VERSION or "plan" not in offset:
        raise CheckpointError("the checkpoint holds an offset splitsource did not write (or a newer release "
                              "wrote): use another checkpoint location")
    if offset.get("source") != fingerprint:
        raise CheckpointError("the checkpoint belongs to another source (different connector, table or options): "
                              "use another checkpoint location, or the options it was started with")
