"""fp8 e4m3 queries on an fp8 KV cache, as vLLM 0.33 plans FlashInfer's wrappers with an fp8 KV cache on
sm_90 (``q_data_type=float8_e4m3fn``, ``kv_data_type`` fp8, ``o_data_type`` the model's dtype) and runs
them with ``q_scale`` / ``k_scale`` / ``v_scale``: out comes back in ``o_data_type`` and equals the
reference of the fp8 values (q is converted to out's dtype exactly before the kernels run).

On the CPU backend with NumPy arrays of ml_dtypes' fp8 types (out float16), and on CUDA with PyTorch
fp8 tensors (out bfloat16) when a GPU is present; plus the dtype rules' errors. The CUDA-graph cases
(vLLM's decode: fp8 q, with sinks, on the CUDA-graph wrapper re-planned by fast_decode_plan; the
sink prefill wrapper with its CUDA-graph buffers and an fp8 q) capture run on CUDA and replay it
after each re-plan; on the CPU backend the same steps call run instead of replaying."""

import numpy as np
import pytest

import ignis
from ignis.decode import fast_decode_plan
from engine_arrays import capture
from refs import decode_ref, ml_dtypes, prefill_ref, torch

CUDA = torch is not None and torch.cuda.is_available()
DEVICES = (["cpu"] if ml_dtypes is not None else []) + (["cuda"] if CUDA else [])
HEADS, KV_HEADS, DIM, PAGE = 16, 4, 128, 16
rng = np.random.default_rng(31)


def fp8_values(shape, scale=1.0):
    """Random values already on the e4m3 grid (float64), so the reference sees what the kernels see."""
    x = rng.standard_normal(shape) * scale
    return x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def as_fp8(x, device):
    """float64 values on the e4m3 grid as the device's fp8 array."""
    if device == "cpu":
        return x.astype(ml_dtypes.float8_e4m3fn)
    return torch.from_numpy(x.astype(np.float32)).to("cuda").to(torch.float8_e4m3fn)


def out_dtype(device):
    return "float16" if device == "cpu" else torch.bfloat16


def to_numpy(x):
    return x.float().cpu().numpy().astype(np.float64) if hasattr(x, "detach") else np.asarray(x, np.float64)


def workspace(device):
    return torch.zeros(64 << 20, dtype=torch.uint8, device="cuda") if device == "cuda" else np.zeros(16, np.uint8)


def host_i32(values):
    return np.asarray(values, np.int32)


def device_i32(values, device):
    return torch.from_numpy(host_i32(values)).to("cuda") if device == "cuda" else host_i32(values)


def paged(lens):
    """Per-request K / V (float64 on the e4m3 grid) and an NHD cache of them, pages in order."""
    ks = [fp8_values((n, KV_HEADS, DIM)) for n in lens]
    vs = [fp8_values((n, KV_HEADS, DIM)) for n in lens]
    pages = [(n + PAGE - 1) // PAGE for n in lens]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    cache = np.zeros((indptr[-1], 2, PAGE, KV_HEADS, DIM))
    for b, n in enumerate(lens):
        for j in range(n):
            cache[indptr[b] + j // PAGE, 0, j % PAGE] = ks[b][j]
            cache[indptr[b] + j // PAGE, 1, j % PAGE] = vs[b][j]
    last = np.array([n - (p - 1) * PAGE for n, p in zip(lens, pages)], np.int32)
    return ks, vs, cache, indptr, np.arange(indptr[-1], dtype=np.int32), last


def assert_close(actual, expected, what):
    got = to_numpy(actual)
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(got - expected).max()) / scale
    assert err < 2e-2, "%s: max error %.3g" % (what, err)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_fp8_decode(device):
    lens = [700, 33, 1500]
    ks, vs, cache, indptr, indices, last = paged(lens)
    q = fp8_values((len(lens), HEADS, DIM))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(device), "NHD")
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    wrapper.plan(indptr, device_i32(indices, device), last, HEADS, KV_HEADS, DIM, PAGE, q_data_type=fp8,
                 kv_data_type=fp8, o_data_type=out_dtype(device), fixed_split_size=-1)
    q_scale, k_scale, v_scale = 0.5, 1.25, 0.75
    out = wrapper.run(as_fp8(q, device), as_fp8(cache, device), q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)
    assert str(out.dtype).replace("torch.", "") == ("float16" if device == "cpu" else "bfloat16")
    want = np.concatenate([decode_ref(q[b:b + 1] * q_scale, ks[b], vs[b], k_scale=k_scale, v_scale=v_scale)[0]
                           for b in range(len(lens))])
    assert_close(out, want, "fp8 decode")


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_fp8_prefill(device):
    q_lens, kv_lens = [9, 40, 1], [9, 1200, 300]
    ks, vs, cache, indptr, indices, last = paged(kv_lens)
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = fp8_values((qo[-1], HEADS, DIM))
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(device), "NHD", backend="auto")
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    wrapper.plan(qo_indptr=qo, paged_kv_indptr=indptr, paged_kv_indices=device_i32(indices, device),
                 paged_kv_last_page_len=last, seq_lens=np.array(kv_lens, np.int32), num_qo_heads=HEADS,
                 num_kv_heads=KV_HEADS, head_dim_qk=DIM, page_size=PAGE, causal=True, sm_scale=DIM ** -0.5,
                 window_left=-1, logits_soft_cap=None, q_data_type=fp8, kv_data_type=fp8,
                 o_data_type=out_dtype(device), fixed_split_size=-1, disable_split_kv=False)
    out = wrapper.run(as_fp8(q, device), as_fp8(cache, device), q_scale=2.0, k_scale=0.5, v_scale=1.5,
                      kv_cache_sf=None)
    want = np.concatenate([prefill_ref(q[qo[b]:qo[b + 1]] * 2.0, ks[b], vs[b], causal=True, k_scale=0.5,
                                       v_scale=1.5)[0] for b in range(len(q_lens))])
    assert_close(out, want, "fp8 prefill")


class Pages:
    """A pool of fp8 pages (float64 values on the e4m3 grid) that every step of a graph test draws
    from, so that a captured run reads the same cache tensor throughout."""

    def __init__(self, num_pages, device):
        self.values = fp8_values((num_pages, 2, PAGE, KV_HEADS, DIM))
        self.cache = as_fp8(self.values, device)

    def batch(self, lens):
        """(indptr, indices, last_page_len, keys, values) of requests of these lengths on random pages."""
        pages = [(n + PAGE - 1) // PAGE for n in lens]
        indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
        indices = rng.permutation(self.values.shape[0])[: indptr[-1]].astype(np.int32)
        last = np.array([n - (p - 1) * PAGE if p else 0 for n, p in zip(lens, pages)], np.int32)
        ks, vs = [], []
        for b, n in enumerate(lens):
            rows = [indices[indptr[b] + j // PAGE] for j in range(n)]
            slots = [j % PAGE for j in range(n)]
            ks.append(self.values[rows, 0, slots] if n else np.zeros((0, KV_HEADS, DIM)))
            vs.append(self.values[rows, 1, slots] if n else np.zeros((0, KV_HEADS, DIM)))
        return indptr, indices, last, ks, vs


def set_rows(static, values, device):
    """Write fp8 values into the front rows of a static (graph input) array."""
    if device == "cuda":
        static[: values.shape[0]].copy_(as_fp8(values, device))
    else:
        static[: values.shape[0]] = values.astype(ml_dtypes.float8_e4m3fn)


def write_i32(buffer, values):
    """An engine's write of index values into the front of its persistent buffer."""
    if hasattr(buffer, "copy_"):
        buffer[: len(values)].copy_(torch.from_numpy(np.asarray(values, np.int32)))
    else:
        buffer[: len(values)] = values


def replayable(device, run):
    """On CUDA: run captured in a CUDA graph (warmed up on a side stream first, as the engines do)
    and a step that replays it and waits; on the CPU backend: run itself."""
    if device != "cuda":
        return run
    graph, _ = capture(run)

    def replay():
        graph.replay()
        torch.cuda.synchronize()

    return replay


def static_out(shape, device):
    """A graph's static output of out_dtype(device)."""
    if device == "cuda":
        return torch.zeros(shape, dtype=out_dtype(device), device="cuda")
    return np.zeros(shape, np.float16)


def sinks_of(device):
    """Per-head sink logits (float32 on the device) large enough to matter, and their values."""
    values = rng.uniform(-1.0, 6.0, HEADS).astype(np.float32)
    return (torch.from_numpy(values).to("cuda") if device == "cuda" else values), values.astype(np.float64)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_decode_cuda_graph(device):
    """vLLM's CUDA-graph decode on an fp8 KV cache: the CUDA-graph wrapper planned with an fp8 q
    (o_data_type the model's), run(q, cache, q_scale=, k_scale=, v_scale=, out=, sinks=) captured
    on a static fp8 q, then per step the engine's buffers written, fast_decode_plan, new queries
    into the static q, replay. The batch is the graph's size; short steps pad with empty requests."""
    batch = 3
    pool = Pages(240, device)
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    buffers = (device_i32(np.zeros(batch + 1), device), device_i32(np.zeros(240), device),
               device_i32(np.zeros(batch), device))
    wrapper = ignis.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(device), *buffers)
    q = as_fp8(np.zeros((batch, HEADS, DIM)), device)
    out = static_out((batch, HEADS, DIM), device)
    sinks, sinks_d = sinks_of(device)
    q_scale, k_scale, v_scale = 0.5, 1.25, 0.75

    def step(lens, first):
        indptr, indices, last, ks, vs = pool.batch(lens)
        for buffer, values in zip(buffers, (indptr, indices, last)):
            write_i32(buffer, values)  # vLLM fills its persistent buffers itself
        view = buffers[1][: len(indices)]
        if first:
            wrapper.plan(indptr, view, last, HEADS, KV_HEADS, DIM, PAGE, q_data_type=fp8, kv_data_type=fp8,
                         o_data_type=out_dtype(device), fixed_split_size=-1)
        else:
            fast_decode_plan(wrapper, indptr, view, last, HEADS, KV_HEADS, DIM, PAGE, "NONE", -1, None, fp8, fp8,
                             fixed_split_size=-1)
        values = fp8_values((batch, HEADS, DIM))
        set_rows(q, values, device)
        return [decode_ref(values[b:b + 1] * q_scale, ks[b], vs[b], k_scale=k_scale, v_scale=v_scale,
                           sinks=sinks_d)[0][0] for b in range(batch)]

    def run():
        wrapper.run(q, pool.cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, out=out, sinks=sinks)

    want = step([700, 33, 1500], True)
    replay = replayable(device, run)
    for number, lens in enumerate(([700, 33, 1500], [5, 900, 0], [1200, 1, 17])):
        if number:
            want = step(lens, False)
        replay()
        assert_close(out, np.stack(want), "fp8 decode, step %d" % number)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_sink_prefill_cuda_graph(device):
    """The sink prefill wrapper (gpt-oss) with its CUDA-graph buffers and an fp8 q on an fp8 cache:
    run(q, cache, sinks, out=, q_scale=, k_scale=, v_scale=) captured on a static fp8 q, then per
    step a new plan (same batch size and query tokens, other lengths and pages), new queries,
    replay."""
    batch, tokens = 3, 24
    pool = Pages(240, device)
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    buffers = dict(qo_indptr_buf=device_i32(np.zeros(batch + 1), device),
                   paged_kv_indptr_buf=device_i32(np.zeros(batch + 1), device),
                   paged_kv_indices_buf=device_i32(np.zeros(240), device),
                   paged_kv_last_page_len_buf=device_i32(np.zeros(batch), device))
    wrapper = ignis.BatchAttentionWithAttentionSinkWrapper(workspace(device), "NHD", use_cuda_graph=True,
                                                           q_data_type=fp8, kv_data_type=fp8, head_dim_qk=DIM,
                                                           head_dim_vo=DIM, **buffers)
    q = as_fp8(np.zeros((tokens, HEADS, DIM)), device)
    out = static_out((tokens, HEADS, DIM), device)
    sinks, sinks_d = sinks_of(device)
    q_scale, k_scale, v_scale = 2.0, 0.5, 1.5

    def step(q_lens, kv_lens):
        indptr, indices, last, ks, vs = pool.batch(kv_lens)
        qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        wrapper.plan(qo, indptr, device_i32(indices, device), last, HEADS, KV_HEADS, DIM, PAGE, causal=True,
                     q_data_type=fp8, kv_data_type=fp8, o_data_type=out_dtype(device))
        values = fp8_values((tokens, HEADS, DIM))
        set_rows(q, values, device)
        return np.concatenate([prefill_ref(values[qo[b]:qo[b + 1]] * q_scale, ks[b], vs[b], causal=True,
                                           k_scale=k_scale, v_scale=v_scale, sinks=sinks_d)[0]
                               for b in range(batch)])

    def run():
        wrapper.run(q, pool.cache, sinks, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, out=out)

    steps = (([9, 14, 1], [9, 600, 300]), ([20, 2, 2], [1200, 2, 40]), ([1, 1, 22], [1, 700, 22]))
    want = step(*steps[0])
    replay = replayable(device, run)
    for number, (q_lens, kv_lens) in enumerate(steps):
        if number:
            want = step(q_lens, kv_lens)
        replay()
        assert_close(out, want, "fp8 sink prefill, step %d" % number)


def test_fp8_query_rules():
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8), "NHD")
    indptr, last = np.array([0, 1], np.int32), np.array([3], np.int32)
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float8_e4m3fn",
                     kv_data_type="float8_e4m3fn")
    with pytest.raises(ignis.UnsupportedError, match="kv_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float8_e4m3fn",
                     kv_data_type="float16", o_data_type="float16")
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float16",
                     o_data_type="bfloat16")
