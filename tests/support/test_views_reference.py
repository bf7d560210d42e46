#!/usr/bin/python3
"""Self-test of views_reference.py (hand-computed cases) and of check_views.py
(run against a fake mount: the reference's expected files written to a
temporary directory, then damaged on purpose).

  python3 tests/support/test_views_reference.py [-v]
"""
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import views_reference as ref  # noqa: E402
import make_edge_checkpoint  # noqa: E402
import check_views  # noqa: E402

F = np.float32


def bits32(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def f32_from_bits(b):
    return np.array([b], dtype=np.uint32).view(np.float32)


def read_bytes(p):
    with open(p, "rb") as f:
        return f.read()


def write_bytes(p, data):
    with open(p, "wb") as f:
        f.write(data)


def load_json(p):
    with open(p) as f:
        return json.load(f)


def dump_json(obj, p):
    with open(p, "w") as f:
        json.dump(obj, f)


# ----------------------------------------------------------------------------
# Straight scalar ports of the kernels, to compare the vectorized code with
# ----------------------------------------------------------------------------

def scalar_dquantize(code, x):
    """dQuantize<0> line by line (float32 scalars)."""
    x = F(x)
    pivot, upper_pivot, lower_pivot = 127, 255, 0
    lower, upper = F(-1.0), F(1.0)
    val = code[pivot]
    i = 64
    while i > 0:
        if x > val:
            lower_pivot = pivot
            lower = val
            pivot += i
        else:
            upper_pivot = pivot
            upper = val
            pivot -= i
        val = code[pivot]
        i >>= 1
    if upper_pivot == 255:
        upper = code[upper_pivot]
    if lower_pivot == 0:
        lower = code[lower_pivot]
    if x > val:
        midpoint = F(F(upper + val) * F(0.5))
        return upper_pivot if x > midpoint else pivot
    midpoint = F(F(lower + val) * F(0.5))
    return lower_pivot if x < midpoint else pivot


def count_nf4(y):
    """NF4 code as the number of split points below y (NaN -> 0)."""
    ts = sorted(ref.NF4_T.values())
    return sum(1 for t in ts if y > t)


class TestNF4(unittest.TestCase):
    def test_table(self):
        self.assertEqual(ref.NF4_TABLE.dtype, np.float32)
        self.assertEqual(ref.NF4_TABLE.size, 16)
        self.assertEqual(float(ref.NF4_TABLE[0]), -1.0)
        self.assertEqual(float(ref.NF4_TABLE[7]), 0.0)
        self.assertEqual(float(ref.NF4_TABLE[15]), 1.0)
        self.assertTrue(np.all(np.diff(ref.NF4_TABLE) > 0))
        self.assertEqual(float(ref.NF4_TABLE[8]), float(F(0.07958029955625534)))

    def test_split_points_are_midpoints(self):
        ts = sorted(float(t) for t in ref.NF4_T.values())
        self.assertEqual(len(ts), 15)
        for k, t in enumerate(ts):
            mid = (float(ref.NF4_TABLE[k]) + float(ref.NF4_TABLE[k + 1])) / 2
            self.assertAlmostEqual(t, mid, delta=2e-7)

    def test_code_points_map_to_themselves(self):
        self.assertEqual(ref.nf4_codes(ref.NF4_TABLE).tolist(), list(range(16)))

    def test_split_values(self):
        for k, t in enumerate(sorted(ref.NF4_T.values())):
            self.assertEqual(int(ref.nf4_codes(np.array([t]))[0]), k, "at split %r" % t)
            up = np.nextafter(t, F(np.inf))
            self.assertEqual(int(ref.nf4_codes(np.array([up]))[0]), k + 1)

    def test_nonfinite(self):
        c = ref.nf4_codes(np.array([np.nan, -np.nan, np.inf, -np.inf, 2.0, -2.0], dtype=np.float32))
        self.assertEqual(c.tolist(), [0, 0, 15, 0, 15, 0])

    def test_tree_equals_count(self):
        rng = np.random.default_rng(5)
        y = np.concatenate([rng.uniform(-1.1, 1.1, 20000).astype(np.float32),
                            np.array(sorted(ref.NF4_T.values()), np.float32),
                            ref.NF4_TABLE]).astype(np.float32)
        y = np.concatenate([y, np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)])
        y = np.concatenate([y, np.nextafter(y, F(np.inf)), np.nextafter(y, F(-np.inf))]).astype(np.float32)
        want = [count_nf4(v) for v in y]
        self.assertEqual(ref.nf4_codes_tree(y).tolist(), want)
        self.assertEqual(ref.nf4_codes(y).tolist(), want)

    def test_quantize_hand(self):
        x = np.array([1.0, -1.0, 0.5, 0.0], np.float32)
        packed, absmax = ref.quantize_nf4(x)
        self.assertEqual(absmax.tolist(), [1.0])
        # 1 -> 15, -1 -> 0, 0.5 -> 12 (0.3893 < 0.5 <= 0.5017), 0 -> 7
        self.assertEqual(packed.tolist(), [0xF0, 0xC7])

    def test_scaling_is_float32_reciprocal_then_multiply(self):
        # absmax 3: s = 1.0f/3 (float32), y = x*s. 1.0*s is just below 1/3:
        x = np.array([3.0, 1.0], np.float32)
        packed, absmax = ref.quantize_nf4(x)
        s = F(1.0) / F(3.0)
        self.assertEqual(packed.tolist(), [(15 << 4) | count_nf4(F(1.0) * s)])
        self.assertEqual(absmax.tolist(), [3.0])

    def test_partial_and_odd(self):
        x = np.zeros(65, np.float32)
        x[0] = 4.0
        x[64] = -3.0          # block 1 holds one element; absmax 3; y = -1 -> code 0
        packed, absmax = ref.quantize_nf4(x)
        self.assertEqual(packed.size, 33)
        self.assertEqual(absmax.tolist(), [4.0, 3.0])
        self.assertEqual(int(packed[0]), (15 << 4) | 7)
        self.assertEqual(int(packed[32]), (0 << 4) | 7)   # missing element: 0.0*s -> code 7
        # single zero: absmax 0, s = inf, 0*inf = NaN -> code 0, padding too
        p, a = ref.quantize_nf4(np.array([0.0], np.float32))
        self.assertEqual((p.tolist(), a.tolist()), ([0x00], [0.0]))
        p, a = ref.quantize_nf4(np.array([2.0], np.float32))
        self.assertEqual((p.tolist(), a.tolist()), ([0xF7], [2.0]))
        p, a = ref.quantize_nf4(np.array([-2.0, 0.0, 1.0], np.float32))
        self.assertEqual(p.tolist(), [(0 << 4) | 7, (count_nf4(F(1.0) * F(0.5)) << 4) | 7])

    def test_zero_and_nan_blocks(self):
        x = np.zeros(128, np.float32)
        x[64:] = np.nan
        x[70] = 0.5
        x[71] = -np.nan
        packed, absmax = ref.quantize_nf4(x)
        self.assertEqual(absmax.tolist(), [0.0, 0.5])        # zero block; NaN ignored
        self.assertTrue(np.all(packed[:32] == 0))              # 0*inf = NaN -> 0
        p2, a2 = ref.quantize_nf4(np.full(64, np.nan, np.float32))
        self.assertEqual(a2.tolist(), [0.0])
        self.assertTrue(np.all(p2 == 0))
        # inf in a block: absmax inf, s = 0, inf*0 = NaN -> 0, finite*0 = 0 -> 7
        p3, a3 = ref.quantize_nf4(np.array([np.inf, 1.0], np.float32))
        self.assertEqual((p3.tolist(), a3.tolist()), ([0x07], [float("inf")]))

    def test_subnormal_absmax(self):
        # 1/absmax overflows to inf: nonzero values go to +-1 codes, zeros to NaN -> 0
        x = np.array([1e-40, -5e-41, 0.0, 2e-41], np.float32)
        packed, absmax = ref.quantize_nf4(x)
        self.assertEqual(packed.tolist(), [(15 << 4) | 0, (0 << 4) | 15])

    def test_dequantize(self):
        x = np.linspace(-2, 2, 130).astype(np.float32)
        packed, absmax = ref.quantize_nf4(x)
        raw = ref.dequantize_nf4(packed, absmax, x.size)
        got = raw.view("<f4")
        codes = ref.unpack_nf4(packed, x.size)
        want = (ref.NF4_TABLE[codes] * absmax[np.arange(x.size) // 64]).astype(np.float32)
        self.assertTrue(np.array_equal(got, want))
        self.assertTrue(np.all(np.abs(got - x) <= absmax[np.arange(x.size) // 64] * ref.NF4_MAX_REL_ERROR + 1e-7))
        bf = ref.dequantize_nf4(packed, absmax, x.size, out_dtype="BF16")
        self.assertTrue(np.array_equal(bf.view("<u2"), ref.f32_to_bf16_bits(want)))

    def test_quant_state_json(self):
        self.assertEqual(ref.nf4_quant_state_json("BF16", [64, 128]),
                         b'{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [64, 128]}')
        self.assertEqual(ref.nf4_quant_state_json("F32", [5]),
                         b'{"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [5]}')


class TestDynamicMap(unittest.TestCase):
    code = ref.DYNAMIC_MAP

    def test_shape_and_order(self):
        c = self.code
        self.assertEqual(c.dtype, np.float32)
        self.assertEqual(c.size, 256)
        self.assertTrue(np.all(np.diff(c) > 0), "strictly increasing")
        self.assertEqual(float(c[127]), 0.0)
        self.assertEqual(float(c[255]), 1.0)
        self.assertIn(0.0, c.tolist())
        self.assertIn(1.0, c.tolist())
        # the negatives mirror the positives except 1.0, which has no negative
        self.assertTrue(np.array_equal(c[:127], -c[128:255][::-1]))
        self.assertNotIn(-1.0, c.tolist())

    def test_hand_values(self):
        c = self.code
        # i = 6: linspace(0.1, 1, 65): step = (1.0f - 0.1f) / 64; top mean = (b63 + 1)/2
        step = F(F(F(1.0) - F(0.1)) / F(64))
        b63 = F(F(1.0) - F(step * F(1)))
        self.assertEqual(float(c[254]), float(F(F(b63 + F(1.0)) / F(2.0))))
        self.assertAlmostEqual(float(c[0]), -0.99296875, places=6)
        self.assertAlmostEqual(float(c[1]), -0.97890625, places=6)
        # i = 0: linspace(0.1, 1, 2) = [0.1f, 1.0f], mean 0.55, times float32(1e-6)
        m0 = F(F(F(0.1) + F(1.0)) / F(2.0))
        self.assertEqual(float(c[128]), float(F(F(1e-6) * m0)))
        self.assertEqual(float(c[126]), -float(F(F(1e-6) * m0)))
        # i = 1: linspace(0.1, 1, 3): first half counts up, second counts down from 1
        step = F(F(F(1.0) - F(0.1)) / F(2))
        b = [F(0.1), F(F(1.0) - F(step * F(1))), F(1.0)]
        m = [F(F(b[0] + b[1]) / F(2)), F(F(b[1] + b[2]) / F(2))]
        self.assertEqual(float(c[129]), float(F(F(1e-5) * m[0])))
        self.assertEqual(float(c[130]), float(F(F(1e-5) * m[1])))

    def test_linspace_halves(self):
        v = ref._torch_linspace_f32(0.1, 1, 65)
        step = F(F(F(1.0) - F(0.1)) / F(64))
        self.assertEqual(float(v[0]), float(F(0.1)))
        self.assertEqual(float(v[31]), float(F(F(0.1) + F(step * F(31)))))
        self.assertEqual(float(v[32]), float(F(F(1.0) - F(step * F(32)))))
        self.assertEqual(float(v[64]), 1.0)


class TestDQuantize(unittest.TestCase):
    code = ref.DYNAMIC_MAP

    def test_points(self):
        got = ref.dquantize8(self.code)
        self.assertEqual(got.tolist(), list(range(256)))

    def test_special(self):
        x = np.array([0.0, -0.0, 1.0, -1.0, 1.5, -1.5, np.inf, -np.inf, np.nan], np.float32)
        self.assertEqual(ref.dquantize8(x).tolist(), [127, 127, 255, 0, 255, 0, 255, 0, 0])

    def test_against_scalar_port(self):
        c = self.code
        mids = ((c[:-1] + c[1:]) * F(0.5)).astype(np.float32)
        rng = np.random.default_rng(7)
        xs = np.concatenate([mids, np.nextafter(mids, F(np.inf)), np.nextafter(mids, F(-np.inf)),
                             rng.uniform(-1.05, 1.05, 3000).astype(np.float32),
                             (rng.standard_normal(2000) * 1e-4).astype(np.float32)]).astype(np.float32)
        got = ref.dquantize8(xs)
        want = [scalar_dquantize(c, v) for v in xs]
        self.assertEqual(got.tolist(), want)

    def test_midpoint_tie_goes_to_final_pivot(self):
        # a tie at the exact float32 midpoint returns the search's final pivot
        c = self.code
        for k in (3, 100, 127, 128, 200, 253, 254):
            mid = F(F(c[k] + c[k + 1]) * F(0.5))
            self.assertIn(int(ref.dquantize8(np.array([mid]))[0]), (k, k + 1))
            self.assertEqual(int(ref.dquantize8(np.array([mid]))[0]), scalar_dquantize(c, mid))

    def test_blockwise(self):
        x = np.zeros(2049 + 2048, np.float32)
        x[0] = 2.0
        x[1] = 1.0
        x[2] = -2.0
        x[4096] = 0.25          # third block: one element
        q, absmax = ref.quantize_blockwise(x)
        self.assertEqual(absmax.tolist(), [2.0, 0.0, 0.25])
        self.assertEqual(q.size, x.size)
        self.assertEqual(q[:4].tolist(), [255, scalar_dquantize(self.code, F(0.5)), 0, 127])
        self.assertTrue(np.all(q[2048:4096] == 0))     # all-zero block: 0*inf = NaN -> code 0
        self.assertEqual(int(q[4096]), 255)
        deq = ref.dequantize_blockwise(q, absmax).view("<f4")
        self.assertEqual(float(deq[0]), 2.0)
        self.assertTrue(np.all(deq[2048:4096] == 0))
        self.assertTrue(np.all(np.signbit(deq[2048:4096])))  # code[0] * 0 = -0.0
        n = ref.quantize_blockwise(np.full(3000, np.nan, np.float32))
        self.assertEqual(n[1].tolist(), [0.0, 0.0])
        self.assertTrue(np.all(n[0] == 0))


class TestInt8(unittest.TestCase):
    def test_ties_to_even(self):
        x = np.array([[127.0, 2.5, 3.5, -2.5, 0.5, 1.5, -0.5, 126.5]], np.float32)
        q, scb = ref.int8_rowwise(x, 1)
        self.assertEqual(q.tolist(), [[127, 2, 4, -2, 0, 2, 0, 126]])
        self.assertEqual(scb.tolist(), [127.0])

    def test_scale_float32(self):
        x = np.array([[3.0, 1.0, -1.5]], np.float32)
        q, scb = ref.int8_rowwise(x, 1)
        s = F(F(127.0) / F(3.0))
        want = [int(np.rint(F(v * s))) for v in (F(3.0), F(1.0), F(-1.5))]
        self.assertEqual(q.tolist(), [want])
        self.assertEqual(q.dtype, np.int8)

    def test_special_rows(self):
        x = np.array([[0.0, 0.0, 0.0],
                      [np.inf, 1.0, -2.0],
                      [np.nan, 2.0, -1.0],
                      [np.nan, np.nan, np.nan],
                      [-np.inf, np.nan, 0.0]], np.float32)
        q, scb = ref.int8_rowwise(x, 5)
        self.assertEqual(q.tolist(), [[0, 0, 0], [0, 0, 0], [0, 127, -64], [0, 0, 0], [0, 0, 0]])
        self.assertEqual(scb.tolist(), [0.0, float("inf"), 2.0, 0.0, float("inf")])


class TestCasts(unittest.TestCase):
    def bf(self, b):
        return int(ref.f32_to_bf16_bits(f32_from_bits(b))[0])

    def test_bf16_hand(self):
        self.assertEqual(self.bf(0x3F808000), 0x3F80)   # tie, even stays
        self.assertEqual(self.bf(0x3F818000), 0x3F82)   # tie, odd rounds up
        self.assertEqual(self.bf(0x3F808001), 0x3F81)
        self.assertEqual(self.bf(0x3F807FFF), 0x3F80)
        self.assertEqual(self.bf(0x7F7FFFFF), 0x7F80)   # FLT_MAX -> inf
        self.assertEqual(self.bf(0xFF7FFFFF), 0xFF80)
        self.assertEqual(self.bf(0x7F800000), 0x7F80)
        self.assertEqual(self.bf(0x00008000), 0x0000)   # subnormal tie -> even
        self.assertEqual(self.bf(0x00018000), 0x0002)
        self.assertEqual(self.bf(0x80000001), 0x8000)
        self.assertEqual(self.bf(0x7FA00001), 0x7FE0)   # sNaN quieted, payload kept
        self.assertEqual(self.bf(0xFFC12345), 0xFFC1)   # sign kept
        self.assertEqual(self.bf(0x7F800001), 0x7FC0)   # low payload only: still a NaN

    def test_bf16_random_against_nearest(self):
        rng = np.random.default_rng(11)
        b = rng.integers(0, 2 ** 32, 50000, dtype=np.uint64).astype(np.uint32)
        x = b.view(np.float32)
        fin = np.isfinite(x)
        got = ref.f32_to_bf16_bits(x)
        for xi, gi in zip(x[fin][:20000], got[fin][:20000]):
            lo = int(bits32(float(xi))) >> 16
            cands = []
            for c in (lo, lo + 1):
                v = float(np.array([c << 16], np.uint32).view(np.float32)[0]) if (c & 0x7F80) != 0x7F80 or (c & 0x7F) == 0 else None
                if v is not None:
                    cands.append((abs(float(xi) - v), c & 1, c))
            if float(xi) != 0 and (lo & 0x7FFF) == 0x7F7F:
                continue  # next value up is inf; covered by the hand cases
            best = min(cands)
            ties = [c for c in cands if c[0] == best[0]]
            want = min(ties, key=lambda t: t[1])[2] & 0xFFFF
            self.assertEqual(int(gi), want, hex(bits32(float(xi))))
        self.assertTrue(np.all(np.isnan(ref.decode_f32(got[~fin & np.isnan(x)].astype("<u2").view(np.uint8), "BF16"))))

    def test_f16_against_struct(self):
        rng = np.random.default_rng(12)
        vals = np.concatenate([
            (rng.standard_normal(20000) * np.exp(rng.uniform(-20, 12, 20000))).astype(np.float32),
            np.array([65504.0, 65519.99, 65520.0, -65520.0, 70000.0, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25,
                      2.0 ** -14, 1e-8, 0.0, -0.0, 1e-40], np.float32)])
        got = ref.f32_to_f16_bits(vals)
        for v, g in zip(vals.tolist(), got.tolist()):
            try:
                want = struct.unpack("<H", struct.pack("<e", v))[0]
            except OverflowError:
                want = 0xFC00 if v < 0 else 0x7C00
            self.assertEqual(g, want, repr(v))

    def test_f16_hand(self):
        def h(v):
            return int(ref.f32_to_f16_bits(np.array([v], np.float32))[0])
        self.assertEqual(h(65520.0), 0x7C00)
        self.assertEqual(h(float(np.nextafter(F(65520.0), F(0)))), 0x7BFF)
        self.assertEqual(h(2.0 ** -25), 0x0000)
        self.assertEqual(h(3 * 2.0 ** -25), 0x0002)
        self.assertEqual(h(float("inf")), 0x7C00)
        self.assertEqual(int(ref.f32_to_f16_bits(f32_from_bits(0xFFC12345))[0]), 0xFE09)
        self.assertEqual(int(ref.f32_to_f16_bits(f32_from_bits(0x7F800001))[0]), 0x7E00)

    def test_decode(self):
        raw = np.array([0x3F80, 0xC000, 0x0001], "<u2").view(np.uint8)
        self.assertEqual(ref.decode_f32(raw, "BF16").tolist()[:2], [1.0, -2.0])
        self.assertEqual(float(ref.decode_f32(raw, "BF16")[2]), float(f32_from_bits(0x00010000)[0]))
        self.assertEqual(ref.decode_f32(np.array([0x3C00, 0x0001], "<u2").view(np.uint8), "F16").tolist(),
                         [1.0, 2.0 ** -24])


class TestSafetensors(unittest.TestCase):
    def test_header_bytes(self):
        h = ref.serialize_header([("a", "F32", [2], 8), ("b.c", "U8", [3, 1], 3)])
        text = b'{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' \
               b'"b.c":{"dtype":"U8","shape":[3,1],"data_offsets":[8,11]}}'
        pad = (-(8 + len(text))) % 8
        self.assertEqual(h, struct.pack("<Q", len(text) + pad) + text + b" " * pad)
        self.assertEqual(len(h) % 8, 0)
        n, meta, tensors = ref.parse_header(h, strict=True)
        self.assertEqual(meta, {"format": "pt"})
        self.assertEqual(list(tensors), ["a", "b.c"])
        self.assertEqual(ref.check_tiling(tensors, 11), [])
        self.assertTrue(ref.check_tiling(tensors, 12))

    def test_scalar_and_empty(self):
        h = ref.serialize_header([("s", "F32", [], 4), ("e", "F16", [0, 3], 0)])
        self.assertIn(b'"shape":[]', h)
        self.assertIn(b'"data_offsets":[4,4]', h)

    def test_strict_rules(self):
        good = ref.serialize_header([("a", "F32", [1], 4)])
        bad_meta = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"format":"pt"}}'
        bad_meta += b" " * ((-(8 + len(bad_meta))) % 8)
        with self.assertRaises(ref.SafetensorsError):
            ref.parse_header(struct.pack("<Q", len(bad_meta)) + bad_meta, strict=True)
        unpadded = good[8:].rstrip(b" ")
        if (8 + len(unpadded)) % 8:
            with self.assertRaises(ref.SafetensorsError):
                ref.parse_header(struct.pack("<Q", len(unpadded)) + unpadded, strict=True)
        ref.parse_header(good, strict=True)

    def test_file_roundtrip(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            raw = np.arange(6, dtype="<f4").view(np.uint8)
            with open(p, "wb") as f:
                f.write(ref.serialize_file([("w", "F32", [2, 3], raw), ("i", "I64", [1], np.zeros(8, np.uint8))]))
            ds, meta, infos = ref.parse_file(p)
            self.assertEqual(ds % 8, 0)
            self.assertEqual(infos["w"]["data_offsets"], [0, 24])
            d2 = ref.load_safetensors_dict(p)
            self.assertEqual(bytes(d2["w"][2]), bytes(raw))


class TestGrouping(unittest.TestCase):
    def test_groups(self):
        g = ref.group_prefix
        self.assertEqual(g("model.layers.0.self_attn.q_proj.weight"), "model.layers.0.")
        self.assertEqual(g("model.layers.12.mlp.experts.3.w1.weight"), "model.layers.12.")
        self.assertEqual(g("transformer.h.3.attn.c_attn.weight"), "transformer.h.3.")
        self.assertEqual(g("encoder.block.1.layer.0.SelfAttention.q.weight"), "encoder.block.1.")
        self.assertEqual(g("layers.0.attention.wq.weight"), "layers.0.")
        self.assertEqual(g("model.embed_tokens.weight"), "model.embed_tokens.")
        self.assertEqual(g("lm_head.weight"), "lm_head.")
        self.assertEqual(g("model.norm.weight"), "model.norm.")
        self.assertEqual(g("model.layers.x.weight"), "model.layers.x.")
        self.assertEqual(g("model.layers.3"), "model.layers.")
        self.assertIsNone(ref.block_prefix("model.embed_tokens.weight"))

    def test_tensor_file_names(self):
        self.assertEqual(ref.tensors_file_name("a/b%c.weight"), "a%2Fb%25c.weight.safetensors")

    def test_airllm_layers(self):
        keys = ["model.embed_tokens.weight", "model.layers.0.x.weight", "model.layers.1.y.weight",
                "model.norm.weight"]
        self.assertEqual(ref.airllm_layers(keys), ["model.embed_tokens.", "model.layers.0.",
                                                   "model.layers.1.", "model.norm."])
        self.assertEqual(ref.airllm_layers(keys + ["lm_head.weight"])[-1], "lm_head.")


# ----------------------------------------------------------------------------
# Fake mount and the checker
# ----------------------------------------------------------------------------

def make_fake_mount(source_dir, mount_dir, views=ref.VIEWS):
    """Writes what a correct mount would show: the source's files plus every
    view directory with the reference's expected files."""
    os.makedirs(mount_dir, exist_ok=True)
    for f in os.listdir(source_dir):
        p = os.path.join(source_dir, f)
        if os.path.isfile(p):
            shutil.copyfile(p, os.path.join(mount_dir, f))
    src = ref.Source(source_dir)
    qz = ref.Quantizer()
    for v in views:
        vdir = os.path.join(mount_dir, v)
        os.makedirs(vdir, exist_ok=True)
        for name, e in ref.build_view(src, v, qz).items():
            with open(os.path.join(vdir, name), "wb") as f:
                f.write(e.content())


def run_checker(args):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = check_views.main(args)
    return rc, buf.getvalue()


class TestChecker(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="views_ref_test_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh(self, tag, dtype="bf16", shards=2, extra=False):
        src = os.path.join(self.tmp, tag, "src")
        mnt = os.path.join(self.tmp, tag, "mnt")
        make_edge_checkpoint.write_checkpoint(src, dtype, shards, extra)
        make_fake_mount(src, mnt)
        return src, mnt

    def assert_ok(self, src, mnt, extra_args=()):
        rc, out = run_checker(["--mount", mnt, "--source", src] + list(extra_args))
        self.assertEqual(rc, 0, out)
        self.assertRegex(out.strip().splitlines()[-1], r"^checked \d+ files, \d+ tensors: OK$")
        return out

    def test_edge_checkpoints_pass(self):
        layers = "model.embed_tokens.,model.layers.0.,model.layers.1.,model.norm.,lm_head."
        for dtype in ("bf16", "f16", "f32"):
            with self.subTest(dtype=dtype):
                src, mnt = self.fresh("ok_" + dtype, dtype)
                out = self.assert_ok(src, mnt, ["--expect-layers", layers, "--mmap-loader"])
                self.assertNotIn("MISMATCH", out)

    def test_single_shard_no_index(self):
        src, mnt = self.fresh("one", "f16", shards=1)
        self.assertFalse(os.path.exists(os.path.join(src, "model.safetensors.index.json")))
        out = self.assert_ok(src, mnt)
        self.assertIn("no index file", out)

    def test_three_shards(self):
        src, mnt = self.fresh("three", "bf16", shards=3)
        self.assert_ok(src, mnt)

    def test_extra_tensors(self):
        src, mnt = self.fresh("extra", "bf16", extra=True)
        out = self.assert_ok(src, mnt)
        self.assertIn("AirLLM cannot load this layer compressed", out)

    def test_expected_contents(self):
        src, mnt = self.fresh("contents", "bf16")
        names = sorted(os.listdir(os.path.join(mnt, "splitted_model.4bit")))
        self.assertIn("model.layers.0.safetensors.done", names)
        self.assertIn("lm_head.safetensors", names)
        d = ref.load_safetensors_dict(os.path.join(mnt, "splitted_model.4bit", "model.layers.1.safetensors"))
        k = "model.layers.1.self_attn.v_proj.weight"
        self.assertEqual(d[k][0], "U8")
        self.assertEqual(d[k][1], [(70 * 70 + 1) // 2, 1])
        self.assertEqual(d[k + ".4bit.absmax"][1], [-(-4900 // 64)])
        self.assertEqual(bytes(d[k + ".4bit.quant_state.bitsandbytes__nf4"][2]),
                         b'{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [70, 70]}')
        # storage order across the two shards for layer 0
        d0 = ref.load_safetensors_dict(os.path.join(mnt, "splitted_model", "model.layers.0.safetensors"))
        names0 = list(d0.keys())
        self.assertLess(names0.index("model.layers.0.self_attn.o_proj.weight"),
                        names0.index("model.layers.0.mlp.gate_proj.weight"))
        cfg = load_json(os.path.join(mnt, "@bnb-nf4", "config.json"))
        self.assertEqual(cfg["quantization_config"]["bnb_4bit_compute_dtype"], "bfloat16")
        dq = ref.load_safetensors_dict(os.path.join(mnt, "@bnb-int8", "model-00002-of-00002.safetensors"))
        self.assertEqual(dq["model.layers.1.mlp.gate_proj.SCB"][1], [130])
        g = dq["model.layers.1.mlp.gate_proj.weight"][2].view(np.int8).reshape(130, 70)
        self.assertEqual(g[0, :9].tolist(), [127, 0, 2, 2, 4, 0, -2, -2, -4])

    def test_flipped_byte_fails(self):
        src, mnt = self.fresh("flip", "bf16")
        p = os.path.join(mnt, "splitted_model.4bit", "model.layers.0.safetensors")
        data = bytearray(read_bytes(p))
        n = struct.unpack("<Q", bytes(data[:8]))[0]
        data[8 + n + 5] ^= 0x10
        write_bytes(p, bytes(data))
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "splitted_model.4bit"])
        self.assertEqual(rc, 1, out)
        self.assertIn("MISMATCH splitted_model.4bit/model.layers.0.safetensors: tensor "
                      "'model.layers.0.input_layernorm.weight'", out)
        self.assertIn("first at [5,0]", out)
        self.assertRegex(out.strip().splitlines()[-1], r"^checked \d+ files, \d+ tensors: \d+ mismatch")

    def test_flipped_cast_byte_fails(self):
        src, mnt = self.fresh("flipcast", "f32")
        p = os.path.join(mnt, "@bf16", "model-00001-of-00002.safetensors")
        data = bytearray(read_bytes(p))
        data[-1] ^= 0x01
        write_bytes(p, bytes(data))
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "@bf16"])
        self.assertEqual(rc, 1, out)
        self.assertIn("MISMATCH @bf16/model-00001-of-00002.safetensors: tensor", out)

    def test_header_damage_fails(self):
        src, mnt = self.fresh("hdr", "bf16")
        p = os.path.join(mnt, "@tensors", "lm_head.weight.safetensors")
        data = read_bytes(p)
        n = struct.unpack("<Q", data[:8])[0]
        text = data[8:8 + n].replace(b'"data_offsets"', b'"data_offsets" ', 1).rstrip(b" ")
        text += b" " * ((-(8 + len(text))) % 8)
        write_bytes(p, struct.pack("<Q", len(text)) + text + data[8 + n:])
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "@tensors"])
        self.assertEqual(rc, 1, out)
        self.assertIn("header bytes differ", out)

    def test_dropped_done_fails(self):
        src, mnt = self.fresh("done", "f16")
        os.remove(os.path.join(mnt, "splitted_model.8bit", "model.layers.1.safetensors.done"))
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "splitted_model.8bit"])
        self.assertEqual(rc, 1, out)
        self.assertIn("listing lacks 'model.layers.1.safetensors.done'", out)
        self.assertIn("AirLLM already-split check", out)

    def test_wrong_layers_and_json(self):
        src, mnt = self.fresh("json", "bf16")
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "splitted_model",
                               "--expect-layers", "model.embed_tokens,model.layers.0"])
        self.assertEqual(rc, 1, out)
        self.assertIn("layer prefixes", out)
        p = os.path.join(mnt, "@bnb-int8", "config.json")
        cfg = load_json(p)
        cfg["quantization_config"]["llm_int8_threshold"] = 5.0
        dump_json(cfg, p)
        p = os.path.join(mnt, "@bf16", "model.safetensors.index.json")
        idx = load_json(p)
        idx["metadata"]["total_size"] += 2
        dump_json(idx, p)
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "@bnb-int8,@bf16"])
        self.assertEqual(rc, 1, out)
        self.assertIn("llm_int8_threshold", out)
        self.assertIn("total_size", out)

    def test_cli_runs(self):
        src, mnt = self.fresh("cli", "bf16")
        p = subprocess.run([sys.executable, os.path.join(HERE, "check_views.py"), "--mount", mnt, "--source", src],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(p.returncode, 0, p.stdout)
        q = subprocess.run([sys.executable, os.path.join(HERE, "make_edge_checkpoint.py"),
                            os.path.join(self.tmp, "cli2"), "--dtype", "f32", "--shards", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(q.returncode, 0, q.stdout)


class TestStacked(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="views_ref_stacked_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def source(self, tag, tensors):
        d = os.path.join(self.tmp, tag)
        os.makedirs(d)
        entries = [(n, "F32", shape, np.arange(ref.numel(shape), dtype="<f4").view(np.uint8) + i)
                   for i, (n, shape) in enumerate(tensors)]
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(ref.serialize_file(entries))
        return ref.Source(d)

    def test_experts_then_layers_and_runs(self):
        L = "model.layers.%d."
        tensors = [("model.embed_tokens.weight", [4, 2])]
        for i in range(4):
            tensors.append((L % i + "attn.weight", [2, 2]))
            if i == 0:
                tensors.append((L % i + "mlp.up.weight", [3, 2]))
            else:
                tensors += [(L % i + "mlp.experts.%d.up.weight" % j, [1, 2]) for j in range(2)]
        src = self.source("runs", tensors)
        got = {n: (shape, groups) for n, _, shape, groups in ref.stacked_tensors(src)}
        self.assertEqual(sorted(got), ["model.embed_tokens.weight", "model.layers.0-0.mlp.up.weight",
                                       "model.layers.1-3.mlp.experts.up.weight", "model.layers.attn.weight"])
        self.assertEqual(got["model.layers.attn.weight"][0], [4, 2, 2])
        self.assertEqual(got["model.layers.0-0.mlp.up.weight"][0], [1, 3, 2])
        shape, groups = got["model.layers.1-3.mlp.experts.up.weight"]
        self.assertEqual(shape, [3, 2, 1, 2])
        self.assertEqual([[t.name for t in g] for g in groups][0],
                         ["model.layers.1.mlp.experts.0.up.weight", "model.layers.1.mlp.experts.1.up.weight"])
        stacked = ref.numpy_stack(groups, shape).view("<f4").reshape(shape)
        want = np.stack([np.stack([src.by_name[t.name].f32().reshape(1, 2) for t in g]) for g in groups])
        np.testing.assert_array_equal(stacked, want)

    def test_taken_name_leaves_family_unstacked(self):
        src = self.source("taken", [("model.layers.0.w", [2]), ("model.layers.1.w", [2]), ("model.layers.w", [1])])
        self.assertEqual([n for n, _, _, _ in ref.stacked_tensors(src)],
                         ["model.layers.0.w", "model.layers.1.w", "model.layers.w"])

    def test_flipped_stacked_byte_fails(self):
        src = os.path.join(self.tmp, "flip", "src")
        mnt = os.path.join(self.tmp, "flip", "mnt")
        make_edge_checkpoint.write_checkpoint(src, "bf16", 2, False)
        make_fake_mount(src, mnt, views=["@stacked"])
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "@stacked"])
        self.assertEqual(rc, 0, out)
        name = sorted(f for f in os.listdir(os.path.join(mnt, "@stacked")) if f.endswith(".safetensors"))[0]
        p = os.path.join(mnt, "@stacked", name)
        data = bytearray(read_bytes(p))
        data[-3] ^= 0x01
        write_bytes(p, bytes(data))
        rc, out = run_checker(["--mount", mnt, "--source", src, "--views", "@stacked"])
        self.assertEqual(rc, 1, out)
        self.assertIn("MISMATCH @stacked/%s: tensor" % name, out)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    from daemon_check import run_tests
    run_tests()
