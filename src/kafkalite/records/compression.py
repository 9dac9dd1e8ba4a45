"""Batch payload codecs (attributes bits 0-2), through cramjam.

What is written is what Kafka's Java producer writes, so any Kafka reader accepts it:
gzip streams, xerial-framed snappy, LZ4 frames with independent 64 KiB blocks (Kafka's
Lz4BlockInputStream decompresses every block on its own, so linked blocks would break it),
and zstd frames. Readers accept more: raw snappy as librdkafka writes it, any valid LZ4 frame.
"""

from __future__ import annotations

import enum
import struct

import cramjam

from kafkalite.errors import CorruptRecordError, UnsupportedCompressionTypeError


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec_id}") from None

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        key = name.strip().upper()
        if key in ("UNCOMPRESSED", "NONE"):
            return cls.NONE
        try:
            return cls[key]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


# xerial snappy-java stream framing: magic, version 1, compatible version 1, then length-prefixed
# raw snappy blocks of at most 32 KiB input each (SnappyOutputStream's default block size).
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        if bytes(view[pos : pos + 8]) == XERIAL_MAGIC:  # a (possibly concatenated) stream header
            if end - pos < 16:
                raise CorruptRecordError("truncated xerial snappy header")
            pos += 16
            continue
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(out)


def _lz4_compress(data: bytes | memoryview) -> bytes:
    compressor = cramjam.lz4.Compressor(block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def compress(codec: CompressionType, data: bytes | memoryview) -> bytes:
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CompressionType.SNAPPY:
        return _snappy_xerial_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data)
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


def decompress(codec: CompressionType, data: bytes | memoryview) -> bytes:
    """Decompress a batch payload; any codec failure is a CorruptRecordError (CORRUPT_MESSAGE)."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError, or ValueError on bad frames
        raise CorruptRecordError(f"failed to decompress {codec.name.lower()} payload: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")
