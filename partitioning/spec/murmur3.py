"""Vectorized murmur3 x86_32 (seed 0) over Arrow arrays, with SPEC-NOTES 7 byte rules.

Which bytes each Arrow type hashes is decided in one place, :func:`unhashable_reason`:
a type is hashed only where SPEC-NOTES 7 and the Lance Rust extension (arrow-rs) agree
on its bytes; the others are refused when a spec is created.

The hash works on whole columns with numpy ``uint32`` arithmetic (which wraps, as
murmur3 needs): fixed-width values are hashed as one or two 4-byte blocks, and
variable-length values are hashed block by block across all rows at once, rows
sorted by length so that each round touches only the rows that still have blocks.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partitioning.errors import SpecError

if sys.byteorder != "little":  # pragma: no cover - x86/arm64 only
    raise ImportError("partitioning.spec.murmur3 assumes a little-endian machine")

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_TAIL_MASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)

__all__ = [
    "HASHABLE_TYPES",
    "bucket",
    "decimal_display",
    "format_time_of_day",
    "hash_bytes",
    "murmur3",
    "murmur3_multi",
    "murmur3_scalar",
    "time_display",
    "to_hash_bytes",
    "unhashable_reason",
]

HASHABLE_TYPES = (
    "int8..int64, uint8..uint64, float32, float64, decimal (scale >= 0), utf8, large_utf8, utf8_view, "
    "dictionary of strings, binary, large_binary, boolean, date32, date64, timestamp, time32, time64"
)
_NANOS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_NANOS_PER_DAY = 86_400 * 1_000_000_000


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def unhashable_reason(t: pa.DataType) -> str | None:
    """Why values of Arrow type ``t`` cannot be hashed, or None when their bytes are fixed.

    Hashed (SPEC-NOTES 7, as the Lance Rust extension ``scalar_to_bytes`` does):

    - ints, float32, float64, date32, date64, timestamps: native width, little-endian;
    - utf8, large_utf8, utf8_view and dictionaries of them: the UTF-8 bytes (the
      extension hashes a view or dictionary by its display string, which is the string);
    - binary, large_binary: the raw bytes;
    - boolean, decimal with scale >= 0, time32, time64: the UTF-8 of arrow-rs's display
      string (``"true"``, ``"1.50"``, ``"10:30:00.500"``), as DataFusion's
      ``CAST(x AS VARCHAR)`` prints it.

    Refused, because the two rules disagree and neither is clearly the spec's:

    - float16: SPEC-NOTES 7 hashes floats by their native bytes, but the extension has
      no float16 case and hashes arrow-rs's display string (``"0.099975586"``);
    - fixed_size_binary, binary_view: "binary hashes its raw bytes" against the
      extension's display string of them (hex);
    - dictionaries of non-strings: a dictionary is an encoding of its values (native
      bytes), but the extension hashes the display string (``"5"``, not 4 bytes);
    - decimals with a negative scale: arrow-rs prints the unscaled digits padded with
      zeros (``"000"`` for 0 at scale -2), other Arrow libraries print ``"0E+2"``.

    Every other type (null, nested, duration, interval, ...) has no rule.
    """
    if pa.types.is_float16(t):
        return "refused: SPEC-NOTES 7 hashes floats by their native bytes, the Lance extension by display string"
    if pa.types.is_fixed_size_binary(t) or pa.types.is_binary_view(t):
        return "refused: SPEC-NOTES 7 hashes binary as raw bytes, the Lance extension this type's display string"
    if pa.types.is_dictionary(t):
        if _is_text(t.value_type):
            return None
        return "refused: only dictionaries of strings hash as their values, the Lance extension hashes display strings"
    if pa.types.is_decimal(t) and t.scale < 0:
        return "refused: decimals with a negative scale have no agreed display string"
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
        or _is_text(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return None
    return "no hash rule for this type"


def _check_hashable(t: pa.DataType) -> None:
    if pa.types.is_null(t):
        return
    reason = unhashable_reason(t)
    if reason is not None:
        raise SpecError(f"murmur3: values of type {t} cannot be hashed ({reason}); hashable types: {HASHABLE_TYPES}")


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k(k: np.ndarray) -> np.ndarray:
    k = k * _C1
    k = _rotl(k, 15)
    return k * _C2


def _mix_h(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    h = h ^ _mix_k(k)
    h = _rotl(h, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length, dtype=np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _hash_fixed(raw: np.ndarray) -> np.ndarray:
    """Hash each element of a 1/2/4/8-byte numpy array by its little-endian bytes."""
    width = raw.dtype.itemsize
    n = raw.shape[0]
    h = np.zeros(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        if width in (1, 2):
            tail = raw.view(np.uint8 if width == 1 else np.uint16).astype(np.uint32)
            h = h ^ _mix_k(tail)
        elif width == 4:
            h = _mix_h(h, raw.view(np.uint32))
        elif width == 8:
            words = raw.view(np.uint32).reshape(n, 2)
            h = _mix_h(h, words[:, 0])
            h = _mix_h(h, words[:, 1])
        else:  # pragma: no cover - callers only pass the widths above
            raise ValueError(f"unsupported width {width}")
        return _fmix(h, width)


def _hash_var(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Hash variable-length values given Arrow-style offsets and a byte buffer."""
    n = offsets.shape[0] - 1
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    padded = np.zeros(data.shape[0] + 4, dtype=np.uint8)
    padded[: data.shape[0]] = data
    # A uint32 view starting at every byte offset, so unaligned 4-byte words gather in one step.
    words = np.ndarray(shape=(padded.shape[0] - 3,), dtype="<u4", buffer=padded, strides=(1,))
    nblocks = lengths // 4
    h = np.zeros(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        max_blocks = int(nblocks.max()) if n else 0
        if max_blocks:
            order = np.argsort(-nblocks, kind="stable")
            sorted_blocks = nblocks[order]
            # active[k] = number of rows with more than k blocks
            active = np.searchsorted(-sorted_blocks, -np.arange(max_blocks), side="left")
            for k in range(max_blocks):
                rows = order[: active[k]]
                h[rows] = _mix_h(h[rows], words[starts[rows] + 4 * k])
        tail = (lengths % 4).astype(np.intp)
        tail_words = words[starts + 4 * nblocks] & _TAIL_MASK[tail] if n else h
        h = h ^ _mix_k(tail_words)
        return _fmix(h, lengths.astype(np.uint32))


def _numpy_values(arr: pa.Array, dtype: np.dtype) -> np.ndarray:
    """The raw values buffer of a fixed-width array as numpy (nulls hold garbage)."""
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr))[arr.offset :]


def _fixed_dtype(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_date32(t):
        return np.dtype(np.int32)
    if pa.types.is_date64(t) or pa.types.is_timestamp(t):
        return np.dtype(np.int64)
    return None


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (relative to the array's slice) and data bytes of a (large) binary array."""
    t = arr.type
    off_dtype = np.int64 if (pa.types.is_large_binary(t) or pa.types.is_large_string(t)) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=arr.offset + len(arr) + 1)[arr.offset :]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _as_bytes_array(arr: pa.Array) -> pa.Array:
    """Binary view of variable-length values, per SPEC-NOTES 7 (display string otherwise)."""
    t = arr.type
    _check_hashable(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.view(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    if pa.types.is_string_view(t):
        return arr.cast(pa.large_string()).view(pa.large_binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return arr
    if pa.types.is_dictionary(t):
        return _as_bytes_array(_decode(arr))
    if pa.types.is_decimal(t):
        return decimal_display(arr).view(pa.binary())
    if pa.types.is_time(t):
        return time_display(arr).view(pa.binary())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, b"true", b"false")
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.binary())
    raise SpecError(f"murmur3: values of type {t} cannot be hashed; hashable types: {HASHABLE_TYPES}")


def _decode(arr: pa.DictionaryArray) -> pa.Array:
    """The values of a dictionary array (string views are taken as large strings; Arrow cannot take views)."""
    if pa.types.is_string_view(arr.type.value_type):
        arr = pa.DictionaryArray.from_arrays(arr.indices, arr.dictionary.cast(pa.large_string()))
    return arr.dictionary_decode()


def format_time_of_day(nanos: int) -> str:
    """arrow-rs's display of a time of day (chrono): ``HH:MM:SS`` plus 3, 6 or 9 fraction digits.

    The fraction is omitted when zero and otherwise printed with the fewest of 3, 6 or
    9 digits that hold it exactly, whatever the column's unit (``10:30:00.500``).
    """
    if not 0 <= nanos < _NANOS_PER_DAY:
        raise SpecError(f"murmur3: time of day {nanos} ns is outside 00:00:00-23:59:59.999999999")
    seconds, frac = divmod(nanos, 1_000_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if frac == 0:
        return text
    if frac % 1_000_000 == 0:
        return f"{text}.{frac // 1_000_000:03d}"
    if frac % 1_000 == 0:
        return f"{text}.{frac // 1_000:06d}"
    return f"{text}.{frac:09d}"


def time_display(arr: pa.Array) -> pa.Array:
    """time32/time64 values as arrow-rs display strings (see :func:`format_time_of_day`)."""
    t = arr.type
    raw = pc.fill_null(arr.view(pa.int32() if t.bit_width == 32 else pa.int64()), 0).to_numpy()
    nanos = raw.astype(np.int64) * _NANOS_PER_UNIT[t.unit]
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(
        [format_time_of_day(int(n)) if ok else None for n, ok in zip(nanos, valid, strict=True)], pa.string()
    )


def decimal_display(arr: pa.Array) -> pa.Array:
    """Decimals as plain strings with exactly ``scale`` fraction digits (``"1.50"``, ``"0.0000001"``).

    This is arrow-rs's display form, which the spec's DataFusion ``murmur3`` hashes;
    pyarrow's own cast switches to scientific notation for small values.
    """
    t = arr.type
    if isinstance(t, pa.Decimal128Type) and t.precision <= 18 and t.scale >= 0:
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + len(arr)))
        unscaled = words[2 * arr.offset :: 2]
        magnitude = np.abs(unscaled)
        unit = 10**t.scale
        integer = pa.array(magnitude // unit).cast(pa.string())
        sign = pa.array(np.where(unscaled < 0, "-", ""))
        if t.scale:
            fraction = pc.utf8_lpad(pa.array(magnitude % unit).cast(pa.string()), t.scale, "0")
            text = pc.binary_join_element_wise(sign, integer, ".", fraction, "")
        else:
            text = pc.binary_join_element_wise(sign, integer, "")
        if arr.null_count:
            text = pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.string()))
        return text
    values = [None if v is None else format(v, "f") for v in arr.to_pylist()]
    return pa.array(values, type=pa.string())


def to_hash_bytes(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The exact bytes murmur3 hashes for each value (nulls stay null), as a binary array."""
    arr = _combine(arr)
    _check_hashable(arr.type)
    dtype = _fixed_dtype(arr.type)
    if dtype is None:
        return _as_bytes_array(arr)
    raw = np.ascontiguousarray(_numpy_values(arr, dtype))
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(dtype.itemsize), len(arr), [None, pa.py_buffer(raw)])
    out = fixed.cast(pa.binary())
    if arr.null_count:
        out = pc.if_else(arr.is_valid(), out, pa.scalar(None, pa.binary()))
    return out


def _combine(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def hash_bytes(arr: pa.Array) -> np.ndarray:
    """murmur3 of every value of a binary/string array, ignoring validity, as uint32."""
    offsets, data = _binary_parts(arr)
    return _hash_var(offsets, data)


def _with_validity(hashes: np.ndarray, arr: pa.Array) -> pa.Array:
    mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    return pa.array(hashes.view(np.int32), type=pa.int32(), mask=mask)


def murmur3(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Signed int32 murmur3 of each value; NULL maps to NULL."""
    arr = _combine(arr)
    _check_hashable(arr.type)
    if pa.types.is_dictionary(arr.type):
        arr = _decode(arr)
    dtype = _fixed_dtype(arr.type)
    if dtype is not None:
        hashes = _hash_fixed(_numpy_values(arr, dtype))
    else:
        hashes = hash_bytes(_as_bytes_array(arr))
    return _with_validity(hashes, arr)


def murmur3_multi(*arrays: pa.Array | pa.ChunkedArray) -> pa.Array:
    """murmur3 over the concatenated bytes of the non-null arguments of each row.

    Returns NULL only where every argument is NULL.
    """
    if not arrays:
        raise SpecError("murmur3_multi needs at least one column")
    parts = [to_hash_bytes(a).cast(pa.large_binary()) for a in arrays]
    if len(parts) == 1:
        joined = pc.fill_null(parts[0], b"")
    else:
        joined = pc.binary_join_element_wise(
            *parts, pa.scalar(b"", pa.large_binary()), null_handling="replace", null_replacement=b""
        )
    all_null = parts[0].is_null()
    for p in parts[1:]:
        all_null = pc.and_(all_null, p.is_null())
    hashes = hash_bytes(_combine(joined))
    mask = all_null.to_numpy(zero_copy_only=False)
    return pa.array(hashes.view(np.int32), type=pa.int32(), mask=mask if mask.any() else None)


def bucket(hashes: pa.Array, num_buckets: int) -> pa.Array:
    """``abs(h) % N`` computed in 64 bits, as int32 in ``[0, N)``; NULL stays NULL."""
    if num_buckets < 1:
        raise SpecError(f"num_buckets must be >= 1, got {num_buckets}")
    h = _numpy_values(hashes, np.dtype(np.int32)).astype(np.int64)
    out = (np.abs(h) % num_buckets).astype(np.int32)
    mask = hashes.is_null().to_numpy(zero_copy_only=False) if hashes.null_count else None
    return pa.array(out, type=pa.int32(), mask=mask)


def murmur3_scalar(data: bytes) -> int:
    """Reference scalar murmur3 of raw bytes (signed int32), used to cross-check the vector form."""
    import mmh3

    return int(mmh3.hash(data, 0, signed=True))
