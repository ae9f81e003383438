"""Decode attention (single_decode_with_kv_cache, BatchDecodeWithPagedKVCacheWrapper) against a
float64 NumPy reference on every framework and half dtype present: NHD / HND, GQA groups, kv
lengths 0 .. ~1500 ending mid-page, every option (sm_scale, logits_soft_cap, window_left, both LSE
bases; fp8 K/V with k_scale / v_scale, q_scale, scales on 16-bit K/V, ROPE_LLAMA with rope_scale /
rope_theta, ALIBI, per-head sinks, q_len_per_req > 1), split-KV auto / fixed / disabled,
re-planning (the C plan kept across plans, index arrays of every kind, growing past the maxima),
CUDA-graph buffers and a captured run replayed after re-planning, and the errors."""

import math

import numpy as np
import pytest

import ignis
from refs import FRAMES, decode_ref, ml_dtypes, torch

rng = np.random.default_rng(11)

HALF_FRAMES = [(f, d) for f in FRAMES if f.name != "jax-cpu" for d in f.dtypes if d in ("f16", "bf16")]
HALF_IDS = [f"{f.name}-{d}" for f, d in HALF_FRAMES]
TOL = {"f16": 2e-3, "bf16": 1e-2}


def attention_ref(q, k, v, sm_scale=None, soft_cap=None, window_left=-1, lse_base="2"):
    """q [H, D], k / v [L, Hkv, D] -> out [H, D], lse [H]."""
    heads, dim = q.shape
    kv_len, kv_heads = k.shape[0], k.shape[1]
    scale = sm_scale if sm_scale else 1.0 / math.sqrt(dim)
    out, lse = np.zeros((heads, dim)), np.full(heads, -np.inf)
    start = max(0, kv_len - 1 - window_left) if window_left >= 0 else 0
    for h in range(heads):
        kvh = h // (heads // kv_heads)
        x = scale * (k[start:, kvh] @ q[h])
        if soft_cap:
            x = soft_cap * np.tanh(x / soft_cap)
        if x.size == 0:
            continue
        m = x.max()
        w = np.exp(x - m)
        out[h] = (w @ v[start:, kvh]) / w.sum()
        lse[h] = (m + math.log(w.sum())) / (math.log(2.0) if lse_base == "2" else 1.0)
    return out, lse


def check(got_out, got_lse, ref_out, ref_lse, dtype):
    tol = TOL[dtype]
    scale = max(float(np.abs(ref_out).max()) if ref_out.size else 0.0, 1e-3)
    assert np.all(np.isfinite(got_out))
    err = float(np.abs(got_out - ref_out).max()) if ref_out.size else 0.0
    assert err <= tol * scale, f"out error {err:.3g} > {tol * scale:.3g}"
    if got_lse is not None:
        assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse))
        finite = ~np.isneginf(ref_lse)
        lerr = np.abs(got_lse[finite] - ref_lse[finite]) / (1 + np.abs(ref_lse[finite]))
        assert lerr.size == 0 or float(lerr.max()) <= tol


def rounded(frame, a, dtype):
    x = frame.array(a, dtype)
    return x, frame.numpy(x)


OPTIONS = [
    {},
    {"sm_scale": 0.3, "lse_base": "ln"},
    {"logits_soft_cap": 3.0},
    {"window_left": 20},
]


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kv_len", [0, 1, 7, 300, 1000])
@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_single_decode(frame, dtype, layout, kv_len, opt):
    options = OPTIONS[opt]
    kv_heads, group, dim = 2, 3, 64
    q, qd = rounded(frame, rng.standard_normal((kv_heads * group, dim)), dtype)
    kn, vn = rng.standard_normal((kv_len, kv_heads, dim)), rng.standard_normal((kv_len, kv_heads, dim))
    if layout == "HND":
        k, kd = rounded(frame, kn.transpose(1, 0, 2), dtype)
        v, vd = rounded(frame, vn.transpose(1, 0, 2), dtype)
        kd, vd = kd.transpose(1, 0, 2), vd.transpose(1, 0, 2)
    else:
        k, kd = rounded(frame, kn, dtype)
        v, vd = rounded(frame, vn, dtype)
    out, lse = ignis.single_decode_with_kv_cache(q, k, v, kv_layout=layout, return_lse=True, **options)
    assert type(out) is type(q) and tuple(out.shape) == tuple(q.shape)
    ref_out, ref_lse = attention_ref(qd, kd, vd, options.get("sm_scale"), options.get("logits_soft_cap"),
                                     options.get("window_left", -1), options.get("lse_base", "2"))
    check(frame.numpy(out), np.asarray(frame.numpy(lse)), ref_out, ref_lse, dtype)
    only_out = ignis.single_decode_with_kv_cache(q, k, v, kv_layout=layout, **options)
    check(frame.numpy(only_out), None, ref_out, ref_lse, dtype)


FP8_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def kv_array(frame, a, dtype, kv=None):
    """a (float64) as K/V of the frame: q's dtype, or fp8 (kv "e4m3" / "e5m2"; NumPy through
    ml_dtypes); and the float64 values it holds."""
    if kv is None:
        return rounded(frame, a, dtype)
    name = FP8_NAMES[kv]
    if frame.name == "numpy":
        if ml_dtypes is None:
            pytest.skip("fp8 NumPy arrays need ml_dtypes")
        x = np.asarray(a, np.float32).astype(getattr(ml_dtypes, name))
        return x, x.astype(np.float64)
    x = torch.from_numpy(np.asarray(a, np.float32).copy()).to(getattr(torch, name)).to(frame.device)
    return x, x.float().cpu().numpy().astype(np.float64)


def workspace_for(frame):
    if frame.name == "torch-cuda":
        return torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    return np.zeros(16, np.uint8)


def make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype, kv=None):
    pages = [(n + page_size - 1) // page_size for n in lengths]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    num_pages = int(indptr[-1]) + 2
    indices = rng.permutation(num_pages)[: indptr[-1]].astype(np.int32)
    last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
    inner = (page_size, kv_heads, dim) if layout == "NHD" else (kv_heads, page_size, dim)
    cache, cache_d = kv_array(frame, rng.standard_normal((num_pages, 2) + inner), dtype, kv)
    ks, vs = [], []
    for b, n in enumerate(lengths):
        rows_k, rows_v = [], []
        for j in range(n):
            page, slot = indices[indptr[b] + j // page_size], j % page_size
            if layout == "NHD":
                rows_k.append(cache_d[page, 0, slot])
                rows_v.append(cache_d[page, 1, slot])
            else:
                rows_k.append(cache_d[page, 0, :, slot])
                rows_v.append(cache_d[page, 1, :, slot])
        shape = (0, kv_heads, dim)
        ks.append(np.stack(rows_k) if rows_k else np.zeros(shape))
        vs.append(np.stack(rows_v) if rows_v else np.zeros(shape))
    return indptr, indices, last, cache, ks, vs


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("split", ["auto", "fixed", "disabled"])
def test_batch_decode(frame, dtype, layout, page_size, split):
    kv_heads, group, dim = 2, 4, 128
    lengths = [0, 1, 1500, 37, 600]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), layout)
    options = {"logits_soft_cap": 4.0, "window_left": 700} if split == "fixed" else {}
    wrapper.plan(indptr, frame.index(indices, "i32"), frame.index(last, "i32"), kv_heads * group, kv_heads, dim,
                 page_size, q_data_type="bfloat16" if dtype == "bf16" else "float16",
                 fixed_split_size=(64 // page_size) if split == "fixed" else None,
                 disable_split_kv=split == "disabled", **options)
    q, qd = rounded(frame, rng.standard_normal((len(lengths), kv_heads * group, dim)), dtype)
    for paged in (cache, (cache[:, 0], cache[:, 1])):
        out, lse = wrapper.run(q, paged, return_lse=True)
        got_out, got_lse = frame.numpy(out), np.asarray(frame.numpy(lse))
        for b in range(len(lengths)):
            ref_out, ref_lse = attention_ref(qd[b], ks[b], vs[b], None, options.get("logits_soft_cap"),
                                             options.get("window_left", -1))
            check(got_out[b], got_lse[b], ref_out, ref_lse, dtype)

    # Re-plan the same wrapper with a smaller batch of other lengths.
    lengths2 = [900, 3]
    indptr2, indices2, last2, cache2, ks2, vs2 = make_batch(page_size, lengths2, kv_heads, dim, layout, frame, dtype)
    wrapper.plan(frame.index(indptr2, "i32"), frame.index(indices2, "i32"), last2, kv_heads * group, kv_heads, dim,
                 page_size, q_data_type="bfloat16" if dtype == "bf16" else "float16",
                 fixed_split_size=(64 // page_size) if split == "fixed" else None,
                 disable_split_kv=split == "disabled", **options)
    q2, qd2 = rounded(frame, rng.standard_normal((2, kv_heads * group, dim)), dtype)
    out2 = frame.numpy(wrapper.run(q2, cache2))
    for b in range(2):
        ref_out, _ = attention_ref(qd2[b], ks2[b], vs2[b], None, options.get("logits_soft_cap"),
                                   options.get("window_left", -1))
        check(out2[b], None, ref_out, None, dtype)


@pytest.mark.skipif(not any(f.name == "torch-cuda" for f in FRAMES), reason="needs PyTorch on CUDA")
def test_batch_decode_cuda_graph_buffers():
    frame = next(f for f in FRAMES if f.name == "torch-cuda")
    kv_heads, group, dim, page_size = 1, 8, 128, 16
    lengths = [100, 2000, 5]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, "NHD", frame, "bf16")
    buffers = (torch.empty(9, dtype=torch.int32, device="cuda"), torch.empty(512, dtype=torch.int32, device="cuda"),
               torch.empty(8, dtype=torch.int32, device="cuda"))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), "NHD", use_cuda_graph=True,
                                                       paged_kv_indptr_buffer=buffers[0],
                                                       paged_kv_indices_buffer=buffers[1],
                                                       paged_kv_last_page_len_buffer=buffers[2])
    wrapper.plan(indptr, indices, last, kv_heads * group, kv_heads, dim, page_size, q_data_type=torch.bfloat16,
                 max_kv_len=4096)
    q, qd = rounded(frame, rng.standard_normal((3, kv_heads * group, dim)), "bf16")
    out = frame.numpy(wrapper.run(q, cache))
    for b in range(3):
        ref_out, _ = attention_ref(qd[b], ks[b], vs[b])
        check(out[b], None, ref_out, None, "bf16")


# ---- the options of the extended API: each case is (id, options); "kv" picks fp8 K/V, "sinks" adds
# per-head sinks, "q_len" (batch only) sets q_len_per_req; the rest are keyword arguments.
NEW_OPTIONS = [
    ("fp8e4m3-scales", {"kv": "e4m3", "k_scale": 0.5, "v_scale": 2.0}),
    ("fp8e5m2-ln", {"kv": "e5m2", "k_scale": 1.5, "v_scale": 0.25, "lse_base": "ln"}),
    ("scales-16bit", {"k_scale": 0.5, "v_scale": 3.0, "q_scale": 2.0}),
    ("rope", {"pos_encoding_mode": "ROPE_LLAMA"}),
    ("rope-scaled", {"pos_encoding_mode": "ROPE_LLAMA", "rope_scale": 2.0, "rope_theta": 5e5, "lse_base": "ln"}),
    ("alibi", {"pos_encoding_mode": "ALIBI"}),
    ("sinks", {"sinks": True}),
    ("sinks-alibi-cap-window", {"sinks": True, "pos_encoding_mode": "ALIBI", "logits_soft_cap": 5.0,
                                "window_left": 30}),
    ("fp8-rope-sinks", {"kv": "e4m3", "pos_encoding_mode": "ROPE_LLAMA", "sinks": True, "k_scale": 0.75}),
]
NEW_IDS = [name for name, _ in NEW_OPTIONS]
PLAN_KEYS = ("pos_encoding_mode", "rope_scale", "rope_theta", "logits_soft_cap", "window_left", "lse_base")
RUN_KEYS = ("k_scale", "v_scale", "q_scale")


def sinks_for(frame, heads):
    """Sink logits large enough to matter next to ~1000 keys (f32 on the frame's device), and their
    float64 values."""
    values = rng.uniform(-2.0, 8.0, heads)
    sinks = frame.array(values, "f32")
    return sinks, frame.numpy(sinks)


def reference_kwargs(options, sinks_d):
    ref = {key: options[key] for key in PLAN_KEYS if key in options}
    ref["k_scale"] = options.get("k_scale", 1.0) * options.get("q_scale", 1.0)
    ref["v_scale"] = options.get("v_scale", 1.0)
    ref["sinks"] = sinks_d
    return ref


def rope_scale_of(options):
    """A looser bound for in-kernel RoPE: the rotated q and k are rounded to 16 bits on the GPU."""
    return 2.0 if options.get("pos_encoding_mode") == "ROPE_LLAMA" else 1.0


def check_scaled(got_out, got_lse, ref_out, ref_lse, dtype, factor):
    saved = dict(TOL)
    TOL[dtype] = saved[dtype] * factor
    try:
        check(got_out, got_lse, ref_out, ref_lse, dtype)
    finally:
        TOL.update(saved)


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("kv_len", [0, 1, 7, 300, 1000])
@pytest.mark.parametrize("case", range(len(NEW_OPTIONS)), ids=NEW_IDS)
def test_single_decode_new_options(frame, dtype, kv_len, case):
    options = dict(NEW_OPTIONS[case][1])
    kv, with_sinks = options.pop("kv", None), options.pop("sinks", False)
    kv_heads, group, dim = 2, 4, 64
    q, qd = rounded(frame, rng.standard_normal((kv_heads * group, dim)), dtype)
    k, kd = kv_array(frame, rng.standard_normal((kv_len, kv_heads, dim)), dtype, kv)
    v, vd = kv_array(frame, rng.standard_normal((kv_len, kv_heads, dim)), dtype, kv)
    sinks, sinks_d = sinks_for(frame, kv_heads * group) if with_sinks else (None, None)
    out, lse = ignis.single_decode_with_kv_cache(q, k, v, return_lse=True, sinks=sinks, **options)
    ref_out, ref_lse = decode_ref(qd[None], kd, vd, **reference_kwargs(options, sinks_d))
    check_scaled(frame.numpy(out), np.asarray(frame.numpy(lse)), ref_out[0], ref_lse[0], dtype, rope_scale_of(options))


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("q_len", [1, 3])
@pytest.mark.parametrize("case", range(len(NEW_OPTIONS)), ids=NEW_IDS)
def test_batch_decode_new_options(frame, dtype, q_len, case):
    options = dict(NEW_OPTIONS[case][1])
    kv, with_sinks = options.pop("kv", None), options.pop("sinks", False)
    layout = "HND" if case % 2 else "NHD"
    kv_heads, group, dim, page_size = 2, 3, 64, 16
    lengths = [0, 1, 2, 37, 300, 1000]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype, kv)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), layout)
    plan_options = {key: options[key] for key in PLAN_KEYS if key in options}
    wrapper.plan(indptr, frame.index(indices, "i32"), last, kv_heads * group, kv_heads, dim, page_size,
                 q_data_type="bfloat16" if dtype == "bf16" else "float16",
                 kv_data_type=FP8_NAMES[kv] if kv else None, q_len_per_req=q_len, **plan_options)
    q, qd = rounded(frame, rng.standard_normal((len(lengths) * q_len, kv_heads * group, dim)), dtype)
    sinks, sinks_d = sinks_for(frame, kv_heads * group) if with_sinks else (None, None)
    run_options = {key: options[key] for key in RUN_KEYS if key in options}
    out, lse = wrapper.run(q, cache, return_lse=True, sinks=sinks, **run_options)
    got_out, got_lse = frame.numpy(out), np.asarray(frame.numpy(lse))
    assert got_out.shape == (len(lengths) * q_len, kv_heads * group, dim)
    ref = reference_kwargs(options, sinks_d)
    for b in range(len(lengths)):
        rows = slice(b * q_len, (b + 1) * q_len)
        ref_out, ref_lse = decode_ref(qd[rows], ks[b], vs[b], **ref)
        check_scaled(got_out[rows], got_lse[rows], ref_out, ref_lse, dtype, rope_scale_of(options))


def host_index_kinds():
    """Ways of handing plan() its indptr / last_page_len: the fast path's host int32 arrays, and
    arrays that take the slow path (int64, strided views, lists)."""
    kinds = [("numpy-i32", lambda a: np.asarray(a, np.int32)),
             ("numpy-i64", lambda a: np.asarray(a, np.int64)),
             ("numpy-strided", lambda a: np.repeat(np.asarray(a, np.int32), 2)[::2]),
             ("list", lambda a: [int(x) for x in a])]
    if torch is not None:
        kinds.append(("torch-cpu-i32", lambda a: torch.tensor(np.asarray(a), dtype=torch.int32)))
        kinds.append(("torch-cpu-i64", lambda a: torch.tensor(np.asarray(a), dtype=torch.int64)))
    if any(f.name == "torch-cuda" for f in FRAMES):
        kinds.append(("torch-cuda-i32", lambda a: torch.tensor(np.asarray(a), dtype=torch.int32, device="cuda")))
    return kinds


@pytest.mark.parametrize("frame", [f for f, d in HALF_FRAMES if d == "f16"], ids=lambda f: f.name)
def test_plan_reuse(frame):
    """Re-plans of one wrapper keep its C plan while the configuration is unchanged (whatever kind of
    index arrays plan() gets), make a larger one past the batch bound, a new one for another
    configuration, and every run sees the batch of the last plan."""
    kv_heads, group, dim, page_size = 2, 2, 128, 16
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), "NHD")

    def plan_and_check(lengths, convert, **options):
        indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, "NHD", frame, "f16")
        wrapper.plan(convert(indptr), frame.index(indices, "i32"), convert(last), kv_heads * group, kv_heads, dim,
                     page_size, **options)
        q, qd = rounded(frame, rng.standard_normal((len(lengths), kv_heads * group, dim)), "f16")
        out, lse = wrapper.run(q, cache, return_lse=True)
        for b in range(len(lengths)):
            ref_out, ref_lse = decode_ref(qd[b : b + 1], ks[b], vs[b],
                                          logits_soft_cap=options.get("logits_soft_cap"))
            check(frame.numpy(out)[b], np.asarray(frame.numpy(lse))[b], ref_out[0], ref_lse[0], "f16")

    plan_and_check([5, 40, 300], host_index_kinds()[0][1])
    first = wrapper._plan
    for name, convert in host_index_kinds():
        lengths = list(rng.integers(0, 700, size=int(rng.integers(1, 9))))
        plan_and_check(lengths, convert)
        assert wrapper._plan is first, name
    plan_and_check([0] * 99 + [17], host_index_kinds()[0][1])  # past the first plan's batch bound
    assert wrapper._plan is not first
    grown = wrapper._plan
    plan_and_check([3, 2000], host_index_kinds()[0][1])
    assert wrapper._plan is grown
    plan_and_check([3, 2000], host_index_kinds()[0][1], logits_soft_cap=2.0)
    assert wrapper._plan is not grown
    plan_and_check([3, 200], host_index_kinds()[0][1], fixed_split_size=4)
    fixed = wrapper._plan
    plan_and_check([5000, 7], host_index_kinds()[0][1], fixed_split_size=4)  # past its KV-length bound
    assert wrapper._plan is not fixed


@pytest.mark.skipif(not any(f.name == "torch-cuda" for f in FRAMES), reason="needs PyTorch on CUDA")
@pytest.mark.parametrize("kv", [None, "e4m3"])
def test_batch_decode_cuda_graph_replay(kv):
    """A run captured in a CUDA graph serves later plans of the same wrapper: re-plan (other
    lengths, other pages, a smaller batch), refill q, replay, and compare."""
    frame = next(f for f in FRAMES if f.name == "torch-cuda")
    kv_heads, group, dim, page_size, max_batch = 2, 4, 128, 16, 4
    buffers = (torch.empty(max_batch + 1, dtype=torch.int32, device="cuda"),
               torch.empty(1024, dtype=torch.int32, device="cuda"),
               torch.empty(max_batch, dtype=torch.int32, device="cuda"))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), "NHD", use_cuda_graph=True,
                                                       paged_kv_indptr_buffer=buffers[0],
                                                       paged_kv_indices_buffer=buffers[1],
                                                       paged_kv_last_page_len_buffer=buffers[2])
    plan_options = {"pos_encoding_mode": "ALIBI", "kv_data_type": FP8_NAMES[kv] if kv else None}
    # One pool of pages serves every plan: the captured run reads the same cache tensor.
    num_pages = 600
    cache, cache_d = kv_array(frame, rng.standard_normal((num_pages, 2, page_size, kv_heads, dim)), "bf16", kv)
    sinks, sinks_d = sinks_for(frame, kv_heads * group)
    q = torch.empty(max_batch, kv_heads * group, dim, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(q)

    def plan(lengths):
        pages = [(n + page_size - 1) // page_size for n in lengths]
        indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
        indices = rng.permutation(num_pages)[: indptr[-1]].astype(np.int32)
        last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
        wrapper.plan(torch.from_numpy(indptr), torch.from_numpy(indices).cuda(), torch.from_numpy(last),
                     kv_heads * group, kv_heads, dim, page_size, q_data_type=torch.bfloat16, **plan_options)
        qd = rng.standard_normal((len(lengths), kv_heads * group, dim))
        q[: len(lengths)].copy_(frame.array(qd, "bf16"))
        qd = frame.numpy(q[: len(lengths)])
        refs = []
        for b, n in enumerate(lengths):
            rows = [indices[indptr[b] + j // page_size] for j in range(n)]
            slots = [j % page_size for j in range(n)]
            kd = cache_d[rows, 0, slots] if n else np.zeros((0, kv_heads, dim))
            vd = cache_d[rows, 1, slots] if n else np.zeros((0, kv_heads, dim))
            refs.append(decode_ref(qd[b : b + 1], kd, vd, pos_encoding_mode="ALIBI", k_scale=0.5, v_scale=2.0,
                                   sinks=sinks_d)[0][0])
        return refs

    plan([100, 2000, 5, 700])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        wrapper.run(q, cache, out=out, k_scale=0.5, v_scale=2.0, sinks=sinks)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wrapper.run(q, cache, out=out, k_scale=0.5, v_scale=2.0, sinks=sinks)
    for lengths in ([1500, 3, 64, 0], [17, 4000, 1, 256], [900, 31]):
        refs = plan(lengths)
        graph.replay()
        got = frame.numpy(out)
        for b, ref in enumerate(refs):
            check(got[b], None, ref, None, "bf16")


@pytest.mark.skipif(not any(f.name == "torch-cuda" for f in FRAMES), reason="needs PyTorch on CUDA")
def test_scale_on_cuda_is_refused():
    q = torch.zeros(4, 64, dtype=torch.float16, device="cuda")
    k = torch.zeros(5, 2, 64, dtype=torch.float16, device="cuda")
    with pytest.raises(ignis.UnsupportedError, match="synchronize"):
        ignis.single_decode_with_kv_cache(q, k, k, k_scale=torch.ones(1, device="cuda"))


def test_scale_as_host_tensor():
    q = np.asarray(rng.standard_normal((4, 64)), np.float16)
    k = np.asarray(rng.standard_normal((9, 2, 64)), np.float16)
    want = ignis.single_decode_with_kv_cache(q, k, k, k_scale=0.5, v_scale=2.0)
    got = ignis.single_decode_with_kv_cache(q, k, k, k_scale=np.array([0.5], np.float32), v_scale=np.float64(2.0))
    assert np.array_equal(got, want)
    if torch is not None:
        got = ignis.single_decode_with_kv_cache(q, k, k, k_scale=torch.tensor(0.5), v_scale=torch.tensor([2.0]))
        assert np.array_equal(got, want)


def test_workspace_size_queries():
    # the size queries answer on any machine; a long single request needs split scratch
    assert ignis._ext.single_decode_workspace_size(32, 128, 32768) > 0
    assert ignis._ext.single_prefill_workspace_size(32, 8, 128, 128, 16, 32768) > 0


def test_errors():
    q = np.zeros((4, 64), np.float16)
    k = np.zeros((5, 2, 64), np.float16)
    with pytest.raises(ignis.InvalidArgumentError, match="pos_encoding_mode"):
        ignis.single_decode_with_kv_cache(q, k, k, pos_encoding_mode="ROPE")
    with pytest.raises(ignis.InvalidArgumentError, match="k_scale"):
        ignis.single_decode_with_kv_cache(q, k, k, k_scale=0.0)
    with pytest.raises(ignis.InvalidArgumentError, match="q_scale"):
        ignis.single_decode_with_kv_cache(q, k, k, q_scale=-1.0)
    with pytest.raises(ignis.InvalidArgumentError, match="one value"):
        ignis.single_decode_with_kv_cache(q, k, k, v_scale=np.ones(2))
    with pytest.raises(ignis.ArgumentTypeError, match="v_scale"):
        ignis.single_decode_with_kv_cache(q, k, k, v_scale="2")
    with pytest.raises(ignis.InvalidArgumentError, match="sinks"):
        ignis.single_decode_with_kv_cache(q, k, k, sinks=np.zeros(3, np.float32))
    with pytest.raises(ignis.DtypeError, match="sinks"):
        ignis.single_decode_with_kv_cache(q, k, k, sinks=np.zeros(4, np.float16))
    with pytest.raises(ignis.InvalidArgumentError, match="rope_theta"):
        ignis.single_decode_with_kv_cache(q, k, k, pos_encoding_mode="ROPE_LLAMA", rope_theta=-1.0)
    if ml_dtypes is not None:
        k8 = np.zeros((5, 2, 64), ml_dtypes.float8_e4m3fn)
        with pytest.raises(ignis.InvalidArgumentError, match="dtype"):
            ignis.single_decode_with_kv_cache(q, k8, k8.astype(ml_dtypes.float8_e5m2))
    with pytest.raises(ignis.UnsupportedError, match="head_dim"):
        ignis.single_decode_with_kv_cache(np.zeros((4, 96), np.float16), np.zeros((5, 2, 96), np.float16),
                                          np.zeros((5, 2, 96), np.float16))
    with pytest.raises(ignis.InvalidArgumentError, match="kv_layout"):
        ignis.single_decode_with_kv_cache(q, k, k, kv_layout="NDH")
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        ignis.single_decode_with_kv_cache(np.zeros((3, 64), np.float16), k, k)

    with pytest.raises(ignis.UnsupportedError, match="jit_args"):
        ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8), jit_args=[])
    with pytest.raises(ignis.InvalidArgumentError, match="use_cuda_graph"):
        ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8), use_cuda_graph=True)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8))
    cache = np.zeros((2, 2, 4, 2, 64), np.float16)
    with pytest.raises(ignis.InvalidArgumentError, match="plan"):
        wrapper.run(np.zeros((1, 4, 64), np.float16), cache)
    indptr, last = np.array([0, 2], np.int32), np.array([3], np.int32)
    with pytest.raises(ignis.InvalidArgumentError, match="pos_encoding_mode"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, pos_encoding_mode="alibi")
    with pytest.raises(ignis.UnsupportedError, match="q_data_type"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, q_data_type="float32")
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, o_data_type="bfloat16")
    with pytest.raises(ignis.InvalidArgumentError, match="kv_dtype"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, q_data_type="float16", kv_data_type="bfloat16")
    with pytest.raises(ignis.InvalidArgumentError, match="q_len_per_req"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, q_len_per_req=0)
    with pytest.raises(ignis.InvalidArgumentError, match="q_len_per_req"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, q_len_per_req=17)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_last_page_len_host"):
        wrapper.plan(indptr, indptr, np.array([5], np.int32), 4, 2, 64, 4)
    with pytest.raises(ignis.InvalidArgumentError, match="last_page_len has 2 entries"):
        wrapper.plan(indptr, indptr, np.array([3, 3], np.int32), 4, 2, 64, 4)
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        wrapper.plan(indptr, indptr, last, 5, 2, 64, 4)
    with pytest.raises(ignis.InvalidArgumentError, match="max_batch_size"):
        wrapper.plan(np.array([0, 1, 2], np.int32), indptr, np.array([1, 1], np.int32), 4, 2, 64, 4,
                     max_batch_size=1)
    with pytest.raises(ignis.InvalidArgumentError, match="max_kv_len"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, max_kv_len=6)

    wrapper.plan(indptr, np.array([0, 1], np.int32), last, 4, 2, 64, 4, window_left=3, q_len_per_req=2)
    q2 = np.zeros((2, 4, 64), np.float16)
    wrapper.run(q2, cache, window_left=3, q_len_per_req=2)
    with pytest.raises(ignis.InvalidArgumentError, match="window_left"):
        wrapper.run(q2, cache, window_left=5)
    with pytest.raises(ignis.InvalidArgumentError, match="q_len_per_req"):
        wrapper.run(q2, cache, q_len_per_req=1)
    with pytest.raises(ignis.InvalidArgumentError, match="q.shape"):
        wrapper.run(np.zeros((1, 4, 64), np.float16), cache)
    with pytest.raises(ignis.InvalidArgumentError, match="sinks"):
        wrapper.run(q2, cache, sinks=np.zeros((2, 4), np.float32))
    with pytest.raises(ignis.InvalidArgumentError, match="k_cache.dtype"):
        wrapper.plan(indptr, np.array([0, 1], np.int32), last, 4, 2, 64, 4, kv_data_type="float8_e4m3fn")
        wrapper.run(np.zeros((1, 4, 64), np.float16), cache)
    with pytest.raises(ignis.UnsupportedError, match="positional"):
        wrapper.run(np.zeros((1, 4, 64), np.float16), cache, 1.0)
    with pytest.raises(ignis.UnsupportedError, match="kv_cache_sf"):
        wrapper.run(np.zeros((1, 4, 64), np.float16), cache, kv_cache_sf=cache)
    with pytest.raises(ignis.UnsupportedError, match="window_right"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, window_right=-1)


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("case", range(len(NEW_OPTIONS)), ids=NEW_IDS)
def test_head_dim_512(frame, dtype, case):
    """Head dim 512 (FlashInfer compiles it): single decode and the batch wrapper with q_len_per_req 1
    and 3, GQA 8, every option of the extended API, 16-bit and fp8 K/V, odd lengths."""
    options = dict(NEW_OPTIONS[case][1])
    kv, with_sinks = options.pop("kv", None), options.pop("sinks", False)
    kv_heads, group, dim, page_size = 1 + case % 2, 8, 512, 16
    heads = kv_heads * group
    sinks, sinks_d = sinks_for(frame, heads) if with_sinks else (None, None)
    ref = reference_kwargs(options, sinks_d)
    factor = rope_scale_of(options)

    q, qd = rounded(frame, rng.standard_normal((heads, dim)), dtype)
    k, kd = kv_array(frame, rng.standard_normal((333, kv_heads, dim)), dtype, kv)
    v, vd = kv_array(frame, rng.standard_normal((333, kv_heads, dim)), dtype, kv)
    out, lse = ignis.single_decode_with_kv_cache(q, k, v, return_lse=True, sinks=sinks, **options)
    ref_out, ref_lse = decode_ref(qd[None], kd, vd, **ref)
    check_scaled(frame.numpy(out), np.asarray(frame.numpy(lse)), ref_out[0], ref_lse[0], dtype, factor)

    layout = "HND" if case % 2 else "NHD"
    lengths = [0, 1, 37, 700]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype, kv)
    plan_options = {key: options[key] for key in PLAN_KEYS if key in options}
    run_options = {key: options[key] for key in RUN_KEYS if key in options}
    for q_len in (1, 3):
        wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), layout)
        wrapper.plan(indptr, frame.index(indices, "i32"), last, heads, kv_heads, dim, page_size,
                     q_data_type="bfloat16" if dtype == "bf16" else "float16",
                     kv_data_type=FP8_NAMES[kv] if kv else None, q_len_per_req=q_len, **plan_options)
        q, qd = rounded(frame, rng.standard_normal((len(lengths) * q_len, heads, dim)), dtype)
        out, lse = wrapper.run(q, cache, return_lse=True, sinks=sinks, **run_options)
        got_out, got_lse = frame.numpy(out), np.asarray(frame.numpy(lse))
        for b in range(len(lengths)):
            rows = slice(b * q_len, (b + 1) * q_len)
            ref_out, ref_lse = decode_ref(qd[rows], ks[b], vs[b], **ref)
            check_scaled(got_out[rows], got_lse[rows], ref_out, ref_lse, dtype, factor)
