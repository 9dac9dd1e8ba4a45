"""Framing a chunk of a segment into batches and decoding their records in bulk.

Both cleaner passes (building the key map, then filtering) read a segment chunk by chunk. A chunk
holds whole batches (a partial trailing batch is left for the next chunk, as Kafka's readInto
does). Headers are parsed per batch in Python (cheap: tens of bytes of work per kilobytes of data);
records are decoded for all batches of the chunk at once by `vector.decode_records`, the
uncompressed ones in place and the compressed ones after decompressing them into one side buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafkalite.cleaner.vector import FRONT_PAD, PaddedBuffer, RecordArrays, decode_records, hash_keys
from kafkalite.errors import CorruptRecordError
from kafkalite.records.batch import (
    COMPRESSION_CODEC_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from kafkalite.records.compression import CompressionType, decompress

HEADER_SIZE_UP_TO_MAGIC = 17
MIN_BATCH_LENGTH = 14


@dataclass(slots=True)
class Batch:
    """One framed batch of a chunk: where it is and its header fields."""

    pos: int  # absolute position in the chunk's raw buffer
    size: int
    base_offset: int
    epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def frame(buf: PaddedBuffer) -> tuple[list[Batch], int]:
    """The complete batches at the start of `buf` and the bytes they span.

    Like Kafka's batch iteration over a read buffer: a batch running past the buffer ends the list
    quietly (the caller reads on from there), a length below the 14-byte minimum is corruption.
    """
    raw = buf.raw
    n = buf.n
    out: list[Batch] = []
    append = out.append
    pos = 0
    unpack = HEADER.unpack_from
    end = FRONT_PAD + n
    at = FRONT_PAD
    while end - at >= HEADER_SIZE_UP_TO_MAGIC:
        if end - at < RECORD_BATCH_OVERHEAD:
            if int.from_bytes(raw[at + 8 : at + 12], "big", signed=True) < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"record size below the minimum 14 at byte {at - FRONT_PAD}")
            break
        (base, length, epoch, magic, _crc, attrs, lod, bts, max_ts, pid, pe, bseq, count) = unpack(raw, at)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record size {length} at byte {at - FRONT_PAD} is smaller than the minimum 14")
        size = length + LOG_OVERHEAD
        if at + size > end:
            break
        if size < RECORD_BATCH_OVERHEAD or magic != MAGIC_V2:
            raise CorruptRecordError(f"unsupported batch at byte {at - FRONT_PAD}: magic {magic}, size {size} "
                                     "(only the v2 record format is cleaned)")
        append(Batch(at, size, base, epoch, attrs, lod, bts, max_ts, pid, pe, bseq, count))
        at += size
    pos = at - FRONT_PAD
    return out, pos


@dataclass(slots=True)
class Decoded:
    """Records of a set of batches, decoded from one buffer, with their absolute offsets and times."""

    buf: PaddedBuffer
    batches: list[int]  # indices into the chunk's batch list, in order
    records: RecordArrays
    offsets: np.ndarray
    timestamps: np.ndarray

    def key_hashes(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = self.records
        return hash_keys(self.buf, r.key_start[sel], r.key_len[sel])


def decode(buf: PaddedBuffer, batches: list[Batch], chosen: list[int], values: bool = True) -> list[Decoded]:
    """Decode the records of the chosen batches: one group for uncompressed batches, read in place,
    and one for compressed batches, decompressed into a side buffer."""
    plain = [i for i in chosen if not batches[i].attributes & COMPRESSION_CODEC_MASK]
    packed = [i for i in chosen if batches[i].attributes & COMPRESSION_CODEC_MASK]
    groups = []
    if plain:
        sel = [batches[i] for i in plain]
        starts = np.fromiter((b.pos + RECORD_BATCH_OVERHEAD for b in sel), dtype=np.int64, count=len(sel))
        ends = np.fromiter((b.pos + b.size for b in sel), dtype=np.int64, count=len(sel))
        groups.append(_decoded(buf, sel, plain, starts, ends, values))
    if packed:
        sel = [batches[i] for i in packed]
        raw = memoryview(buf.raw)
        payloads = [decompress(CompressionType.from_id(b.attributes & COMPRESSION_CODEC_MASK),
                               raw[b.pos + RECORD_BATCH_OVERHEAD : b.pos + b.size]) for b in sel]
        side = PaddedBuffer.of(b"".join(payloads))
        lengths = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(lengths) + FRONT_PAD
        groups.append(_decoded(side, sel, packed, ends - lengths, ends, values))
    return groups


def _decoded(buf: PaddedBuffer, sel: list[Batch], chosen: list[int], starts: np.ndarray,
             ends: np.ndarray, values: bool) -> Decoded:
    counts = np.fromiter((b.count for b in sel), dtype=np.int64, count=len(sel))
    records = decode_records(buf, starts, ends, counts, values)
    base = np.fromiter((b.base_offset for b in sel), dtype=np.int64, count=len(sel))
    offsets = base[records.batch] + records.offset_delta
    if not values:
        return Decoded(buf, chosen, records, offsets, offsets)
    base_ts = np.fromiter((b.max_timestamp if b.attributes & TIMESTAMP_TYPE_MASK else b.base_timestamp
                           for b in sel), dtype=np.int64, count=len(sel))
    log_append = np.fromiter((bool(b.attributes & TIMESTAMP_TYPE_MASK) for b in sel), dtype=bool, count=len(sel))
    timestamps = base_ts[records.batch] + np.where(log_append[records.batch], 0, records.ts_delta)
    return Decoded(buf, chosen, records, offsets, timestamps)
