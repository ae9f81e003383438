#!/usr/bin/env python3
"""Side by side on the GPU, in one process: ignis against the PyTorch eager baselines of
../shared/ANCHORS.md (optionally torch.compile too), with ratios measured in the same run.

For every op and shape the two implementations run on the same input sets:
  - rmsnorm:            F.rms_norm(x, (H,), w, eps)
  - fused_add_rmsnorm:  residual.add_(x) then F.rms_norm(residual, ...) into a new tensor (the
                        in-place semantics of the fused op, minus the copy back into x, which
                        would only slow the baseline down)
  - silu_and_mul:       F.silu(x[..., :H]) * x[..., H:]   (shape quoted: the output [T, H])
  - RoPE:               eager NeoX rotate-half with a precomputed f32 cos/sin cache gathered by
                        position (vLLM's forward_native), in place via copy_ or out of place.

Timing: CUDA events on the current stream, median of many samples. Inputs rotate over several
sets: for shapes that move 64 MiB or more per call, enough sets that together they exceed twice
the L2, one launch per sample; for smaller shapes, many calls (100 per graph, each on the next
set) are captured in CUDA graphs that are replayed back to back, and the time is divided by the
calls (ignis and the baseline alike). Sets of small shapes are capped at 2000 so the baseline's
many-kernel graphs stay affordable; the working set may then fit in L2, as a decode step's input
does when the previous kernel just wrote it.

Bytes per call are the op's minimum (each input read once, each output written once), the same
count for ignis and the baseline: GB/s = bytes / median time. The copy ceiling is a 1 GiB
device-to-device copy measured here (bytes read + written). Correctness: each shape is also run
once on fresh data and compared with the baseline and with an fp32 reference (max |a - b| over
max |b|); a NaN or an error above the dtype's tolerance fails.

Targets (from the issue): large shapes (16384 tokens) >= 3600 GB/s and >= 1.3x eager; small
shapes (1, 16, 128 tokens) <= 4 us per call; 4096x4096 has none. A missed target is reported, and
fails the exit status only with --strict.

Usage (on the GPU machine; the ignis package on PYTHONPATH, e.g. build-gpu/python):
    python3 bench/compare.py [--dtype bf16] [--markdown FILE] [--jsonl FILE] [--compile] [--only RE]
"""

import argparse
import datetime
import json
import math
import re
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import ignis

EPS = 1e-6
GRAPH_THRESHOLD_BYTES = 64 << 20
CALLS_PER_GRAPH = 100
MAX_SMALL_SETS = 2000
MAX_LARGE_SETS = 64
MAX_POSITION = 32768
Q_HEADS, K_HEADS, HEAD_DIM = 32, 8, 128
LARGE_GBPS_TARGET = 3600.0
LARGE_RATIO_TARGET = 1.3
SMALL_US_TARGET = 4.0
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float32: 5e-3}


def rand(*shape, dtype):
    return torch.empty(shape, dtype=dtype, device="cuda").uniform_(-1.0, 1.0)


def rel_err(a, b):
    """max |a - b| / max |b| in f32; inf for NaN."""
    a, b = a.float(), b.float()
    diff = (a - b).abs().max().item()
    scale = b.abs().max().item()
    err = diff / (scale if scale > 0 else 1.0)
    return err if math.isfinite(err) else math.inf


def positions(sets, tokens, dtype):
    """Distinct positions base + t per set, a random base each (as in one prefill request)."""
    limit = max(MAX_POSITION, tokens)
    base = torch.randint(0, limit - tokens + 1, (sets, 1), device="cuda")
    return (base + torch.arange(tokens, device="cuda")).to(dtype)


def cos_sin_cache(max_position, rotary_dim, theta=1e4):
    """[max_position, rotary_dim] f32: cos of the rotary_dim/2 frequencies, then their sin."""
    inv = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64, device="cuda") / rotary_dim)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float64, device="cuda"), inv)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float()


def torch_rope(q, k, pos, cache):
    """Eager NeoX RoPE (vLLM forward_native): gather cos/sin rows, rotate half. q [T, H, D]."""
    cos, sin = cache.index_select(0, pos).chunk(2, dim=-1)
    cos = cos.unsqueeze(-2).to(q.dtype)
    sin = sin.unsqueeze(-2).to(q.dtype)

    def rotate(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rotate(q), rotate(k)


def torch_rope_inplace(q, k, pos, cache):
    q_rot, k_rot = torch_rope(q, k, pos, cache)
    q.copy_(q_rot)
    k.copy_(k_rot)


# ---- the ops: inputs per set, the ignis call, the baseline, the correctness check -------------
class Op:
    """One op at one shape. build(n) allocates n input sets; ignis_call(i) and
    torch_fn(*torch_args(i)) run on set i; check() returns (err vs baseline, err vs fp32)."""

    name = ""

    def __init__(self, tokens, dtype):
        self.tokens = tokens
        self.dtype = dtype
        self.es = torch.tensor([], dtype=dtype).element_size()

    @property
    def tier(self):
        return "large" if self.tokens >= 16384 else "small" if self.tokens <= 128 else "medium"

    def set_bytes(self):
        """Bytes of one input set (what rotation spreads over the L2)."""
        return self.bytes()


class RMSNorm(Op):
    name = "rmsnorm"

    def __init__(self, tokens, hidden, dtype):
        super().__init__(tokens, dtype)
        self.hidden = hidden

    def shape(self):
        return f"{self.tokens}x{self.hidden}"

    def bytes(self):
        return self.es * (2 * self.tokens * self.hidden + self.hidden)

    def build(self, n):
        self.x = rand(n, self.tokens, self.hidden, dtype=self.dtype)
        self.w = rand(n, self.hidden, dtype=self.dtype)
        self.out = rand(n, self.tokens, self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.rmsnorm(self.x[i], self.w[i], EPS, out=self.out[i])

    def torch_args(self, i):
        return (self.x[i], self.w[i])

    @staticmethod
    def torch_fn(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, EPS)

    def check(self):
        x = rand(self.tokens, self.hidden, dtype=self.dtype)
        w = rand(self.hidden, dtype=self.dtype)
        got = ignis.rmsnorm(x, w, EPS)
        ref = F.rms_norm(x.float(), (self.hidden,), w.float(), EPS)
        return rel_err(got, self.torch_fn(x, w)), rel_err(got, ref)


class FusedAddRMSNorm(RMSNorm):
    name = "fused_add_rmsnorm"

    def bytes(self):
        return self.es * (4 * self.tokens * self.hidden + self.hidden)

    def set_bytes(self):
        return self.es * (2 * self.tokens * self.hidden + self.hidden)

    def build(self, n):
        self.x = rand(n, self.tokens, self.hidden, dtype=self.dtype)
        self.r = rand(n, self.tokens, self.hidden, dtype=self.dtype)
        self.w = rand(n, self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.fused_add_rmsnorm(self.x[i], self.r[i], self.w[i], EPS)

    def torch_args(self, i):
        return (self.x[i], self.r[i], self.w[i])

    @staticmethod
    def torch_fn(x, r, w):
        r.add_(x)
        return F.rms_norm(r, (r.shape[-1],), w, EPS)

    def check(self):
        x = rand(self.tokens, self.hidden, dtype=self.dtype)
        r = rand(self.tokens, self.hidden, dtype=self.dtype)
        w = rand(self.hidden, dtype=self.dtype)
        x_ignis, r_ignis = x.clone(), r.clone()
        ignis.fused_add_rmsnorm(x_ignis, r_ignis, w, EPS)
        r_torch = r.clone()
        y_torch = self.torch_fn(x.clone(), r_torch, w)
        total = x.float() + r.float()
        y_ref = F.rms_norm(total, (self.hidden,), w.float(), EPS)
        return (max(rel_err(x_ignis, y_torch), rel_err(r_ignis, r_torch)),
                max(rel_err(x_ignis, y_ref), rel_err(r_ignis, total)))


class SiluAndMul(RMSNorm):
    name = "silu_and_mul"

    def shape(self):
        return f"{self.tokens}x{self.hidden} (in {self.tokens}x{2 * self.hidden})"

    def bytes(self):
        return self.es * 3 * self.tokens * self.hidden

    def build(self, n):
        self.x = rand(n, self.tokens, 2 * self.hidden, dtype=self.dtype)
        self.out = rand(n, self.tokens, self.hidden, dtype=self.dtype)

    def ignis_call(self, i):
        ignis.silu_and_mul(self.x[i], out=self.out[i])

    def torch_args(self, i):
        return (self.x[i],)

    @staticmethod
    def torch_fn(x):
        h = x.shape[-1] // 2
        return F.silu(x[..., :h]) * x[..., h:]

    def check(self):
        x = rand(self.tokens, 2 * self.hidden, dtype=self.dtype)
        got = ignis.silu_and_mul(x)
        return rel_err(got, self.torch_fn(x)), rel_err(got, self.torch_fn(x.float()))


class RopePosIds(Op):
    """FlashInfer's apply_rope_pos_ids[_inplace]: q [T, 32, 128], k [T, 8, 128], i32 pos_ids."""

    def __init__(self, tokens, dtype, inplace):
        super().__init__(tokens, dtype)
        self.inplace = inplace
        self.name = "rope_pos_ids" + ("_inplace" if inplace else "")
        self.cache = cos_sin_cache(max(MAX_POSITION, tokens), HEAD_DIM)

    def shape(self):
        return f"{self.tokens}tok {Q_HEADS}/{K_HEADS}h d{HEAD_DIM}"

    def qk_bytes(self):
        return self.es * 2 * self.tokens * (Q_HEADS + K_HEADS) * HEAD_DIM

    def bytes(self):
        return self.qk_bytes() + 4 * self.tokens

    def set_bytes(self):
        return self.qk_bytes() // 2 + 8 * self.tokens

    def build(self, n):
        self.q = rand(n, self.tokens, Q_HEADS, HEAD_DIM, dtype=self.dtype)
        self.k = rand(n, self.tokens, K_HEADS, HEAD_DIM, dtype=self.dtype)
        self.pos = positions(n, self.tokens, torch.int32)

    def ignis_call(self, i):
        if self.inplace:
            ignis.apply_rope_pos_ids_inplace(self.q[i], self.k[i], self.pos[i])
        else:
            ignis.apply_rope_pos_ids(self.q[i], self.k[i], self.pos[i])

    def torch_args(self, i):
        return (self.q[i], self.k[i], self.pos[i], self.cache)

    @property
    def torch_fn(self):
        return torch_rope_inplace if self.inplace else torch_rope

    def check(self):
        q = rand(self.tokens, Q_HEADS, HEAD_DIM, dtype=self.dtype)
        k = rand(self.tokens, K_HEADS, HEAD_DIM, dtype=self.dtype)
        pos = positions(1, self.tokens, torch.int32)[0]
        if self.inplace:
            q_got, k_got = q.clone(), k.clone()
            ignis.apply_rope_pos_ids_inplace(q_got, k_got, pos)
        else:
            q_got, k_got = ignis.apply_rope_pos_ids(q, k, pos)
        q_torch, k_torch = torch_rope(q, k, pos, self.cache)
        q_ref, k_ref = torch_rope(q.float(), k.float(), pos, self.cache)
        return (max(rel_err(q_got, q_torch), rel_err(k_got, k_torch)),
                max(rel_err(q_got, q_ref), rel_err(k_got, k_ref)))


class RopeCosSinCache(RopePosIds):
    """vLLM/SGLang form, in place: query [T, 32*128], key [T, 8*128], i64 positions, f32 cache."""

    def __init__(self, tokens, dtype):
        super().__init__(tokens, dtype, inplace=True)
        self.name = "rope_cos_sin_cache_inplace"

    def bytes(self):
        return self.qk_bytes() + 8 * self.tokens + 4 * self.tokens * HEAD_DIM

    def build(self, n):
        self.q = rand(n, self.tokens, Q_HEADS * HEAD_DIM, dtype=self.dtype)
        self.k = rand(n, self.tokens, K_HEADS * HEAD_DIM, dtype=self.dtype)
        self.pos = positions(n, self.tokens, torch.int64)

    def ignis_call(self, i):
        ignis.apply_rope_with_cos_sin_cache_inplace(self.pos[i], self.q[i], self.k[i], HEAD_DIM, self.cache,
                                                    is_neox=True)

    def torch_args(self, i):
        return (self.q[i].view(self.tokens, Q_HEADS, HEAD_DIM), self.k[i].view(self.tokens, K_HEADS, HEAD_DIM),
                self.pos[i], self.cache)

    def check(self):
        q = rand(self.tokens, Q_HEADS * HEAD_DIM, dtype=self.dtype)
        k = rand(self.tokens, K_HEADS * HEAD_DIM, dtype=self.dtype)
        pos = positions(1, self.tokens, torch.int64)[0]
        q_got, k_got = q.clone(), k.clone()
        ignis.apply_rope_with_cos_sin_cache_inplace(pos, q_got, k_got, HEAD_DIM, self.cache, is_neox=True)

        def heads(t, h):
            return t.view(self.tokens, h, HEAD_DIM)

        q_torch, k_torch = torch_rope(heads(q, Q_HEADS), heads(k, K_HEADS), pos, self.cache)
        q_ref, k_ref = torch_rope(heads(q, Q_HEADS).float(), heads(k, K_HEADS).float(), pos, self.cache)
        q_got, k_got = heads(q_got, Q_HEADS), heads(k_got, K_HEADS)
        return (max(rel_err(q_got, q_torch), rel_err(k_got, k_torch)),
                max(rel_err(q_got, q_ref), rel_err(k_got, k_ref)))


def cases(dtype, quick):
    large = [] if quick else [
        RMSNorm(16384, 8192, dtype), FusedAddRMSNorm(16384, 8192, dtype), SiluAndMul(16384, 8192, dtype),
        RopePosIds(16384, dtype, inplace=True), RopePosIds(16384, dtype, inplace=False),
        RopeCosSinCache(16384, dtype),
        RMSNorm(4096, 4096, dtype), FusedAddRMSNorm(4096, 4096, dtype), SiluAndMul(4096, 4096, dtype),
    ]
    small = []
    for tokens in (1, 16, 128):
        small += [RMSNorm(tokens, 4096, dtype), FusedAddRMSNorm(tokens, 4096, dtype),
                  SiluAndMul(tokens, 4096, dtype), RopePosIds(tokens, dtype, inplace=True),
                  RopeCosSinCache(tokens, dtype)]
    return large + small


# ---- timing ----------------------------------------------------------------------------------
def stats(samples):
    ordered = sorted(samples)
    return {"median_us": statistics.median(ordered), "min_us": ordered[0],
            "p90_us": ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]}


def time_direct(fn, sets, samples, warmup=3):
    """Events around each launch, set i % sets for call i."""
    for i in range(warmup):
        fn(i % sets)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(samples + 1)]
    events[0].record()
    for s in range(samples):
        fn((warmup + s) % sets)
        events[s + 1].record()
    events[-1].synchronize()
    return stats([events[s].elapsed_time(events[s + 1]) * 1e3 for s in range(samples)])


def time_graphs(fn, sets, samples):
    """CALLS_PER_GRAPH calls per graph, call g*C+i on set (g*C+i) % sets; all graphs replayed back
    to back per sample; time per call."""
    for i in range(3):  # outside capture: lazy initialization and module loading
        fn(i % sets)
    torch.cuda.synchronize()
    count = max(1, math.ceil(sets / CALLS_PER_GRAPH))
    graphs, pool = [], None
    for g in range(count):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            for i in range(CALLS_PER_GRAPH):
                fn((g * CALLS_PER_GRAPH + i) % sets)
        pool = graph.pool()
        graphs.append(graph)
    for graph in graphs:
        graph.replay()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(samples + 1)]
    events[0].record()
    for s in range(samples):
        for graph in graphs:
            graph.replay()
        events[s + 1].record()
    events[-1].synchronize()
    calls = count * CALLS_PER_GRAPH
    result = stats([events[s].elapsed_time(events[s + 1]) * 1e3 / calls for s in range(samples)])
    del graphs
    return result


def copy_ceiling():
    """1 GiB device-to-device copy, bytes read + written, median of 10 after 3 warm-ups."""
    size = 1 << 30
    src = torch.empty(size, dtype=torch.uint8, device="cuda").random_(1, 255)
    dst = torch.empty_like(src).random_(1, 255)
    result = time_direct(lambda i: dst.copy_(src), 1, 10)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * size / (result["median_us"] * 1e-6) / 1e9


def measure(op, l2_bytes, args):
    row = {"op": op.name, "shape": op.shape(), "dtype": args.dtype, "tier": op.tier, "bytes": op.bytes()}
    graph = op.bytes() < GRAPH_THRESHOLD_BYTES
    sets = max(2, (2 * l2_bytes) // op.set_bytes() + 1)
    sets = min(sets, MAX_SMALL_SETS if graph else MAX_LARGE_SETS)
    samples = args.iters or (10 if graph else 30)
    row.update(mode="graph" if graph else "direct", sets=sets, samples=samples)
    err_torch, err_ref = op.check()
    row.update(err_vs_eager=err_torch, err_vs_fp32=err_ref,
               check="PASS" if err_ref <= TOLERANCE[op.dtype] else "FAIL")
    op.build(sets)
    timer = time_graphs if graph else time_direct
    row["ignis"] = timer(op.ignis_call, sets, samples)
    row["eager"] = timer(lambda i: op.torch_fn(*op.torch_args(i)), sets, samples)
    if args.compile:
        compiled = torch.compile(op.torch_fn, dynamic=False)
        compiled(*op.torch_args(0))
        row["compiled"] = timer(lambda i: compiled(*op.torch_args(i)), sets, samples)
    return row


def judge(row, ceiling):
    """Add GB/s, ratios and the target verdict."""
    for impl in ("ignis", "eager", "compiled"):
        if impl in row:
            row[impl]["gbps"] = row["bytes"] / (row[impl]["median_us"] * 1e-6) / 1e9
    row["ratio_eager"] = row["eager"]["median_us"] / row["ignis"]["median_us"]
    if "compiled" in row:
        row["ratio_compiled"] = row["compiled"]["median_us"] / row["ignis"]["median_us"]
    row["fraction_of_ceiling"] = row["ignis"]["gbps"] / ceiling
    if row["tier"] == "large":
        row["target"] = f">= {LARGE_GBPS_TARGET:.0f} GB/s and >= {LARGE_RATIO_TARGET}x eager"
        met = row["ignis"]["gbps"] >= LARGE_GBPS_TARGET and row["ratio_eager"] >= LARGE_RATIO_TARGET
    elif row["tier"] == "small":
        row["target"] = f"<= {SMALL_US_TARGET:.0f} us/call"
        met = row["ignis"]["median_us"] <= SMALL_US_TARGET
    else:
        row["target"], met = "-", None
    row["result"] = "-" if met is None else "PASS" if met else "FAIL"


# ---- output ----------------------------------------------------------------------------------
def markdown_table(rows, with_compiled):
    head = ["op", "shape", "dtype", "mode", "ignis us", "ignis GB/s", "eager us", "eager GB/s", "eager/ignis"]
    if with_compiled:
        head += ["compiled us", "compiled/ignis"]
    head += ["ignis % copy", "err vs eager", "err vs fp32", "check", "target", "result"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if "error" in row:
            cells = [row["op"], row["shape"], row["dtype"], "ERROR"] + [""] * (len(head) - 5) + [row["error"]]
        else:
            cells = [row["op"], row["shape"], row["dtype"], row["mode"],
                     f"{row['ignis']['median_us']:.2f}", f"{row['ignis']['gbps']:.0f}",
                     f"{row['eager']['median_us']:.2f}", f"{row['eager']['gbps']:.0f}",
                     f"{row['ratio_eager']:.2f}x"]
            if with_compiled:
                cells += [f"{row['compiled']['median_us']:.2f}", f"{row['ratio_compiled']:.2f}x"]
            cells += [f"{100 * row['fraction_of_ceiling']:.1f}%", f"{row['err_vs_eager']:.1e}",
                      f"{row['err_vs_fp32']:.1e}", row["check"], row["target"], row["result"]]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--iters", type=int, default=0, help="timed samples (default 30 direct, 10 graph)")
    parser.add_argument("--markdown", help="write the report (markdown) here")
    parser.add_argument("--jsonl", help="append one JSON object per row here")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile baselines")
    parser.add_argument("--only", help="regular expression over 'op shape': run only the matching cases")
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    parser.add_argument("--strict", action="store_true", help="a missed performance target fails too")
    return parser.parse_args()


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("compare.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    dtype = DTYPES[args.dtype]
    props = torch.cuda.get_device_properties(0)
    l2_bytes = props.L2_cache_size
    ceiling = copy_ceiling()
    header = [
        f"# ignis vs PyTorch eager ({args.dtype})",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- device: {props.name}, {props.multi_processor_count} SMs, L2 {l2_bytes / 2**20:.0f} MiB",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}); ignis {ignis.version()}: {ignis.build_info()}",
        f"- copy ceiling: {ceiling:.0f} GB/s (1 GiB device-to-device copy, read+write bytes, median of 10)",
        "- time: median per call; direct = events around each launch (inputs rotated over > 2x L2); "
        f"graph = {CALLS_PER_GRAPH} calls per CUDA graph, graphs replayed back to back, time / calls",
        "- GB/s: the op's minimum bytes (inputs read once, outputs written once) over the median time, "
        "the same bytes for both; eager/ignis = eager time / ignis time",
        "- err: max |a - b| / max |b| on fresh data; check PASS when err vs fp32 <= "
        f"{TOLERANCE[dtype]:g}",
        "",
    ]
    print("\n".join(header), flush=True)
    rows = []
    selected = [op for op in cases(dtype, args.quick)
                if not args.only or re.search(args.only, f"{op.name} {op.shape()}")]
    for n, op in enumerate(selected, 1):
        start = time.time()
        print(f"[{n}/{len(selected)}] {op.name} {op.shape()}", file=sys.stderr, flush=True)
        try:
            row = measure(op, l2_bytes, args)
            judge(row, ceiling)
        except Exception as exc:  # report and go on: one broken op must not hide the others
            traceback.print_exc()
            row = {"op": op.name, "shape": op.shape(), "dtype": args.dtype,
                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
        row["seconds"] = round(time.time() - start, 2)
        rows.append(row)
        for name in [a for a in vars(op) if isinstance(getattr(op, a), torch.Tensor)]:
            delattr(op, name)
        torch.cuda.empty_cache()
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps({"record": "compare", "ceiling_gbps": ceiling, **row}) + "\n")

    table = markdown_table(rows, args.compile)
    judged = [r for r in rows if r.get("result") in ("PASS", "FAIL")]
    errors = [r for r in rows if "error" in r]
    wrong = [r for r in rows if r.get("check") == "FAIL"]
    missed = [r for r in judged if r["result"] == "FAIL"]
    summary = (f"targets met: {len(judged) - len(missed)}/{len(judged)}; correctness failures: {len(wrong)}; "
               f"errors: {len(errors)}")
    print(table + "\n\n" + summary)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(header) + "\n" + table + "\n\n" + summary + "\n")
    failed = errors or wrong or (args.strict and missed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
