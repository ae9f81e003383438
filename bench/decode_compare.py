"""Decode attention: ignis batch decode over a paged bf16 KV cache, side by side with PyTorch SDPA's
cuDNN and flash backends on the same keys and values laid out contiguously, in one process.

Shapes are the decode issue's: 32 query / 8 KV heads, head dim 128, page size 16, pages in random
order; batch x KV length 64x4096, 256x2048, 128x8192, 1x32768, and 16x16384 with 64 query heads.
Bytes are the K and V a call must read (batch * kv_len * kv_heads * head_dim * 2 bytes * 2); the
time is the median of CUDA-event-timed calls after warm-up (the KV of every shape is larger than
twice the L2, so no rotation is needed). Only ``run`` is timed; ``plan`` is timed separately on the
host. The ignis output is checked against the cuDNN one (max |a - b| / max |b|).

    PYTHONPATH=build/python python3 bench/decode_compare.py [--markdown FILE] [--iters N]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import ignis

SHAPES = [  # batch, kv_len, qo_heads, kv_heads
    (64, 4096, 32, 8),
    (256, 2048, 32, 8),
    (128, 8192, 32, 8),
    (1, 32768, 32, 8),
    (16, 16384, 64, 8),
]
HEAD_DIM = 128
PAGE = 16


def median_us(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(samples)


def one_shape(batch, kv_len, hq, hkv, iters, workspace):
    dev = "cuda"
    pages_per_req = (kv_len + PAGE - 1) // PAGE
    num_pages = batch * pages_per_req
    k = torch.randn(batch, hkv, kv_len, HEAD_DIM, dtype=torch.bfloat16, device=dev)
    v = torch.randn_like(k)
    q = torch.randn(batch, hq, HEAD_DIM, dtype=torch.bfloat16, device=dev)
    # Paged copy: request b's page i goes to a random page of the pool (NHD: [pages, page, hkv, d]).
    perm = torch.randperm(num_pages, device=dev, dtype=torch.int64)
    padded = pages_per_req * PAGE
    k_tok = F.pad(k, (0, 0, 0, padded - kv_len)).permute(0, 2, 1, 3)  # [b, padded, hkv, d]
    v_tok = F.pad(v, (0, 0, 0, padded - kv_len)).permute(0, 2, 1, 3)
    cache = torch.empty(num_pages, 2, PAGE, hkv, HEAD_DIM, dtype=torch.bfloat16, device=dev)
    cache[perm, 0] = k_tok.reshape(num_pages, PAGE, hkv, HEAD_DIM)
    cache[perm, 1] = v_tok.reshape(num_pages, PAGE, hkv, HEAD_DIM)
    indices = perm.to(torch.int32)
    indptr = torch.arange(0, num_pages + 1, pages_per_req, dtype=torch.int32)
    last = torch.full((batch,), kv_len - (pages_per_req - 1) * PAGE, dtype=torch.int32)

    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    plan_samples = []
    for _ in range(21):  # the first builds the plan object; the median is of re-plans
        t0 = time.perf_counter()
        wrapper.plan(indptr, indices, last, hq, hkv, HEAD_DIM, PAGE, q_data_type=torch.bfloat16)
        plan_samples.append((time.perf_counter() - t0) * 1e6)
    plan_us = statistics.median(plan_samples)
    out = torch.empty_like(q)
    ignis_us = median_us(lambda: wrapper.run(q, cache, out=out), iters)

    q4 = q.unsqueeze(2)  # [b, hq, 1, d]
    results = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                ref = F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
                results[name] = (median_us(lambda: F.scaled_dot_product_attention(q4, k, v, enable_gqa=True), iters),
                                 ref)
        except RuntimeError as error:
            results[name] = (float("nan"), None)
            print(f"  {name} unavailable: {str(error).splitlines()[0]}")
    ref = next((r for _, r in results.values() if r is not None), None)
    err = float("nan")
    if ref is not None:
        ref = ref.squeeze(2).float()
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    kv_bytes = batch * kv_len * hkv * HEAD_DIM * 2 * 2
    return {
        "shape": f"B{batch} L{kv_len} {hq}/{hkv} d{HEAD_DIM} page{PAGE}",
        "ignis_us": ignis_us,
        "ignis_gbs": kv_bytes / ignis_us / 1e3,
        "cudnn_us": results["cudnn"][0],
        "flash_us": results["flash"][0],
        "cudnn_gbs": kv_bytes / results["cudnn"][0] / 1e3,
        "flash_gbs": kv_bytes / results["flash"][0] / 1e3,
        "plan_us": plan_us,
        "err": err,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for batch, kv_len, hq, hkv in SHAPES:
        print(f"decode B{batch} L{kv_len} {hq}/{hkv}", flush=True)
        rows.append(one_shape(batch, kv_len, hq, hkv, args.iters, workspace))
        torch.cuda.empty_cache()
    lines = [
        "# Decode attention: ignis (paged, page 16) vs PyTorch SDPA (contiguous KV), bf16",
        "",
        f"- torch {torch.__version__}; {torch.cuda.get_device_name()}; {ignis.build_info()}",
        "- GB/s: K+V bytes read / median time; plan: host time of the Python plan() (median of 21,",
        "  host indptr / last_page_len, device indices)",
        "",
        "| shape | ignis us | ignis GB/s | cuDNN us | cuDNN GB/s | flash us | flash GB/s | cuDNN/ignis | plan us | err vs SDPA |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['ignis_us']:.1f} | {r['ignis_gbs']:.0f} | {r['cudnn_us']:.1f} | "
                     f"{r['cudnn_gbs']:.0f} | {r['flash_us']:.1f} | {r['flash_gbs']:.0f} | "
                     f"{r['cudnn_us'] / r['ignis_us']:.2f}x | {r['plan_us']:.1f} | {r['err']:.1e} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
