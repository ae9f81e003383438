"""One decode shape, ignis only, for profilers (ncu, nsys): builds a paged cache like
bench/decode_compare.py, plans once and runs the batch decode a few times.

    PYTHONPATH=build/python python3 bench/decode_one.py BATCH KV_LEN [--qo-heads 32] [--kv-heads 8]
        [--page 16] [--layout NHD] [--kv bf16|fp8_e4m3|fp8_e5m2] [--runs 5]
e.g. ncu --kernel-name regex:decode_attention --launch-skip 3 --launch-count 1 python3 bench/decode_one.py 64 4096
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_compare import HEAD_DIM, paged_copy  # noqa: E402

import ignis  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("batch", type=int)
    parser.add_argument("kv_len", type=int)
    parser.add_argument("--qo-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--layout", default="NHD")
    parser.add_argument("--kv", default="bf16", choices=("bf16", "fp8_e4m3", "fp8_e5m2"))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    kv_dtype = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[args.kv]
    k = torch.randn(args.batch, args.kv_heads, args.kv_len, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    q = torch.randn(args.batch, args.qo_heads, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    cache, indptr, indices, last = paged_copy(k, v, args.page, args.layout, kv_dtype)
    del k, v
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, args.layout)
    wrapper.plan(indptr, indices, last, args.qo_heads, args.kv_heads, HEAD_DIM, args.page,
                 q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
    out = torch.empty_like(q)
    for _ in range(args.runs):
        wrapper.run(q, cache, out=out)
    torch.cuda.synchronize()
    print(f"decode B{args.batch} L{args.kv_len} {args.qo_heads}/{args.kv_heads} page{args.page} "
          f"{args.layout} {args.kv}: {args.runs} runs done")


if __name__ == "__main__":
    main()
