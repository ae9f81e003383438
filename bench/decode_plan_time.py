"""Host time of BatchDecodeWithPagedKVCacheWrapper.plan and of fast_decode_plan: the decode issue asks
for at most 10 us at batch 256 (plan takes host metadata only, never reads device memory, never
synchronizes), the engines-switch issue the same of fast_decode_plan, which vLLM calls on its
CUDA-graph wrappers (persistent index buffers of the largest batch, here 256, the page indices
written into the indices buffer and a view of it passed, as vLLM does) between replays.

Each row re-plans one wrapper with the same configuration (the C plan object is kept; each call
schedules the batch and, on CUDA, copies indptr / last_page_len to the device asynchronously),
with indptr and last_page_len given as PyTorch CPU int32 tensors or NumPy int32 arrays; indices
live where an engine keeps them (on the GPU with a CUDA workspace, else on the host). Shapes are
the decode bench's: 32 query / 8 KV heads, head dim 128, page size 16, bf16, requests of 2048
keys. The time is the median (and 90th percentile) of many calls, each timed with
time.perf_counter_ns after warm-up, with the GPU idle: the stream is synchronized before each call,
outside the timing, as in a serving loop where each step's kernels take far longer than the plan's
small copy. "back-to-back" is the median of calls issued with no synchronization at all: there
each call also waits for the staging slot of the copy four calls back (the plan keeps four), so it
measures the rate of tiny host-to-device copies as much as plan(). Runs on CUDA when PyTorch and ignis's CUDA backend see a GPU,
else on the host (the CPU backend: no device copy, so only a sanity check of the Python path).

    PYTHONPATH=build/python python3 bench/decode_plan_time.py [--markdown FILE] [--iters N] [--device cpu]

Prints a markdown table and PASS / FAIL against the 10 us budget at batch 256 (both calls); exits 1 on
FAIL.
"""

import argparse
import statistics
import sys
import time

import numpy as np

import ignis
from ignis.decode import fast_decode_plan

try:
    import torch
except ImportError:
    torch = None

BATCHES = (1, 64, 256)
BUDGET_US = 10.0
HEADS, KV_HEADS, HEAD_DIM, PAGE, KV_LEN = 32, 8, 128, 16, 2048


def use_cuda(requested):
    available = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
    if requested == "cuda" and not available:
        sys.exit("decode_plan_time: --device cuda but PyTorch / ignis see no CUDA device")
    return available and requested != "cpu"


def graph_buffers(batch, cuda):
    """vLLM's persistent indptr / indices / last_page_len buffers for a CUDA-graph wrapper."""
    pages = (KV_LEN + PAGE - 1) // PAGE
    shapes = (batch + 1, batch * pages, batch)
    if cuda:
        return tuple(torch.zeros(n, dtype=torch.int32, device="cuda") for n in shapes)
    return tuple(np.zeros(n, np.int32) for n in shapes)


def batch_arrays(batch, kind, cuda):
    pages = (KV_LEN + PAGE - 1) // PAGE
    indptr = np.arange(0, batch * pages + 1, pages, dtype=np.int32)
    last = np.full(batch, KV_LEN - (pages - 1) * PAGE, dtype=np.int32)
    indices = np.random.default_rng(batch).permutation(batch * pages).astype(np.int32)
    if kind == "torch-cpu":
        indptr, last, indices = torch.from_numpy(indptr), torch.from_numpy(last), torch.from_numpy(indices)
    if cuda:
        indices = torch.from_numpy(np.asarray(indices)).cuda()
    return indptr, indices, last


def time_plan(wrapper, arrays, iters, cuda, fast=False):
    """(median, p90) us with the GPU idle before each call, and the back-to-back median; fast: the
    call is fast_decode_plan (after one plan), as vLLM re-plans its CUDA-graph wrappers."""
    indptr, indices, last = arrays

    def plan():
        wrapper.plan(indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, PAGE, q_data_type="bfloat16")

    if fast:  # as vLLM: the page table written into the wrapper's indices buffer, a view of it passed
        n = indices.shape[0]
        if cuda:
            wrapper._paged_kv_indices_buf[:n].copy_(indices)
        else:
            wrapper._paged_kv_indices_buf[:n] = indices
        indices = wrapper._paged_kv_indices_buf[:n]
        plan()

        def plan():  # noqa: F811 (vLLM's call: flashinfer.py, after the first plan of the wrapper)
            fast_decode_plan(wrapper, indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, PAGE, "NONE", -1, None,
                             "bfloat16", "bfloat16")

    def sample(idle):
        if idle and cuda:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        plan()
        return time.perf_counter_ns() - start

    for _ in range(100):
        plan()
    idle = sorted(sample(True) for _ in range(iters))
    back_to_back = [sample(False) for _ in range(iters)]
    return (statistics.median(idle) / 1e3, idle[int(0.9 * (len(idle) - 1))] / 1e3,
            statistics.median(back_to_back) / 1e3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args()
    cuda = use_cuda(args.device)
    if cuda:
        workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    else:
        workspace = np.zeros(16, np.uint8)
    kinds = ["numpy"] + (["torch-cpu"] if torch is not None else [])

    rows, worst = [], 0.0
    for call in ("plan", "fast_decode_plan"):
        for kind in kinds:
            if call == "plan":
                wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
            else:  # vLLM's CUDA-graph wrapper: persistent index buffers of the largest batch
                buffers = graph_buffers(max(BATCHES), cuda)
                wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=True,
                                                                   paged_kv_indptr_buffer=buffers[0],
                                                                   paged_kv_indices_buffer=buffers[1],
                                                                   paged_kv_last_page_len_buffer=buffers[2])
            for batch in BATCHES:
                median, p90, back_to_back = time_plan(wrapper, batch_arrays(batch, kind, cuda), args.iters, cuda,
                                                      call != "plan")
                rows.append((call, kind, batch, median, p90, back_to_back))
                if batch == 256:
                    worst = max(worst, median)
            if cuda:
                torch.cuda.synchronize()
    device = torch.cuda.get_device_name() if cuda else "host (CPU backend)"
    verdict = "PASS" if worst <= BUDGET_US else "FAIL"
    lines = [
        "decode plan() / fast_decode_plan() host time on %s: %d heads / %d KV heads, head dim %d, page %d, %d keys per request, "
        "median of %d calls" % (device, HEADS, KV_HEADS, HEAD_DIM, PAGE, KV_LEN, args.iters),
        "",
        "| call | indptr / last_page_len | batch | median us | p90 us | back-to-back median us |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += ["| %s | %s | %d | %.2f | %.2f | %.2f |" % row for row in rows]
    lines += ["", "%s: worst median at batch 256 is %.2f us (budget %.0f us)" % (verdict, worst, BUDGET_US)]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
