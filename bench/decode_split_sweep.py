"""Decode split-KV sweep: ignis batch decode of one paged cache planned with the automatic split and
with every fixed chunk size given (fixed_split_size, in pages) or no split, to see how far the
planner's choice is from the best split the kernel allows. bf16 q, page 16, NHD, head dim 128.
Times are medians of CUDA-event timed runs; KV GB/s counts the K and V bytes read once.

    PYTHONPATH=build/python python3 bench/decode_split_sweep.py [--shapes 64x4096,256x2048]
        [--splits 0,16,32,64] [--kv bf16|fp8_e4m3|fp8_e5m2] [--iters 50]
(split 0: disable_split_kv; the automatic plan is always the first row of a shape)
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_compare import HEAD_DIM, paged_copy  # noqa: E402
from gpu_timing import median_us  # noqa: E402

import ignis  # noqa: E402

PAGE = 16
DTYPES = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def sweep(batch, kv_len, splits, kv_dtype, qo_heads, kv_heads, iters):
    k = torch.randn(batch, kv_heads, kv_len, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    q = torch.randn(batch, qo_heads, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    cache, indptr, indices, last = paged_copy(k, v, PAGE, "NHD", kv_dtype)
    del k, v
    kv_bytes = 2 * batch * kv_heads * kv_len * HEAD_DIM * cache.element_size()
    workspace = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    out = torch.empty_like(q)
    indptr_h, last_h = indptr.cpu(), last.cpu()
    rows = []
    for split in [None] + splits:
        wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        options = {} if split is None else ({"disable_split_kv": True} if split == 0 else {"fixed_split_size": split})
        wrapper.plan(indptr_h, indices, last_h, qo_heads, kv_heads, HEAD_DIM, PAGE,
                     q_data_type=torch.bfloat16, kv_data_type=kv_dtype, **options)
        us = median_us(lambda: wrapper.run(q, cache, out=out), iters)
        label = "auto" if split is None else ("no split" if split == 0 else f"{split} pages")
        rows.append((label, us, kv_bytes / us / 1e3))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="64x4096,256x2048,128x8192,1x32768")
    parser.add_argument("--splits", default="0,8,16,24,32,43,48,64,86,128")
    parser.add_argument("--kv", default="bf16", choices=tuple(DTYPES))
    parser.add_argument("--qo-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    splits = [int(s) for s in args.splits.split(",") if s]
    print(f"| shape ({args.kv}, {args.qo_heads}/{args.kv_heads} heads) | split | us | KV GB/s |")
    print("|---|---|---|---|")
    for shape in args.shapes.split(","):
        batch, kv_len = (int(x) for x in shape.split("x"))
        for label, us, gbs in sweep(batch, kv_len, splits, DTYPES[args.kv], args.qo_heads, args.kv_heads,
                                    args.iters):
            print(f"| B{batch} L{kv_len} | {label} | {us:.1f} | {gbs:.0f} |", flush=True)


if __name__ == "__main__":
    main()
