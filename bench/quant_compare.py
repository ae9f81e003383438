#!/usr/bin/env python3
"""Side by side on the GPU, in one process: ignis' fp8 quantization ops against PyTorch eager
compositions of the same math, with bench/compare.py's timing, rotation, ceiling and report (this
script only supplies the cases):
  - fp8_quantize (static per-tensor):   (x.float() * (1 / s)).clamp(-448, 448).to(float8_e4m3fn)
  - fp8_quantize_dynamic:               amax = x.abs().amax(); s = max(amax, eps) / 448; as above
  - per_token_group_quant_8bit (1x128, column-major TMA-aligned f32 scales): amax per 128-group,
                                        s = amax / 448, q = x / s, scales written transposed
  - rmsnorm_quant / fused_add_rmsnorm_quant: F.rms_norm (after residual.add_) then the static quant
  - fused_add_rmsnorm_fp8_block_quant:  residual.add_(x); normed = F.rms_norm(residual, w) (bf16,
                                        the normed_out); 1x128 group quant of normed
  - silu_and_mul_quant (+ per_token_group): F.silu(a) * b then the quant
Bytes per call: input read once, fp8 output written once, scales, residual read and written,
normed_out written (the dynamic per-tensor form reads its input twice, uncounted: see quant.h).
The issue's bar: 16384x8192 bf16 at >= 3600 GB/s (the "large" tier target of compare.py, which
also asks >= 1.3x eager). Correctness: max |a - b| / max |b| of the dequantized outputs against the
baseline and an fp32 reference (the fp8 outputs only: residual and normed_out are checked by
tests/python/test_quant.py); the check's tolerance is one e4m3 step at the top of the range
(32 / 448), since one rounding step apart is the most two correct roundings can differ by.

Usage (on the GPU machine; the ignis package on PYTHONPATH, e.g. build-gpu/python):
    python3 bench/quant_compare.py [--markdown FILE] [--jsonl FILE] [--only RE] [--quick]
"""

import sys

import torch
import torch.nn.functional as F

import compare
import ignis
from compare import EPS, Op, rand, rel_err

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
GROUP = 128
STEP_TOLERANCE = 32.0 / 448.0


def quant(v, s):
    """fp8(sat(v * (1 / s))) in f32, s broadcast."""
    return (v.float() * (1.0 / s)).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def group_quant(v, eps):
    """1x128 dynamic quantization of v [M, K]: (q, s [M, K / 128])."""
    m, k = v.shape
    g = v.float().view(m, k // GROUP, GROUP)
    s = g.abs().amax(-1).clamp(min=eps) / FP8_MAX
    return quant(g, s[..., None]).view(m, k), s


def column_major_scales(sets, m, k, device="cuda"):
    """n buffers [K / 128, round_up(M, 4)] f32 (DeepGEMM's TMA-aligned MN-major layout)."""
    return torch.empty(sets, k // GROUP, (m + 3) // 4 * 4, dtype=torch.float32, device=device)


def dequant(q, s):
    return q.float() * s


class Quantize(Op):
    """fp8_quantize with a static per-tensor scale."""

    name = "fp8_quantize"
    scale = 0.02

    def __init__(self, tokens, hidden, dtype):
        super().__init__(tokens, dtype)
        self.hidden = hidden

    def shape(self):
        return f"{self.tokens}x{self.hidden}"

    def bytes(self):
        return (self.es + 1) * self.tokens * self.hidden

    def build(self, n):
        self.x = rand(n, self.tokens, self.hidden, dtype=self.dtype)
        self.out = torch.empty(n, self.tokens, self.hidden, dtype=FP8, device="cuda")
        self.s = torch.full((1,), self.scale, dtype=torch.float32, device="cuda")

    def ignis_call(self, i):
        ignis.fp8_quantize(self.x[i], self.s, out=self.out[i])

    def torch_args(self, i):
        return (self.x[i], self.s)

    @staticmethod
    def torch_fn(x, s):
        return quant(x, s)

    def check(self):
        x = rand(self.tokens, self.hidden, dtype=self.dtype)
        s = torch.full((1,), self.scale, dtype=torch.float32, device="cuda")
        got, _ = ignis.fp8_quantize(x, s)
        ref = x.float() / s
        return rel_err(dequant(got, 1), dequant(self.torch_fn(x, s), 1)), rel_err(dequant(got, 1), ref.clamp(-448, 448))


class QuantizeDynamic(Quantize):
    name = "fp8_quantize_dynamic"

    def build(self, n):
        super().build(n)
        self.s = torch.empty(n, 1, dtype=torch.float32, device="cuda")

    def ignis_call(self, i):
        ignis._ext.fp8_quantize_dynamic(self.x[i], 1e-10, self.out[i], self.s[i], -1, None)

    def torch_args(self, i):
        return (self.x[i],)

    @staticmethod
    def torch_fn(x):
        s = x.abs().amax().float().clamp(min=1e-10) / FP8_MAX
        return quant(x, s), s

    def check(self):
        x = rand(self.tokens, self.hidden, dtype=self.dtype)
        got, s = ignis.fp8_quantize(x)
        want, ws = self.torch_fn(x)
        return rel_err(dequant(got, s), dequant(want, ws)), rel_err(dequant(got, s), x.float())


class GroupQuant(Quantize):
    name = "per_token_group_quant_8bit"

    def bytes(self):
        return (self.es + 1) * self.tokens * self.hidden + 4 * self.tokens * (self.hidden // GROUP)

    def build(self, n):
        super().build(n)
        self.scales = column_major_scales(n, self.tokens, self.hidden)

    def ignis_call(self, i):
        ignis.per_token_group_quant_8bit(self.x[i], GROUP, out=self.out[i],
                                         scale=self.scales[i][:, :self.tokens].T)

    def torch_args(self, i):
        return (self.x[i], self.scales[i])

    @staticmethod
    def torch_fn(x, scales):
        q, s = group_quant(x, 1e-10)
        scales[:, :x.shape[0]].copy_(s.T)
        return q

    def check(self):
        x = rand(self.tokens, self.hidden, dtype=self.dtype)
        q, s = ignis.per_token_group_quant_8bit(x, GROUP, column_major_scales=True, scale_tma_aligned=True)
        wq, ws = group_quant(x, 1e-10)
        got = dequant(q.view(self.tokens, -1, GROUP), s[..., None]).view(self.tokens, -1)
        want = dequant(wq.view(self.tokens, -1, GROUP), ws[..., None]).view(self.tokens, -1)
        return rel_err(got, want), rel_err(got, x.float())


class RMSNormQuant(Quantize):
    name = "rmsnorm_quant"

    def bytes(self):
        return (self.es + 1) * self.tokens * self.hidden + self.es * self.hidden

    def build(self, n):
        super().build(n)
        self.w = rand(n, self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.rmsnorm_quant(self.out[i], self.x[i], self.w[i], self.s)

    def torch_args(self, i):
        return (self.x[i], self.w[i], self.s)

    @staticmethod
    def torch_fn(x, w, s):
        return quant(F.rms_norm(x, (x.shape[-1],), w, EPS), s)

    def check(self):
        x, w = rand(self.tokens, self.hidden, dtype=self.dtype), rand(self.hidden, dtype=self.dtype)
        s = torch.full((1,), self.scale, dtype=torch.float32, device="cuda")
        out = torch.empty(self.tokens, self.hidden, dtype=FP8, device="cuda")
        ignis.rmsnorm_quant(out, x, w, s)
        ref = (F.rms_norm(x.float(), (self.hidden,), w.float(), EPS) / s).clamp(-448, 448)
        return rel_err(dequant(out, 1), dequant(self.torch_fn(x, w, s), 1)), rel_err(dequant(out, 1), ref)


class FusedAddRMSNormQuant(RMSNormQuant):
    name = "fused_add_rmsnorm_quant"

    def bytes(self):
        return (3 * self.es + 1) * self.tokens * self.hidden + self.es * self.hidden

    def build(self, n):
        super().build(n)
        self.r = rand(n, self.tokens, self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.fused_add_rmsnorm_quant(self.out[i], self.x[i], self.r[i], self.w[i], self.s)

    def torch_args(self, i):
        return (self.x[i], self.r[i], self.w[i], self.s)

    @staticmethod
    def torch_fn(x, r, w, s):
        r.add_(x)
        return quant(F.rms_norm(r, (r.shape[-1],), w, EPS), s)

    def check(self):
        x, r = rand(self.tokens, self.hidden, dtype=self.dtype), rand(self.tokens, self.hidden, dtype=self.dtype)
        w = rand(self.hidden, dtype=self.dtype)
        s = torch.full((1,), self.scale, dtype=torch.float32, device="cuda")
        out = torch.empty(self.tokens, self.hidden, dtype=FP8, device="cuda")
        ignis.fused_add_rmsnorm_quant(out, x, r.clone(), w, s)
        want = self.torch_fn(x, r.clone(), w, s)
        total = x.float() + r.float()
        ref = (F.rms_norm(total, (self.hidden,), w.float(), EPS) / s).clamp(-448, 448)
        return rel_err(dequant(out, 1), dequant(want, 1)), rel_err(dequant(out, 1), ref)


class BlockQuant(FusedAddRMSNormQuant):
    name = "fused_add_rmsnorm_fp8_block_quant"

    def bytes(self):
        m, k = self.tokens, self.hidden
        return (4 * self.es + 1) * m * k + self.es * k + 4 * m * (k // GROUP)

    def build(self, n):
        super().build(n)
        self.normed = torch.empty(n, self.tokens, self.hidden, dtype=self.dtype, device="cuda")
        self.scales = column_major_scales(n, self.tokens, self.hidden)

    def ignis_call(self, i):
        ignis.fused_add_rmsnorm_fp8_block_quant(self.out[i], self.scales[i], self.normed[i], self.x[i], self.r[i],
                                                self.w[i])

    def torch_args(self, i):
        return (self.x[i], self.r[i], self.w[i], self.scales[i])

    @staticmethod
    def torch_fn(x, r, w, scales):
        r.add_(x)
        normed = F.rms_norm(r, (r.shape[-1],), w, EPS)
        q, s = group_quant(normed, 1e-4)
        scales[:, :x.shape[0]].copy_(s.T)
        return q, normed

    def check(self):
        m, k = self.tokens, self.hidden
        x, r, w = rand(m, k, dtype=self.dtype), rand(m, k, dtype=self.dtype), rand(k, dtype=self.dtype)
        out = torch.empty(m, k, dtype=FP8, device="cuda")
        normed = torch.empty(m, k, dtype=self.dtype, device="cuda")
        scales = column_major_scales(1, m, k)[0]
        ignis.fused_add_rmsnorm_fp8_block_quant(out, scales, normed, x, r.clone(), w)
        wscales = column_major_scales(1, m, k)[0]
        wq, _ = self.torch_fn(x, r.clone(), w, wscales)
        got = dequant(out.view(m, -1, GROUP), scales[:, :m].T[..., None]).view(m, k)
        want = dequant(wq.view(m, -1, GROUP), wscales[:, :m].T[..., None]).view(m, k)
        ref = F.rms_norm(x.float() + r.float(), (k,), w.float(), EPS)
        return rel_err(got, want), rel_err(got, ref)


class SiluQuant(Quantize):
    name = "silu_and_mul_quant"

    def shape(self):
        return f"{self.tokens}x{self.hidden} (in {self.tokens}x{2 * self.hidden})"

    def bytes(self):
        return (2 * self.es + 1) * self.tokens * self.hidden

    def build(self, n):
        super().build(n)
        self.x = rand(n, self.tokens, 2 * self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.silu_and_mul_quant(self.x[i], self.s, out=self.out[i])

    @staticmethod
    def torch_fn(x, s):
        h = x.shape[-1] // 2
        return quant(F.silu(x[..., :h]) * x[..., h:], s)

    def check(self):
        x = rand(self.tokens, 2 * self.hidden, dtype=self.dtype)
        s = torch.full((1,), self.scale, dtype=torch.float32, device="cuda")
        got = ignis.silu_and_mul_quant(x, s)
        xf = x.float()
        ref = (F.silu(xf[:, :self.hidden]) * xf[:, self.hidden:] / s).clamp(-448, 448)
        return rel_err(dequant(got, 1), dequant(self.torch_fn(x, s), 1)), rel_err(dequant(got, 1), ref)


class SiluGroupQuant(SiluQuant):
    name = "silu_and_mul_quant_per_token_group"

    def bytes(self):
        return (2 * self.es + 1) * self.tokens * self.hidden + 4 * self.tokens * (self.hidden // GROUP)

    def build(self, n):
        super().build(n)
        self.scales = column_major_scales(n, self.tokens, self.hidden)

    def ignis_call(self, i):
        ignis.silu_and_mul_quant_per_token_group(self.x[i], GROUP, out=self.out[i],
                                                 scale=self.scales[i][:, :self.tokens].T)

    def torch_args(self, i):
        return (self.x[i], self.scales[i])

    @staticmethod
    def torch_fn(x, scales):
        h = x.shape[-1] // 2
        q, s = group_quant(F.silu(x[..., :h]) * x[..., h:], 1e-10)
        scales[:, :x.shape[0]].copy_(s.T)
        return q

    def check(self):
        m, h = self.tokens, self.hidden
        x = rand(m, 2 * h, dtype=self.dtype)
        q, s = ignis.silu_and_mul_quant_per_token_group(x, GROUP)
        xf = x.float()
        ref = F.silu(xf[:, :h]) * xf[:, h:]
        wq, ws = group_quant(F.silu(x[:, :h]) * x[:, h:], 1e-10)
        got = dequant(q.view(m, -1, GROUP), s[..., None]).view(m, h)
        want = dequant(wq.view(m, -1, GROUP), ws[..., None]).view(m, h)
        return rel_err(got, want), rel_err(got, ref)


def cases(dtype, quick):
    kinds = [Quantize, QuantizeDynamic, GroupQuant, RMSNormQuant, FusedAddRMSNormQuant, BlockQuant, SiluQuant,
             SiluGroupQuant]
    large = [] if quick else [kind(16384, 8192, dtype) for kind in kinds]
    large += [] if quick else [kind(4096, 4096, dtype) for kind in (GroupQuant, FusedAddRMSNormQuant, BlockQuant)]
    small = [kind(tokens, 4096, dtype) for tokens in (1, 16, 128)
             for kind in (GroupQuant, RMSNormQuant, FusedAddRMSNormQuant, BlockQuant, SiluGroupQuant)]
    return large + small


if __name__ == "__main__":
    compare.cases = cases
    compare.TOLERANCE = {dtype: STEP_TOLERANCE for dtype in compare.TOLERANCE}
    sys.exit(compare.main())
