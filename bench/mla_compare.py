"""MLA attention: ignis' BatchMLAPagedAttentionWrapper vs PyTorch's absorbed attention, bf16 q, CUDA.

Both sides in one process on the same paged latent cache (ckv [pages, page, 512] and kpe
[pages, page, 64], pages in a random order). PyTorch: gather the request's pages
(``cache[kv_indices]``), then ``einsum`` of q (576 = q_nope | q_pe) with the keys, causal mask,
softmax in f32, ``einsum`` with ckv: the same absorbed attention, in eager PyTorch (long prefill
chunked over query tokens to bound its score memory). The cache is bf16, or fp8 e4m3 on the rows
marked so (ckv_scale 0.5, kpe_scale 0.25; PyTorch dequantizes the same bytes). Reported per shape: GPU time per call
(gpu_timing.median_us), cache GB/s (ckv + kpe bytes of the tokens held / time), TFLOP/s
(2 * H * (576 + 512) per visible query-key pair / time), the ratio to PyTorch, and the largest
error of ignis' out against PyTorch's (f32 softmax) relative to max |out|. The issue's bars
(issue 21) are checked at the end; FlashMLA's published H800 figures (3000 GB/s memory-bound,
660 TFLOP/s compute-bound) are quoted beside them.

Usage: PYTHONPATH=build/python python3 bench/mla_compare.py [--iters N] [--heads H] [--markdown FILE]
"""

import argparse
import math
import os
import sys

import torch

import ignis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import median_us  # noqa: E402
from report import emit, targets_with_count  # noqa: E402

CKV, KPE = 512, 64
SM_SCALE = 1.0 / math.sqrt(192.0)
FP8_SCALES = (0.5, 0.25)  # ckv_scale, kpe_scale of the fp8 rows
# (batch, q tokens per request, kv_len, heads, page size, fp8 cache)
SHAPES = [
    (64, 1, 4096, 16, 64),
    (128, 1, 8192, 16, 64),
    (64, 1, 4096, 16, 64, True),
    (128, 1, 8192, 16, 64, True),
    (64, 1, 4096, 128, 64),
    (128, 1, 4096, 128, 64),
    (64, 2, 4096, 128, 64),
    (1, 1, 32768, 128, 64),
    (64, 1, 4096, 16, 1),
    (1, 2048, 10240, 128, 64),
]


def make_case(batch, q_len, kv_len, heads, page, fp8=False):
    pages_per = (kv_len + page - 1) // page
    num_pages = batch * pages_per
    ckv = torch.randn(num_pages, page, CKV, dtype=torch.bfloat16, device="cuda")
    kpe = torch.randn(num_pages, page, KPE, dtype=torch.bfloat16, device="cuda")
    if fp8:
        ckv, kpe = ckv.to(torch.float8_e4m3fn), kpe.to(torch.float8_e4m3fn)
    kv_indices = torch.randperm(num_pages, device="cuda").to(torch.int32)
    qo = torch.arange(batch + 1, dtype=torch.int32) * q_len
    kv_indptr = torch.arange(batch + 1, dtype=torch.int32) * pages_per
    kv_lens = torch.full((batch,), kv_len, dtype=torch.int32)
    q = torch.randn(batch * q_len, heads, CKV + KPE, dtype=torch.bfloat16, device="cuda")
    return ckv, kpe, kv_indices, qo, kv_indptr, kv_lens, q


def torch_mla(q, ckv, kpe, kv_indices, batch, q_len, kv_len, page, scales=(1.0, 1.0)):
    """The absorbed attention in eager PyTorch over gathered pages: out [B*T, H, 512]; the cache
    dequantized by scales (ckv_scale, kpe_scale)."""
    heads = q.shape[1]
    if ckv.dtype == torch.float8_e4m3fn:
        ckv, kpe = (ckv.float() * scales[0]).to(torch.bfloat16), (kpe.float() * scales[1]).to(torch.bfloat16)
    pages_per = (kv_len + page - 1) // page
    keys = torch.cat([ckv, kpe], dim=-1)[kv_indices.long()].view(batch, pages_per * page, CKV + KPE)[:, :kv_len]
    qb = q.view(batch, q_len, heads, CKV + KPE)
    out = torch.empty(batch, q_len, heads, CKV, dtype=q.dtype, device=q.device)
    chunk = q_len if q_len * heads * kv_len <= (1 << 28) else max(1, (1 << 28) // (heads * kv_len))
    for t0 in range(0, q_len, chunk):
        t1 = min(q_len, t0 + chunk)
        scores = torch.einsum("bthd,bld->bthl", qb[:, t0:t1].float(), keys.float()) * SM_SCALE
        pos = torch.arange(t0, t1, device=q.device) + (kv_len - q_len)
        mask = torch.arange(kv_len, device=q.device)[None, :] > pos[:, None]
        scores.masked_fill_(mask[None, :, None, :], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        out[:, t0:t1] = torch.einsum("bthl,bld->bthd", p, keys[..., :CKV].float()).to(q.dtype)
    return out.view(batch * q_len, heads, CKV)


def one_shape(shape, iters, workspace):
    batch, q_len, kv_len, heads, page = shape[:5]
    fp8 = len(shape) > 5 and shape[5]
    ckv, kpe, kv_indices, qo, kv_indptr, kv_lens, q = make_case(*shape)
    scales = FP8_SCALES if fp8 else (1.0, 1.0)
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace)
    wrapper.plan(qo, kv_indptr, kv_indices, kv_lens, heads, CKV, KPE, page, True, SM_SCALE, torch.bfloat16,
                 ckv.dtype)
    q_nope, q_pe = q[..., :CKV], q[..., CKV:]
    out = torch.empty(batch * q_len, heads, CKV, dtype=torch.bfloat16, device="cuda")

    def run_ignis():
        if fp8:
            wrapper.run(q_nope, q_pe, ckv, kpe, out=out, ckv_scale=scales[0], kpe_scale=scales[1])
        else:
            wrapper.run(q_nope, q_pe, ckv, kpe, out=out)

    def run_torch():
        return torch_mla(q, ckv, kpe, kv_indices, batch, q_len, kv_len, page, scales)

    run_ignis()
    ref = run_torch()
    torch.cuda.synchronize()
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    ignis_us = median_us(run_ignis, iters, settle_s=0.2)
    torch_us = median_us(run_torch, max(3, iters // 4), settle_s=0.2)
    cache_bytes = batch * kv_len * (CKV + KPE) * ckv.element_size()
    pairs = batch * sum(max(0, kv_len - q_len + i + 1) for i in range(q_len))
    flops = 2 * heads * (CKV + KPE + CKV) * pairs
    return {"shape": f"B{batch} T{q_len} L{kv_len} {heads}h p{page}" + (" fp8" if fp8 else ""), "fp8": fp8,
            "batch": batch, "q_len": q_len,
            "kv_len": kv_len, "heads": heads, "page": page, "ignis_us": ignis_us, "torch_us": torch_us,
            "gbs": cache_bytes / ignis_us / 1e3, "tflops": flops / ignis_us / 1e6, "err": err}


def targets(rows):
    """The bars of issue 21 that these shapes measure."""
    checks = []
    for r in rows:
        if r["fp8"]:
            same = [b for b in rows if not b["fp8"] and b["shape"] == r["shape"][:-len(" fp8")]]
            if same:
                speedup = same[0]["ignis_us"] / r["ignis_us"]
                checks.append((f"{r['shape']} vs bf16", f"{speedup:.2f}x", ">= 1.8x", speedup >= 1.8))
            continue
        if r["heads"] == 16 and r["q_len"] == 1 and r["page"] == 64 and r["batch"] >= 64:
            checks.append((f"{r['shape']} cache read", f"{r['gbs']:.0f} GB/s", ">= 4000 GB/s", r["gbs"] >= 4000))
        if r["heads"] == 128 and r["batch"] >= 64 and r["q_len"] <= 2:
            checks.append((f"{r['shape']} compute", f"{r['tflops']:.0f} TFLOP/s", ">= 600 TFLOP/s",
                           r["tflops"] >= 600))
        if r["batch"] == 1 and r["kv_len"] == 32768:
            checks.append((f"{r['shape']} split-KV", f"{r['gbs']:.0f} GB/s", ">= 3000 GB/s", r["gbs"] >= 3000))
        if r["q_len"] == 2048:
            checks.append((f"{r['shape']} chunked prefill", f"{r['tflops']:.0f} TFLOP/s", ">= 550 TFLOP/s",
                           r["tflops"] >= 550))
    return checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--markdown")
    parser.add_argument("--heads", type=int, help="only the shapes of this head count")
    args = parser.parse_args()
    workspace = torch.empty(384 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for shape in SHAPES:
        if args.heads and shape[3] != args.heads:
            continue
        print("mla", shape, flush=True)
        rows.append(one_shape(shape, args.iters, workspace))
        torch.cuda.empty_cache()
    lines = [
        "# MLA attention: ignis (BatchMLAPagedAttentionWrapper) vs PyTorch eager absorbed attention, bf16 q",
        "",
        f"- torch {torch.__version__}; {torch.cuda.get_device_name()}; {ignis.build_info()}",
        f"- IGNIS_MLA_TILE_ROWS={os.environ.get('IGNIS_MLA_TILE_ROWS', '(unset)')}, "
        f"IGNIS_MLA_WGMMA={os.environ.get('IGNIS_MLA_WGMMA', '(unset)')}",
        f"- us: GPU time per call (median of {args.iters} bursts); GB/s: ckv + kpe bytes of the tokens held / time;",
        "  TFLOP/s: 2*H*(576+512) per visible query-key pair / time; FlashMLA (H800): 3000 GB/s, 660 TFLOP/s",
        "",
        "| shape | ignis us | GB/s | TFLOP/s | torch us | torch/ignis | err vs torch |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['ignis_us']:.1f} | {r['gbs']:.0f} | {r['tflops']:.0f} | "
                     f"{r['torch_us']:.1f} | {r['torch_us'] / r['ignis_us']:.2f}x | {r['err']:.1e} |")
    checks = targets(rows)
    lines += targets_with_count(checks, "")[0]
    emit(lines, args.markdown)
    bad = [r for r in rows if not r["err"] <= 2e-2]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
