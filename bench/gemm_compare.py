#!/usr/bin/env python3
"""Side by side on the GPU, in one process: ignis' GEMMs (include/ignis/gemm.h, through ignis.gemm)
against PyTorch on issue 18's shapes, with ratios measured in the same run.

    bf16 (mm_bf16)                  vs torch.matmul(a, w.t())
    fp8 per-tensor (bmm_fp8)        vs torch._scaled_mm(a, w.t(), scale_a, scale_b, out_dtype=bf16)
    fp8 block-scaled 1x128/128x128  vs torch._scaled_mm per-tensor on the same shape (the issue's
      (gemm_fp8_nt_groupwise)          bar), and torch._scaled_mm with the same block scales where
                                       this PyTorch takes them

    grouped bf16 (grouped_mm_bf16)  vs torch._grouped_mm(a, w.transpose(-2, -1), offs) where this
                                       PyTorch has it, and a loop of torch.matmul over the groups
    grouped fp8 block-scaled        vs torch._scaled_grouped_mm with row-wise scales where this
      (group_gemm_fp8_nt_groupwise)    PyTorch has it (another scaling, the same FLOPs), and the
                                       bf16 torch._grouped_mm of the same shape

Grouped shapes are G groups of R rows each ("GxR N K"), m_indptr on the device; TFLOP/s count
2*G*R*N*K. The weight is stored [N, K] and used transposed, as in a model's linear layer. Timing: CUDA
events, the median over bursts queued behind a GPU sleep (bench/gpu_timing.py: the GPU's time per
call, host overhead excluded for both sides alike), each call on the next of several input sets
that together exceed twice the L2, so the weight comes from HBM as in a model's forward pass.

Each row: µs per call, TFLOP/s (2*M*N*K / time), the fraction of the H200's dense peak (989 bf16,
1979 fp8), the baseline's µs and TFLOP/s, ratio = baseline µs / ignis µs (above 1: ignis faster),
and for M <= 64 the weight-read floor: the weight's bytes over the read bandwidth measured here
(a 2 GiB torch.sum), and ignis' time over that floor (the issue's bar: at most 1.5). Before
timing, each shape's outputs are compared (max |ignis - baseline| / max |baseline|).

Targets (issue 18): bf16 M >= 4096 ratio >= 1.0; decode M 1..64 at most 1.5x the floor and ratio
> 1; fp8 per-tensor ratio >= 1.0; block-scaled M4096 N7168 K16384 >= 1400 TFLOP/s and ratio >= 1.0
against per-tensor _scaled_mm; M64 N2112 K7168 at most 1.5x the floor; grouped fp8 block-scaled
8x4096 N4096 K7168 at least 1300 TFLOP/s. Which kernel runs each row (include/ignis/gemm.h has the
rules): the bf16 and per-tensor fp8 rows, small M ("bf16 small-M") included, on cuBLASLt; the
block-scaled rows with M <= 16 on ignis' small-M grouped kernel run as one group, the larger ones on
cuBLASLt; the grouped rows on ignis' Hopper grouped kernel. bench/micro/skinny_gemm.cu and
bench/micro/grouped_skinny.cu time the small-M kernels' variants against cuBLASLt on decode shapes.

Usage (on the GPU machine; the ignis package on PYTHONPATH, e.g. build-gpu/python):
    python3 bench/gemm_compare.py [--only RE] [--samples N] [--markdown FILE]
"""

import argparse
import re
import sys

import torch

import ignis
from ignis import gemm

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpu_timing import median_us, read_bandwidth, rotating  # noqa: E402

PEAK_BF16, PEAK_FP8 = 989.0, 1979.0
E4M3 = torch.float8_e4m3fn

BF16_SHAPES = [(4096, 7168, 2048), (8192, 7168, 2048), (4096, 4096, 4096), (4096, 2112, 7168),
               (1, 7168, 2048), (4, 7168, 2048), (16, 7168, 2048), (64, 7168, 2048),
               (1, 4096, 4096), (4, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096)]
FP8_SHAPES = [(4096, 7168, 2048), (64, 7168, 2048), (16, 7168, 2048), (1, 7168, 2048)]
BLOCK_SHAPES = [(4096, 7168, 16384), (64, 2112, 7168), (16, 2112, 7168), (4, 7168, 2048)]
# (groups, rows per group, N, K): issue 18's bar; Mixtral fc1 at 4096 tokens top-2; Qwen3-30B-A3B
# fc1 at 4096 tokens top-8; DeepSeek-V3 fc1 (local share) at 4096 tokens
GROUPED_SHAPES = [(8, 4096, 4096, 7168), (8, 1024, 28672, 4096), (128, 256, 1536, 2048), (32, 1024, 4096, 7168)]


def sets_for(bytes_per_set):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return max(2, min(64, -(-4 * l2 // max(bytes_per_set, 1))))


def max_rel(a, b):
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def quantize_blocks(x, rows):
    q, s = gemm._quantize_groups("gemm_compare", x, rows)
    return q, s.float()


def make_case(kind, m, n, k):
    """(ignis call, baseline call, check) over several input sets; check runs ignis on set 0 and
    returns its max relative difference from the baseline (block-scaled: from the exact blockwise
    sum of the quantized operands, since the per-tensor baseline computes another product)."""
    per_set = (m * k + n * k) * (2 if kind == "bf16" else 1) + m * n * 2
    sets = []
    for _ in range(sets_for(per_set)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        out_i = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        out_b = torch.empty_like(out_i)
        if kind == "bf16":
            sets.append((lambda a=a, w=w, o=out_i: ignis.mm_bf16(a, w.t(), out=o),
                         lambda a=a, w=w, o=out_b: torch.matmul(a, w.t(), out=o), out_i, None))
            continue
        one = torch.ones((), device="cuda")
        if kind == "fp8":
            a8, w8 = a.to(E4M3), w.to(E4M3)
            sets.append((lambda a8=a8, w8=w8, o=out_i: ignis.bmm_fp8(a8.unsqueeze(0), w8.t().unsqueeze(0), one, one,
                                                                      torch.bfloat16, out=o.unsqueeze(0)),
                         lambda a8=a8, w8=w8: torch._scaled_mm(a8, w8.t(), one, one, out_dtype=torch.bfloat16),
                         out_i, None))
            continue
        a8, sa = quantize_blocks(a, 1)
        w8, sw = quantize_blocks(w, 128)
        sets.append((lambda a8=a8, w8=w8, sa=sa, sw=sw, o=out_i: gemm.gemm_fp8_nt_groupwise(a8, w8, sa, sw, out=o),
                     lambda a8=a8, w8=w8: torch._scaled_mm(a8, w8.t(), one, one, out_dtype=torch.bfloat16),
                     out_i, (a8, w8, sa, sw)))
    first = sets[0]

    def check():
        first[0]()
        if kind == "block":
            a8, w8, sa, sw = first[3]
            ref = torch.zeros(m, n, device="cuda")
            for kb in range(k // 128):
                part = a8[:, kb * 128:(kb + 1) * 128].float() @ w8[:, kb * 128:(kb + 1) * 128].float().t()
                ref += part * sa[:, kb:kb + 1] * sw[:, kb].repeat_interleave(128)[None, :n]
            return max_rel(first[2], ref)
        return max_rel(first[2], first[1]())
    return rotating([s[0] for s in sets]), rotating([s[1] for s in sets]), check


def blockwise_scaled_mm(m, n, k):
    """torch._scaled_mm with 1x128 / 128x128 scales, or None where this PyTorch refuses it."""
    a8 = torch.randn(m, k, device="cuda").to(E4M3)
    w8 = torch.randn(n, k, device="cuda").to(E4M3)
    sa = torch.ones(k // 128, m, device="cuda").t()  # outer-dim-major
    sw = torch.ones(n // 128, k // 128, device="cuda")
    try:
        torch._scaled_mm(a8, w8.t(), sa, sw.t(), out_dtype=torch.bfloat16)
    except Exception:  # noqa: BLE001 - any refusal means "not available here"
        return None
    return lambda: torch._scaled_mm(a8, w8.t(), sa, sw.t(), out_dtype=torch.bfloat16)


def grouped_offsets(g, rows):
    return torch.arange(g + 1, device="cuda", dtype=torch.int32) * rows


def torch_grouped_mm(a, w, ends):
    """torch._grouped_mm over the groups (ends: int32 end offsets), or None where this PyTorch lacks it."""
    fn = getattr(torch, "_grouped_mm", None)
    if fn is None:
        return None
    try:
        fn(a, w.transpose(-2, -1), offs=ends)
    except Exception:  # noqa: BLE001 - any refusal means "not available here"
        return None
    return lambda: fn(a, w.transpose(-2, -1), offs=ends)


def make_grouped_case(kind, g, rows, n, k):
    """(ignis call, [(baseline name, call)], check) for G groups of `rows` rows; one input set (the
    weights of all groups already exceed the L2 at these shapes)."""
    m = g * rows
    indptr = grouped_offsets(g, rows)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    baselines = []
    bf16_grouped = torch_grouped_mm(a, w, indptr[1:])
    if bf16_grouped is not None:
        baselines.append(("torch._grouped_mm bf16", bf16_grouped))
    if kind == "grouped":
        ours = lambda: gemm.grouped_mm_bf16(a, w, indptr, out=out)  # noqa: E731
        baselines.append(("torch.matmul loop", lambda: [torch.matmul(a[i * rows:(i + 1) * rows], w[i].t())
                                                         for i in range(g)]))

        def check():
            ours()
            ref = torch.cat([a[i * rows:(i + 1) * rows].float() @ w[i].float().t() for i in range(g)])
            return max_rel(out, ref)
        return ours, baselines, check
    a8, sa = quantize_blocks(a, 1)
    pairs = [quantize_blocks(w[i], 128) for i in range(g)]
    w8 = torch.stack([p[0] for p in pairs])
    sw = torch.stack([p[1] for p in pairs])
    ours = lambda: gemm.group_gemm_fp8_nt_groupwise(a8, w8, sa, sw, indptr, scale_major_mode="K", out=out)  # noqa: E731
    scaled_grouped = getattr(torch, "_scaled_grouped_mm", None)
    if scaled_grouped is not None:
        row_a = torch.ones(m, device="cuda")
        row_b = torch.ones(g, n, device="cuda")
        try:
            scaled_grouped(a8, w8.transpose(-2, -1), row_a, row_b, offs=indptr[1:], out_dtype=torch.bfloat16)
            baselines.insert(0, ("_scaled_grouped_mm rowwise", lambda: scaled_grouped(
                a8, w8.transpose(-2, -1), row_a, row_b, offs=indptr[1:], out_dtype=torch.bfloat16)))
        except Exception:  # noqa: BLE001 - not available for this PyTorch / GPU
            pass

    def check():
        ours()
        worst = 0.0
        for i in range(g):
            lo, hi = i * rows, (i + 1) * rows
            ref = torch.zeros(rows, n, device="cuda")
            for kb in range(k // 128):
                part = a8[lo:hi, kb * 128:(kb + 1) * 128].float() @ w8[i, :, kb * 128:(kb + 1) * 128].float().t()
                ref += part * sa[lo:hi, kb:kb + 1] * sw[i, :, kb].repeat_interleave(128)[None, :n]
            worst = max(worst, max_rel(out[lo:hi], ref))
        return worst
    return ours, baselines, check


def grouped_rows(args, lines):
    for kind, (g, rows, n, k) in [(kd, s) for kd in ("grouped", "grouped-fp8") for s in GROUPED_SHAPES]:
        label = "%s %dx%d %d %d" % (kind, g, rows, n, k)
        if args.only and not re.search(args.only, label):
            continue
        try:
            ours, baselines, check = make_grouped_case(kind, g, rows, n, k)
            diff = check()
            flops = 2.0 * g * rows * n * k
            peak = PEAK_BF16 if kind == "grouped" else PEAK_FP8
            us = median_us(ours, args.samples, settle_s=0.2)
            timed = [(name, median_us(call, args.samples, settle_s=0.2)) for name, call in baselines]
            for name, b_us in timed or [("none", float("nan"))]:
                row = "| %s | %dx%d %dx%d | %.2f | %.1f | %.1f%% | %s | %.2f | %.1f | %.2f |  |  | %.2g |" % (
                    kind, g, rows, n, k, us, flops / us / 1e6, 100 * flops / us / 1e6 / peak, name, b_us,
                    flops / b_us / 1e6, b_us / us, diff)
                lines.append(row)
                print(row, flush=True)
        except Exception as e:  # noqa: BLE001 - report the failing shape and go on
            row = "| %s | %dx%d %dx%d | FAILED: %s: %s |" % (kind, g, rows, n, k, type(e).__name__,
                                                          str(e).splitlines()[0])
            lines.append(row)
            print(row, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="regex over 'kind MxNxK' (grouped: 'kind GxR N K')")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args()

    torch.manual_seed(0)
    bandwidth = read_bandwidth()
    lines = ["# gemm_compare: %s, torch %s, ignis %s; read bandwidth %.0f GB/s (torch.sum of 2 GiB)"
             % (torch.cuda.get_device_name(), torch.__version__, ignis.__version__, bandwidth / 1e9),
             "| op | M x N x K | ignis us | TFLOP/s | of peak | baseline | base us | base TFLOP/s | ratio "
             "| floor us | x floor | max rel diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    cases = [("bf16", s) for s in BF16_SHAPES] + [("fp8", s) for s in FP8_SHAPES] + [("block", s) for s in BLOCK_SHAPES]
    for kind, (m, n, k) in cases:
        label = "%s %dx%dx%d" % (kind, m, n, k)
        if args.only and not re.search(args.only, label):
            continue
        try:
            ours, base, check = make_case(kind, m, n, k)
            diff = check()
            flops = 2.0 * m * n * k
            peak = PEAK_BF16 if kind == "bf16" else PEAK_FP8
            us = median_us(ours, args.samples, settle_s=0.2)
            base_us = median_us(base, args.samples, settle_s=0.2)
            baselines = [("torch.matmul" if kind == "bf16" else "_scaled_mm tensor", base_us)]
            if kind == "block":
                blockwise = blockwise_scaled_mm(m, n, k)
                if blockwise is not None:
                    baselines.append(("_scaled_mm 1x128/128x128", median_us(blockwise, args.samples, settle_s=0.2)))
            weight_bytes = n * k * (2 if kind == "bf16" else 1)
            floor = weight_bytes / bandwidth * 1e6
            for name, b_us in baselines:
                op = "bf16 small-M" if kind == "bf16" and m <= 64 else kind
                row = "| %s | %dx%dx%d | %.2f | %.1f | %.1f%% | %s | %.2f | %.1f | %.2f | %s | %s | %.2g |" % (
                    op, m, n, k, us, flops / us / 1e6, 100 * flops / us / 1e6 / peak, name, b_us,
                    flops / b_us / 1e6, b_us / us, "%.2f" % floor if m <= 64 else "", "%.2f" % (us / floor)
                    if m <= 64 else "", diff)
                lines.append(row)
                print(row, flush=True)
        except Exception as e:  # noqa: BLE001 - report the failing shape and go on
            row = "| %s | %dx%dx%d | FAILED: %s: %s |" % (kind, m, n, k, type(e).__name__, str(e).splitlines()[0])
            lines.append(row)
            print(row, flush=True)
    grouped_rows(args, lines)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
