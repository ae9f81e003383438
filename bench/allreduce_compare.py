#!/usr/bin/env python3
"""Side by side on the GPUs of one host, one process per GPU: ignis' tensor-parallel all-reduce
(include/ignis/comm.h, through ignis.comm) against NCCL's all-reduce through torch.distributed, on
issue 23's shapes, with ratios measured in the same run.

    all-reduce, bf16, 16 KB..64 MB   NCCL dist.all_reduce (in place)   vs ignis.comm.all_reduce
                                                                          algo oneshot, twoshot, auto
                                                                          (out of place, as engines call it)
    kARResidualRMSNorm               dist.all_reduce + ignis.norm.fused_add_rmsnorm
                                                                       vs ignis.comm.allreduce_fusion
    kARResidualRMSNormFP8Quant       dist.all_reduce + ignis.norm.fused_add_rmsnorm_quant
                                                                       vs ignis.comm.allreduce_fusion
      (1..512 tokens x hidden 4096, 7168; ignis with use_oneshot True, False and None = auto)

Processes: torchrun starts one per GPU (LOCAL_RANK picks it). The baseline runs on the default NCCL
process group; ignis' workspace (one, sized for the largest message) exchanges its CUDA IPC handles
through a separate gloo group (create_allreduce_fusion_workspace(group=...)), which also carries the
barriers and the per-sample maximum over ranks. NCCL is left as the machine configures it
(NCCL_NVLS_ENABLE=0 there: no NVLink multicast on either side).

Timing: both sides captured in CUDA graphs, `calls` calls per graph (64 for small messages, fewer
from 4 MB so a replay stays near 1 ms..4 ms), each call on the next of several input sets that
together exceed twice the L2 (bench/gpu_timing.py's rotating), so the large messages come from HBM.
Each sample is one replay between CUDA events, started after a gloo barrier so the ranks enter
together; a sample's time is the slowest rank's, divided by `calls`; the row shows the median of
--samples samples. The timed inputs hold zeros: NCCL's all-reduce is in place, and repeated sums of
non-zero data would overflow bf16 (neither side's speed depends on the values); the residual and
gamma are random. NCCL's communicator is warmed by an eager call before its capture.

Correctness, once per shape before timing, on random data (each rank its own input, the residual
and gamma the same on every rank as tensor parallelism has them): ignis' result against NCCL's (the
plain sum; for the fused forms the residual out and the normed out, or the fp8 out as floats), the
largest |ignis - NCCL| over max |NCCL|, within (W + 1) x 2^-7 for bf16 (a bf16 step at the largest
value per rounding: NCCL rounds its W-1 partial sums to bf16, ignis the f32 sum once in rank order,
and the fused forms round again after the residual add) and 1/8 for fp8 (one e4m3 step at the top
of the range). A wrong sum is off by O(1). A shape that fails its check is reported and not timed;
a shape that raises (on every rank alike) is reported as FAILED and the run goes on.

Each row: µs per call, bus bandwidth 2(W-1)/W x bytes / time (the message's bytes, also for the
fused rows), ratio = NCCL's µs / ignis' µs (above 1: ignis faster), and issue 23's bar for the row,
judged on ignis' auto: 16 KB..512 KB at most half NCCL's time (ratio >= 2.0), 1 MB..64 MB ratio >=
1.0, fused >= 1.3 against NCCL + fused_add_rmsnorm(_quant). The bar is to be met on 2, 4 and 8 GPUs.

CPU smoke run (no GPU): --device cpu runs everything on gloo alone, the baseline column being
torch.distributed's gloo all_reduce and ignis the CPU backend over POSIX shared memory, timed by
the host's clock (no CUDA graphs); fewer token counts and samples by default. Its numbers say
nothing about the GPU bar ("met" shows "-"); it checks that the script, the exchange and the
correctness checks work.

Usage (the ignis package on PYTHONPATH, e.g. build-gpu/python; one process per GPU):
    torchrun --nproc_per_node=N bench/allreduce_compare.py [--sizes 16K,1M,64M] [--tokens 1,16,512]
        [--hidden 4096,7168] [--samples S] [--skip-fused] [--markdown FILE]
    python3 -m torch.distributed.run --nproc_per_node=2 bench/allreduce_compare.py --device cpu
"""

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ignis
from ignis import comm
from ignis import norm as inorm

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpu_timing import rotating  # noqa: E402

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
EPS = 1e-6
FP8_SCALE = 0.05  # normed values up to ~20 land well inside e4m3's 448
FP8_TOL = 0.125  # one e4m3 step at the top of the range, relative to the largest value
ALGOS = ("oneshot", "twoshot", "auto")
USE_ONESHOT = {"oneshot": True, "twoshot": False, "auto": None}
PATTERNS = (("rmsnorm", comm.AllReduceFusionPattern.kARResidualRMSNorm),
            ("rmsnorm+fp8", comm.AllReduceFusionPattern.kARResidualRMSNormFP8Quant))
GPU_TOKENS = "1,2,4,8,16,32,64,128,256,512"
CPU_TOKENS = "1,32,512"
DEFAULT_SIZES = ",".join("%dK" % (16 << i) for i in range(6)) + "," + ",".join("%dM" % (1 << i) for i in range(7))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    value = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    if value < 2 or value % 2:
        raise argparse.ArgumentTypeError("size %r must be a positive even number of bytes (bf16)" % text)
    return value


def size_label(nbytes):
    for unit, shift in (("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return "%d%s" % (nbytes >> shift, unit)
    return "%dB" % nbytes


class Runner:
    """The world: process groups, device, and how a call is timed there."""

    def __init__(self, args):
        self.args = args
        self.cuda = args.device == "cuda"
        if self.cuda:
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
            dist.init_process_group("nccl", device_id=self.device)
            self.cpu_group = dist.new_group(backend="gloo")
            self.base_group = None  # the default NCCL group
            self.l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
            self.cpu_group = None  # the default (gloo) group
            self.base_group = None
            self.l2 = 0
        self.world, self.rank = dist.get_world_size(), dist.get_rank()

    def calls_for(self, nbytes):
        if self.args.calls:
            return self.args.calls
        if self.cuda:
            return max(4, min(64, (256 << 20) // nbytes))
        return max(2, min(10, (16 << 20) // nbytes))

    def sets_for(self, set_bytes, calls):
        if not self.cuda:
            return 2
        return max(2, min(calls, -(-2 * self.l2 // set_bytes)))

    def slowest(self, values):
        """Per-sample maximum over the ranks."""
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.cpu_group)
        return t.tolist()

    def time_us(self, fn, calls):
        """Median over samples of the slowest rank's time for `calls` calls of fn, per call (µs)."""
        if not self.cuda:
            for _ in range(2):
                fn()
            times = []
            for _ in range(self.args.samples):
                dist.barrier(group=self.cpu_group)
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times.append((time.perf_counter() - t0) * 1e6 / calls)
            return statistics.median(self.slowest(times))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.args.samples):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier(group=self.cpu_group)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3 / calls)
        del graph
        return statistics.median(self.slowest(times))

    def base_all_reduce(self, x):
        dist.all_reduce(x, group=self.base_group)

    def random(self, shape, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=g, dtype=torch.float32).to(BF16).to(self.device)

    def busbw(self, nbytes, us):
        return 2.0 * (self.world - 1) / self.world * nbytes / (us * 1e-6) / 1e9


def bf16_bound(world):
    """Largest |ignis - NCCL| / max |NCCL| accepted for bf16: NCCL rounds each of its W-1 partial sums
    to bf16, ignis the f32 sum once, and the fused forms round again after the residual add; one bf16
    step at the largest value is up to 2^-7 of it."""
    return (world + 1) * 2.0 ** -7


def max_rel(ours, ref):
    ours, ref = ours.float().cpu(), ref.float().cpu()
    return float((ours - ref).abs().max() / ref.abs().max().clamp(min=1e-30))


def bar_of(nbytes, fused):
    """Issue 23's minimum ratio (NCCL µs / ignis µs) for this row, or None where it sets none."""
    if fused:
        return 1.3
    if nbytes <= 512 << 10:
        return 2.0
    if nbytes >= 1 << 20:
        return 1.0
    return None


def bar_cells(r, ratio, nbytes, fused):
    need = bar_of(nbytes, fused)
    if need is None:
        return "-", "-"
    met = ("yes" if ratio >= need else "NO") if r.cuda else "-"
    return ">= %.1fx" % need, met


def allreduce_row(r, ws, nbytes):
    n = nbytes // 2
    bf16_tol = bf16_bound(r.world)
    x = r.random(n, 1000 + r.rank)
    ref = x.clone()
    r.base_all_reduce(ref)
    worst = 0.0
    for algo in ALGOS:
        worst = max(worst, max_rel(comm.all_reduce(x, ws, algo=algo, out=torch.empty_like(x)), ref))
    if worst > bf16_tol:
        return "| %s | %d | check FAILED: max rel diff %.3g > %.3g |" % (size_label(nbytes), r.world, worst, bf16_tol)
    calls = r.calls_for(nbytes)
    sets = r.sets_for(2 * nbytes, calls)
    ins = [torch.zeros(n, dtype=BF16, device=r.device) for _ in range(sets)]
    outs = [torch.empty_like(t) for t in ins]
    base_us = r.time_us(rotating([lambda t=t: r.base_all_reduce(t) for t in ins]), calls)
    us = {}
    for algo in ALGOS:
        us[algo] = r.time_us(rotating([lambda a=a, b=b, algo=algo: comm.all_reduce(a, ws, algo=algo, out=b)
                                       for a, b in zip(ins, outs)]), calls)
    ws.check()
    need, met = bar_cells(r, base_us / us["auto"], nbytes, False)
    return "| %s | %d | %.2f | %.2f | %.2f | %.2f | %s | %.3g | %.3g | %.2f | %.2f | %.2f | %s | %s | %.2g |" % (
        size_label(nbytes), r.world, base_us, us["oneshot"], us["twoshot"], us["auto"], ws.choose(nbytes),
        r.busbw(nbytes, base_us), r.busbw(nbytes, us["auto"]), base_us / us["oneshot"], base_us / us["twoshot"],
        base_us / us["auto"], need, met, worst)


def fused_call(ws, pattern, x, res_in, res_out, out, gamma, scale, algo):
    if pattern == comm.AllReduceFusionPattern.kARResidualRMSNorm:
        comm.allreduce_fusion(x, ws, pattern, residual_in=res_in, residual_out=res_out, norm_out=out,
                              rms_gamma=gamma, rms_eps=EPS, use_oneshot=USE_ONESHOT[algo])
    else:
        comm.allreduce_fusion(x, ws, pattern, residual_in=res_in, residual_out=res_out, quant_out=out,
                              rms_gamma=gamma, rms_eps=EPS, scale_factor=scale, use_oneshot=USE_ONESHOT[algo])


def base_fused(r, pattern, x, res, out, gamma, scale):
    """NCCL's all-reduce, then ignis' fused add + RMSNorm (+ fp8): x and res in place, out the fp8."""
    r.base_all_reduce(x)
    if pattern == comm.AllReduceFusionPattern.kARResidualRMSNorm:
        inorm.fused_add_rmsnorm(x, res, gamma, EPS)
    else:
        inorm.fused_add_rmsnorm_quant(out, x, res, gamma, scale, EPS)


def fused_row(r, ws, name, pattern, tokens, hidden):
    shape = (tokens, hidden)
    nbytes = tokens * hidden * 2
    fp8 = pattern != comm.AllReduceFusionPattern.kARResidualRMSNorm
    bf16_tol = bf16_bound(r.world)
    gamma = r.random(hidden, 7)
    scale = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=r.device)
    x = r.random(shape, 2000 + r.rank)
    res = r.random(shape, 3)
    bx, bres = x.clone(), res.clone()
    bq = torch.empty(shape, dtype=E4M3, device=r.device) if fp8 else None
    base_fused(r, pattern, bx, bres, bq, gamma, scale)
    worst, worst_fp8 = 0.0, 0.0
    for algo in ALGOS:
        res_out = torch.empty_like(res)
        out = torch.empty(shape, dtype=E4M3 if fp8 else BF16, device=r.device)
        fused_call(ws, pattern, x, res, res_out, out, gamma, scale, algo)
        worst = max(worst, max_rel(res_out, bres))
        if fp8:
            worst_fp8 = max(worst_fp8, max_rel(out, bq))
        else:
            worst = max(worst, max_rel(out, bx))
    label = "| %s | %d | %d | %d |" % (name, tokens, hidden, r.world)
    diff = "%.2g" % worst + (", fp8 %.2g" % worst_fp8 if fp8 else "")
    if worst > bf16_tol or worst_fp8 > FP8_TOL:
        return label + " check FAILED: max rel diff %s (bounds %.3g, fp8 %.3g) |" % (diff, bf16_tol, FP8_TOL)
    calls = r.calls_for(nbytes)
    sets = r.sets_for(3 * nbytes, calls)
    xs = [torch.zeros(shape, dtype=BF16, device=r.device) for _ in range(sets)]
    ress = [r.random(shape, 3) for _ in range(sets)]
    outs = [torch.empty(shape, dtype=E4M3 if fp8 else BF16, device=r.device) for _ in range(sets)]
    base_us = r.time_us(rotating([lambda a=a, s=s, o=o: base_fused(r, pattern, a, s, o, gamma, scale)
                                  for a, s, o in zip(xs, ress, outs)]), calls)
    us = {}
    for algo in ALGOS:
        us[algo] = r.time_us(rotating([lambda a=a, s=s, o=o, algo=algo: fused_call(ws, pattern, a, s, s, o, gamma,
                                                                                   scale, algo)
                                       for a, s, o in zip(xs, ress, outs)]), calls)
    ws.check()
    need, met = bar_cells(r, base_us / us["auto"], nbytes, True)
    return label + " %.2f | %.2f | %.2f | %.2f | %s | %.3g | %.2f | %.2f | %.2f | %s | %s | %s |" % (
        base_us, us["oneshot"], us["twoshot"], us["auto"], ws.choose(nbytes), r.busbw(nbytes, us["auto"]),
        base_us / us["oneshot"], base_us / us["twoshot"], base_us / us["auto"], need, met, diff)


def guarded(label, row, *args):
    """row(*args), or a FAILED row naming the exception (every rank raises alike: same shapes)."""
    try:
        return row(*args)
    except Exception as e:  # noqa: BLE001 - report the failing shape and go on
        return label + " FAILED: %s: %s |" % (type(e).__name__, (str(e).splitlines() or [""])[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="all-reduce message sizes, e.g. 16K,1M,64M")
    parser.add_argument("--tokens", default=None, help="fused token counts (default %s; cpu %s)"
                        % (GPU_TOKENS, CPU_TOKENS))
    parser.add_argument("--hidden", default="4096,7168", help="fused hidden sizes")
    parser.add_argument("--skip-fused", action="store_true", help="time the plain all-reduce only")
    parser.add_argument("--samples", type=int, default=None, help="replays per row (default 20; cpu 5)")
    parser.add_argument("--calls", type=int, default=None, help="calls per replay (default by size)")
    parser.add_argument("--markdown", default=None, help="rank 0 also writes the tables to this file")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    tokens = [int(t) for t in (args.tokens or (GPU_TOKENS if args.device == "cuda" else CPU_TOKENS)).split(",")]
    hiddens = [int(h) for h in args.hidden.split(",")]
    if args.samples is None:
        args.samples = 20 if args.device == "cuda" else 5
    if args.skip_fused:
        tokens = []

    r = Runner(args)
    capacity = max(sizes + [t * h * 2 for t in tokens for h in hiddens])
    hidden_dim = max(hiddens)
    ws = comm.create_allreduce_fusion_workspace(world_size=r.world, rank=r.rank, hidden_dim=hidden_dim,
                                                max_token_num=-(-capacity // (hidden_dim * 2)), dtype=BF16,
                                                group=r.cpu_group, device=str(r.device))
    lines = []

    def emit(line):
        if r.rank == 0:
            lines.append(line)
            print(line, flush=True)

    base = "NCCL" if r.cuda else "gloo"
    where = ("%s x%d, NCCL %s" % (torch.cuda.get_device_name(r.device), r.world,
                                  ".".join(map(str, torch.cuda.nccl.version())))
             if r.cuda else "cpu, %d processes (gloo; ignis CPU backend)" % r.world)
    emit("# allreduce_compare: %s, torch %s, ignis %s; bf16, %d samples; ratio = %s us / ignis us"
         % (where, torch.__version__, ignis.__version__, args.samples, base))
    emit("")
    emit("| size | W | %s us | oneshot us | twoshot us | auto us | auto runs | %s GB/s | auto GB/s | "
         "oneshot ratio | twoshot ratio | auto ratio | bar | met | max rel diff |" % (base, base))
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for nbytes in sizes:
        emit(guarded("| %s | %d |" % (size_label(nbytes), r.world), allreduce_row, r, ws, nbytes))
    if tokens:
        emit("")
        emit("| fused | tokens | hidden | W | %s+norm us | oneshot us | twoshot us | auto us | auto runs | "
             "auto GB/s | oneshot ratio | twoshot ratio | auto ratio | bar | met | max rel diff |" % base)
        emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, pattern in PATTERNS:
            for hidden in hiddens:
                for t in tokens:
                    emit(guarded("| %s | %d | %d | %d |" % (name, t, hidden, r.world), fused_row, r, ws, name,
                                 pattern, t, hidden))
    if r.cuda:
        torch.cuda.synchronize()
    dist.barrier(group=r.cpu_group)
    ws.destroy()
    if args.markdown and r.rank == 0:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
