"""`kafkalite dump-log`: what kafka-dump-log.sh prints, for files written by Kafka or by us.

It only reads (files are opened read-only; nothing is trimmed or created), so it is safe on a live
broker's directory: an active index is preallocated and its zero-filled tail is not entries.

It is a diagnostic tool, so it must survive any file: every problem is reported with the file,
the byte position and the reason, and the dump goes on where the format allows it (a bad CRC or
an undecodable batch does not stop the scan; a broken frame does, since nothing after it can be
framed). The exit status is 1 when anything was found wrong, so scripts can use it as a check.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from kafkalite.errors import KafkaliteError
from kafkalite.records.batch import RecordBatch
from kafkalite.records.control import ControlRecordType, EndTransactionMarker, parse_control_type
from kafkalite.storage import names
from kafkalite.storage.file_records import BatchHeader, FileRecords
from kafkalite.storage.read_only import OFFSET_ENTRY, TIME_ENTRY, read_index_entries

Emit = Callable[[dict[str, Any]], None]


def _text(b: bytes | None) -> str:
    if b is None:
        return "null"
    return b.decode("utf-8", errors="backslashreplace")


JSON_BYTES_HELP = (
    "In --json output, keys, payloads and header values are lossless: a JSON string when the bytes are "
    "valid UTF-8, null when absent, and otherwise the bytes in base64 with a sibling field saying so "
    '("key"/"keyEncoding", "payload"/"payloadEncoding", and per header {"key", "value", "valueEncoding"}, '
    'the encoding being "base64"). Headers are a list, in record order, since keys may repeat.'
)


def json_bytes(name: str, b: bytes | None) -> dict[str, Any]:
    """`{name: text}` for valid UTF-8, `{name: None}` for absent, else base64 marked by `<name>Encoding`."""
    if b is None:
        return {name: None}
    try:
        return {name: b.decode("utf-8")}
    except UnicodeDecodeError:
        return {name: base64.b64encode(b).decode("ascii"), f"{name}Encoding": "base64"}


def bytes_from_json(obj: dict[str, Any], name: str) -> bytes | None:
    """The inverse of `json_bytes`: what a reader of --json output does to get the bytes back."""
    value = obj[name]
    if value is None:
        return None
    if obj.get(f"{name}Encoding") == "base64":
        return base64.b64decode(value)
    return value.encode("utf-8")


class Dumper:
    def __init__(self, out: TextIO, *, deep: bool, print_data: bool, as_json: bool, max_bytes: int | None) -> None:
        self.out = out
        self.deep = deep or print_data
        self.print_data = print_data
        self.as_json = as_json
        self.max_bytes = max_bytes
        self.problems = 0

    # --- output ---------------------------------------------------------------------------------

    def emit(self, kind: str, text: str, **fields: Any) -> None:
        if self.as_json:
            self.out.write(json.dumps({"type": kind, **fields}, default=str) + "\n")
        else:
            self.out.write(text + "\n")

    def problem(self, file: Path, position: int | None, reason: str) -> None:
        self.problems += 1
        where = f" at byte position {position}" if position is not None else ""
        self.emit("error", f"ERROR: {file}{where}: {reason}", file=str(file), position=position, reason=reason)

    # --- dispatch ---------------------------------------------------------------------------------

    def dump(self, path: Path, verify_index_only: bool = False, index_sanity_check: bool = False) -> None:
        self.emit("file", f"Dumping {path}", file=str(path))
        if not path.exists():
            self.problem(path, None, "no such file")
            return
        name = path.name
        try:
            if name.endswith(names.LOG_SUFFIX):
                self.dump_log(path)
            elif name.endswith(names.INDEX_SUFFIX):
                self.dump_offset_index(path, verify_index_only, index_sanity_check)
            elif name.endswith(names.TIME_INDEX_SUFFIX):
                self.dump_time_index(path, verify_index_only, index_sanity_check)
            elif name.endswith(names.TXN_INDEX_SUFFIX):
                self.dump_txn_index(path)
            elif name.endswith(names.SNAPSHOT_SUFFIX):
                self.dump_snapshot(path)
            else:
                self.problem(path, None, "ignoring unknown file type (expected .log, .index, .timeindex, "
                                         ".txnindex or .snapshot)")
        except (KafkaliteError, OSError, ValueError) as exc:
            self.problem(path, None, f"{type(exc).__name__}: {exc}")

    # --- .log -------------------------------------------------------------------------------------

    def dump_log(self, path: Path) -> None:
        base = _base_offset(path)
        self.emit("log_start", f"Log starting offset: {base}", file=str(path), base_offset=base)
        records = FileRecords(path, mutable=False)
        try:
            end = records.size if self.max_bytes is None else min(records.size, self.max_bytes)
            last_end = 0
            for position, size, view in _guarded_views(records, end, self, path):
                last_end = position + size
                self._dump_batch(path, position, RecordBatch(bytes(view)))
            if last_end < end:
                self.problem(path, last_end, f"found {end - last_end} invalid bytes at the end of {path.name}")
        finally:
            records.close_handlers()

    def _dump_batch(self, path: Path, position: int, b: RecordBatch) -> None:
        valid = b.is_valid()
        fields = {
            "baseOffset": b.base_offset, "lastOffset": b.last_offset, "count": b.records_count,
            "baseSequence": b.base_sequence, "lastSequence": b.last_sequence, "producerId": b.producer_id,
            "producerEpoch": b.producer_epoch, "partitionLeaderEpoch": b.partition_leader_epoch,
            "isTransactional": b.is_transactional, "isControl": b.is_control,
            "deleteHorizonMs": b.delete_horizon_ms, "position": position,
            "timestampType": b.timestamp_type.display, "maxTimestamp": b.max_timestamp,
            "size": b.size_in_bytes, "magic": b.magic, "compresscodec": _codec_name(b), "crc": b.crc,
            "isvalid": valid,
        }
        horizon = "OptionalLong.empty" if b.delete_horizon_ms is None else f"OptionalLong[{b.delete_horizon_ms}]"
        text = (
            f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
            f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {position} {b.timestamp_type.display}: {b.max_timestamp} "
            f"size: {b.size_in_bytes} magic: {b.magic} compresscodec: {_codec_name(b)} crc: {b.crc} "
            f"isvalid: {str(valid).lower()}"
        )
        self.emit("batch", text, file=str(path), **fields)
        if not valid:
            self.problem(path, position, f"batch {b.base_offset}..{b.last_offset} fails its CRC32C check "
                                         f"(stored {b.crc}, computed {b.compute_checksum()})")
        if self.deep:
            try:
                recs = b.records()
            except KafkaliteError as exc:
                self.problem(path, position, f"cannot decode the records of batch {b.base_offset}: {exc}")
                return
            for r in recs:
                self._dump_record(path, b, r)

    def _dump_record(self, path: Path, b: RecordBatch, r: Any) -> None:
        ts_name = b.timestamp_type.display
        fields: dict[str, Any] = {
            "offset": r.offset, "timestampType": ts_name, "timestamp": r.timestamp,
            "keySize": -1 if r.key is None else len(r.key), "valueSize": -1 if r.value is None else len(r.value),
            "sequence": r.sequence, "headerKeys": [h for h, _ in r.headers],
        }
        header_keys = ",".join(fields["headerKeys"])
        text = (f"| offset: {r.offset} {ts_name}: {r.timestamp} keySize: {fields['keySize']} "
                f"valueSize: {fields['valueSize']} sequence: {r.sequence} headerKeys: [{header_keys}]")
        if b.is_control:
            try:
                kind = parse_control_type(r.key)
                if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                    m = EndTransactionMarker.from_record(r)
                    text += f" endTxnMarker: {kind.name} coordinatorEpoch: {m.coordinator_epoch}"
                    fields.update(endTxnMarker=kind.name, coordinatorEpoch=m.coordinator_epoch)
                else:
                    text += f" controlType: {kind.name}"
                    fields["controlType"] = kind.name
            except KafkaliteError as exc:
                self.problem(path, None, f"invalid control record at offset {r.offset}: {exc}")
        elif self.print_data:
            text += f" key: {_text(r.key)} payload: {_text(r.value)}"
            if r.headers:
                text += " headers: " + ",".join(f"{k}:{_text(v)}" for k, v in r.headers)
            fields.update(json_bytes("key", r.key))
            fields.update(json_bytes("payload", r.value))
            fields["headers"] = [{"key": k, **json_bytes("value", v)} for k, v in r.headers]
        self.emit("record", text, file=str(path), **fields)

    # --- indexes ----------------------------------------------------------------------------------

    def _log_batches_by_last_offset(self, index_path: Path) -> dict[int, tuple[int, int]] | None:
        log_path = index_path.with_name(index_path.name.split(".")[0] + names.LOG_SUFFIX)
        if not log_path.exists():
            self.problem(index_path, None, f"no matching log file {log_path.name}; cannot verify entries")
            return None
        records = FileRecords(log_path, mutable=False)
        try:
            return {h.last_offset: (h.position, h.max_timestamp)
                    for h in _guarded_headers(records, self, log_path)}
        finally:
            records.close_handlers()

    def dump_offset_index(self, path: Path, verify_only: bool, sanity_only: bool) -> None:
        from kafkalite.storage.offset_index import OffsetIndex

        base = _base_offset(path)
        size = path.stat().st_size
        if size % 8:
            self.problem(path, None, f"index file size {size} is not a multiple of 8")
        if sanity_only:
            index = OffsetIndex(path, base, max(size, 8), writable=False)
            try:
                self._sanity(index, path)
            finally:
                index.close()
            return
        # entries first, then the log: a live writer adds an entry only after its batch is written
        entries = read_index_entries(path, OFFSET_ENTRY)
        by_last = self._log_batches_by_last_offset(path)
        prev = None
        for i, (relative, position) in enumerate(entries.tolist()):
            offset = base + relative
            if not verify_only:
                self.emit("index_entry", f"offset: {offset} position: {position}", file=str(path),
                          offset=offset, position=position)
            if prev is not None and offset <= prev:
                self.problem(path, i * 8, f"entry {i} offset {offset} does not increase (previous {prev})")
            prev = offset
            if by_last is not None and (offset not in by_last or by_last[offset][0] != position):
                found = by_last.get(offset)
                self.problem(path, i * 8, f"entry {i} ({offset} -> {position}) does not match the log "
                                          f"(batch ending at {offset}: {found[0] if found else 'none'})")

    def dump_time_index(self, path: Path, verify_only: bool, sanity_only: bool) -> None:
        from kafkalite.storage.time_index import TimeIndex

        base = _base_offset(path)
        size = path.stat().st_size
        if size % 12:
            self.problem(path, None, f"time index file size {size} is not a multiple of 12")
        if sanity_only:
            index = TimeIndex(path, base, max(size, 12), writable=False)
            try:
                self._sanity(index, path)
            finally:
                index.close()
            return
        entries = read_index_entries(path, TIME_ENTRY)
        by_last = self._log_batches_by_last_offset(path)
        prev_ts = None
        for i, (timestamp, relative) in enumerate(entries.tolist()):
            offset = base + relative
            if not verify_only:
                self.emit("timeindex_entry", f"timestamp: {timestamp} offset: {offset}", file=str(path),
                          timestamp=timestamp, offset=offset)
            if prev_ts is not None and timestamp < prev_ts:
                self.problem(path, i * 12, f"entry {i} timestamp {timestamp} is below the previous {prev_ts}")
            prev_ts = timestamp
            if by_last is not None:
                found = by_last.get(offset)
                if found is None or found[1] != timestamp:
                    self.problem(path, i * 12, f"entry {i} ({timestamp} @ {offset}) does not match a batch "
                                               "of the log ending at that offset with that max timestamp")

    def _sanity(self, index: Any, path: Path) -> None:
        try:
            index.sanity_check()
            self.emit("sanity", f"{path} passed sanity check.", file=str(path), ok=True)
        except KafkaliteError as exc:
            self.problem(path, None, f"sanity check failed: {exc}")

    def dump_txn_index(self, path: Path) -> None:
        from kafkalite.storage.txn_index import TransactionIndex

        index = TransactionIndex(_base_offset(path), path)
        try:
            for t in index.all_aborted():
                self.emit("aborted_txn", f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                                         f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}",
                          file=str(path), producerId=t.producer_id, firstOffset=t.first_offset,
                          lastOffset=t.last_offset, lastStableOffset=t.last_stable_offset)
        finally:
            index.close()

    def dump_snapshot(self, path: Path) -> None:
        from kafkalite.storage.producer_snapshot import read_snapshot

        for e in read_snapshot(path):
            fields = {k: getattr(e, k) for k in e.__dataclass_fields__}
            self.emit("producer_snapshot_entry", " ".join(f"{k}: {v}" for k, v in fields.items()),
                      file=str(path), **fields)


def _codec_name(b: RecordBatch) -> str:
    try:
        return b.compression.name.lower()
    except KafkaliteError:
        return f"unknown({b.attributes & 7})"


def _guarded_views(records: FileRecords, end: int, dumper: Dumper, path: Path) -> Iterator[tuple[int, int, memoryview]]:
    """Batches until the end or the first broken frame, which is reported and ends the scan."""
    position = 0
    try:
        for position, size, view in records.iter_views(0, end):
            if view[16] != 2 or size < 61:
                dumper.problem(path, position, f"batch of {size} bytes with magic {view[16]} is not a v2 batch; "
                                               "stopping (only the v2 format is read)")
                return
            yield position, size, view
            position += size
    except KafkaliteError as exc:
        dumper.problem(path, position, str(exc))


def _guarded_headers(records: FileRecords, dumper: Dumper, path: Path) -> Iterator[BatchHeader]:
    try:
        yield from records.batch_headers(0)
    except KafkaliteError as exc:
        dumper.problem(path, None, str(exc))


def _base_offset(path: Path) -> int:
    try:
        return names.offset_from_file_name(path.name)
    except ValueError:
        return 0


def run(args: Any, out: TextIO = sys.stdout) -> int:
    files = [Path(f) for f in args.files]
    for extra in args.files_opt or []:
        files += [Path(f) for f in extra.split(",") if f]
    if not files:
        print("dump-log: no files given", file=sys.stderr)
        return 2
    dumper = Dumper(out, deep=args.deep_iteration, print_data=args.print_data_log, as_json=args.json,
                    max_bytes=args.max_bytes)
    for f in files:
        dumper.dump(f, verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check)
    return 1 if dumper.problems else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dump-log", help="print the batches, records and index entries of log files",
                       description="Dump .log, .index, .timeindex, .txnindex and .snapshot files "
                                   "(like kafka-dump-log.sh). Exit status 1 if anything is corrupt.")
    p.add_argument("files", nargs="*", help="files to dump")
    p.add_argument("--files", dest="files_opt", action="append", help="comma-separated files (Kafka's form)")
    p.add_argument("--deep-iteration", action="store_true", help="decode every record")
    p.add_argument("--print-data-log", action="store_true", help="print keys, payloads and headers (implies deep)")
    p.add_argument("--verify-index-only", action="store_true", help="check index entries against the log, "
                                                                     "print only mismatches")
    p.add_argument("--index-sanity-check", action="store_true", help="only run the index sanity check")
    p.add_argument("--max-bytes", type=int, default=None, help="stop reading a .log after this many bytes")
    p.add_argument("--json", action="store_true", help="one JSON object per line, for machines. " + JSON_BYTES_HELP)
    p.set_defaults(func=run)
