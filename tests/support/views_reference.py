#!/usr/bin/python3
"""Reference implementation of tensorfs' virtual views, in numpy.

Independent of the C++ code: everything here follows the published algorithms
of bitsandbytes (csrc/kernels.cu, bitsandbytes/functional.py), the layout that
AirLLM writes and reads (airllm/utils.py, persist/safetensor_model_persister.py)
and the safetensors file format, as the views (core/views/views.h, docs/VIEWS.md) pin them down.

Contents
  - safetensors: parse_header / parse_file / serialize_header / serialize_file
  - dtype helpers: F32 <-> BF16 / F16 (round to nearest even), decode to F32
  - NF4: NF4_TABLE, nf4_codes (bnb dQuantizeNF4 decision tree), quantize_nf4,
    dequantize_nf4, nf4_quant_state_json
  - 8-bit blockwise: create_dynamic_map (as torch computes it in float32),
    dquantize8 (bnb dQuantize<0>), quantize_blockwise, dequantize_blockwise
  - LLM.int8 row-wise: int8_rowwise
  - views: Source (a local checkpoint directory), build_view (the expected
    files of one view), layer grouping; stacked_tensors (@stacked: the layer
    families stacked with numpy.stack)
  - AirLLM emulation: airllm_layers, airllm_already_split,
    airllm_uncompress_layer

All float arithmetic that the format defines in float32 is done in float32.
BF16 has no numpy dtype: BF16 data is handled as uint16 bit patterns.
"""
import json
import math
import os
import re
import struct
from collections import OrderedDict

import numpy as np

# ----------------------------------------------------------------------------
# dtypes
# ----------------------------------------------------------------------------

DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
FLOAT_DTYPES = ("F32", "F16", "BF16")
TORCH_DTYPE_NAME = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
# numpy dtypes used to show values in messages (BF16 shown via decode)
NUMPY_DTYPE = {
    "BOOL": np.uint8, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
    "U16": np.uint16, "F16": np.float16, "BF16": np.uint16, "I32": np.int32,
    "U32": np.uint32, "F32": np.float32, "I64": np.int64, "U64": np.uint64,
    "F64": np.float64,
}


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def decode_f32(raw, dtype):
    """Raw little-endian bytes (uint8 array or bytes) of F32/F16/BF16 -> float32
    array (exact)."""
    raw = np.frombuffer(bytes(raw), dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
    raw = np.ascontiguousarray(raw)
    if dtype == "F32":
        return raw.view("<f4").astype(np.float32)
    if dtype == "F16":
        return raw.view("<f2").astype(np.float32)
    if dtype == "BF16":
        bits = raw.view("<u2").astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32)
    raise ValueError("not a float dtype: %s" % dtype)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 BF16 bit patterns, round to nearest even.
    Overflow rounds to +-inf, subnormals round like everything else.
    NaN -> quiet NaN, sign and top payload bits kept ((bits >> 16) | 0x40)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    lsb = (b >> np.uint64(16)) & np.uint64(1)
    r = ((b + np.uint64(0x7FFF) + lsb) >> np.uint64(16)).astype(np.uint16)
    nan = (b & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    if nan.any():
        r[nan] = ((b[nan] >> np.uint64(16)) | np.uint64(0x0040)).astype(np.uint16)
    return r


def f32_to_f16_bits(x):
    """float32 array -> uint16 F16 bit patterns, round to nearest even
    (numpy's conversion: RNE, overflow -> +-inf, RNE into subnormals).
    NaN -> quiet NaN, sign and top payload bits kept (sign|0x7E00|m>>13)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float16).view(np.uint16).copy()
    b = x.view(np.uint32)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        bn = b[nan]
        r[nan] = (((bn >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7E00)
                  | ((bn >> np.uint32(13)) & np.uint32(0x03FF))).astype(np.uint16)
    return r


def f32_to_dtype_bytes(x, dtype):
    """float32 array -> raw bytes (uint8 array) of dtype F32/F16/BF16."""
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype="<f4").view(np.uint8)
    if dtype == "F16":
        return f32_to_f16_bits(x).astype("<u2").view(np.uint8)
    if dtype == "BF16":
        return f32_to_bf16_bits(x).astype("<u2").view(np.uint8)
    raise ValueError(dtype)


def describe_element(raw, dtype):
    """Short text for one element's raw bytes: hex bits and value."""
    raw = bytes(raw)
    hexbits = raw[::-1].hex()
    try:
        if dtype in FLOAT_DTYPES:
            v = float(decode_f32(np.frombuffer(raw, np.uint8), dtype)[0])
            return "0x%s (%r)" % (hexbits, v)
        if dtype in NUMPY_DTYPE:
            v = np.frombuffer(raw, dtype=np.dtype(NUMPY_DTYPE[dtype]).newbyteorder("<"))[0]
            return "0x%s (%s)" % (hexbits, v)
    except Exception:
        pass
    return "0x%s" % hexbits


# ----------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------

class SafetensorsError(Exception):
    pass


def parse_header(blob, strict=False):
    """Parse the header of a safetensors file.

    blob: bytes-like holding at least the first 8+N bytes (and the whole file
    when the offsets are to be checked against the file length: pass
    file_len via parse_file).
    Returns (header_len N, metadata or None, OrderedDict name -> dict(dtype,
    shape, data_offsets)) in the header's own key order.
    strict: also enforce the view rules (8+N multiple of 8, padding is spaces
    only, "__metadata__" first and == {"format": "pt"}).
    """
    if len(blob) < 8:
        raise SafetensorsError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", bytes(blob[:8]))
    if 8 + n > len(blob):
        raise SafetensorsError("header length %d runs past the end (%d bytes)" % (n, len(blob)))
    text = bytes(blob[8:8 + n])
    if strict:
        if (8 + n) % 8 != 0:
            raise SafetensorsError("8+N = %d is not a multiple of 8" % (8 + n))
        stripped = text.rstrip(b" ")
        if not stripped.endswith(b"}"):
            raise SafetensorsError("header JSON not followed by space padding only")
        if len(text) - len(stripped) >= 8:
            raise SafetensorsError("header padded with %d spaces (more than needed)" % (len(text) - len(stripped)))
    try:
        obj = json.loads(text.decode("utf-8"), object_pairs_hook=OrderedDict)
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("header is not valid JSON: %s" % e)
    if not isinstance(obj, dict):
        raise SafetensorsError("header is not a JSON object")
    meta = obj.pop("__metadata__", None)
    if strict:
        keys = list(json.loads(text.decode("utf-8"), object_pairs_hook=OrderedDict).keys())
        if not keys or keys[0] != "__metadata__":
            raise SafetensorsError('"__metadata__" is not the first key')
        if meta != {"format": "pt"}:
            raise SafetensorsError('"__metadata__" is %r, not {"format": "pt"}' % (meta,))
    tensors = OrderedDict()
    for name, info in obj.items():
        if not isinstance(info, dict) or set(info.keys()) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError("tensor %r: bad entry %r" % (name, info))
        tensors[name] = info
    return n, meta, tensors


def check_tiling(tensors, data_len, strict_order=True):
    """Check that the tensors' data_offsets tile [0, data_len) exactly and that
    each tensor's byte length matches dtype and shape. strict_order: the
    tensors must be contiguous in header order (the view rule); otherwise any
    order that tiles is accepted. Returns a list of problems (empty if none)."""
    problems = []
    spans = []
    for name, info in tensors.items():
        b, e = info["data_offsets"]
        dt = info["dtype"]
        if dt not in DTYPE_SIZES:
            problems.append("tensor %r: unknown dtype %r" % (name, dt))
            continue
        want = numel(info["shape"]) * DTYPE_SIZES[dt]
        if e - b != want:
            problems.append("tensor %r: data_offsets [%d,%d] hold %d bytes, dtype/shape need %d"
                            % (name, b, e, e - b, want))
        spans.append((b, e, name))
    if not strict_order:
        spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            problems.append("tensor %r starts at %d, expected %d (offsets must tile the data)" % (name, b, pos))
        pos = max(pos, e)
    if pos != data_len:
        problems.append("tensors end at %d but the data section is %d bytes" % (pos, data_len))
    return problems


def tensor_header_entry(name, dtype, shape, begin, end):
    return "%s:{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%d,%d]}" % (
        json.dumps(name, ensure_ascii=False), dtype, ",".join(str(int(d)) for d in shape), begin, end)


def serialize_header(entries):
    """entries: list of (name, dtype, shape, nbytes) in file order.
    Returns the 8+N header bytes of the views' compact serialization:
    {"__metadata__":{"format":"pt"},"name":{...},...} padded with spaces so
    that 8+N is a multiple of 8."""
    parts = ['{"__metadata__":{"format":"pt"}']
    pos = 0
    for name, dtype, shape, nbytes in entries:
        parts.append("," + tensor_header_entry(name, dtype, shape, pos, pos + nbytes))
        pos += nbytes
    text = ("".join(parts) + "}").encode("utf-8")
    pad = (-(8 + len(text))) % 8
    text += b" " * pad
    return struct.pack("<Q", len(text)) + text


def serialize_file(tensors):
    """tensors: list of (name, dtype, shape, raw bytes-like). Returns bytes."""
    entries = []
    datas = []
    for name, dtype, shape, raw in tensors:
        raw = bytes(raw)
        if len(raw) != numel(shape) * DTYPE_SIZES[dtype]:
            raise ValueError("tensor %r: %d bytes for %s %r" % (name, len(raw), dtype, shape))
        entries.append((name, dtype, shape, len(raw)))
        datas.append(raw)
    return serialize_header(entries) + b"".join(datas)


def parse_file(path):
    """Parse a safetensors file on disk (lenient: any valid safetensors file).
    Returns (data_start, metadata, OrderedDict name -> info)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError("%s: shorter than 8 bytes" % path)
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise SafetensorsError("%s: header length %d past end of file" % (path, n))
        text = f.read(n)
    _, meta, tensors = parse_header(head + text)
    probs = check_tiling(tensors, size - 8 - n, strict_order=False)
    if probs:
        raise SafetensorsError("%s: %s" % (path, "; ".join(probs)))
    return 8 + n, meta, tensors


# ----------------------------------------------------------------------------
# NF4 (bitsandbytes get_4bit_type("nf4"), dQuantizeNF4, kQuantizeBlockwise)
# ----------------------------------------------------------------------------

NF4_TABLE = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)

# Split constants of bnb's dQuantizeNF4 tree, written in csrc/kernels.cu as
# float literals ('f' suffix): the compiler rounds the decimal straight to the
# nearest float32. np.float32(0.8480964004993439) would round twice (decimal to
# double, then double to float32) and lands one ulp off for -0.8480964004993439,
# so the literals are rounded here from their exact decimal value.
def _float32_literal(text):
    from fractions import Fraction
    exact = Fraction(text)
    guess = np.float32(float(exact))
    candidates = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    def distance(c):
        return abs(Fraction(float(c)) - exact)
    best = min(distance(c) for c in candidates)
    ties = [c for c in candidates if distance(c) == best]
    # round half to even: the candidate whose last mantissa bit is 0
    ties.sort(key=lambda c: int(np.array(c, dtype=np.float32).view(np.uint32)) & 1)
    return np.float32(ties[0])


_F = _float32_literal
NF4_T = {
    "root": _F("0.03979014977812767"),
    "1": _F("0.3893125355243683"), "11": _F("0.6427869200706482"), "111": _F("0.8614784181118011"),
    "110": _F("0.5016634166240692"), "10": _F("0.2035212516784668"), "101": _F("0.2920137718319893"),
    "100": _F("0.1202552504837513"),
    "0": _F("-0.33967943489551544"), "01": _F("-0.13791173323988914"), "011": _F("-0.045525018125772476"),
    "010": _F("-0.23460740596055984"), "00": _F("-0.6106329262256622"), "001": _F("-0.4599952697753906"),
    "000": _F("-0.8480964004993439"),
}
NF4_BLOCKSIZE = 64
BLOCKWISE8_BLOCKSIZE = 2048


def nf4_codes_tree(y):
    """bnb dQuantizeNF4 on a float32 array: the literal decision tree with
    `y > t` comparisons (all false for NaN, so NaN -> 0). Returns uint8."""
    y = np.asarray(y, dtype=np.float32)
    t = NF4_T
    w = np.where
    with np.errstate(invalid="ignore"):
        right = w(y > t["1"],
                  w(y > t["11"], w(y > t["111"], 15, 14), w(y > t["110"], 13, 12)),
                  w(y > t["10"], w(y > t["101"], 11, 10), w(y > t["100"], 9, 8)))
        left = w(y > t["0"],
                 w(y > t["01"], w(y > t["011"], 7, 6), w(y > t["010"], 5, 4)),
                 w(y > t["00"], w(y > t["001"], 3, 2), w(y > t["000"], 1, 0)))
        return w(y > t["root"], right, left).astype(np.uint8)


NF4_SPLITS = np.array(sorted(NF4_T.values()), dtype=np.float32)


def nf4_codes(y):
    """Same result as nf4_codes_tree, faster: the tree is a balanced search
    over the 15 sorted split points, so its leaf is the number of split points
    t with y > t (searchsorted side='left'); NaN compares false everywhere and
    gets code 0."""
    y = np.asarray(y, dtype=np.float32)
    c = np.searchsorted(NF4_SPLITS, y, side="left").astype(np.uint8)
    c[np.isnan(y)] = 0
    return c


def _blockwise_scale(x32, blocksize):
    """Blocks of x (padded with 0.0 like the kernel's LoadT), block absmax
    (max |x| ignoring NaN, 0 for an all-NaN block), s = 1.0f/absmax and
    y = x*s, all float32. Returns (absmax[nb], y[nb, blocksize])."""
    x32 = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1)
    n = x32.size
    nb = -(-n // blocksize)
    blk = np.zeros(nb * blocksize, dtype=np.float32)
    blk[:n] = x32
    blk = blk.reshape(nb, blocksize)
    with np.errstate(invalid="ignore"):
        absmax = np.fmax.reduce(np.abs(blk), axis=1, initial=np.float32(0.0)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        s = (np.float32(1.0) / absmax).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        y = (blk * s[:, None]).astype(np.float32)
    return absmax, y


def quantize_nf4(x32):
    """bnb quantize_nf4(blocksize=64, no double quant) of a flat float32 array
    with n > 0 elements. Returns (packed uint8[(n+1)//2], absmax float32[nb]).
    Byte j = code(x[2j]) << 4 | code(x[2j+1]); for odd n the missing element is
    0.0 scaled by its block's s."""
    n = int(np.asarray(x32).size)
    absmax, y = _blockwise_scale(x32, NF4_BLOCKSIZE)
    codes = nf4_codes(y.reshape(-1))
    m = (n + 1) // 2
    packed = ((codes[0:2 * m:2] << 4) | codes[1:2 * m:2]).astype(np.uint8)
    return packed, absmax


def unpack_nf4(packed, n):
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2] = packed >> 4
    codes[1::2] = packed & 0x0F
    return codes[:n]


def dequantize_nf4(packed, absmax, n, blocksize=NF4_BLOCKSIZE, out_dtype="F32"):
    """bnb dequantize_4bit (NF4): out[i] = NF4[code_i] * absmax[i // blocksize]
    in float32 (the kernel's dDequantizeNF4 lookup, not quant_map), stored as
    out_dtype (F32/F16/BF16, RNE). Returns raw bytes (uint8 array)."""
    codes = unpack_nf4(packed, n)
    absmax = np.asarray(absmax, dtype=np.float32)
    idx = np.arange(n) // blocksize
    with np.errstate(invalid="ignore", over="ignore"):
        vals = (NF4_TABLE[codes] * absmax[idx]).astype(np.float32)
    return f32_to_dtype_bytes(vals, out_dtype)


def nf4_quant_state_json(dtype, shape):
    """The bytes of quant_state.bitsandbytes__nf4 (bnb pack_dict_to_tensor of
    QuantState.as_dict's non-tensor items): json.dumps with default separators."""
    return json.dumps({"quant_type": "nf4", "blocksize": NF4_BLOCKSIZE,
                       "dtype": TORCH_DTYPE_NAME[dtype],
                       "shape": [int(d) for d in shape]}).encode("utf-8")


# Largest distance from a value in [-1, 1] to its NF4 code, relative to absmax:
# half the widest gap of the table (between -1.0 and -0.6961928).
NF4_MAX_REL_ERROR = float((NF4_TABLE[1] - NF4_TABLE[0]) / 2)


# ----------------------------------------------------------------------------
# 8-bit blockwise (create_dynamic_map, dQuantize<0>)
# ----------------------------------------------------------------------------

def _torch_linspace_f32(start, end, steps):
    """torch.linspace(start, end, steps) on CPU in float32: step computed once
    in float32, first half counted up from start, second half down from end."""
    start = np.float32(start)
    end = np.float32(end)
    if steps == 1:
        return np.array([start], dtype=np.float32)
    step = np.float32(np.float32(end - start) / np.float32(steps - 1))
    half = steps // 2
    out = np.empty(steps, dtype=np.float32)
    for j in range(steps):
        if j < half:
            out[j] = np.float32(start + np.float32(step * np.float32(j)))
        else:
            out[j] = np.float32(end - np.float32(step * np.float32(steps - 1 - j)))
    return out


def create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bnb create_dynamic_map as torch evaluates it in float32. Returns the
    sorted float32[256] map."""
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    i = 0
    for i in range(max_exponent_bits):
        if signed:
            fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1)
        else:
            fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        b = _torch_linspace_f32(0.1, 1, fraction_items)
        means = ((b[:-1] + b[1:]).astype(np.float32) / np.float32(2.0)).astype(np.float32)
        scale = 10 ** (-(max_exponent_bits - 1) + i)
        data += (np.float32(scale) * means).astype(np.float32).tolist()
        if signed:
            data += (np.float32(-scale) * means).astype(np.float32).tolist()
    if additional_items > 0:
        b = _torch_linspace_f32(0.1, 1, additional_items + 1)
        means = ((b[:-1] + b[1:]).astype(np.float32) / np.float32(2.0)).astype(np.float32)
        scale = 10 ** (-(max_exponent_bits - 1) + i)
        data += (np.float32(scale) * means).astype(np.float32).tolist()
        if signed:
            data += (np.float32(-scale) * means).astype(np.float32).tolist()
    data.append(0)
    data.append(1.0)
    assert len(data) == 2 ** total_bits
    data += [0] * (256 - len(data))
    data.sort()
    return np.array(data, dtype=np.float32)


DYNAMIC_MAP = create_dynamic_map()


def dquantize8(y, code=DYNAMIC_MAP):
    """bnb dQuantize<0> (non-stochastic) on a float32 array: the 7-step binary
    search from pivot 127 (go right iff y > code[pivot], steps 64..1), then the
    midpoint rule: if y > code[p]: upper if y > (code[upper]+code[p])*0.5f else
    p; else: lower if y < (code[lower]+code[p])*0.5f else p. All comparisons
    with NaN are false: NaN goes left every step, ends at pivot 0 and gets 0.

    The kernel's upper_pivot/lower_pivot need no tracking: after the last step
    upper_pivot is always p+1 and lower_pivot is p-1 (0 when the search never
    went right, i.e. p == 0); its `upper`/`lower` floats are the code values
    there (1.0f/-1.0f start values are replaced by code[255]/code[0])."""
    y = np.asarray(y, dtype=np.float32)
    code = np.asarray(code, dtype=np.float32)
    pivot = np.full(y.shape, 127, dtype=np.int16)
    gt = np.empty(y.shape, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        for i in (64, 32, 16, 8, 4, 2, 1):
            np.greater(y, code.take(pivot), out=gt)
            pivot += gt.astype(np.int16) * np.int16(2 * i) - np.int16(i)
        val = code.take(pivot)
        upper_pivot = pivot + np.int16(1)
        lower_pivot = np.maximum(pivot - np.int16(1), np.int16(0)).astype(np.int16)
        half = np.float32(0.5)
        np.greater(y, val, out=gt)
        res = pivot.copy()
        mid_up = ((code.take(upper_pivot) + val) * half).astype(np.float32)
        up = gt & (y > mid_up)
        res[up] = upper_pivot[up]
        mid_lo = ((code.take(lower_pivot) + val) * half).astype(np.float32)
        lo = ~gt & (y < mid_lo)
        res[lo] = lower_pivot[lo]
    return res.astype(np.uint8)


def quantize_blockwise(x32, blocksize=BLOCKWISE8_BLOCKSIZE, code=DYNAMIC_MAP):
    """bnb quantize_blockwise (non-stochastic) of a flat float32 array with
    n > 0 elements. Returns (uint8[n], absmax float32[nb])."""
    n = int(np.asarray(x32).size)
    absmax, y = _blockwise_scale(x32, blocksize)
    q = dquantize8(y.reshape(-1)[:n], code)
    return q, absmax


def dequantize_blockwise(q, absmax, blocksize=BLOCKWISE8_BLOCKSIZE, code=DYNAMIC_MAP, out_dtype="F32"):
    """bnb dequantize_blockwise: code[q] * absmax[i // blocksize] in float32,
    stored as out_dtype. Returns raw bytes (uint8 array)."""
    q = np.asarray(q, dtype=np.uint8).reshape(-1)
    code = np.asarray(code, dtype=np.float32)
    absmax = np.asarray(absmax, dtype=np.float32)
    idx = np.arange(q.size) // blocksize
    with np.errstate(invalid="ignore", over="ignore"):
        vals = (code[q] * absmax[idx]).astype(np.float32)
    return f32_to_dtype_bytes(vals, out_dtype)


# ----------------------------------------------------------------------------
# LLM.int8 row-wise (SCB)
# ----------------------------------------------------------------------------

def int8_rowwise(x32, rows):
    """Row-wise absmax int8: r = max |x| per row ignoring NaN (0 if none),
    scale = 127.0f / r, q = RNE(x * scale) in float32, NaN -> 0, clamped to
    [-127, 127]. Returns (int8[rows, cols], SCB float32[rows])."""
    x = np.ascontiguousarray(x32, dtype=np.float32).reshape(rows, -1)
    with np.errstate(invalid="ignore"):
        r = np.fmax.reduce(np.abs(x), axis=1, initial=np.float32(0.0)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore"):
        scale = (np.float32(127.0) / r).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        p = (x * scale[:, None]).astype(np.float32)
        q = np.rint(p)
        q = np.where(np.isnan(q), np.float32(0), q)
        q = np.clip(q, -127, 127)
    return q.astype(np.int8), r


# ----------------------------------------------------------------------------
# Layer grouping
# ----------------------------------------------------------------------------

BLOCK_STACKS = ("layers", "layer", "h", "block", "blocks")
_DIGITS = re.compile(r"^[0-9]+$")


def block_prefix(name):
    """The leftmost '<stack>.<N>.' prefix of name (stack's last component in
    BLOCK_STACKS, N decimal, something after it), or None."""
    parts = name.split(".")
    for i in range(len(parts) - 2):
        if parts[i] in BLOCK_STACKS and _DIGITS.match(parts[i + 1]):
            return ".".join(parts[:i + 2]) + "."
    return None


# tensorfs -o layer_regex: a compiled pattern whose first group (or whole
# match) names the layer of the tensors it matches; None for the built-in rules.
LAYER_REGEX = None


def group_prefix(name):
    """tensorfs layer group of a tensor: what LAYER_REGEX gives for it (its
    first group, else the whole match, when not empty); else its block prefix,
    or else its name without the last dotted component, plus '.'. (A name
    without any dot is its own group: name + '.'.)"""
    if LAYER_REGEX is not None:
        m = LAYER_REGEX.search(name)
        if m:
            g = m.group(1) if m.re.groups >= 1 and m.group(1) else m.group(0)
            if g:
                return g
    p = block_prefix(name)
    if p is not None:
        return p
    if "." in name:
        return name.rsplit(".", 1)[0] + "."
    return name + "."


def tensors_file_name(name):
    return name.replace("%", "%25").replace("/", "%2F") + ".safetensors"


# ----------------------------------------------------------------------------
# Source checkpoint
# ----------------------------------------------------------------------------

class SourceTensor(object):
    __slots__ = ("name", "dtype", "shape", "shard", "begin", "end", "path", "data_start", "_src")

    def __init__(self, src, name, dtype, shape, shard, begin, end, path, data_start):
        self._src = src
        self.name, self.dtype, self.shape = name, dtype, [int(d) for d in shape]
        self.shard, self.begin, self.end = shard, begin, end
        self.path, self.data_start = path, data_start

    @property
    def n(self):
        return numel(self.shape)

    @property
    def nbytes(self):
        return self.end - self.begin

    def raw(self):
        return self._src.read_raw(self)

    def f32(self):
        return decode_f32(self.raw(), self.dtype)


# transformers keeps these models' projections in Conv1D modules, whose weight
# is stored [in, out]; its bitsandbytes integration quantizes them as the
# [out, in] weight of a Linear layer, so the @bnb-* views quantize the transpose.
CONV1D_MODEL_TYPES = ("gpt2", "openai-gpt", "imagegpt", "decision_transformer")


class TransposedTensor(object):
    """A 2-D SourceTensor seen transposed (for Conv1D weights in @bnb-*)."""

    def __init__(self, t):
        self._t = t
        self.name, self.dtype, self.shape = t.name, t.dtype, [t.shape[1], t.shape[0]]
        self.cache_tag = "T"

    @property
    def n(self):
        return self._t.n

    def f32(self):
        return np.ascontiguousarray(self._t.f32().reshape(self._t.shape).T).reshape(-1)


class Source(object):
    """A local checkpoint directory: shards (*.safetensors), optional index,
    config and other files."""

    INDEX = "model.safetensors.index.json"
    CONFIG = "config.json"

    def __init__(self, path):
        self.path = path
        names = sorted(os.listdir(path))
        self.files = [f for f in names if os.path.isfile(os.path.join(path, f))]
        self.shards = sorted(f for f in self.files if f.endswith(".safetensors"))
        self.other_files = [f for f in self.files if not f.endswith(".safetensors")]
        self.tensors = []
        self._maps = {}
        for shard in self.shards:
            p = os.path.join(path, shard)
            data_start, _, infos = parse_file(p)
            lst = []
            for name, info in infos.items():
                b, e = info["data_offsets"]
                lst.append(SourceTensor(self, name, info["dtype"], info["shape"], shard, b, e, p, data_start))
            lst.sort(key=lambda t: t.begin)
            self.tensors.extend(lst)
        self.by_name = {}
        for t in self.tensors:
            if t.name in self.by_name:
                raise SafetensorsError("tensor %r is in both %s and %s" % (t.name, self.by_name[t.name].shard, t.shard))
            self.by_name[t.name] = t
        self.index = self._load_json(self.INDEX)
        self.config = self._load_json(self.CONFIG)

    def _load_json(self, fname):
        if fname not in self.files:
            return None
        with open(os.path.join(self.path, fname), "rb") as f:
            return json.loads(f.read().decode("utf-8"), object_pairs_hook=OrderedDict)

    def read_raw(self, t):
        mm = self._maps.get(t.path)
        if mm is None:
            size = os.path.getsize(t.path)
            mm = np.memmap(t.path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
            self._maps[t.path] = mm
        a = t.data_start + t.begin
        return np.array(mm[a:a + t.nbytes], dtype=np.uint8)

    def file_bytes(self, fname):
        with open(os.path.join(self.path, fname), "rb") as f:
            return f.read()

    def in_shard(self, shard):
        return [t for t in self.tensors if t.shard == shard]


# ----------------------------------------------------------------------------
# Expected view contents
# ----------------------------------------------------------------------------

VIEWS = ("@tensors", "splitted_model", "splitted_model.4bit", "splitted_model.8bit",
         "@bnb-nf4", "@bnb-int8", "@bf16", "@f16", "@stacked")


class VT(object):
    """One tensor of an expected view file; produce() returns its raw bytes."""
    __slots__ = ("name", "dtype", "shape", "nbytes", "produce", "source")

    def __init__(self, name, dtype, shape, produce, source=None, nbytes=None):
        self.name, self.dtype, self.shape = name, dtype, [int(d) for d in shape]
        self.nbytes = numel(self.shape) * DTYPE_SIZES[dtype] if nbytes is None else nbytes
        self.produce = produce
        self.source = source


class StFile(object):
    kind = "safetensors"

    def __init__(self, tensors):
        self.tensors = tensors
        self._header = None

    def header(self):
        if self._header is None:
            self._header = serialize_header([(t.name, t.dtype, t.shape, t.nbytes) for t in self.tensors])
        return self._header

    @property
    def size(self):
        return len(self.header()) + sum(t.nbytes for t in self.tensors)

    def content(self):
        parts = [self.header()]
        for t in self.tensors:
            raw = bytes(t.produce())
            assert len(raw) == t.nbytes, t.name
            parts.append(raw)
        return b"".join(parts)


class RawFile(object):
    """A file whose bytes are known (passthrough or empty marker)."""
    kind = "raw"

    def __init__(self, data, origin=None):
        self.data = data
        self.origin = origin

    @property
    def size(self):
        return len(self.data)

    def content(self):
        return self.data


class JsonFile(object):
    """A JSON file whose parsed value is specified (not its exact bytes)."""
    kind = "json"

    def __init__(self, obj, what):
        self.obj = obj
        self.what = what

    def content(self):
        return (json.dumps(self.obj, indent=2) + "\n").encode("utf-8")


class Quantizer(object):
    """Caches per-tensor quantization results shared between views."""

    def __init__(self):
        self.cache = {}

    def _get(self, key, fn):
        v = self.cache.get(key)
        if v is None:
            v = fn()
            self.cache[key] = v
        return v

    def nf4(self, t):
        return self._get(("nf4", t.name, getattr(t, "cache_tag", "")), lambda: quantize_nf4(t.f32()))

    def q8(self, t):
        return self._get(("q8", t.name, getattr(t, "cache_tag", "")), lambda: quantize_blockwise(t.f32()))

    def int8(self, t):
        return self._get(("int8", t.name, getattr(t, "cache_tag", "")), lambda: int8_rowwise(t.f32(), t.shape[0]))


def _passthrough(t, name=None):
    return VT(t.name if name is None else name, t.dtype, t.shape, t.raw, source=t)


def _nf4_entries(t, qz, prefix):
    """The four tensors of an NF4-quantized tensor t; names k, k+prefix+..."""
    n = t.n
    nb = -(-n // NF4_BLOCKSIZE)
    js = nf4_quant_state_json(t.dtype, t.shape)
    return [
        VT(t.name, "U8", [(n + 1) // 2, 1], lambda: qz.nf4(t)[0].view(np.uint8), source=t),
        VT(t.name + prefix + "absmax", "F32", [nb],
           lambda: qz.nf4(t)[1].astype("<f4").view(np.uint8), source=t),
        VT(t.name + prefix + "quant_map", "F32", [16], lambda: NF4_TABLE.astype("<f4").view(np.uint8), source=t),
        VT(t.name + prefix + "quant_state.bitsandbytes__nf4", "U8", [len(js)],
           lambda: np.frombuffer(js, dtype=np.uint8), source=t),
    ]


def _q8_entries(t, qz):
    n = t.n
    nb = -(-n // BLOCKWISE8_BLOCKSIZE)
    return [
        VT(t.name, "U8", t.shape, lambda: qz.q8(t)[0].view(np.uint8), source=t),
        VT(t.name + ".8bit.absmax", "F32", [nb], lambda: qz.q8(t)[1].astype("<f4").view(np.uint8), source=t),
        VT(t.name + ".8bit.code", "F32", [256], lambda: DYNAMIC_MAP.astype("<f4").view(np.uint8), source=t),
    ]


def is_transformable(t):
    return t.dtype in FLOAT_DTYPES and t.n > 0


def bnb_quantizes(t):
    """@bnb-*: in a layer block, 2-D, named *.weight, float dtype (and n > 0)."""
    return (block_prefix(t.name) is not None and len(t.shape) == 2
            and t.name.endswith(".weight") and is_transformable(t))


def layer_groups(src):
    """OrderedDict prefix -> tensors in storage order."""
    groups = OrderedDict()
    for t in src.tensors:
        groups.setdefault(group_prefix(t.name), []).append(t)
    return groups


def _index_obj(files):
    """{"metadata": {"total_size": T}, "weight_map": {name: file}} for the
    given OrderedDict file -> StFile."""
    wm = OrderedDict()
    total = 0
    for fname, sf in files.items():
        for vt in sf.tensors:
            wm[vt.name] = fname
            total += vt.nbytes
    return OrderedDict([("metadata", OrderedDict([("total_size", total)])), ("weight_map", wm)])


FLOAT_DTYPE_NAMES = ("float32", "float16", "bfloat16")


def declared_weight_dtype(cfg):
    """The weights' dtype config.json declares at its top level, as transformers
    reads it: "dtype" (4.56 and later) over "torch_dtype"; None unless it names
    a float dtype."""
    for key in ("dtype", "torch_dtype"):
        v = (cfg or {}).get(key)
        if v is not None:
            return v if isinstance(v, str) and v in FLOAT_DTYPE_NAMES else None
    return None


def set_weight_dtype(obj, target):
    """@bf16/@f16: every "dtype"/"torch_dtype" naming a float dtype, at the top
    level, in nested sub-configs and in a per-sub-config map, becomes target.
    No key is added."""
    for key, v in obj.items():
        if key in ("dtype", "torch_dtype") and isinstance(v, str) and v in FLOAT_DTYPE_NAMES:
            obj[key] = target
        elif key in ("dtype", "torch_dtype") and isinstance(v, dict):
            for sub, sv in v.items():
                if isinstance(sv, str) and sv in FLOAT_DTYPE_NAMES:
                    v[sub] = target
        elif isinstance(v, dict):
            set_weight_dtype(v, target)


def bnb_compute_dtype(src):
    """The dtype the model loads in: the config's declared dtype, else that of
    the tensors @bnb-nf4 quantizes (first in storage order); None if neither."""
    declared = declared_weight_dtype(src.config)
    if declared is not None:
        return declared
    for t in src.tensors:
        if bnb_quantizes(t):
            return TORCH_DTYPE_NAME[t.dtype]
    return None


# The keys of a bitsandbytes quantization_config as transformers writes it:
# save_pretrained() stores BitsAndBytesConfig.to_dict(), which is the object's
# __dict__ (quant_method and the private _load_in_4bit and _load_in_8bit
# included) plus load_in_4bit and load_in_8bit. Reading the config back,
# BitsAndBytesConfig.__init__ takes those three private keys as expected kwargs
# (its _exclude_attributes_at_init), and vLLM reads the keys it needs and
# ignores the rest: a view that writes them all is what a pre-quantized
# checkpoint saved by transformers holds.
BNB_CONFIG_KEYS = (
    "quant_method", "_load_in_4bit", "_load_in_8bit", "load_in_4bit", "load_in_8bit",
    "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage",
    "llm_int8_threshold", "llm_int8_has_fp16_weight", "llm_int8_skip_modules", "llm_int8_enable_fp32_cpu_offload")


def quantization_config(src, view):
    """config.json's quantization_config in @bnb-nf4 or @bnb-int8: every key of
    BNB_CONFIG_KEYS. The 4-bit keys of the int8 view (which loaders ignore for
    8-bit weights) carry the NF4 view's values."""
    nf4 = view == "@bnb-nf4"
    return OrderedDict([
        ("quant_method", "bitsandbytes"), ("_load_in_4bit", nf4), ("_load_in_8bit", not nf4),
        ("load_in_4bit", nf4), ("load_in_8bit", not nf4),
        ("bnb_4bit_quant_type", "nf4"), ("bnb_4bit_use_double_quant", False),
        ("bnb_4bit_compute_dtype", bnb_compute_dtype(src)), ("bnb_4bit_quant_storage", "uint8"),
        ("llm_int8_threshold", 6.0), ("llm_int8_has_fp16_weight", False), ("llm_int8_skip_modules", None),
        ("llm_int8_enable_fp32_cpu_offload", False)])


def build_view(src, view, qz=None):
    """Expected files of one view: OrderedDict file name -> StFile | RawFile | JsonFile."""
    qz = qz or Quantizer()
    out = OrderedDict()
    if view == "@tensors":
        for t in src.tensors:
            out[tensors_file_name(t.name)] = StFile([_passthrough(t)])
        return out
    if view.startswith("splitted_model"):
        for prefix, ts in layer_groups(src).items():
            entries = []
            for t in ts:
                if view == "splitted_model" or not is_transformable(t):
                    entries.append(_passthrough(t))
                elif view == "splitted_model.4bit":
                    entries.extend(_nf4_entries(t, qz, ".4bit."))
                elif view == "splitted_model.8bit":
                    entries.extend(_q8_entries(t, qz))
                else:
                    raise ValueError(view)
            out[prefix + "safetensors"] = StFile(entries)
            out[prefix + "safetensors.done"] = RawFile(b"", origin="done marker")
        return out
    if view in ("@bnb-nf4", "@bnb-int8", "@bf16", "@f16"):
        shards = OrderedDict()
        for shard in src.shards:
            entries = []
            conv1d = (src.config or {}).get("model_type") in CONV1D_MODEL_TYPES
            for t in src.in_shard(shard):
                if view in ("@bnb-nf4", "@bnb-int8") and bnb_quantizes(t) and conv1d:
                    t = TransposedTensor(t)
                if view == "@bnb-nf4" and bnb_quantizes(t):
                    entries.extend(_nf4_entries(t, qz, "."))
                elif view == "@bnb-int8" and bnb_quantizes(t):
                    m = t.name[:-len(".weight")]
                    entries.append(VT(t.name, "I8", t.shape, lambda t=t: qz.int8(t)[0].reshape(-1).view(np.uint8), source=t))
                    entries.append(VT(m + ".SCB", "F32", [t.shape[0]],
                                      lambda t=t: qz.int8(t)[1].astype("<f4").view(np.uint8), source=t))
                elif view in ("@bf16", "@f16") and t.dtype == "F32":
                    target = "BF16" if view == "@bf16" else "F16"
                    entries.append(VT(t.name, target, t.shape,
                                      lambda t=t, target=target: f32_to_dtype_bytes(t.f32(), target), source=t))
                else:
                    entries.append(_passthrough(t))
            shards[shard] = StFile(entries)
        out.update(shards)
        for fname in src.other_files:
            if fname == Source.INDEX:
                out[fname] = JsonFile(_index_obj(shards), "index")
            elif fname == Source.CONFIG:
                cfg = json.loads(json.dumps(src.config), object_pairs_hook=OrderedDict)
                if view in ("@bnb-nf4", "@bnb-int8"):
                    cfg["quantization_config"] = quantization_config(src, view)
                else:
                    set_weight_dtype(cfg, "bfloat16" if view == "@bf16" else "float16")
                out[fname] = JsonFile(cfg, "config")
            else:
                out[fname] = RawFile(src.file_bytes(fname), origin="passthrough")
        return out
    if view == "@stacked":
        return _stacked_view(src)
    raise ValueError("unknown view %r" % view)


# ----------------------------------------------------------------------------
# @stacked: layer families stacked along a leading axis (docs/VIEWS.md, "@stacked")
# ----------------------------------------------------------------------------

MAX_INDEX_DIGITS = 9


def _decimal(text):
    if not text or len(text) > MAX_INDEX_DIGITS or not _DIGITS.match(text):
        return None
    return int(text)


def block_stack(group):
    """The stack ('model.layers.') of a layer group prefix that names a block
    ('model.layers.3.' or, with a layer regex, 'model.layers.3.mlp.'), else None."""
    parts = (group[:-1] if group.endswith(".") else group).split(".")
    for i in range(len(parts) - 1):
        if parts[i] in BLOCK_STACKS and _DIGITS.match(parts[i + 1]):
            return ".".join(parts[:i + 1]) + "."
    return None


def split_layer(name, stack):
    """(layer, rest) of '<stack><layer>.<rest>', else None."""
    if not name.startswith(stack):
        return None
    tail = name[len(stack):]
    layer, dot, rest = tail.partition(".")
    i = _decimal(layer)
    if i is None or not dot or not rest:
        return None
    return i, rest


def split_expert(rest):
    """(head, expert, tail) at the first 'experts.<j>.' component of rest with
    something after it; head ends with 'experts.'; else None."""
    parts = rest.split(".")
    for k in range(len(parts) - 2):
        if parts[k] == "experts":
            j = _decimal(parts[k + 1])
            tail = ".".join(parts[k + 2:])
            if j is not None and tail:
                return ".".join(parts[:k + 1]) + ".", j, tail
    return None


def stacked_tensors(src):
    """The tensors of @stacked sorted by name: [(name, dtype, shape, [[SourceTensor]])],
    the sources grouped per layer (one per expert within a layer)."""
    members, passthrough = [], []
    for t in src.tensors:
        stack = block_stack(group_prefix(t.name))
        split = split_layer(t.name, stack) if stack else None
        if split is None:
            passthrough.append(t)
        else:
            members.append((t, stack) + split)
    nlayers = {}
    for t, stack, layer, rest in members:
        nlayers[stack] = max(nlayers.get(stack, 0), layer + 1)
    families = OrderedDict()  # (stack, rest) -> [(layer, dtype, shape, [tensors])]
    experts = OrderedDict()
    for t, stack, layer, rest in members:
        e = split_expert(rest)
        if e is None:
            families.setdefault((stack, rest), []).append((layer, t.dtype, t.shape, [t]))
        else:
            experts.setdefault((stack, layer, e[0], e[2]), []).append((e[1], t))
    for (stack, layer, head, tail), lst in experts.items():
        lst.sort(key=lambda x: x[0])
        t0 = lst[0][1]
        if [j for j, _ in lst] == list(range(len(lst))) and all(
                t.dtype == t0.dtype and t.shape == t0.shape for _, t in lst):
            families.setdefault((stack, head + tail), []).append(
                (layer, t0.dtype, [len(lst)] + t0.shape, [t for _, t in lst]))
        else:
            for _, t in lst:
                families.setdefault((stack, split_layer(t.name, stack)[1]), []).append((layer, t.dtype, t.shape, [t]))
    plans = []  # [stack, rest, items, runs, names, stacked?]
    for (stack, rest), items in families.items():
        items.sort(key=lambda x: x[0])
        layers = [x[0] for x in items]
        if len(set(layers)) != len(layers):
            plans.append([stack, rest, items, [], [], False])
            continue
        runs = []
        for k, item in enumerate(items):
            if runs and item[0] == items[k - 1][0] + 1 and item[1:3] == runs[-1][0][1:3]:
                runs[-1].append(item)
            else:
                runs.append([item])
        whole = len(runs) == 1 and items[0][0] == 0 and items[-1][0] + 1 == nlayers[stack]
        names = [stack + rest if whole else "%s%d-%d.%s" % (stack, run[0][0], run[-1][0], rest) for run in runs]
        plans.append([stack, rest, items, runs, names, True])
    while True:  # a stacked name that another tensor has: that family stays unstacked
        uses = {}
        for t in passthrough:
            uses[t.name] = uses.get(t.name, 0) + 1
        for p in plans:
            for n in (p[4] if p[5] else [t.name for item in p[2] for t in item[3]]):
                uses[n] = uses.get(n, 0) + 1
        changed = False
        for p in plans:
            if p[5] and any(uses[n] > 1 for n in p[4]):
                p[5] = False
                changed = True
        if not changed:
            break
    out = [(t.name, t.dtype, t.shape, [[t]]) for t in passthrough]
    for stack, rest, items, runs, names, stacked in plans:
        if not stacked:
            out.extend((t.name, t.dtype, t.shape, [[t]]) for item in items for t in item[3])
            continue
        for run, name in zip(runs, names):
            out.append((name, run[0][1], [len(run)] + run[0][2], [item[3] for item in run]))
    out.sort(key=lambda x: x[0])
    return out


def numpy_stack(groups, shape):
    """numpy.stack of the source tensors: over the experts of each layer, then
    over the layers, into `shape` (elements as rows of raw bytes); the bytes as
    a uint8 array."""
    def arr(t):
        return t.raw().reshape(t.shape + [DTYPE_SIZES[t.dtype]])
    item = list(shape[1:]) + [DTYPE_SIZES[groups[0][0].dtype]]
    per_layer = [np.stack([arr(t) for t in g]).reshape(item) for g in groups]
    return np.stack(per_layer).reshape(-1)


def _stacked_view(src):
    tensors = stacked_tensors(src)
    total = sum(numel(shape) * DTYPE_SIZES[dtype] for _, dtype, shape, _ in tensors)
    parts = max(1, len(src.shards))
    files = []
    start = 0
    last = None
    for name, dtype, shape, groups in tensors:
        part = start * parts // total if total else 0  # the equal part where its first byte falls
        if part != last:
            files.append([])
            last = part
        start += numel(shape) * DTYPE_SIZES[dtype]
        if name != groups[0][0].name:
            vt = VT(name, dtype, shape, lambda g=groups, s=shape: numpy_stack(g, s))
        else:
            vt = _passthrough(groups[0][0])
        files[-1].append(vt)
    out = OrderedDict()
    for k, tensors in enumerate(files):
        fname = "model.safetensors" if len(files) == 1 else "model-%05d-of-%05d.safetensors" % (k + 1, len(files))
        out[fname] = StFile(tensors)
    had_index = any(f.endswith(".safetensors.index.json") for f in src.other_files)
    others = OrderedDict()
    for fname in src.other_files:
        if not fname.endswith(".safetensors.index.json"):
            others[fname] = RawFile(src.file_bytes(fname), origin="passthrough")
    if len(files) > 1 or had_index:
        others[Source.INDEX] = JsonFile(_index_obj(out), "index")
    for fname in sorted(others):
        out[fname] = others[fname]
    return out


# ----------------------------------------------------------------------------
# AirLLM emulation (airllm/utils.py, persist/safetensor_model_persister.py)
# ----------------------------------------------------------------------------

LLAMA_LAYER_NAMES = {"embed": "model.embed_tokens", "layer_prefix": "model.layers",
                     "norm": "model.norm", "lm_head": "lm_head"}


def airllm_weight_map(ckpt_dir):
    """split_and_save_layers' weight map: pytorch_model.bin.index.json, else
    model.safetensors.index.json, else the keys of model.safetensors.
    Returns (keys list, how) or (None, reason)."""
    p = os.path.join(ckpt_dir, "pytorch_model.bin.index.json")
    if os.path.exists(p):
        with open(p, "rb") as f:
            return list(json.load(f)["weight_map"].keys()), "pytorch_model.bin.index.json"
    p = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(p):
        with open(p, "rb") as f:
            return list(json.load(f)["weight_map"].keys()), "model.safetensors.index.json"
    p = os.path.join(ckpt_dir, "model.safetensors")
    if os.path.exists(p):
        return list(parse_file(p)[2].keys()), "model.safetensors"
    return None, "no weights index and no model.safetensors"


def airllm_layers(keys):
    """The layer list split_and_save_layers builds with the default (llama)
    layer names, without layers that have no tensor (tied lm_head)."""
    n_layers = len(set(int(k.split(".")[2]) for k in keys if "model.layers" in k))
    layers = ["model.embed_tokens."] + ["model.layers.%d." % i for i in range(n_layers)] + ["model.norm.", "lm_head."]
    return [l for l in layers if any(k.startswith(l) for k in keys)]


def is_llama_layout(names):
    pat = re.compile(r"^(model\.embed_tokens\.|model\.layers\.[0-9]+\.|model\.norm\.|lm_head\.)")
    return bool(names) and all(pat.match(n) for n in names)


def airllm_already_split(ckpt_dir, compression=None):
    """AirLLM's decision that a checkpoint is already split: the split
    directory ckpt_dir/splitted_model[.<compression>] exists and, for every
    layer of the list, '<dir>/<layer>safetensors' and
    '<dir>/<layer>safetensors.done' exist (model_persist_exist).
    Returns (ok, list of problems, notes)."""
    notes = []
    if not (os.path.exists(os.path.join(ckpt_dir, "pytorch_model.bin.index.json"))
            or os.path.exists(os.path.join(ckpt_dir, "model.safetensors.index.json"))):
        notes.append("no index file: AirLLM's find_or_create_local_splitted_path would treat the "
                     "directory as a hub repo id; checked split_and_save_layers' test alone")
    keys, how = airllm_weight_map(ckpt_dir)
    if keys is None:
        return False, ["AirLLM finds no weights (%s)" % how], notes
    layers = airllm_layers(keys)
    saving = os.path.join(ckpt_dir, "splitted_model" + ("." + compression if compression else ""))
    if not os.path.exists(saving):
        return False, ["%s does not exist" % saving], notes
    problems = []
    for layer in layers:
        for suffix in ("safetensors", "safetensors.done"):
            p = os.path.join(saving, layer + suffix)
            if not os.path.exists(p):
                problems.append("AirLLM looks for %s: missing" % p)
    return not problems, problems, notes


def _tensor_array(dtype, shape, raw):
    raw = np.ascontiguousarray(np.asarray(raw, dtype=np.uint8))
    if dtype in ("F32", "F16", "BF16"):
        return decode_f32(raw, dtype).reshape(shape) if shape else decode_f32(raw, dtype)
    return raw.view(np.dtype(NUMPY_DTYPE[dtype]).newbyteorder("<")).reshape(shape)


def load_safetensors_dict(path):
    """Like safetensors' load_file: name -> (dtype, shape, raw uint8 array)."""
    data_start, _, infos = parse_file(path)
    with open(path, "rb") as f:
        blob = f.read()
    out = OrderedDict()
    for name, info in infos.items():
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], [int(d) for d in info["shape"]],
                     np.frombuffer(blob, dtype=np.uint8, offset=data_start + b, count=e - b))
    return out


_VALID_QS_KEYS = {"absmax", "quant_map", "nested_absmax", "nested_quant_map", "quant_state",
                  "quant_type", "blocksize", "dtype", "shape", "nested_blocksize",
                  "nested_dtype", "nested_offset"}
_TORCH_TO_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


class AirLLMLoadError(Exception):
    pass


def airllm_uncompress_layer(state):
    """AirLLM's uncompress_layer_state_dict on name -> (dtype, shape, raw):
    4bit: for every key k without '4bit', gather {kk[len(k):]: v for kk
    starting with k, kk != k}, QuantState.from_dict (exactly one
    '*quant_state*' tensor ending in bitsandbytes__nf4|fp4, JSON unpacked,
    prefixes stripped), then dequantize_nf4 to the stored dtype and shape.
    8bit: code[q] * absmax (blocksize 2048), out dtype float16.
    Returns name -> (dtype, shape, raw bytes) of the uncompressed tensors."""
    keys = list(state.keys())
    out = OrderedDict()
    if any("4bit" in k for k in keys):
        for k in keys:
            if "4bit" in k:
                continue
            qsd = {kk[len(k):]: state[kk] for kk in keys if kk.startswith(k) and kk != k}
            qs_keys = [kk for kk in qsd if "quant_state" in kk]
            if not qs_keys:
                raise AirLLMLoadError("%s: no quant_state item (QuantState.from_dict raises)" % k)
            if len(qs_keys) != 1 or qs_keys[0].split(".")[-1] not in ("bitsandbytes__nf4", "bitsandbytes__fp4"):
                raise AirLLMLoadError("%s: quant_state items %r (QuantState.from_dict raises)" % (k, qs_keys))
            dt, shp, raw = qsd.pop(qs_keys[0])
            try:
                packed = json.loads(bytes(raw).decode("utf-8"))
            except ValueError as e:
                raise AirLLMLoadError("%s: quant_state JSON: %s" % (k, e))
            qs = {kk.split(".")[-1]: v for kk, v in qsd.items()}
            qs.update(packed)
            if not set(qs.keys()) <= _VALID_QS_KEYS:
                raise AirLLMLoadError("%s: unexpected quant state keys %r" % (k, sorted(set(qs) - _VALID_QS_KEYS)))
            for need in ("absmax", "quant_map", "quant_type", "blocksize", "dtype", "shape"):
                if need not in qs:
                    raise AirLLMLoadError("%s: quant state lacks %r" % (k, need))
            if qs["quant_type"] != "nf4":
                raise AirLLMLoadError("%s: quant_type %r" % (k, qs["quant_type"]))
            out_dtype = _TORCH_TO_DTYPE.get(qs["dtype"])
            if out_dtype is None:
                raise AirLLMLoadError("%s: dtype %r" % (k, qs["dtype"]))
            shape = [int(d) for d in qs["shape"]]
            n = numel(shape)
            absmax = _tensor_array(qs["absmax"][0], qs["absmax"][1], qs["absmax"][2]).reshape(-1)
            qdt, qshape, qraw = state[k]
            if qdt != "U8" or numel(qshape) != (n + 1) // 2:
                raise AirLLMLoadError("%s: packed tensor %s %r does not fit shape %r" % (k, qdt, qshape, shape))
            out[k] = (out_dtype, shape, dequantize_nf4(qraw, absmax, n, int(qs["blocksize"]), out_dtype))
        return out
    if any("8bit" in k for k in keys):
        for k in keys:
            if "8bit" in k:
                continue
            if k + ".8bit.absmax" not in state or k + ".8bit.code" not in state:
                raise AirLLMLoadError("%s: no %s.8bit.absmax / .8bit.code (KeyError in AirLLM)" % (k, k))
            a = state[k + ".8bit.absmax"]
            c = state[k + ".8bit.code"]
            absmax = _tensor_array(*a).reshape(-1)
            code = _tensor_array(*c).reshape(-1)
            dt, shape, raw = state[k]
            out[k] = ("F16", shape, dequantize_blockwise(raw, absmax, BLOCKWISE8_BLOCKSIZE, code, "F16"))
        return out
    return OrderedDict((k, v) for k, v in state.items())
