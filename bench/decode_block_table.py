"""Block-table decode (FlashInfer's xqa_batch_decode_with_kv_cache as vLLM calls it on the H200, through
ignis.trtllm: no plan, nothing per step on the host beyond the call) side by side with the wrapper path
(BatchDecodeWithPagedKVCacheWrapper.plan once, then run) on the same paged bf16 cache, in one process.

Shapes: 32 query / 8 KV heads, head dim 128, page 16, NHD, pages in random order; batch x KV length
64x4096, 256x2048, 128x8192, 1x32768, 16x16384 with 64 query heads, and a batch of 64 with mixed
lengths (uniform in 1..8192, max_seq_len the longest). Batches of two or more requests below one wave
of the GPU (here B64 L4096, B16 L16384 and the mixed B64) are planned from their seq_lens on the device
by the attention kernel's blocks, each for itself after its wait on the previous kernel, so they run
the wrapper's split and their time includes that planning; the others take the split of a uniform
batch at max_seq_len (as the wrapper does for those lengths). Times are GPU time (gpu_timing.median_us:
bursts queued behind a GPU sleep); "host us" is the host time of one call (median, issued to an idle
GPU: synchronized between calls, untimed; the wrapper's is plan + run, as an engine pays per step
without CUDA graphs). The bar (the engines-switch issue's): block-table time / wrapper time <= 1.02 for every shape; the
outputs must agree (max |a - b| / max |b| <= 1e-2). Exit status 1 when a bar fails.

    PYTHONPATH=build/python python3 bench/decode_block_table.py [--markdown FILE] [--iters N]
"""

import argparse
import sys

import torch

import ignis
from gpu_timing import BURST, host_us, median_us
from ignis.trtllm import xqa_batch_decode_with_kv_cache
from report import emit, targets_with_count

SETTLE_S = 1.0
HEAD_DIM, PAGE = 128, 16
SHAPES = [  # batch, kv_len (None: mixed), qo_heads, kv_heads
    (64, 4096, 32, 8),
    (256, 2048, 32, 8),
    (128, 8192, 32, 8),
    (1, 32768, 32, 8),
    (16, 16384, 64, 8),
    (64, None, 32, 8),
]


def one_shape(batch, kv_len, hq, hkv, iters, workspace):
    gen = torch.Generator().manual_seed(batch * 7 + hq)
    lengths = ([kv_len] * batch if kv_len is not None
               else torch.randint(1, 8193, (batch,), generator=gen).tolist())
    pages_of = [-(-n // PAGE) for n in lengths]
    num_pages = sum(pages_of)
    cache = torch.randn((num_pages, 2, PAGE, hkv, HEAD_DIM), dtype=torch.bfloat16, device="cuda")
    perm = torch.randperm(num_pages, generator=gen).to(torch.int32)
    width = max(pages_of)
    table = torch.zeros((batch, width), dtype=torch.int32)
    indptr = [0]
    for b, n in enumerate(pages_of):
        table[b, :n] = perm[indptr[-1]:indptr[-1] + n]
        indptr.append(indptr[-1] + n)
    indptr = torch.tensor(indptr, dtype=torch.int32)
    last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(lengths, pages_of)], dtype=torch.int32)
    indices = perm.cuda()
    table, seq_lens = table.cuda(), torch.tensor(lengths, dtype=torch.int32, device="cuda")
    q = torch.randn((batch, hq, HEAD_DIM), dtype=torch.bfloat16, device="cuda")
    sm_scale = HEAD_DIM ** -0.5
    max_seq_len = max(lengths)

    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")

    def plan():
        wrapper.plan(indptr, indices, last, hq, hkv, HEAD_DIM, PAGE, q_data_type=torch.bfloat16,
                     kv_data_type=torch.bfloat16, sm_scale=sm_scale)

    plan()
    out_w, out_b = torch.empty_like(q), torch.empty_like(q)
    run_w = lambda: wrapper.run(q, cache, out=out_w)  # noqa: E731
    k_v = (cache[:, 0], cache[:, 1])

    def run_b():
        xqa_batch_decode_with_kv_cache(query=q, kv_cache=k_v, kv_cache_sf=None, workspace_buffer=workspace,
                                       block_tables=table, seq_lens=seq_lens, max_seq_len=max_seq_len,
                                       bmm1_scale=sm_scale, bmm2_scale=1.0, window_left=-1, out=out_b, sinks=None,
                                       kv_layout="NHD", q_len_per_req=1, mask=None, q_cu_seq_lens=None)

    run_w()
    run_b()
    torch.cuda.synchronize()
    err = ((out_b.float() - out_w.float()).abs().max() / out_w.float().abs().max()).item()
    wrapper_us = median_us(run_w, iters, SETTLE_S)
    table_us = median_us(run_b, iters, SETTLE_S)
    wrapper_host = host_us(lambda: (plan(), run_w()), 200)
    table_host = host_us(run_b, 200)
    kv_bytes = sum(lengths) * hkv * HEAD_DIM * 2 * 2
    name = f"B{batch} L{kv_len if kv_len is not None else 'mixed<=8192'} {hq}/{hkv} d{HEAD_DIM} NHD page{PAGE} bf16"
    return {"shape": name, "wrapper_us": wrapper_us, "table_us": table_us, "ratio": table_us / wrapper_us,
            "table_gbs": kv_bytes / table_us / 1e3, "wrapper_host": wrapper_host, "table_host": table_host,
            "err": err}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    workspace = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for batch, kv_len, hq, hkv in SHAPES:
        print(f"block-table decode B{batch} L{kv_len} {hq}/{hkv}", flush=True)
        rows.append(one_shape(batch, kv_len, hq, hkv, args.iters, workspace))
        torch.cuda.empty_cache()
    lines = [
        "# Block-table decode (xqa_batch_decode_with_kv_cache, plan-free) vs the wrapper path (plan + run), bf16",
        "",
        f"- torch {torch.__version__}; {torch.cuda.get_device_name()}; {ignis.build_info()}",
        f"- us: GPU time per call (median of {args.iters} bursts of {BURST} calls queued behind a GPU sleep);",
        "  GB/s: K+V bytes read / the block-table time; host us: one call's host time (wrapper: plan + run)",
        "",
        "| shape | wrapper us | block-table us | block-table / wrapper | block-table GB/s | wrapper host us "
        "| block-table host us | diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['wrapper_us']:.1f} | {r['table_us']:.1f} | {r['ratio']:.3f} | "
                     f"{r['table_gbs']:.0f} | {r['wrapper_host']:.1f} | {r['table_host']:.1f} | {r['err']:.1e} |")
    checks = [(f"{r['shape']}: block-table / wrapper time", f"{r['ratio']:.3f}", "<= 1.02", r["ratio"] <= 1.02)
              for r in rows]
    checks += [(f"{r['shape']}: outputs agree", f"{r['err']:.1e}", "<= 1e-2", r["err"] <= 1e-2) for r in rows]
    table, failed = targets_with_count(checks)
    lines += table
    emit(lines, args.markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
