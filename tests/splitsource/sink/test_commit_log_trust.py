"""A commit log that cannot be poisoned, names that never collide, replays recognised for ever, sweeps that leave
other writers alone (issue 27's findings 2, 3 and 5, each failing on the code before it)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from serializers import write_envelope
from splitsource import SinkError
from splitsource._errors import OutputOwnedError
from splitsource.sink import (
    COMMIT_RECORD_SERIALIZER,
    BucketingGlobalCommitter,
    BucketingSinkWriter,
    CommitRecord,
    PendingFile,
    parse_sink_options,
)
from splitsource.sink._writer import TOKEN_BITS, new_task_token, write_files


def _options(base: Path) -> object:
    return parse_sink_options({"path": str(base), "format": "jsonl", "bucketer": "none"})


def _committer(base: Path, retention: int = 10) -> BucketingGlobalCommitter:
    return BucketingGlobalCommitter(pafs.LocalFileSystem(), str(base), _options(base).names, retention=retention)


def _rows(first: int, n: int = 3) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(range(first, first + n), pa.int64())], names=["id"])


def _ids(base: Path) -> list[int]:
    out = []
    for path in sorted(base.glob("part-*")):
        out += [int(line.split(":")[1].rstrip("}")) for line in path.read_text().splitlines()]
    return sorted(out)


def test_writer_tokens_have_96_random_bits() -> None:
    tokens = {new_task_token() for _ in range(1000)}
    assert TOKEN_BITS >= 96 and len(tokens) == 1000
    assert all(len(t) * 4 >= 96 and int(t, 16) >= 0 for t in tokens)


def test_a_commit_never_replaces_a_finished_file_it_did_not_log(tmp_path: Path) -> None:
    committer = _committer(tmp_path)
    writer = BucketingSinkWriter(_options(tmp_path), _rows(0).schema, pafs.LocalFileSystem(), str(tmp_path),
                                 task="00000-aaaa")
    writer.write(_rows(0))
    files = writer.prepare_commit(end_of_input=True)
    (tmp_path / "part-00000-aaaa-0.jsonl").write_text('{"id":99}\n')  # an earlier batch's file of the same name
    with pytest.raises(SinkError, match=r"already exists and no commit of this output logged it"):
        committer.commit(committer.combine(files, kind="append", write_id="w"))
    assert (tmp_path / "part-00000-aaaa-0.jsonl").read_text() == '{"id":99}\n'


def test_a_commit_record_is_never_written_for_pending_files_that_are_gone(tmp_path: Path) -> None:
    committer = _committer(tmp_path)
    missing = PendingFile("", "00000-bbbb", 0, 3, 10)  # written on another machine's disk, say
    with pytest.raises(SinkError, match=r"commit refused: 1 pending file\(s\) .* nothing was committed"):
        committer.commit_batch([missing], query_id="q", batch_id=0)
    assert committer.records() == []  # nothing logged: the next write is not stuck
    writer = BucketingSinkWriter(_options(tmp_path), _rows(0).schema, pafs.LocalFileSystem(), str(tmp_path),
                                 task="00000-cccc")
    writer.write(_rows(0))
    assert committer.commit_batch(writer.prepare_commit(end_of_input=True), query_id="q", batch_id=0) is not None
    assert _ids(tmp_path) == [0, 1, 2]


def test_a_logged_commit_whose_files_are_gone_is_rolled_back_once_not_raised_for_ever(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    committer = _committer(tmp_path)
    writer = BucketingSinkWriter(_options(tmp_path), _rows(0).schema, pafs.LocalFileSystem(), str(tmp_path),
                                 task="00000-dddd", )
    writer.write(_rows(0))
    files = writer.prepare_commit(end_of_input=True)
    record = committer.combine(files, kind="stream", write_id="q", batch_id=0)
    log = tmp_path.with_name(tmp_path.name + ".bucketing") / "log"
    log.mkdir(parents=True)
    (log / f"{record.seq:020d}.commit").write_bytes(write_envelope(COMMIT_RECORD_SERIALIZER, record))
    os.unlink(files[0].pending_path(str(tmp_path), _options(tmp_path).names))  # removed from outside
    with caplog.at_level(logging.WARNING, logger="splitsource.sink"):
        assert committer.recover() == [record]
    assert "rolled back" in caplog.text and len(caplog.records) == 1
    assert committer.records() == [] and committer.last_stream_batch("q") is None  # batch 0 is read again
    assert committer.recover() == []  # and nothing raises any more


def test_a_replay_is_recognised_after_other_writers_pruned_its_records(tmp_path: Path) -> None:
    committer = _committer(tmp_path, retention=2)
    options = _options(tmp_path)

    def batch(query: str, batch_id: int, first: int) -> CommitRecord | None:
        files = write_files(options, [_rows(first)], 0)
        return committer.commit_batch(files, query_id=query, batch_id=batch_id)

    assert batch("stream-a", 5, 0) is not None
    for n in range(10):  # another writer commits ten times: stream-a's record is pruned from the log
        assert batch("stream-b", n, 100 + 10 * n) is not None
    assert all(r.write_id == "stream-b" for r, _ in committer.records())
    assert batch("stream-a", 5, 0) is None  # the restarted query's replay of batch 5 is not committed again
    assert _ids(tmp_path).count(0) == 1
    record = batch("stream-a", 6, 1000)
    assert record is not None and record.total_rows == 6  # running totals survive pruning too


@pytest.mark.parametrize("record", [
    CommitRecord(1, "append", "w", -1, (PendingFile("../../etc", "00000-aaaa", 0, 1, 1),)),
    CommitRecord(1, "append", "w", -1, (PendingFile("/abs", "00000-aaaa", 0, 1, 1),)),
    CommitRecord(1, "append", "w", -1, (PendingFile("", "../x", 0, 1, 1),)),
    CommitRecord(1, "overwrite", "w", -1, (), replaced=("../outside",)),
], ids=["bucket-up", "bucket-absolute", "task-path", "replaced-up"])
def test_a_commit_record_that_escapes_the_output_is_damage_not_an_instruction(tmp_path: Path,
                                                                             record: CommitRecord) -> None:
    log = tmp_path.with_name(tmp_path.name + ".bucketing") / "log"
    log.mkdir(parents=True)
    (log / f"{1:020d}.commit").write_bytes(write_envelope(COMMIT_RECORD_SERIALIZER, record))
    with pytest.raises(SinkError, match=r"is unreadable .* damaged: move the output aside"):
        _committer(tmp_path).recover()


def test_a_sweep_leaves_another_running_writers_files_and_removes_day_old_orphans(tmp_path: Path) -> None:
    committer = _committer(tmp_path)
    options = _options(tmp_path)
    mine = write_files(options, [_rows(0)], 0, "aaaaaaaaaaaa")
    theirs = write_files(options, [_rows(10)], 0, "bbbbbbbbbbbb")
    old = write_files(options, [_rows(20)], 0, "cccccccccccc")
    day_ago = time.time() - 25 * 3600
    for f in old:
        os.utime(f.pending_path(str(tmp_path), options.names), (day_ago, day_ago))
    removed = committer.sweep(owner="aaaaaaaaaaaa")
    assert sorted(os.path.basename(p) for p in removed) == sorted(
        os.path.basename(f.pending_path(str(tmp_path), options.names)) for f in mine + old)
    assert all(os.path.exists(f.pending_path(str(tmp_path), options.names)) for f in theirs)


def test_the_spark_sink_refuses_an_output_a_copy_owns_or_writes(tmp_path: Path) -> None:
    from splitsource.spark._sink import BucketingBatchWriter, BucketingStreamWriter

    meta = tmp_path.with_name(tmp_path.name + ".bucketing")
    meta.mkdir()
    (meta / "owner.json").write_text('{"token": "t", "checkpoint": "/data/out.checkpoint"}')
    options = parse_sink_options({"path": str(tmp_path), "bucketer": "none"})
    with pytest.raises(OutputOwnedError, match=r"belongs to a splitsource copy \(its checkpoint is "
                                               r"/data/out.checkpoint\): df.write.format\('bucketing'\) does not"):
        BucketingBatchWriter(options, overwrite=False)
    (meta / "owner.json").unlink()
    (meta / "lock.json").write_text('{"host": "h", "pid": 1}')
    with pytest.raises(OutputOwnedError, match=r"is being written by a splitsource copy"):
        BucketingStreamWriter(options)


def test_two_commits_racing_for_one_sequence_number_never_replace_each_other(tmp_path: Path) -> None:
    first, second = _committer(tmp_path), _committer(tmp_path)
    options = _options(tmp_path)
    a = first.combine(write_files(options, [_rows(0)], 0, "aaaaaaaaaaaa"), kind="append", write_id="a")
    b = second.combine(write_files(options, [_rows(10)], 0, "bbbbbbbbbbbb"), kind="append", write_id="b")
    assert a.seq == b.seq == 1  # both computed their number before either wrote
    first.commit(a)
    with pytest.raises(SinkError, match=r"exists already and logs another commit"):
        second.commit(b)
    assert [r.write_id for r, _ in first.records()] == ["a"] and _ids(tmp_path) == [0, 1, 2]
