"""GPU timing shared by the benchmark scripts (decode_compare, prefill_compare, sampling_compare,
decode_split_sweep, the block-table scripts, gemm_compare, moe_compare): what a call costs the GPU, what one call costs end to
end, and what it costs the host.

median_us: the median over `samples` bursts of BURST calls, each burst queued behind a GPU sleep
(so the host has enqueued the whole burst before the GPU starts it) and timed by CUDA events,
divided by BURST: the GPU time of a call as a CUDA graph or a busy stream runs it. The host's cost
of issuing a call, which differs between libraries (Python, the framework, the launches), stays
out, so both sides of a comparison are measured alike.

single_call_us: one call on an idle GPU with events around it: its GPU time plus the host's cost
of issuing it (what a caller that waits on every call sees).

read_bandwidth: bytes per second a torch.sum reads from a 2 GiB tensor (the read floor the GEMM
and MoE scripts quote); rotating: a call that cycles through a list of calls (input sets).

host_us: the host time of one call issued to an idle GPU, by the host's clock, so that no call
waits on the device.

settle_s (both): seconds the GPU idles before the warmup. A measurement that follows a long
bandwidth-bound one otherwise starts at the lower clocks that load left (decode at batch 1,
32k keys: 44.5 us fresh, 49.0 us right after the batch-128 shape's SDPA runs), which penalises
whichever library a script times first.
"""

import statistics
import time

import torch

BURST = 10
SLEEP_CYCLES = 2_000_000  # ~1 ms: longer than the host needs to enqueue a burst
WARMUP = 3


def _median_per_call(fn, samples, burst, queued, settle_s):
    """Median over samples of (event time of `burst` calls) / burst, in microseconds."""
    if settle_s > 0:
        torch.cuda.synchronize()
        time.sleep(settle_s)
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(burst):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / burst)
    return statistics.median(times)


def median_us(fn, samples, settle_s=0.0):
    """GPU time of one call of fn, in microseconds."""
    return _median_per_call(fn, samples, BURST, True, settle_s)


def single_call_us(fn, samples, settle_s=0.0):
    """One call of fn on an idle GPU, in microseconds: GPU time plus the host's cost of issuing it."""
    return _median_per_call(fn, samples, 1, False, settle_s)


def host_us(fn, samples):
    """Median host time of one call of fn issued to an idle GPU (synchronized between calls,
    untimed), in microseconds."""
    times = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def read_bandwidth():
    """Bytes per second torch.sum reads from a 2 GiB tensor (median)."""
    x = torch.ones(1 << 30, device="cuda", dtype=torch.bfloat16)
    us = median_us(lambda: x.sum(dtype=torch.float32), 10)
    return x.numel() * 2 / (us * 1e-6)


def rotating(calls):
    """A function calling calls[i % len(calls)] on its i-th invocation."""
    state = {"i": 0}

    def call():
        calls[state["i"] % len(calls)]()
        state["i"] += 1
    return call
