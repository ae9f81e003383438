"""Host time of BatchDecodeWithPagedKVCacheWrapper.plan: the decode issue asks for at most 10 us at
batch 256 (plan takes host metadata only, never reads device memory, never synchronizes).

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

Prints a markdown table and PASS / FAIL against the 10 us budget at batch 256; exits 1 on FAIL.
"""

import argparse
import statistics
import sys
import time

import numpy as np

import ignis

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


def time_plan(wrapper, arrays, iters, cuda):
    """(median, p90) us with the GPU idle before each call, and the back-to-back median."""
    indptr, indices, last = arrays

    def plan():
        wrapper.plan(indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, PAGE, q_data_type="bfloat16")

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
    for kind in kinds:
        wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        for batch in BATCHES:
            median, p90, back_to_back = time_plan(wrapper, batch_arrays(batch, kind, cuda), args.iters, cuda)
            rows.append((kind, batch, median, p90, back_to_back))
            if batch == 256:
                worst = max(worst, median)
        if cuda:
            torch.cuda.synchronize()
    device = torch.cuda.get_device_name() if cuda else "host (CPU backend)"
    verdict = "PASS" if worst <= BUDGET_US else "FAIL"
    lines = [
        "decode plan() host time on %s: %d heads / %d KV heads, head dim %d, page %d, %d keys per request, "
        "median of %d calls" % (device, HEADS, KV_HEADS, HEAD_DIM, PAGE, KV_LEN, args.iters),
        "",
        "| indptr / last_page_len | batch | median us | p90 us | back-to-back median us |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += ["| %s | %d | %.2f | %.2f | %.2f |" % row for row in rows]
    lines += ["", "%s: worst median at batch 256 is %.2f us (budget %.0f us)" % (verdict, worst, BUDGET_US)]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
