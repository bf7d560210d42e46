#!/usr/bin/python3
"""Checks tensorfs' virtual views of one checkpoint against the reference.

  check_views.py --mount MOUNTED_CKPT_DIR --source SOURCE_CKPT_DIR
                 [--views v1,v2,...] [--expect-layers p1,p2,...] [--mmap-loader]

SOURCE_CKPT_DIR is the original checkpoint on local disk; MOUNTED_CKPT_DIR is
the same checkpoint seen through the mount, holding the view directories
(@tensors, splitted_model, splitted_model.4bit, splitted_model.8bit, @bnb-nf4,
@bnb-int8, @bf16, @f16, @stacked; all by default). The expected files are computed from
the source with views_reference.py. Checked, per view:
  - the directory listing is exactly the expected set of names;
  - st_size (stat'ed before anything is read) equals the real length;
  - .safetensors files follow the view rules (8+N multiple of 8, space
    padding, "__metadata__" {"format":"pt"} first, tensors in the documented
    order, offsets tiling the data) and the header bytes equal the compact
    serialization; every tensor's bytes equal the reference bit for bit, read
    with plain read() and again through a numpy.memmap of the whole file
    (always for files up to 64 MiB, for all with --mmap-loader);
  - splitted_model*: the layer files partition the source's tensors, names
    start with their file's prefix, the prefixes equal --expect-layers when
    given, and AirLLM's "already split" test passes (llama layer names);
    .4bit/.8bit layers load the way AirLLM's uncompress_layer_state_dict
    does and match the reference dequantization (4bit: and the NF4 error bound);
  - @bnb-*: config.json's quantization_config, the index's weight_map and
    total_size against the view shards, passthrough files byte-identical;
  - @bf16/@f16: casts exact (NaN: a quiet NaN of the same sign), index, config.
  - @stacked: every tensor equals numpy.stack of its source tensors (experts
    within a layer, then layers), the index against the view shards, other
    files byte-identical; and RANDOM_RANGES random ranges of every stacked
    file, read with pread, equal the same ranges of the reference file.
Every problem is printed with file, tensor and first differing element. Exit
status 0 when everything matches, 1 otherwise; the last line is a summary.
"""
import argparse
import json
import os
import re
import stat
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import views_reference as ref  # noqa: E402

MMAP_ALWAYS_LIMIT = 64 << 20
RANDOM_RANGES = 32
MAX_LINES_PER_FILE = 25


class Report(object):
    def __init__(self):
        self.errors = 0
        self.warnings = 0
        self.files = 0
        self.tensors = 0
        self._per_file = {}

    def error(self, where, msg):
        self.errors += 1
        k = self._per_file.get(where, 0) + 1
        self._per_file[where] = k
        if k <= MAX_LINES_PER_FILE:
            print("MISMATCH %s: %s" % (where, msg))
        elif k == MAX_LINES_PER_FILE + 1:
            print("MISMATCH %s: ... (further problems in this file not shown)" % where)

    def warn(self, where, msg):
        self.warnings += 1
        print("warning %s: %s" % (where, msg))

    def note(self, msg):
        print("note: %s" % msg)


def read_plain(path):
    chunks = []
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


def unravel(k, shape):
    if not shape:
        return "[]"
    try:
        return "[%s]" % ",".join(str(int(i)) for i in np.unravel_index(k, shape))
    except ValueError:
        return "(flat %d)" % k


# ----------------------------------------------------------------------------
# JSON comparison
# ----------------------------------------------------------------------------

def json_diff(a, b, path="$"):
    """First difference between JSON values a (got) and b (expected), bools
    distinct from numbers; None when equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        if type(a) is not type(b) or a != b:
            return "%s: got %r, expected %r" % (path, a, b)
        return None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return None if a == b else "%s: got %r, expected %r" % (path, a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        for k in b:
            if k not in a:
                return "%s: key %r missing" % (path, k)
        for k in a:
            if k not in b:
                return "%s: unexpected key %r" % (path, k)
        for k in b:
            d = json_diff(a[k], b[k], "%s.%s" % (path, k))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "%s: list of %d, expected %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = json_diff(x, y, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    if type(a) is not type(b) or a != b:
        return "%s: got %r, expected %r" % (path, a, b)
    return None


# ----------------------------------------------------------------------------
# Tensor comparison
# ----------------------------------------------------------------------------

def compare_tensor(rep, where, vt, got, want):
    """got/want: uint8 arrays. Cast tensors (source F32 -> BF16/F16) accept any
    quiet NaN of the source's sign where the source is NaN."""
    if got.size != want.size:
        rep.error(where, "tensor %r: %d bytes, expected %d" % (vt.name, got.size, want.size))
        return False
    isz = ref.DTYPE_SIZES[vt.dtype]
    cast = vt.source is not None and vt.source.dtype == "F32" and vt.dtype in ("BF16", "F16")
    if cast:
        g = got.view("<u2")
        w = want.view("<u2")
        diff = g != w
        if diff.any():
            src = vt.source.f32()
            srcnan = np.isnan(src)
            if vt.dtype == "BF16":
                expo, mant, quiet = 0x7F80, 0x007F, 0x0040
            else:
                expo, mant, quiet = 0x7C00, 0x03FF, 0x0200
            ok_nan = (srcnan & ((g & expo) == expo) & ((g & mant) != 0) & ((g & quiet) != 0)
                      & ((g & 0x8000) == (w & 0x8000)))
            diff &= ~ok_nan
        bad = np.flatnonzero(diff)
    else:
        bad = np.flatnonzero(got != want)
        if bad.size:
            bad = np.unique(bad // isz)
    if bad.size == 0:
        return True
    k = int(bad[0])
    rep.error(where, "tensor %r: %d of %d elements differ; first at %s: got %s, expected %s%s" % (
        vt.name, bad.size, max(1, got.size // isz), unravel(k, vt.shape),
        ref.describe_element(got[k * isz:(k + 1) * isz], vt.dtype),
        ref.describe_element(want[k * isz:(k + 1) * isz], vt.dtype),
        source_hint(vt, k)))
    return False


def source_hint(vt, k):
    t = vt.source
    if t is None or t.dtype not in ref.FLOAT_DTYPES or vt.name.endswith((".absmax", ".quant_map", ".code", ".SCB")) \
            or "quant_state" in vt.name:
        return ""
    try:
        if vt.dtype == "U8" and len(vt.shape) == 2 and vt.shape[1] == 1 and t.n != vt.shape[0]:
            x = t.f32()
            pair = x[2 * k:2 * k + 2]
            return " (packed source elements %d,%d = %s)" % (2 * k, 2 * k + 1, [float(v) for v in pair])
        return " (source value %r)" % float(t.f32()[k])
    except Exception:
        return ""


# ----------------------------------------------------------------------------
# One file
# ----------------------------------------------------------------------------

class FileResult(object):
    def __init__(self):
        self.names = None        # tensor names in the actual header order
        self.sizes = None        # name -> byte length per actual header
        self.data = None         # file bytes
        self.data_start = None
        self.infos = None


def check_st_file(rep, where, path, exp, st_size, use_mmap):
    res = FileResult()
    data = read_plain(path)
    res.data = data
    rep.files += 1
    if st_size != len(data):
        rep.error(where, "st_size is %d but read() returned %d bytes" % (st_size, len(data)))
    if len(data) != exp.size:
        rep.error(where, "file is %d bytes, expected %d" % (len(data), exp.size))
    try:
        n, meta, infos = ref.parse_header(data, strict=True)
    except ref.SafetensorsError as e:
        rep.error(where, "invalid view safetensors: %s" % e)
        try:
            n, meta, infos = ref.parse_header(data)
        except ref.SafetensorsError:
            return res
    res.names = list(infos.keys())
    res.infos = infos
    res.data_start = 8 + n
    res.sizes = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in infos.items()}
    for p in ref.check_tiling(infos, len(data) - 8 - n, strict_order=True):
        rep.error(where, p)
    want_header = exp.header()
    got_header = data[:8 + n]
    if got_header != want_header:
        i = next((j for j in range(min(len(got_header), len(want_header))) if got_header[j] != want_header[j]),
                 min(len(got_header), len(want_header)))
        rep.error(where, "header bytes differ from the compact serialization at byte %d: got %r, expected %r" % (
            i, got_header[max(0, i - 30):i + 50], want_header[max(0, i - 30):i + 50]))
    want_names = [t.name for t in exp.tensors]
    if res.names != want_names:
        missing = [x for x in want_names if x not in infos]
        extra = [x for x in res.names if x not in set(want_names)]
        if missing:
            rep.error(where, "tensors missing: %s" % ", ".join(missing[:10]))
        if extra:
            rep.error(where, "unexpected tensors: %s" % ", ".join(extra[:10]))
        if not missing and not extra:
            first = next(i for i, (a, b) in enumerate(zip(res.names, want_names)) if a != b)
            rep.error(where, "tensor order differs at position %d: got %r, expected %r" % (
                first, res.names[first], want_names[first]))
    buf = np.frombuffer(data, dtype=np.uint8)
    mm = None
    if use_mmap and len(data):
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        if mm.size != len(data):
            rep.error(where, "numpy.memmap of the file has %d bytes, read() gave %d" % (mm.size, len(data)))
            mm = None
    for vt in exp.tensors:
        info = infos.get(vt.name)
        if info is None:
            continue
        rep.tensors += 1
        if info["dtype"] != vt.dtype or [int(d) for d in info["shape"]] != vt.shape:
            rep.error(where, "tensor %r: %s %r, expected %s %r" % (
                vt.name, info["dtype"], info["shape"], vt.dtype, vt.shape))
            continue
        b, e = info["data_offsets"]
        a0 = res.data_start + b
        a1 = res.data_start + e
        if a1 > len(data):
            continue
        want = np.ascontiguousarray(vt.produce(), dtype=np.uint8).reshape(-1)
        ok = compare_tensor(rep, where, vt, buf[a0:a1], want)
        if mm is not None:
            via_map = np.array(mm[a0:a1])
            if ok or not np.array_equal(via_map, buf[a0:a1]):
                compare_tensor(rep, where + " (mmap)", vt, via_map, want)
    if mm is not None:
        same = np.array_equal(np.asarray(mm[:res.data_start]), buf[:res.data_start])
        if not same:
            rep.error(where + " (mmap)", "header bytes seen through numpy.memmap differ from read()")
        del mm
    return res


def check_raw_file(rep, where, path, exp, st_size):
    data = read_plain(path)
    rep.files += 1
    if st_size != len(data):
        rep.error(where, "st_size is %d but read() returned %d bytes" % (st_size, len(data)))
    if data != exp.data:
        if len(data) != len(exp.data):
            rep.error(where, "%s file is %d bytes, expected %d" % (exp.origin or "file", len(data), len(exp.data)))
        else:
            i = next(j for j in range(len(data)) if data[j] != exp.data[j])
            rep.error(where, "%s file differs at byte %d" % (exp.origin or "file", i))
    return data


def check_json_file(rep, where, path, exp, st_size):
    data = read_plain(path)
    rep.files += 1
    if st_size != len(data):
        rep.error(where, "st_size is %d but read() returned %d bytes" % (st_size, len(data)))
    try:
        got = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        rep.error(where, "not valid JSON: %s" % e)
        return None
    want = exp.obj
    if exp.what == "config":
        if not isinstance(got, dict):
            rep.error(where, "config is not a JSON object")
            return got
        for k in list(want.keys()) + [k for k in got if k not in want]:
            if k == "quantization_config" and k in want and isinstance(got.get(k), dict):
                qg, qw = got[k], want[k]
                for kk in qw:
                    if kk not in qg:
                        rep.error(where, "quantization_config lacks %r" % kk)
                    else:
                        d = json_diff(qg[kk], qw[kk], "$.quantization_config.%s" % kk)
                        if d:
                            rep.error(where, d)
                extra = [kk for kk in qg if kk not in qw]
                if extra:
                    rep.warn(where, "quantization_config has keys the view format does not list: %s" % ", ".join(extra))
                continue
            if k not in got:
                rep.error(where, "key %r missing" % k)
            elif k not in want:
                rep.error(where, "unexpected key %r" % k)
            else:
                d = json_diff(got[k], want[k], "$.%s" % k)
                if d:
                    rep.error(where, d)
    elif exp.what == "index":
        if not isinstance(got, dict):
            rep.error(where, "index is not a JSON object")
            return got
        meta = got.get("metadata")
        if not isinstance(meta, dict) or "total_size" not in meta:
            rep.error(where, "no metadata.total_size")
        else:
            d = json_diff(meta["total_size"], want["metadata"]["total_size"], "$.metadata.total_size")
            if d:
                rep.error(where, d)
            extra = [k for k in meta if k != "total_size"]
            if extra:
                rep.warn(where, "index metadata has extra keys: %s" % ", ".join(extra))
        wm = got.get("weight_map")
        if not isinstance(wm, dict):
            rep.error(where, "no weight_map object")
        else:
            for name in want["weight_map"]:
                if name not in wm:
                    rep.error(where, "weight_map lacks %r" % name)
                elif wm[name] != want["weight_map"][name]:
                    rep.error(where, "weight_map[%r] = %r, expected %r" % (name, wm[name], want["weight_map"][name]))
            for name in wm:
                if name not in want["weight_map"]:
                    rep.error(where, "weight_map has unexpected tensor %r" % name)
        extra = [k for k in got if k not in ("metadata", "weight_map")]
        if extra:
            rep.warn(where, "index has extra top-level keys: %s" % ", ".join(extra))
    else:
        d = json_diff(got, want)
        if d:
            rep.error(where, d)
    return got


# ----------------------------------------------------------------------------
# View-level checks
# ----------------------------------------------------------------------------

def strip_quant_suffix(view, name):
    if view == "splitted_model.4bit":
        for s in (".4bit.absmax", ".4bit.quant_map", ".4bit.quant_state.bitsandbytes__nf4"):
            if name.endswith(s):
                return name[:-len(s)]
    if view == "splitted_model.8bit":
        for s in (".8bit.absmax", ".8bit.code"):
            if name.endswith(s):
                return name[:-len(s)]
    return name


def check_split_view(rep, src, view, mount, results, expect_layers, qz):
    vdir = os.path.join(mount, view)
    where = view
    seen = {}
    prefixes = set()
    for fname, res in results.items():
        if not fname.endswith("safetensors") or fname.endswith(".done"):
            continue
        prefix = fname[:-len("safetensors")]
        prefixes.add(prefix)
        if res is None or res.names is None:
            continue
        for name in res.names:
            if not name.startswith(prefix):
                rep.error("%s/%s" % (view, fname), "tensor %r does not start with the file's prefix %r" % (name, prefix))
            base = strip_quant_suffix(view, name)
            if base == name:
                if name in seen:
                    rep.error(where, "tensor %r is in both %s and %s" % (name, seen[name], fname))
                seen[name] = fname
    src_names = set(t.name for t in src.tensors)
    missing = sorted(src_names - set(seen))
    extra = sorted(set(seen) - src_names)
    if missing:
        rep.error(where, "layer files lack source tensors: %s" % ", ".join(missing[:10]))
    if extra:
        rep.error(where, "layer files hold tensors not in the source: %s" % ", ".join(extra[:10]))
    if expect_layers is not None:
        want = set(p if p.endswith(".") else p + "." for p in expect_layers)
        if prefixes != want:
            rep.error(where, "layer prefixes %s, expected %s" % (sorted(prefixes), sorted(want)))
    names = [t.name for t in src.tensors]
    if ref.is_llama_layout(names):
        compression = view.split(".", 1)[1] if "." in view else None
        ok, problems, notes = ref.airllm_already_split(mount, compression)
        for n in notes:
            rep.note("%s: %s" % (view, n))
        for p in problems:
            rep.error(where, "AirLLM already-split check: %s" % p)
    else:
        rep.note("%s: tensor names are not llama layer names; AirLLM's already-split check skipped" % view)
    if view in ("splitted_model.4bit", "splitted_model.8bit"):
        check_airllm_load(rep, src, view, results, qz)


def state_from_result(res):
    state = {}
    for name in res.names:
        info = res.infos[name]
        b, e = info["data_offsets"]
        state[name] = (info["dtype"], [int(d) for d in info["shape"]],
                       np.frombuffer(res.data, dtype=np.uint8, offset=res.data_start + b, count=e - b))
    return state


def check_airllm_load(rep, src, view, results, qz):
    for fname, res in results.items():
        if fname.endswith(".done") or res is None or res.names is None:
            continue
        where = "%s/%s (AirLLM load)" % (view, fname)
        state = state_from_result(res)
        passthrough = [k for k in state if k in src.by_name and not ref.is_transformable(src.by_name[k])]
        if passthrough:
            rep.warn(where, "AirLLM cannot load this layer compressed: passed-through tensors %s "
                            "have no quantization state" % ", ".join(passthrough))
            continue
        try:
            loaded = ref.airllm_uncompress_layer(state)
        except ref.AirLLMLoadError as e:
            rep.error(where, str(e))
            continue
        for name, (dt, shape, raw) in loaded.items():
            t = src.by_name.get(name)
            if t is None:
                continue
            x = t.f32()
            if view.endswith("4bit"):
                if dt != t.dtype or shape != t.shape:
                    rep.error(where, "tensor %r loads as %s %r, source is %s %r" % (name, dt, shape, t.dtype, t.shape))
                    continue
                packed, absmax = qz.nf4(t)
                want = ref.dequantize_nf4(packed, absmax, t.n, out_dtype=t.dtype)
                vt = ref.VT(name, dt, shape, None)
                if not compare_tensor(rep, where, vt, np.asarray(raw, np.uint8), want):
                    continue
                got = ref.decode_f32(raw, dt)
                blk = np.arange(t.n) // ref.NF4_BLOCKSIZE
                a = absmax[blk]
                with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                    s_ok = np.isfinite(np.float32(1.0) / absmax)[blk]
                    rel = {"F32": 0.0, "F16": 2.0 ** -11, "BF16": 2.0 ** -8}[dt]
                    bound = a.astype(np.float64) * ref.NF4_MAX_REL_ERROR * (1 + 1e-6) + np.abs(got.astype(np.float64)) * rel
                    err = np.abs(x.astype(np.float64) - got.astype(np.float64))
                    check = np.isfinite(x) & np.isfinite(a) & s_ok
                    bad = np.flatnonzero(check & ~(err <= bound))
                if bad.size:
                    k = int(bad[0])
                    rep.error(where, "tensor %r: %d elements beyond the NF4 error bound; first at %s: source %r, "
                                     "dequantized %r, block absmax %r" % (name, bad.size, unravel(k, shape),
                                                                          float(x[k]), float(got[k]), float(a[k])))
            else:
                if dt != "F16" or shape != t.shape:
                    rep.error(where, "tensor %r loads as %s %r, source shape %r" % (name, dt, shape, t.shape))
                    continue
                q, absmax = qz.q8(t)
                want = ref.dequantize_blockwise(q, absmax, out_dtype="F16")
                compare_tensor(rep, where, ref.VT(name, "F16", shape, None), np.asarray(raw, np.uint8), want)


def check_index_against_shards(rep, view, exp_files, results, got_index):
    """The index's weight_map names exactly the tensors of the view shards
    (as the mount shows them), with their file, and total_size is the sum of
    their byte sizes."""
    if not isinstance(got_index, dict) or not isinstance(got_index.get("weight_map"), dict):
        return
    where = "%s/%s" % (view, ref.Source.INDEX)
    actual = {}
    total = 0
    for fname, res in results.items():
        if not fname.endswith(".safetensors") or res is None or res.names is None:
            continue
        for name in res.names:
            actual[name] = fname
            total += res.sizes[name]
    wm = got_index["weight_map"]
    for name, fname in actual.items():
        if wm.get(name) != fname:
            rep.error(where, "tensor %r of %s: weight_map says %r" % (name, fname, wm.get(name)))
    for name in wm:
        if name not in actual:
            rep.error(where, "weight_map names %r, which no view shard holds" % name)
    ts = got_index.get("metadata", {}).get("total_size") if isinstance(got_index.get("metadata"), dict) else None
    if ts != total:
        rep.error(where, "total_size %r, but the view shards hold %d tensor bytes" % (ts, total))


def check_random_ranges(rep, where, path, exp, seed):
    """RANDOM_RANGES ranges of random offset and length (a fixed seed per
    file), read with pread, against the same ranges of the expected file."""
    want = exp.content()
    if not want:
        return
    rng = np.random.default_rng(seed)
    with open(path, "rb", buffering=0) as f:
        for _ in range(RANDOM_RANGES):
            offset = int(rng.integers(0, len(want)))
            length = int(rng.integers(1, min(len(want) - offset, 1 << 20) + 1))
            got = os.pread(f.fileno(), length, offset)
            if got != want[offset:offset + length]:
                rep.error(where, "range [%d, %d) differs from the reference" % (offset, offset + length))
                return


def check_view_dir(rep, src, mount, view, exp, stats, use_mmap, expect_layers, qz):
    vdir = os.path.join(mount, view)
    results = {}
    got_index = None
    for fname, e in exp.items():
        if fname not in stats:
            continue
        where = "%s/%s" % (view, fname)
        path = os.path.join(vdir, fname)
        st = stats[fname]
        if not stat.S_ISREG(st.st_mode):
            rep.error(where, "not a regular file (mode %o)" % st.st_mode)
            continue
        if e.kind == "safetensors":
            if st.st_size != e.size:
                rep.error(where, "st_size %d, expected %d" % (st.st_size, e.size))
            results[fname] = check_st_file(rep, where, path, e, st.st_size,
                                           use_mmap or e.size <= MMAP_ALWAYS_LIMIT)
            if view == "@stacked":
                check_random_ranges(rep, where + " (random ranges)", path, e, len(results))
        elif e.kind == "raw":
            if st.st_size != e.size:
                rep.error(where, "st_size %d, expected %d" % (st.st_size, e.size))
            check_raw_file(rep, where, path, e, st.st_size)
            results[fname] = None
        else:
            got = check_json_file(rep, where, path, e, st.st_size)
            if e.what == "index":
                got_index = got
    if view.startswith("splitted_model"):
        check_split_view(rep, src, view, mount, results, expect_layers, qz)
    if got_index is not None:
        check_index_against_shards(rep, view, exp, results, got_index)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Check tensorfs views of a checkpoint against the reference.")
    ap.add_argument("--mount", required=True, help="the checkpoint directory inside the mount")
    ap.add_argument("--source", required=True, help="the same checkpoint on local disk")
    ap.add_argument("--views", help="comma-separated views (default: all nine)")
    ap.add_argument("--expect-layers", help="comma-separated layer prefixes splitted_model* must have")
    ap.add_argument("--layer-regex", help="the mount's -o layer_regex, if it has one")
    ap.add_argument("--mmap-loader", action="store_true",
                    help="also read every file through numpy.memmap (done anyway for files up to 64 MiB)")
    ap.add_argument("--min-files", type=int, default=1,
                    help="fail when any view has fewer files checked than this (default 1)")
    ap.add_argument("--min-tensors", type=int, default=1,
                    help="fail when fewer tensors were checked in all (default 1)")
    a = ap.parse_args(argv)
    t0 = time.time()
    views = [v for v in a.views.split(",") if v] if a.views else list(ref.VIEWS)
    for v in views:
        if v not in ref.VIEWS:
            ap.error("unknown view %r (known: %s)" % (v, ", ".join(ref.VIEWS)))
    expect_layers = [p for p in a.expect_layers.split(",") if p] if a.expect_layers else None

    if a.layer_regex:
        ref.LAYER_REGEX = re.compile(a.layer_regex)
    rep = Report()
    src = ref.Source(a.source)
    qz = ref.Quantizer()
    expected = {v: ref.build_view(src, v, qz) for v in views}

    # 1. listings and stat of every file, before anything is read
    stats = {}
    for v in views:
        vdir = os.path.join(a.mount, v)
        stats[v] = {}
        if not os.path.isdir(vdir):
            rep.error(v, "view directory %s does not exist" % vdir)
            continue
        got = set(os.listdir(vdir))
        want = set(expected[v].keys())
        for name in sorted(want - got):
            rep.error(v, "listing lacks %r" % name)
        for name in sorted(got - want):
            rep.error(v, "listing has unexpected %r" % name)
        for name in sorted(got & want):
            try:
                stats[v][name] = os.stat(os.path.join(vdir, name))
            except OSError as e:
                rep.error("%s/%s" % (v, name), "stat failed: %s" % e)

    # 2. contents; an empty source or view checks nothing, which is a failure,
    # not a pass
    for v in views:
        files_before = rep.files
        if stats[v]:
            check_view_dir(rep, src, a.mount, v, expected[v], stats[v], a.mmap_loader, expect_layers, qz)
        if rep.files - files_before < a.min_files:
            rep.error(v, "%d files checked, fewer than the %d expected" % (rep.files - files_before, a.min_files))
    if rep.tensors < a.min_tensors:
        rep.error("all views", "%d tensors checked, fewer than the %d expected" % (rep.tensors, a.min_tensors))

    status = "OK" if rep.errors == 0 else "%d mismatch%s" % (rep.errors, "" if rep.errors == 1 else "es")
    print("views %s checked in %.1fs" % (",".join(views), time.time() - t0))
    print("checked %d files, %d tensors: %s" % (rep.files, rep.tensors, status))
    return 0 if rep.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
