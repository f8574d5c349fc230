"""The FLIP-27 contracts: Source, Split, SplitState, SplitEnumerator, SplitReader, RecordEmitter.

A connector author implements three small things and gets Spark reads, local runs, restartable copy jobs and the
conformance kit for free:

- a frozen :class:`Split` dataclass (a piece of the source, with a stable ``split_id``),
- a :class:`SplitEnumerator` with ``generate_split`` and ``position`` (the plan, cut lazily),
- a :class:`SplitReader` with ``add_splits`` and ``fetch`` (the I/O),

and two more only where the framework's defaults do not fit:

- a :class:`SplitState` (the mutable position inside one split, convertible back to the remaining split; the
  default, :class:`ResumeState`, holds what is left of the split),
- a :class:`RecordEmitter` with ``emit`` (raw rows to Arrow, advancing the split state; the default,
  :class:`ResumeEmitter`, serves a reader whose raw batch is the rows and what is left of their split),

tied together by a :class:`Source` subclass. The contracts below are checked by :mod:`splitsource.testing`.

Exactly-once reading rests on one rule: **a split's records are a fixed, ordered sequence and a split state is a
position in it.** ``SplitState.to_split()`` returns the split of the records not yet emitted, so a reader that
resumes from it (after a retry, an add-back or a restore) neither repeats nor skips a record.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast

import pyarrow as pa

from serializers import SimpleVersionedSerializer
from splitsource._errors import OptionsError, ProtocolError, TransientSplitReadError

__all__ = [
    "Boundedness",
    "Changes",
    "EnumeratorState",
    "RecordEmitter",
    "Predicate",
    "ReadEvent",
    "RecordsBySplits",
    "ResumeEmitter",
    "ResumeState",
    "Source",
    "Split",
    "SplitEnumerator",
    "SplitEnumeratorContext",
    "SplitReader",
    "SplitState",
]

SplitT = TypeVar("SplitT", bound="Split")
PositionT = TypeVar("PositionT")
RawT = TypeVar("RawT")
OptionsT = TypeVar("OptionsT")
StateT = TypeVar("StateT", bound="SplitState[Any]")


class Boundedness(enum.Enum):
    """Whether a source ends. splitsource reads bounded sources; the enum exists so the question is explicit."""

    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


class Changes(enum.Enum):
    """What an incremental run of a source reads (:meth:`Source.incremental`): ``APPENDS``, only rows added since
    the last run (each one a new key); ``UPSERTS``, every row added or changed since, whose newest version replaces
    the older by key."""

    APPENDS = "appends"
    UPSERTS = "upserts"


@dataclasses.dataclass(frozen=True)
class Split(abc.ABC):
    """An immutable, picklable piece of a source.

    Contract:

    - ``split_id`` is stable: the same piece of data has the same id in every run, on every machine, and after the
      split was converted to a state and back (``to_split`` keeps the id and narrows the range).
    - ``estimated_size_bytes`` is a best-effort size used to pack splits into Spark partitions and streaming
      batches; 0 means unknown.
    - subclasses are frozen dataclasses; they travel to executors by pickle but are *persisted* only through the
      source's ``split_serializer``.
    """

    @property
    @abc.abstractmethod
    def split_id(self) -> str: ...

    @property
    def estimated_size_bytes(self) -> int:
        return 0


class SplitState(abc.ABC, Generic[SplitT]):
    """The mutable position inside one split, owned by the record emitter.

    ``to_split()`` returns a split that holds exactly the records not yet emitted. It may be called at any time
    between two ``emit`` calls (the source reader never calls it during one). After the last batch of a split
    was emitted, and before the reader reported the split finished, ``to_split()`` must return an *empty*
    split, never the split from its start: a state must tell "at the start" from "at the end".
    """

    @property
    @abc.abstractmethod
    def split_id(self) -> str: ...

    @abc.abstractmethod
    def to_split(self) -> SplitT: ...


class ResumeState(SplitState[SplitT]):
    """The split state of every connector here, and the default of :meth:`Source.create_split_state`:
    ``remaining``, what is left of the split, which the record emitter moves on after each batch from the absolute
    position the raw batch carries: ``state.remaining = split_left`` (:class:`ResumeEmitter`), or
    ``state.advance(paging_state=...)`` on a frozen dataclass split (Cassandra's). ``to_split()`` returns it.
    After the last batch of a split it must read nothing (a key range: nothing after its last key; Cassandra's
    split: ``done``)."""

    def __init__(self, split: SplitT) -> None:
        self.remaining = split

    @property
    def split_id(self) -> str:
        return self.remaining.split_id

    def advance(self, **fields: Any) -> None:
        """``remaining`` with ``fields`` replaced (``dataclasses.replace``)."""
        self.remaining = dataclasses.replace(self.remaining, **fields)

    def to_split(self) -> SplitT:
        return self.remaining


@dataclasses.dataclass(frozen=True)
class EnumeratorState(Generic[SplitT, PositionT]):
    """A checkpoint of an enumerator: splits given back but not yet re-assigned, and the plan's position.

    ``position`` is a connector-defined immutable value from which the enumerator continues generating splits
    without re-planning what it covers; ``pending`` is served before anything new.
    """

    pending: tuple[SplitT, ...]
    position: PositionT


class SplitEnumeratorContext(abc.ABC):
    """What an enumerator can ask of the runtime that drives it."""

    @property
    @abc.abstractmethod
    def parallelism(self) -> int:
        """Number of readers the runtime runs."""


class FixedEnumeratorContext(SplitEnumeratorContext):
    """A context with a fixed number of readers: what a runtime passes an enumerator, and what a test or a tool
    that plans outside a runtime uses (``source.create_enumerator(FixedEnumeratorContext(4))``)."""

    def __init__(self, parallelism: int) -> None:
        self._parallelism = parallelism

    @property
    def parallelism(self) -> int:
        return self._parallelism


class SplitEnumerator(abc.ABC, Generic[SplitT, PositionT]):
    """Cuts a source into splits lazily, on request.

    Subclasses implement :meth:`generate_split` and :meth:`position`; the base class adds the add-back queue,
    snapshotting and the split-request protocol. Contract:

    - **lazy**: a split is generated only when :meth:`next_split` is called, and memory does not grow with the
      total number of splits (keep the plan compact: ranges, not a list of splits);
    - **add-back first**: splits handed to :meth:`add_splits_back` are served before new ones, in order;
    - :meth:`snapshot_state` returns an immutable copy; later calls on the enumerator do not change it;
    - a restored enumerator (built by ``Source.restore_enumerator`` from a snapshot) continues from
      ``position`` and never generates a split that the state already covers;
    - once :meth:`next_split` has returned ``None`` it keeps returning ``None`` until splits are added back.

    An enumerator is driven by one thread at a time; runtimes serialise calls.
    """

    def __init__(self, context: SplitEnumeratorContext | None = None, pending: Iterable[SplitT] = ()) -> None:
        self.context = context or FixedEnumeratorContext(1)
        self._pending: collections.deque[SplitT] = collections.deque(pending)
        self._closed = False

    @abc.abstractmethod
    def generate_split(self) -> SplitT | None:
        """The next split of the plan, or ``None`` when the plan is exhausted."""

    @abc.abstractmethod
    def position(self) -> PositionT:
        """An immutable value from which a restored enumerator continues the plan."""

    def start(self) -> None:
        """Called once before the first request; connect or read metadata here, not in ``__init__``."""

    def reader_options(self) -> Mapping[str, str]:
        """Connector options every reader of this run gets on top of the user's, valid while this enumerator is
        open (after :meth:`start`): what the enumerator set up once for all readers, such as a database snapshot
        that readers import so that the whole run reads one instant. Not part of the plan: a restored enumerator
        (a re-run) sets up its own. The framework passes them to a copy's read tasks, on executors too; a read
        whose planning process ends before its readers start (``spark.read``) cannot, so readers must work
        without them. The default: none."""
        return {}

    def estimated_total_splits(self) -> int | None:
        """Best-effort number of splits of the whole plan, for progress reporting; ``None`` if unknown."""
        return None

    def instant(self) -> Mapping[str, Any]:
        """Where the source stands for the run this enumerator plans (after :meth:`start`), as a small JSON
        object: the highest key a run reads up to, a database snapshot's transaction ids. An incremental copy
        keeps the instant of each run's first plan and hands it to the next run as :attr:`Source.since`, whose
        enumerator then plans only what changed after it. The default: none (a source without incremental runs)."""
        return {}

    def keys(self) -> Iterator[pa.RecordBatch] | None:
        """Every key the source holds at the instant of the run this enumerator plans (after :meth:`start`): the
        source's :meth:`~Source.key_columns`, typed as its reader types them, in batches of any size and order.
        An incremental run of a :attr:`Changes.UPSERTS` source calls it once, on its first plan, and deletes
        from the output the keys it held after the last run that are not among them. None (the default): the
        source does not see deletes."""
        return None

    def changed_keys(self) -> tuple[int, Iterator[pa.RecordBatch]] | None:
        """A shortcut past :meth:`keys` when nothing was deleted: how many keys the source holds at this run's
        instant, and the keys of the rows changed since the last run (typed as :meth:`keys` types them), which
        must hold every key the last run's instant did not. An incremental run counts the output's keys and the
        new ones among these; when that is the source's count, no key is gone, and :meth:`keys` is never read.
        Worth it where counting is cheaper than listing (a server's ``count(*)`` beside a transfer of every
        key). None (the default): :meth:`keys` is read."""
        return None

    def next_split(self) -> SplitT | None:
        """Serve an added-back split if there is one, else generate the next split, else ``None``."""
        if self._closed:
            raise ProtocolError(f"{type(self).__name__}: next_split() after close()")
        if self._pending:
            return self._pending.popleft()
        return self.generate_split()

    def add_splits_back(self, splits: Iterable[SplitT]) -> None:
        """Take back splits (or remaining parts of splits) that a failed reader did not finish."""
        self._pending.extend(splits)

    def _serve_first(self, split: SplitT) -> None:
        """Undo the last :meth:`next_split`: ``split``, just served, is served again by the next call (the framework
        uses it when a batch is full; connectors never call it)."""
        self._pending.appendleft(split)

    def snapshot_state(self) -> EnumeratorState[SplitT, PositionT]:
        return EnumeratorState(pending=tuple(self._pending), position=self.position())

    def close(self) -> None:
        self._closed = True


@dataclasses.dataclass(frozen=True)
class Predicate:
    """One conjunct of a query's filter on a top-level column, for :meth:`Source.push_predicates`: ``op`` is one
    of ``=``, ``in`` (``value`` a tuple), ``<``, ``<=``, ``>``, ``>=``; ``value`` a plain Python value."""

    column: str
    op: str
    value: Any


@dataclasses.dataclass(frozen=True)
class ReadEvent:
    """Something a split reader met and coped with, worth telling the operator: ``kind`` (for example
    ``page_shrunk``), the split it happened in, and one line of detail. Counted by kind in the copy's summary."""

    kind: str
    split_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} in split {self.split_id}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class RecordsBySplits(Generic[RawT]):
    """What one :meth:`SplitReader.fetch` returns: raw batches per split, the splits it finished, and events.

    ``batches`` is a sequence of ``(split_id, raw_batch)`` in read order. ``finished`` lists splits that have no
    record left; a split can be finished without ever producing a batch (an empty split), and must be reported
    after (or with) its last batch. ``events`` are :class:`ReadEvent` s for the summary.
    """

    batches: Sequence[tuple[str, RawT]] = ()
    finished: frozenset[str] = frozenset()
    events: Sequence[ReadEvent] = ()

    @classmethod
    def finished_only(cls, *split_ids: str) -> RecordsBySplits[Any]:
        return cls((), frozenset(split_ids))


class SplitReader(abc.ABC, Generic[SplitT, RawT]):
    """Reads the records of its assigned splits, one bounded batch per :meth:`fetch`.

    Contract:

    - :meth:`fetch` returns a bounded amount of data (a page, a batch) and is re-entrant: after it returns or
      raises, calling it again continues where the last successful fetch stopped;
    - every assigned split is eventually reported in ``finished``, empty splits included;
    - :meth:`wake_up` may be called from another thread; it makes a blocked or long :meth:`fetch` return
      promptly (possibly with nothing) without losing its position;
    - errors are raised, never swallowed or logged away; an error that a retry from the split state may cure is
      raised as (or mapped by ``Source.is_transient`` to) a transient error;
    - :meth:`close` releases connections; it is always called, also after an error.
    """

    @abc.abstractmethod
    def add_splits(self, splits: Sequence[SplitT]) -> None:
        """Assign more splits; they are read in order after the ones already assigned."""

    @abc.abstractmethod
    def fetch(self) -> RecordsBySplits[RawT]:
        """Read the next bounded batch. Returns an empty result when there is nothing assigned."""

    def wake_up(self) -> None:
        """Make a blocked :meth:`fetch` return soon. Readers whose fetch never blocks long need not override."""

    def close(self) -> None:
        """Release resources."""


class RecordEmitter(abc.ABC, Generic[RawT, StateT]):
    """Turns one raw batch into an Arrow record batch and advances the split state.

    Typed by the connector's own split state (Flink's ``RecordEmitter<E, T, SplitStateT>``): the state ``emit``
    gets is the one its source's ``create_split_state`` made, so a connector reads and moves its fields with no
    downcast. ``emit`` must set the state to the position *after* ``raw`` (an absolute position carried by the raw
    batch, not an increment), so emitting is idempotent with respect to the state.
    """

    @abc.abstractmethod
    def emit(self, raw: RawT, state: StateT) -> pa.RecordBatch | None: ...


class ResumeEmitter(RecordEmitter[tuple[pa.RecordBatch, SplitT], ResumeState[SplitT]]):
    """The emitter of a reader whose raw batch is ``(batch, remaining)``: the rows, and what is left of their split
    after them (the split narrowed past the batch, keeping its id). It sets the :class:`ResumeState` to
    ``remaining`` and emits the batch as it is: :meth:`Source.create_record_emitter`'s default."""

    def emit(self, raw: tuple[pa.RecordBatch, SplitT], state: ResumeState[SplitT]) -> pa.RecordBatch:
        batch, state.remaining = raw
        return batch


class Source(abc.ABC, Generic[SplitT, PositionT, RawT, OptionsT]):
    """A bounded source: the factory for its enumerator, split reader, emitter and serializers.

    A Source is built from string options (``Source(options)``), in the driver and again in every executor, so
    its constructor must be cheap and deterministic; connect lazily. Class attributes:

    - ``name``: the short name users pass as ``connector`` (``"generator"``, ``"cassandra"``);
    - ``options_class``: a frozen dataclass of options (see :func:`splitsource.option`);
    - ``since``: see below;
    - ``resumes_from_state``: False (the default): a copy that restarts restores the enumerator from its plan and
      cuts the splits it had taken again, which must come out the same (a plan that moved is refused); True: a
      copy's offsets carry the enumerator's state after each batch (keep it small) and a restart restores that
      state as it is, so a plan that moved since (boundaries of a table that changed) resumes where the state says.
    """

    name: ClassVar[str] = ""
    options_class: ClassVar[type[Any]]
    boundedness: ClassVar[Boundedness] = Boundedness.BOUNDED
    resumes_from_state: ClassVar[bool] = False
    since: Mapping[str, Any] | None = None
    """Set by the framework before any enumerator or reader is made (the framework option ``since``): None, read
    everything; else the :meth:`SplitEnumerator.instant` of an earlier run, and this run reads only what changed
    after it (a source whose :meth:`incremental` accepts)."""

    def __init__(self, options: Mapping[str, str] | OptionsT) -> None:
        from splitsource._typed_options import parse_options

        if isinstance(options, Mapping):
            self.options: OptionsT = parse_options(self.options_class, options, context=f"connector '{self.name}'")
        else:
            self.options = options

    @abc.abstractmethod
    def schema(self) -> pa.Schema:
        """Arrow schema of the emitted batches (Spark-compatible types; see docs/connector-guide.md)."""

    @abc.abstractmethod
    def create_enumerator(self, context: SplitEnumeratorContext) -> SplitEnumerator[SplitT, PositionT]: ...

    @abc.abstractmethod
    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[SplitT, PositionT]
    ) -> SplitEnumerator[SplitT, PositionT]:
        """Rebuild an enumerator from a snapshot without re-planning what ``state.position`` covers."""

    @abc.abstractmethod
    def create_split_reader(self) -> SplitReader[SplitT, RawT]: ...

    def create_record_emitter(self) -> RecordEmitter[RawT, Any]:
        """A :class:`ResumeEmitter`, for a reader whose raw batches are ``(batch, remaining split)``; override it for
        another raw batch (Cassandra's rows of the driver) or another state."""
        return cast(RecordEmitter[RawT, Any], ResumeEmitter())

    def create_split_state(self, split: SplitT) -> SplitState[SplitT]:
        """The state the record emitter moves on while ``split`` is read: a :class:`ResumeState` unless a
        connector needs a state of its own."""
        return ResumeState(split)

    @abc.abstractmethod
    def split_serializer(self) -> SimpleVersionedSerializer[SplitT]: ...

    @abc.abstractmethod
    def position_serializer(self) -> SimpleVersionedSerializer[PositionT]: ...

    def incremental(self) -> Changes:
        """Whether this source copies only what changed since an earlier run (``copy --incremental``), and what
        such a run reads; a source that cannot raises :class:`~splitsource.OptionsError` saying why, in one line
        (the default). One that can returns :class:`Changes` and makes the three parts agree: its enumerator's
        :meth:`~SplitEnumerator.instant` says where a run stands, and with :attr:`since` set its enumerator and
        readers read only what changed after that instant."""
        raise OptionsError(f"connector {self.name!r} cannot copy only what changed (--incremental): it does not say "
                           "where a run stands (SplitEnumerator.instant) nor read changes after one (Source.since); "
                           "copy it whole")

    def is_transient(self, error: BaseException) -> bool:
        """Whether ``error`` from ``fetch`` may be cured by a retry from the split state."""
        return isinstance(error, TransientSplitReadError)

    def identity(self) -> Mapping[str, Any]:
        """What makes two runs read the same data (for refusing a foreign checkpoint); secrets excluded."""
        return {"connector": self.name}

    def origin(self) -> Mapping[str, Any]:
        """Which deployment the data comes from (a cluster's name, a data centre): a copy's checkpoint records it
        and refuses to resume against another. The default: nothing recorded."""
        return {}

    def volatile_columns(self) -> Sequence[str]:
        """Columns whose values change by themselves between two reads (a TTL counting down): ``verify``
        compares only whether they are null. The default: none."""
        return ()

    def push_predicates(self, predicates: Sequence[Predicate]) -> tuple[Mapping[str, str], Sequence[int]]:
        """Filter pushdown (Spark's ``pushFilters``): the options that make this source apply some of
        ``predicates`` itself (added to its options for the read), and the indices of those it now applies
        exactly; Spark evaluates the others. The default pushes nothing."""
        return {}, ()

    def reference_rows(self, part: int = 0, parts: int = 1) -> Iterator[tuple[Any, ...]] | None:
        """The rows of part ``part`` of ``parts`` (the whole source when ``parts`` is 1), read *without* the split
        reader and the record emitter, for ``splitsource verify``; None (the default) when the connector has no
        such path.

        The parts are disjoint and together the whole source, and they are the connector's own division, not its
        enumerator's splits (a token range each for Cassandra, a run of rows for the generator): verify reads them
        in parallel, and a bug that loses splits must not hide itself. Rows are tuples in the order of
        :meth:`schema`, of *plain* Python values: what ``array.cast(plain_storage(type)).to_pylist()`` yields for
        the column's Arrow type (integers for timestamps in the type's unit and for dates in days, dicts for
        structs, lists of ``(key, value)`` pairs for maps). Verify compares them with what it decodes from the
        output files, so a bug in the emitter's conversion shows as a mismatch instead of being repeated on both
        sides. Write it from the source's own client values by code of its own, not by calling the emitter.
        """
        return None

    def reference_label(self, part: int, parts: int) -> str:
        """How verify names part ``part`` of ``parts`` of the reference rows where a row differs (Cassandra: its
        token range). The default: ``part 2 of 8``."""
        return f"part {part + 1} of {parts}"

    def key_columns(self) -> Sequence[str]:
        """The columns whose values identify a row (Cassandra: the primary key), by which verify names the rows
        that differ on a mismatch. The default: none (a row is named by its first values)."""
        return ()
