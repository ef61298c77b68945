"""The truncate transform's arithmetic on integers and decimals, exact at every width.

``truncate[W]`` maps ``v`` to ``v - (v % W)`` with ``%`` truncating toward zero, as SQL does;
these kernels do it on Arrow arrays (and Decimal scalars) without overflowing.
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa

from partitioning.spec import murmur3 as m3


def truncate_int(arr: pa.Array, width: int) -> pa.Array:
    """``v - (v % W)`` with ``%`` truncating toward zero, exact for every int width."""
    t = arr.type
    np_type = np.dtype(t.to_pandas_dtype())
    values = m3._numpy_values(arr, np_type)
    info = np.iinfo(np_type)
    if width > info.max:
        # Every |v| < W gives 0; only v == MIN with W == |MIN| is a multiple of W.
        out = np.where(values == info.min, values, 0) if width == -int(info.min) else np.zeros_like(values)
        out = out.astype(np_type)
    else:
        out = values - np.fmod(values, np_type.type(width))
    mask = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    return pa.array(out, type=t, mask=mask)


def truncate_decimal(arr: pa.Array, width: int) -> pa.Array:
    t = arr.type
    unit = width * 10**t.scale
    if isinstance(t, pa.Decimal128Type) and t.precision <= 18:
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + len(arr)))
        unscaled = words[2 * arr.offset :: 2]
        if unit > np.iinfo(np.int64).max:
            out = np.zeros_like(unscaled)
        else:
            out = unscaled - np.fmod(unscaled, np.int64(unit))
        hi = np.where(out < 0, np.int64(-1), np.int64(0))
        buf = np.empty(2 * len(out), dtype=np.int64)
        buf[0::2] = out
        buf[1::2] = hi
        validity = None
        if arr.null_count:
            validity = pa.array(arr.is_valid().to_numpy(zero_copy_only=False)).buffers()[1]
        return pa.Array.from_buffers(t, len(arr), [validity, pa.py_buffer(buf)], null_count=arr.null_count)
    return pa.array([truncate_scalar_decimal(v, width) for v in arr.to_pylist()], type=t)


def truncate_scalar_decimal(v: decimal.Decimal | None, width: int) -> decimal.Decimal | None:
    if v is None:
        return None
    w = decimal.Decimal(width)
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        return v - (v % w)  # Decimal % truncates toward zero, as SQL does
