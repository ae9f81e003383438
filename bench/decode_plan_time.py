"""Host time of BatchDecodeWithPagedKVCacheWrapper.plan and of fast_decode_plan: the decode issue asks
for at most 10 us at batch 256 (plan takes host metadata only, never reads device memory, never
synchronizes), the engines-switch issue the same of fast_decode_plan, which the engines call on
their CUDA-graph wrappers between replays (persistent index buffers of the largest batch, here 256).

Rows:
- plan: a wrapper without CUDA-graph buffers re-planned with the same configuration (the C plan is
  kept; each call schedules the batch and, on CUDA, copies the schedule to the device
  asynchronously).
- fast_decode_plan (vLLM): vLLM's call after its first plan: the page table written into the
  wrapper's indices buffer and a view of it passed, host indptr / last_page_len, page size 16.
- fast_decode_plan (SGLang): SGLang's begin_forward = partial(fast_decode_plan, w): page size 1,
  the indices buffer itself, device indptr and last_page_len (ones) with the host indptr as
  global_override_indptr_cpu.
indptr and last_page_len are PyTorch CPU int32 tensors or NumPy int32 arrays ("host arrays");
indices live where an engine keeps them (on the GPU with a CUDA workspace, else on the host).
Shapes are the decode bench's: 32 query / 8 KV heads, head dim 128, bf16, requests of 2048 keys.
The time is the median (and 90th percentile) of many calls, each timed with time.perf_counter_ns
after warm-up, with the GPU idle: the stream is synchronized before each call, outside the timing,
as in a serving loop where each step's kernels take far longer than the plan's small copy.
"back-to-back" is the median of calls issued with no synchronization at all: there each call also
waits for the staging slot of the copy four calls back (the plan keeps four), so it measures the
rate of tiny host-to-device copies as much as plan(). "ext call" is the median of the extension
call alone (_ext.decode_plan_update as the wrapper makes it: schedule, upload, on CUDA the
workspace's DLPack export); the rest of a row's median is Python. Runs on CUDA when PyTorch and
ignis's CUDA backend see a GPU, else on the host (the CPU backend: no device copy, so only a
sanity check of the Python path).

    PYTHONPATH=build/python python3 bench/decode_plan_time.py [--markdown FILE] [--iters N] [--device cpu]

Prints a markdown table, then the verdict at batch 256: each call's worst median against the
10 us budget (PASS / FAIL) and fast_decode_plan's median over plan()'s on this machine (host
speed differs up to 2x between machines: compare the two on one). Exits 1 on FAIL.
"""

import argparse
import functools
import statistics
import sys
import time

import numpy as np

import ignis
from ignis import _ext
from ignis.decode import fast_decode_plan
from report import emit

try:
    import torch
except ImportError:
    torch = None

BATCHES = (1, 64, 256)
BAR_BATCH = 256
BUDGET_US = 10.0
HEADS, KV_HEADS, HEAD_DIM, KV_LEN = 32, 8, 128, 2048
FORMS = ("plan", "fast_decode_plan (vLLM)", "fast_decode_plan (SGLang)")
PAGE_OF = {"plan": 16, "fast_decode_plan (vLLM)": 16, "fast_decode_plan (SGLang)": 1}


def use_cuda(requested):
    available = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
    if requested == "cuda" and not available:
        sys.exit("decode_plan_time: --device cuda but PyTorch / ignis see no CUDA device")
    return available and requested != "cpu"


def graph_buffers(batch, page, cuda):
    """An engine's persistent indptr / indices / last_page_len buffers for a CUDA-graph wrapper."""
    pages = (KV_LEN + page - 1) // page
    shapes = (batch + 1, batch * pages, batch)
    if cuda:
        return tuple(torch.zeros(n, dtype=torch.int32, device="cuda") for n in shapes)
    return tuple(np.zeros(n, np.int32) for n in shapes)


def batch_arrays(batch, page, kind, cuda):
    pages = (KV_LEN + page - 1) // page
    indptr = np.arange(0, batch * pages + 1, pages, dtype=np.int32)
    last = np.full(batch, KV_LEN - (pages - 1) * page, dtype=np.int32)
    indices = np.random.default_rng(batch).permutation(batch * pages).astype(np.int32)
    if kind == "torch-cpu":
        indptr, last, indices = torch.from_numpy(indptr), torch.from_numpy(last), torch.from_numpy(indices)
    if cuda:
        indices = torch.from_numpy(np.asarray(indices)).cuda()
    return indptr, indices, last


def on_device(values, cuda):
    """A copy of an int32 host array where the engine keeps its device arrays."""
    return torch.from_numpy(np.asarray(values)).cuda() if cuda else np.array(values)


def plan_call(form, wrapper, arrays, cuda):
    """The call a row times, after the first plan of the wrapper; and the extension call it makes."""
    indptr, indices, last = arrays
    page = PAGE_OF[form]
    wrapper.plan(indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, page, q_data_type="bfloat16")

    def ext():
        _ext.decode_plan_update(wrapper._plan, indptr, last, wrapper._plan_workspace, None, None)

    if form == "plan":
        def call():
            wrapper.plan(indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, page, q_data_type="bfloat16")
    elif form == "fast_decode_plan (vLLM)":  # flashinfer.py, after the first plan of the wrapper
        def call():
            fast_decode_plan(wrapper, indptr, indices, last, HEADS, KV_HEADS, HEAD_DIM, page, "NONE", -1, None,
                             "bfloat16", "bfloat16")
    else:  # SGLang's call_begin_forward through partial(fast_decode_plan, w)
        begin = functools.partial(fast_decode_plan, wrapper)
        device_indptr, device_ones = on_device(indptr, cuda), on_device(np.ones(len(last), np.int32), cuda)

        def call():
            begin(device_indptr, indices, device_ones, HEADS, KV_HEADS, HEAD_DIM, 1, data_type="bfloat16",
                  q_data_type="bfloat16", non_blocking=True, fixed_split_size=None, disable_split_kv=False,
                  global_override_indptr_cpu=indptr)
    return call, ext


def time_call(call, iters, cuda):
    """(median, p90) us with the GPU idle before each call, and the back-to-back median."""

    def sample(idle):
        if idle and cuda:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        call()
        return time.perf_counter_ns() - start

    for _ in range(100):
        call()
    idle = sorted(sample(True) for _ in range(iters))
    back_to_back = [sample(False) for _ in range(iters)]
    return (statistics.median(idle) / 1e3, idle[int(0.9 * (len(idle) - 1))] / 1e3,
            statistics.median(back_to_back) / 1e3)


def make_wrapper(form, workspace, cuda):
    if form == "plan":
        return ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD"), None
    buffers = graph_buffers(max(BATCHES), PAGE_OF[form], cuda)  # the largest batch's, as the engines size them
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph=True,
                                                       paged_kv_indptr_buffer=buffers[0],
                                                       paged_kv_indices_buffer=buffers[1],
                                                       paged_kv_last_page_len_buffer=buffers[2])
    return wrapper, buffers[1]


def engine_indices(form, buffer, indices, cuda):
    """The indices an engine passes: written into the wrapper's indices buffer, then a view of it
    (vLLM) or the buffer itself (SGLang)."""
    if buffer is None:
        return indices
    n = indices.shape[0]
    if cuda:
        buffer[:n].copy_(indices)
    else:
        buffer[:n] = indices
    return buffer[:n] if form == "fast_decode_plan (vLLM)" else buffer


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

    rows, at_bar = [], {}
    for form in FORMS:
        for kind in kinds:
            wrapper, buffer = make_wrapper(form, workspace, cuda)
            for batch in BATCHES:
                indptr, indices, last = batch_arrays(batch, PAGE_OF[form], kind, cuda)
                indices = engine_indices(form, buffer, indices, cuda)
                call, ext = plan_call(form, wrapper, (indptr, indices, last), cuda)
                median, p90, back_to_back = time_call(call, args.iters, cuda)
                ext_median = time_call(ext, args.iters, cuda)[0]
                rows.append((form, kind, batch, median, p90, back_to_back, ext_median, median - ext_median))
                if batch == BAR_BATCH:
                    at_bar[form, kind] = median
            if cuda:
                torch.cuda.synchronize()
    device = torch.cuda.get_device_name() if cuda else "host (CPU backend)"
    lines = [
        "decode plan() / fast_decode_plan() host time on %s: %d heads / %d KV heads, head dim %d, %d keys per "
        "request (page 16; SGLang's form page 1), median of %d calls" % (device, HEADS, KV_HEADS, HEAD_DIM, KV_LEN,
                                                                        args.iters),
        "",
        "| call | host arrays | batch | median us | p90 us | back-to-back median us | ext call us | Python us |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += ["| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |" % row for row in rows]
    lines += ["", "At batch %d (budget %.0f us of host time, each call):" % (BAR_BATCH, BUDGET_US), ""]
    failed = False
    for form in FORMS:
        worst = max(at_bar[form, kind] for kind in kinds)
        verdict = "PASS" if worst <= BUDGET_US else "FAIL"
        failed |= verdict == "FAIL"
        ratios = ", ".join("%s %.2fx" % (kind, at_bar[form, kind] / at_bar["plan", kind]) for kind in kinds)
        lines.append("- %s: %s, worst median %.2f us%s" % (form, verdict, worst,
                                                          "" if form == "plan" else " (over plan(): %s)" % ratios))
    emit(lines, args.markdown)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
