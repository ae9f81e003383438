"""The decode wrapper as vLLM 0.33.0 and SGLang 0.5.23 drive it (their FlashInfer attention
backends, read from their sources), against the float64 reference of refs.py, on every host of
engine_arrays.py: NumPy arrays and PyTorch CPU tensors on the CPU backend, and with a GPU the
engines' own split on the CUDA backend (q, caches, out, lse, workspace, index buffers and page
indices CUDA tensors; the plan metadata vLLM stages on the host pinned CPU tensors).

- vLLM: one wrapper per CUDA-graph batch size with persistent index buffers the engine fills
  itself; ``plan`` with vLLM's full keyword set (``fixed_split_size=-1``, ``seq_lens=``,
  ``block_tables=None``, ``o_data_type=``), then ``fast_decode_plan`` for later batches; asserts on
  ``_window_left`` / ``_logits_soft_cap`` / ``_sm_scale``; ``run`` with ``q_scale`` / ``k_scale`` /
  ``v_scale`` / ``out`` / ``kv_cache_sf=None`` (and ``lse`` / ``return_lse`` as with DCP). On CUDA
  also its CUDA-graph decode: ``run`` captured in a ``torch.cuda.CUDAGraph``, then for each new
  batch ``fast_decode_plan`` outside the graph, new q into the static q, replay.
- SGLang: the positional ``begin_forward`` form, then ``functools.partial(fast_decode_plan, w)``
  with ``global_override_indptr_cpu``, KV indices written straight into
  ``w._paged_kv_indices_buf``, and ``forward(q, (k_pool, v_pool), sm_scale=, logits_soft_cap=,
  k_scale=, v_scale=)`` over page-size-1 token pools; its device index arrays (``kv_indptr``,
  ``kv_last_page_len``) are CUDA tensors on CUDA. On CUDA also ``forward`` captured and replayed
  after each ``begin_forward``, as its CUDA-graph runner does.
- Each FlashInfer behaviour on its own: forward's overrides (and that the C plans they need are
  made once and then reused), the option attributes, plan's arguments (``fixed_split_size`` -1 /
  None / 0, ``data_type``, ``is_causal``, ``block_tables``, ``seq_lens``, ``o_data_type``,
  ``q_len_per_req``, int64 and out-of-range index arrays), ``lse_base="log2"``, workspaces of
  byte-sized dtypes and ``workspace_size`` (CPU backend), ``CUDAGraphBatchDecodeWithPagedKVCacheWrapper``
  and run's arguments (``window_left``, ``sinks``, ``out``, ``lse``, ``kv_cache_sf``).
Shapes: GQA 32/8 and 64/8, head dims 128 and 64, page sizes 16 and 1."""

import functools
import inspect
import math

import numpy as np
import pytest

import ignis
from engine_arrays import (CPU_HOSTS, HOSTS, as_f64, capture, model_dtype, needs_cuda, on_device, on_host,
                           workspace, write)
from ignis.decode import CUDAGraphBatchDecodeWithPagedKVCacheWrapper, fast_decode_plan
from refs import decode_ref, ml_dtypes, torch

rng = np.random.default_rng(17)
TOL = 2e-3  # f16 inputs, fp32 accumulation: relative to the largest |out|


# ---- arrays of the host under test ------------------------------------------------------------------
def f16(values, host):
    """q, K/V, out: where the engine keeps them (the GPU on "cuda")."""
    return on_device(values, host, "f16")


def i32(values, host, pinned=False):
    """Plan metadata the engines pass from the host (indptr, last_page_len, seq_lens)."""
    return on_host(values, host, "i32", pinned)


def pages(values, host):
    """Page indices and other index arrays the engines keep on the device."""
    return on_device(values, host, "i32")


def zeros_i32(n, host):
    """A persistent index buffer (on the device)."""
    return on_device(np.zeros(n), host, "i32")


as_np = as_f64


# ---- a page pool shared by all steps of a test, and batches over it --------------------------------
class Pool:
    """num_pages pages of K/V (f16 values, kept as float64 for the reference), NHD."""

    def __init__(self, num_pages, page_size, kv_heads, dim, host):
        self.page_size = page_size
        values = np.asarray(rng.standard_normal((num_pages, 2, page_size, kv_heads, dim)), np.float16)
        self.values = values.astype(np.float64)
        self.cache = f16(values, host)  # [pages, 2, page, kv_heads, dim]
        self.num_pages = num_pages

    def batch(self, lengths):
        """(indptr, indices, last_page_len) int32 NumPy arrays of requests of these lengths on
        distinct random pages."""
        pages = [(n + self.page_size - 1) // self.page_size for n in lengths]
        indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
        indices = rng.permutation(self.num_pages)[: indptr[-1]].astype(np.int32)
        last = np.array([n - (p - 1) * self.page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
        return indptr, indices, last

    def keys_values(self, indptr, indices, lengths, b):
        rows = [indices[indptr[b] + j // self.page_size] for j in range(lengths[b])]
        slots = [j % self.page_size for j in range(lengths[b])]
        return self.values[rows, 0, slots], self.values[rows, 1, slots]


def reference(pool, q, indptr, indices, lengths, **options):
    """out [B, H, D], lse [B, H] of decode_ref per request."""
    qd = as_np(q)
    outs, lses = [], []
    for b in range(len(lengths)):
        k, v = pool.keys_values(indptr, indices, lengths, b)
        out, lse = decode_ref(qd[b : b + 1], k, v, **options)
        outs.append(out[0])
        lses.append(lse[0])
    return np.stack(outs), np.stack(lses)


def assert_close(got, want):
    got = as_np(got)
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-3)
    err = float(np.abs(got - want).max())
    assert err <= TOL * scale, f"error {err:.3g} > {TOL * scale:.3g}"


def assert_lse_close(got, want):
    got = as_np(got)
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    finite = ~np.isneginf(want)
    assert np.all(np.abs(got[finite] - want[finite]) <= TOL * (1 + np.abs(want[finite])))


def queries(batch, heads, dim, host):
    return f16(rng.standard_normal((batch, heads, dim)), host)


# ---- vLLM -----------------------------------------------------------------------------------------
class VllmDecode:
    """vllm/v1/attention/backends/flashinfer.py for one CUDA-graph batch size: the persistent
    buffers (paged_kv_indptr / paged_kv_last_page_len CpuGpuBuffer.gpu, paged_kv_indices), the
    wrapper of _get_decode_wrapper(use_cudagraph=True), and the decode part of build():
    _compute_flashinfer_kv_metadata fills the buffers, then fast_plan_decode (first call:
    wrapper.plan with vLLM's keywords; later calls: flashinfer.decode.fast_decode_plan) with the
    host copies of indptr / last_page_len / seq_lens, pinned as vLLM stages them."""

    def __init__(self, host, pool, max_batch, heads, kv_heads, dim, max_pages=2048):
        self.host, self.pool, self.heads, self.kv_heads, self.dim = host, pool, heads, kv_heads, dim
        self.indptr_buffer, self.indices_buffer, self.last_buffer = (
            zeros_i32(max_batch + 1, host), zeros_i32(max_pages, host), zeros_i32(max_batch, host))
        self.wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(
            workspace(host, "vllm"), "NHD", use_cuda_graph=True,
            paged_kv_indptr_buffer=self.indptr_buffer[: max_batch + 1], paged_kv_indices_buffer=self.indices_buffer,
            paged_kv_last_page_len_buffer=self.last_buffer[:max_batch], use_tensor_cores=True, backend="fa2")
        self.window_left, self.cap, self.scale = -1, None, 1.0 / math.sqrt(dim)

    def plan(self, lengths):
        """One step's metadata and plan; returns the batch's (indptr, indices) NumPy arrays."""
        host, wrapper, dtype = self.host, self.wrapper, model_dtype(self.host)
        indptr, indices, last = self.pool.batch(lengths)
        write(self.indptr_buffer, indptr)  # paged_kv_indptr.copy_to_gpu
        write(self.indices_buffer, indices)  # _copy_page_indices_kernel
        write(self.last_buffer, last)  # paged_kv_last_page_len.copy_to_gpu
        arguments = dict(indptr=i32(indptr, host, pinned=True), indices=self.indices_buffer[: len(indices)],
                         last_page_len=i32(last, host, pinned=True), num_qo_heads=self.heads,
                         num_kv_heads=self.kv_heads, head_dim=self.dim, page_size=self.pool.page_size,
                         pos_encoding_mode="NONE", window_left=self.window_left, logits_soft_cap=self.cap,
                         q_data_type=dtype, kv_data_type=dtype, data_type=None, sm_scale=self.scale, rope_scale=None,
                         rope_theta=None, non_blocking=True, fixed_split_size=-1, disable_split_kv=False,
                         q_len_per_req=1)
        if getattr(wrapper, "vllm_first_call", True):
            wrapper.plan(**arguments, o_data_type=dtype, block_tables=None,
                         seq_lens=i32(lengths, host, pinned=True))
            wrapper.vllm_first_call = False
        else:
            fast_decode_plan(wrapper, **arguments)
        return indptr, indices

    def check_options(self):
        """FlashInferImpl.forward's asserts before run."""
        assert self.wrapper._window_left == self.window_left
        assert self.wrapper._logits_soft_cap == (self.cap or 0.0)
        assert self.wrapper._sm_scale == self.scale


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("heads,kv_heads,dim,page_size", [(32, 8, 128, 16), (64, 8, 64, 1)])
def test_vllm_decode_sequence(host, heads, kv_heads, dim, page_size):
    """vLLM's steps (VllmDecode.plan), the asserts before run, and run, with out= and as DCP with
    lse= / return_lse=True."""
    max_batch = 4
    pool = Pool(700 // page_size + 8, page_size, kv_heads, dim, host)
    engine = VllmDecode(host, pool, max_batch, heads, kv_heads, dim)
    wrapper = engine.wrapper
    assert wrapper.is_cuda_graph_enabled and wrapper._fixed_batch_size == max_batch
    out = f16(np.zeros((max_batch, heads, dim)), host)
    k_scale, v_scale = 0.5, 2.0

    def step(lengths):
        indptr, indices = engine.plan(lengths)
        engine.check_options()
        q = queries(len(lengths), heads, dim, host)
        got = wrapper.run(q, pool.cache, q_scale=1.0, k_scale=k_scale, v_scale=v_scale, out=out[: len(lengths)],
                          kv_cache_sf=None)
        assert got.shape == out[: len(lengths)].shape
        want, want_lse = reference(pool, q, indptr, indices, lengths, k_scale=k_scale, v_scale=v_scale)
        assert_close(out[: len(lengths)], want)  # written into vLLM's out
        lse = on_device(np.zeros((len(lengths), heads)), host, "f32")
        got, got_lse = wrapper.run(q, pool.cache, q_scale=1.0, k_scale=k_scale, v_scale=v_scale, lse=lse,
                                   return_lse=True, kv_cache_sf=None)  # DCP
        assert got_lse is lse
        assert_close(got, want)
        assert_lse_close(got_lse, want_lse)

    step([300, 1, 77, 16 * 9])
    kept = wrapper._plan
    step([45, 600])
    step([0, 2, 513])
    assert wrapper._plan is kept  # fast_decode_plan kept the C plan: it only scheduled the batches


def new_queries(q):
    """Fresh f16 queries copied into the static q tensor (a graph's input); returns their values."""
    values = queries(q.shape[0], q.shape[1], q.shape[2], "numpy")
    q.copy_(torch.from_numpy(values))
    return values


@needs_cuda
def test_vllm_decode_cuda_graph_replay():
    """vLLM's full CUDA-graph decode: the wrapper of one graph batch size planned, then
    wrapper.run(q, kv_cache, q_scale=, k_scale=, v_scale=, out=, kv_cache_sf=None) captured on the
    static q / out; each later step re-plans outside the graph (fast_decode_plan), copies the new
    queries into the static q and replays. Batches fill the graph's size, padded with empty
    requests as vLLM pads them."""
    host, heads, kv_heads, dim, page_size, batch = "cuda", 32, 8, 128, 16, 4
    pool = Pool(320, page_size, kv_heads, dim, host)
    engine = VllmDecode(host, pool, batch, heads, kv_heads, dim)
    q, out = f16(np.zeros((batch, heads, dim)), host), f16(np.zeros((batch, heads, dim)), host)
    k_scale, v_scale = 0.5, 2.0

    def run():
        engine.check_options()
        return engine.wrapper.run(q, pool.cache, q_scale=1.0, k_scale=k_scale, v_scale=v_scale, out=out,
                                  kv_cache_sf=None)

    lengths = [300, 1, 77, 16 * 9]
    indptr, indices = engine.plan(lengths)
    q_values = new_queries(q)
    graph, _ = capture(run)
    kept = engine.wrapper._plan
    for step in range(3):
        if step:
            lengths = [[45, 600, 0, 0], [0, 2, 513, 1000]][step - 1]
            indptr, indices = engine.plan(lengths)
            q_values = new_queries(q)
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, reference(pool, q_values, indptr, indices, lengths, k_scale=k_scale, v_scale=v_scale)[0])
    assert engine.wrapper._plan is kept


# ---- SGLang ---------------------------------------------------------------------------------------
class SglangDecode:
    """sglang/srt/layers/attention/flashinfer_backend.py with CUDA graphs: the backend's buffers
    (kv_indptr [max_bs + 1], cuda_graph_kv_indices, kv_last_page_len of ones: device tensors), the
    wrapper of _create_decode_wrappers, call_begin_forward (indptr from the lengths, indices packed
    straight into w._paged_kv_indices_buf, begin_forward positionally, with
    global_override_indptr_cpu once it is partial(fast_decode_plan, w)), and forward_decode's
    forward(q, (k_buffer, v_buffer), sm_scale=layer.scaling, logits_soft_cap=layer.logit_cap,
    k_scale=, v_scale=) over page-size-1 token pools."""

    def __init__(self, host, pool, max_batch, heads, kv_heads, dim, scaling, cap):
        self.host, self.pool, self.heads, self.kv_heads, self.dim = host, pool, heads, kv_heads, dim
        self.scaling = dim**-0.5 if scaling is None else scaling
        self.cap, self.k_scale, self.v_scale = cap, 1.0, 0.5
        # token_to_kv_pool.get_kv_buffer(layer_id): a contiguous [slots, kv_heads, dim] pool each
        self.k_pool, self.v_pool = f16(pool.values[:, 0, 0], host), f16(pool.values[:, 1, 0], host)
        self.kv_indptr = zeros_i32(max_batch + 1, host)
        self.kv_last_page_len = on_device(np.ones(max_batch), host, "i32")
        self.w = ignis.BatchDecodeWithPagedKVCacheWrapper(
            workspace(host, "sglang"), "NHD", backend="fa2", use_cuda_graph=True, use_tensor_cores=False,
            paged_kv_indptr_buffer=self.kv_indptr[: max_batch + 1],
            paged_kv_indices_buffer=zeros_i32(pool.num_pages, host),
            paged_kv_last_page_len_buffer=self.kv_last_page_len[:max_batch])

    def call_begin_forward(self, lengths):
        """Returns the batch's (indptr, indices) NumPy arrays."""
        w, bs, dtype = self.w, len(lengths), model_dtype(self.host)
        indptr, indices, _ = self.pool.batch(lengths)
        write(self.kv_indptr, indptr)  # kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens)
        assert w.is_cuda_graph_enabled
        kv_indices = w._paged_kv_indices_buf
        write(kv_indices, indices)  # pack_read_stream(..., out=kv_indices)
        begin = w.begin_forward
        uses_fast = hasattr(begin, "func") and begin.func == fast_decode_plan
        extra = {"global_override_indptr_cpu": i32(indptr, self.host)} if uses_fast else {}
        begin(self.kv_indptr[: bs + 1], kv_indices, self.kv_last_page_len[:bs], self.heads, self.kv_heads, self.dim,
              1, data_type=dtype, q_data_type=dtype, non_blocking=True, fixed_split_size=None, disable_split_kv=False,
              **extra)
        return indptr, indices

    def forward(self, q):
        return self.w.forward(q, (self.k_pool, self.v_pool), sm_scale=self.scaling, logits_soft_cap=self.cap,
                              k_scale=self.k_scale, v_scale=self.v_scale)

    def reference(self, q, indptr, indices, lengths):
        return reference(self.pool, q, indptr, indices, lengths, sm_scale=self.scaling, logits_soft_cap=self.cap,
                         k_scale=self.k_scale, v_scale=self.v_scale)[0]


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("heads,kv_heads,dim,scaling,cap", [(32, 8, 128, None, 0.0), (32, 8, 128, 0.3, 20.0),
                                                            (64, 8, 64, 0.2, 0.0)])
def test_sglang_decode_sequence(host, heads, kv_heads, dim, scaling, cap):
    """SGLang's capture (the first plan through begin_forward, then begin_forward =
    partial(fast_decode_plan, w)), warm-up and captured forwards, then replays (plan, forward),
    and what the engine writes into the indices buffer after the plan."""
    max_batch, slots = 4, 900
    pool = Pool(slots, 1, kv_heads, dim, host)
    engine = SglangDecode(host, pool, max_batch, heads, kv_heads, dim, scaling, cap)
    w = engine.w

    def forward_decode(lengths, indptr, indices):
        q = queries(len(lengths), heads, dim, host)
        assert_close(engine.forward(q), engine.reference(q, indptr, indices, lengths))

    lengths = [200, 3, 1, 450]
    indptr, indices = engine.call_begin_forward(lengths)  # init_forward_metadata_capture_cuda_graph
    w.begin_forward = functools.partial(fast_decode_plan, w)
    for _ in range(2):  # warm-up runs and the captured one
        forward_decode(lengths, indptr, indices)
    plans = dict(w._plans)
    # the C plans: one for the plan's options, plus one for forward's when they differ in substance
    assert len(plans) == (1 if engine.scaling == dim**-0.5 and not cap else 2)
    for lengths in ([17, 600], [0, 5, 300, 64]):  # replays: plan, then the captured forward
        indptr, indices = engine.call_begin_forward(lengths)
        forward_decode(lengths, indptr, indices)
        assert w._plans == plans  # no C plan made again
    # what the engine writes into the indices buffer after the plan is what the next run reads
    moved = rng.permutation(slots)[: len(indices)].astype(np.int32)
    write(w._paged_kv_indices_buf, moved)
    forward_decode(lengths, indptr, moved)


@needs_cuda
@pytest.mark.parametrize("scaling,cap", [(None, 0.0), (0.3, 20.0)])
def test_sglang_decode_cuda_graph_replay(scaling, cap):
    """SGLang's CUDA-graph runner: init_forward_metadata_capture_cuda_graph (begin_forward, then
    partial(fast_decode_plan, w)), forward captured on the static q (warmed up first, which makes
    the C plan forward's options need); each replay: init_forward_metadata_replay_cuda_graph
    (call_begin_forward through fast_decode_plan, KV indices into w._paged_kv_indices_buf), the new
    queries into the static q, replay. Padded requests hold one token."""
    host, heads, kv_heads, dim, bs, slots = "cuda", 32, 8, 128, 4, 2400
    pool = Pool(slots, 1, kv_heads, dim, host)
    engine = SglangDecode(host, pool, bs, heads, kv_heads, dim, scaling, cap)
    q = f16(np.zeros((bs, heads, dim)), host)
    lengths = [200, 3, 1, 450]
    indptr, indices = engine.call_begin_forward(lengths)
    engine.w.begin_forward = functools.partial(fast_decode_plan, engine.w)
    q_values = new_queries(q)
    graph, out = capture(lambda: engine.forward(q))
    plans = dict(engine.w._plans)
    for step in range(3):
        if step:
            lengths = [[17, 600, 1, 1], [64, 300, 1000, 2]][step - 1]
            indptr, indices = engine.call_begin_forward(lengths)
            q_values = new_queries(q)
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, engine.reference(q_values, indptr, indices, lengths))
    assert engine.w._plans == plans


# ---- forward's overrides and the option attributes -------------------------------------------------
def planned(host, heads=8, kv_heads=2, dim=64, page_size=16, lengths=(50, 0, 130), **plan_options):
    pool = Pool(40, page_size, kv_heads, dim, host)
    indptr, indices, last = pool.batch(list(lengths))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"))
    wrapper.plan(i32(indptr, host), pages(indices, host), i32(last, host), heads, kv_heads, dim, page_size,
                 **plan_options)
    q = queries(len(lengths), heads, dim, host)
    return wrapper, pool, q, (indptr, indices, list(lengths)), last


FORWARD_CASES = [
    {"sm_scale": 0.25},
    {"logits_soft_cap": 2.0},
    {"window_left": 20},
    {"pos_encoding_mode": "ALIBI", "sm_scale": 0.2},
    {"pos_encoding_mode": "ROPE_LLAMA", "rope_scale": 2.0, "rope_theta": 5e5},
]


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("case", range(len(FORWARD_CASES)))
def test_forward_overrides(host, case):
    options = FORWARD_CASES[case]
    wrapper, pool, q, batch, last = planned(host, logits_soft_cap=9.0)  # forward's defaults replace the plan's cap
    out = wrapper.forward(q, pool.cache, k_scale=0.5, **options)
    want, want_lse = reference(pool, q, *batch, k_scale=0.5, **options)
    assert_close(out, want)
    out, lse = wrapper.forward_return_lse(q, pool.cache, k_scale=0.5, **options)
    assert_close(out, want)
    assert_lse_close(lse, want_lse)
    # FlashInfer keeps forward's options on the wrapper: a later run applies them too
    assert wrapper._sm_scale == options.get("sm_scale")
    assert wrapper._logits_soft_cap == options.get("logits_soft_cap", 0.0)
    assert wrapper._window_left == options.get("window_left", -1)
    assert_close(wrapper.run(q, pool.cache, k_scale=0.5), want)
    # until the next plan, which sets its own again
    indptr, indices, lengths = batch
    wrapper.plan(i32(indptr, host), pages(indices, host), i32(last, host), 8, 2, 64, 16, logits_soft_cap=9.0)
    assert wrapper._logits_soft_cap == 9.0 and wrapper._sm_scale is None and wrapper._window_left == -1
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, *batch, logits_soft_cap=9.0)[0])


@pytest.mark.parametrize("host", HOSTS)
def test_forward_reuses_its_plans(host):
    """Each distinct set of options gets one C plan, made once; switching between them only
    schedules the batch again; defaults given explicitly share the planned C plan."""
    wrapper, pool, q, batch, last = planned(host)
    base = wrapper._plan
    assert_close(wrapper.forward(q, pool.cache, sm_scale=64**-0.5), reference(pool, q, *batch)[0])
    assert wrapper._plan is base and len(wrapper._plans) == 1
    for _ in range(2):
        for scale in (0.3, 0.1):
            assert_close(wrapper.forward(q, pool.cache, sm_scale=scale), reference(pool, q, *batch, sm_scale=scale)[0])
    assert len(wrapper._plans) == 3
    variants = dict(wrapper._plans)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, *batch, sm_scale=0.1)[0])
    # a new plan with the same arguments keeps all three; its batch goes to the last one used
    new_lengths = [31, 7]
    indptr, indices, last = pool.batch(new_lengths)
    wrapper.plan(i32(indptr, host), pages(indices, host), i32(last, host), 8, 2, 64, 16)
    assert wrapper._plans == variants and wrapper._plan is variants[wrapper._active]
    q2 = queries(2, 8, 64, host)
    assert_close(wrapper.forward(q2, pool.cache, sm_scale=0.1),
                 reference(pool, q2, indptr, indices, new_lengths, sm_scale=0.1)[0])
    assert_close(wrapper.run(q2, pool.cache), reference(pool, q2, indptr, indices, new_lengths, sm_scale=0.1)[0])
    # another configuration starts over
    wrapper.plan(i32(indptr, host), pages(indices, host), i32(last, host), 8, 2, 64, 16, logits_soft_cap=3.0)
    assert len(wrapper._plans) == 1


@pytest.mark.parametrize("host", HOSTS)
def test_option_attributes_apply(host):
    """An engine writing FlashInfer's option attributes changes what the next run computes."""
    wrapper, pool, q, batch, last = planned(host, sm_scale=0.2)
    assert wrapper._sm_scale == 0.2 and wrapper._logits_soft_cap == 0.0 and wrapper._pos_encoding_mode == "NONE"
    assert wrapper._rope_scale is None and wrapper._rope_theta is None
    wrapper._logits_soft_cap = 1.5
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, *batch, sm_scale=0.2, logits_soft_cap=1.5)[0])
    wrapper._window_left = 10
    assert_close(wrapper.run(q, pool.cache, window_left=10),
                 reference(pool, q, *batch, sm_scale=0.2, logits_soft_cap=1.5, window_left=10)[0])
    with pytest.raises(ignis.InvalidArgumentError, match="window_left"):
        wrapper.run(q, pool.cache, window_left=11)
    wrapper._pos_encoding_mode = "ALIBY"
    with pytest.raises(ignis.InvalidArgumentError, match="pos_encoding_mode"):
        wrapper.run(q, pool.cache)


# ---- plan's arguments -----------------------------------------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("fixed", [None, -1, 0, 2])
def test_fixed_split_size(host, fixed):
    wrapper, pool, q, batch, last = planned(host, lengths=(300, 45, 1), fixed_split_size=fixed)
    assert wrapper._config["fixed_split_size"] == (fixed if fixed and fixed > 0 else 0)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, *batch)[0])


def test_data_type_sets_kv_and_only_an_unset_q():
    pool = Pool(8, 16, 2, 64, "numpy")
    indptr, indices, last = pool.batch([40, 9])
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace("numpy", "vllm"))
    # q_data_type keeps its "float16" default: data_type sets only K/V (here: refused f16 q with bf16 K/V)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_dtype"):
        wrapper.plan(indptr, indices, last, 8, 2, 64, 16, data_type="bfloat16")
    # q_data_type=None: data_type sets q too (bf16 here, checked at run against the f16 q)
    wrapper.plan(indptr, indices, last, 8, 2, 64, 16, q_data_type=None, data_type="bfloat16")
    assert wrapper._config["q_dtype"] == wrapper._config["kv_dtype"] == ignis._ext.IGNIS_BF16
    with pytest.raises(ignis.UnsupportedError, match="q_data_type"):
        wrapper.plan(indptr, indices, last, 8, 2, 64, 16, q_data_type=None, data_type="float8_e4m3fn")
    wrapper.plan(indptr, indices, last, 8, 2, 64, 16, q_data_type=None, data_type=None)
    q = queries(2, 8, 64, "numpy")
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, indices, [40, 9])[0])
    if ml_dtypes is not None:  # fp8 K/V from data_type, f16 q from the default
        cache8 = pool.cache.astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        wrapper.plan(indptr, indices, last, 8, 2, 64, 16, data_type="float8_e4m3fn")
        exact = pool.values
        pool.values = cache8.astype(np.float64)
        try:
            assert_close(wrapper.run(q, cache8), reference(pool, q, indptr, indices, [40, 9])[0])
        finally:
            pool.values = exact


def test_plan_arguments_taken_or_refused():
    pool = Pool(12, 16, 2, 64, "numpy")
    lengths = [40, 9, 0]
    indptr, indices, last = pool.batch(lengths)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace("numpy", "vllm"))
    args = (indptr, indices, last, 8, 2, 64, 16)
    q = queries(3, 8, 64, "numpy")
    want = reference(pool, q, indptr, indices, lengths)[0]
    for extra in ({"is_causal": None}, {"is_causal": False}, {"o_data_type": "float16"},
                  {"o_data_type": np.float16}, {"seq_lens": np.array(lengths, np.int64)},
                  {"seq_lens": np.array(lengths, np.uint32)}, {"block_tables": None}):
        wrapper.plan(*args, **extra)
        assert_close(wrapper.run(q, pool.cache), want)
    with pytest.raises(ignis.UnsupportedError, match="is_causal"):
        wrapper.plan(*args, is_causal=True)
    with pytest.raises(ignis.UnsupportedError, match="block_tables"):
        wrapper.plan(*args, block_tables=np.zeros((3, 4), np.int32))
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(*args, o_data_type="bfloat16")
    with pytest.raises(ignis.InvalidArgumentError, match=r"seq_lens\[1\]=10"):
        wrapper.plan(*args, seq_lens=np.array([40, 10, 0]))
    with pytest.raises(ignis.InvalidArgumentError, match="call plan first"):
        wrapper.run(q, pool.cache)  # a refused seq_lens left nothing planned
    with pytest.raises(ignis.InvalidArgumentError, match="seq_lens has 2 entries"):
        wrapper.plan(*args, seq_lens=np.array([40, 9]))
    # q_len_per_req > 1 is causal: is_causal=True is then FlashInfer's (and ignis') value
    q2 = queries(6, 8, 64, "numpy")
    wrapper.plan(*args, q_len_per_req=2, is_causal=True)
    got = as_np(wrapper.run(q2, pool.cache))
    for b in range(3):
        k, v = pool.keys_values(indptr, indices, lengths, b)
        assert_close(got[2 * b : 2 * b + 2], decode_ref(as_np(q2)[2 * b : 2 * b + 2], k, v)[0])
    with pytest.raises(ignis.UnsupportedError, match="is_causal"):
        wrapper.plan(*args, q_len_per_req=2, is_causal=False)


@pytest.mark.parametrize("host", HOSTS)
def test_index_arrays_of_any_integer_dtype(host):
    pool = Pool(30, 16, 2, 64, host)
    lengths = [100, 17, 0, 250]
    indptr, indices, last = pool.batch(lengths)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"))
    q = queries(4, 8, 64, host)
    want = reference(pool, q, indptr, indices, lengths)[0]
    kinds = [lambda a: np.asarray(a, np.int64), lambda a: np.asarray(a, np.uint16), lambda a: [int(x) for x in a]]
    if host != "numpy":
        kinds.append(lambda a: torch.tensor(np.asarray(a), dtype=torch.int64))
    if host == "cuda":  # device arrays: copied to the host (indptr, last_page_len) or converted there (indices)
        kinds.append(lambda a: torch.tensor(np.asarray(a), dtype=torch.int64, device="cuda"))
    for kind in kinds:
        wrapper.plan(kind(indptr), kind(indices), kind(last), 8, 2, 64, 16)
        assert_close(wrapper.run(q, pool.cache), want)
    big = np.asarray(indptr, np.int64)
    big[-1] = 2**31
    with pytest.raises(ignis.InvalidArgumentError, match=r"indptr\[4\]=2147483648 does not fit int32"):
        wrapper.plan(big, indices, last, 8, 2, 64, 16)
    negative = np.asarray(indices, np.int64)
    negative[3] = -(2**40)
    with pytest.raises(ignis.InvalidArgumentError, match=r"indices\[3\]=.* does not fit int32"):
        wrapper.plan(indptr, negative, last, 8, 2, 64, 16)
    with pytest.raises(ignis.DtypeError, match="integers"):
        wrapper.plan(indptr, indices, np.asarray(last, np.float32), 8, 2, 64, 16)


@pytest.mark.parametrize("host", HOSTS)
def test_lse_base_log2(host):
    wrapper, pool, q, batch, last = planned(host, lse_base="log2")
    out, lse = wrapper.run(q, pool.cache, return_lse=True)
    want, want_lse = reference(pool, q, *batch, lse_base="2")
    assert_close(out, want)
    assert_lse_close(lse, want_lse)
    k, v = pool.keys_values(*batch, 0)
    out, lse = ignis.single_decode_with_kv_cache(f16(as_np(q)[0], host), f16(k, host), f16(v, host), return_lse=True,
                                                 lse_base="log2")
    assert_lse_close(lse, decode_ref(as_np(q)[:1], k, v, lse_base="2")[1][0])


@pytest.mark.parametrize("host", CPU_HOSTS)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "bool"])
def test_byte_workspaces_and_workspace_size(host, dtype):
    buffer = np.zeros(16, dtype) if host == "numpy" else torch.zeros(16, dtype=getattr(torch, dtype))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(buffer)
    assert wrapper._workspace_size == 16
    pool = Pool(8, 16, 2, 64, host)
    indptr, indices, last = pool.batch([70, 3])
    wrapper.plan(indptr, indices, last, 8, 2, 64, 16)
    q = queries(2, 8, 64, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, indices, [70, 3])[0])
    # FlashInfer's method: (float bytes, int bytes); CPU plans keep their schedule on the host
    assert wrapper.workspace_size(indptr, indices, last, 8, 2, 64, 16) == (0, 0)
    assert wrapper.workspace_size(indptr, indices, last, 8, 2, 64, 16, fixed_split_size=-1,
                                  seq_lens=np.array([70, 3])) == (0, 0)
    with pytest.raises(ignis.UnsupportedError, match="block_tables"):
        wrapper.workspace_size(indptr, indices, last, 8, 2, 64, 16, block_tables=np.zeros((2, 5), np.int32))
    with pytest.raises(ignis.InvalidArgumentError, match="seq_lens"):
        wrapper.workspace_size(indptr, indices, last, 8, 2, 64, 16, seq_lens=np.array([70, 4]))
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        wrapper.workspace_size(indptr, indices, last, 7, 2, 64, 16)
    assert wrapper._plan is not None and wrapper._config["num_qo_heads"] == 8  # the plan is left alone


# ---- the CUDA-graph wrapper and run's arguments -----------------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
def test_cuda_graph_wrapper_reads_its_buffers(host):
    indptr_buffer, indices_buffer, last_buffer = zeros_i32(5, host), zeros_i32(64, host), zeros_i32(4, host)
    wrapper = CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"), indptr_buffer, indices_buffer,
                                                          last_buffer, kv_layout="NHD")
    assert wrapper.is_cuda_graph_enabled and wrapper._use_cuda_graph and wrapper._fixed_batch_size == 4
    assert wrapper._paged_kv_indices_buf is indices_buffer and wrapper._paged_kv_indptr_buf is indptr_buffer
    assert wrapper._paged_kv_last_page_len_buf is last_buffer
    pool = Pool(40, 16, 8, 128, host)
    lengths = [160, 33, 1]
    indptr, indices, last = pool.batch(lengths)
    wrapper.plan(indptr, indices, last, 32, 8, 128, 16)  # copied into the buffers
    assert np.array_equal(as_np(indices_buffer)[: len(indices)], indices)
    assert np.array_equal(as_np(indptr_buffer)[:4], indptr) and np.array_equal(as_np(last_buffer)[:3], last)
    q = queries(3, 32, 128, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, indices, lengths)[0])
    moved = rng.permutation(40)[: len(indices)].astype(np.int32)
    write(indices_buffer, moved)  # as a replayed graph would, the run reads the buffer
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, moved, lengths)[0])
    with pytest.raises(ignis.InvalidArgumentError, match="q_len_per_req"):
        wrapper.plan(indptr, indices, last, 32, 8, 128, 16, q_len_per_req=2)
    with pytest.raises(ignis.InvalidArgumentError, match="CUDA-graph buffers hold 4"):
        wrapper.plan(np.arange(6, dtype=np.int32), np.arange(5, dtype=np.int32), np.ones(5, np.int32), 32, 8, 128,
                     16)


@pytest.mark.parametrize("host", HOSTS)
def test_run_arguments(host):
    wrapper, pool, q, batch, last = planned(host, heads=32, kv_heads=8, dim=128, window_left=40)
    sinks_d = rng.uniform(-1.0, 4.0, 32)
    sinks = on_device(sinks_d, host, "f32")
    out = f16(np.zeros((3, 32, 128)), host)
    got = wrapper.run(q, pool.cache, window_left=40, sinks=sinks, out=out, v_scale=3.0, q_scale=0.5, k_scale=0.8)
    assert got is out
    want = reference(pool, q, *batch, window_left=40, sinks=sinks_d.astype(np.float32), k_scale=0.4, v_scale=3.0)[0]
    assert_close(out, want)
    with pytest.raises(ignis.InvalidArgumentError, match="window_left=-1"):
        wrapper.run(q, pool.cache, window_left=-1)
    with pytest.raises(ignis.UnsupportedError, match="kv_cache_sf"):
        wrapper.run(q, pool.cache, kv_cache_sf=(pool.cache, pool.cache))
    # forward's window_left replaces the plan's; run's must then match it
    want = reference(pool, q, *batch)[0]
    assert_close(wrapper.forward(q, pool.cache), want)
    assert_close(wrapper.run(q, pool.cache, window_left=-1), want)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_page_size_one_without_page_axis(host, layout):
    pool = Pool(300, 1, 8, 64, host)
    lengths = [120, 0, 9]
    indptr, indices, last = pool.batch(lengths)
    k_nhd, v_nhd = pool.cache[:, 0, 0], pool.cache[:, 1, 0]  # [slots, kv_heads, dim]
    caches = [(k_nhd, v_nhd), pool.cache[:, :, 0]]  # without the page axis, NHD and HND hold the same values
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"), layout)
    wrapper.plan(indptr, indices, last, 32, 8, 64, 1)
    q = queries(3, 32, 64, host)
    want = reference(pool, q, indptr, indices, lengths)[0]
    for cache in caches:
        assert_close(wrapper.run(q, cache), want)


# ---- fast_decode_plan on its own, and the signatures ----------------------------------------------
@pytest.mark.parametrize("host", HOSTS)
def test_fast_decode_plan(host):
    pool = Pool(60, 16, 8, 128, host)
    lengths = [90, 400, 2]
    indptr, indices, last = pool.batch(lengths)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"))
    # without a plan before it; q_data_type None: data_type's, else float16
    fast_decode_plan(wrapper, i32(indptr, host), pages(indices, host), i32(last, host), 32, 8, 128, 16,
                     logits_soft_cap=5.0, sm_scale=0.1)
    assert wrapper._logits_soft_cap == 5.0 and wrapper._sm_scale == 0.1
    assert wrapper._config["q_dtype"] == ignis._ext.IGNIS_F16
    q = queries(3, 32, 128, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, indices, lengths, logits_soft_cap=5.0,
                                                       sm_scale=0.1)[0])
    # global_override_indptr_cpu is the indptr used (SGLang's indptr argument then lives on the device)
    lengths = [33, 7, 250]
    indptr2, indices2, last2 = pool.batch(lengths)
    fast_decode_plan(wrapper, pages(np.zeros(4), host), pages(indices2, host), last2, 32, 8, 128, 16,
                     logits_soft_cap=5.0, sm_scale=0.1, global_override_indptr_cpu=i32(indptr2, host))
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr2, indices2, lengths, logits_soft_cap=5.0,
                                                       sm_scale=0.1)[0])
    with pytest.raises(ignis.UnsupportedError, match="q_data_type"):
        fast_decode_plan(wrapper, indptr2, indices2, last2, 32, 8, 128, 16, data_type="float8_e5m2")


@pytest.mark.parametrize("host", HOSTS)
def test_fast_decode_plan_graph_buffers(host):
    """On a CUDA-graph wrapper, plan fills the indptr / last_page_len buffers (as FlashInfer's plan
    copies them) and fast_decode_plan leaves them to the engine (as FlashInfer's does): only the
    indices go into their buffer, unless they are it. The runs read indptr / last_page_len from the
    plan itself, so stale buffers never mislead them."""
    pool = Pool(80, 16, 8, 128, host)
    buffers = (zeros_i32(5, host), zeros_i32(64, host), zeros_i32(4, host))
    wrapper = CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(host, "vllm"), *buffers)
    lengths = [90, 400, 2]
    indptr, indices, last = pool.batch(lengths)
    wrapper.plan(i32(indptr, host), pages(indices, host), i32(last, host), 32, 8, 128, 16)
    assert np.array_equal(as_np(buffers[0])[:4], indptr) and np.array_equal(as_np(buffers[2])[:3], last)
    q = queries(3, 32, 128, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr, indices, lengths)[0])
    lengths = [33, 7, 250, 16]
    indptr2, indices2, last2 = pool.batch(lengths)
    fast_decode_plan(wrapper, i32(indptr2, host), pages(indices2, host), i32(last2, host), 32, 8, 128, 16)
    assert np.array_equal(as_np(buffers[0])[:4], indptr) and np.array_equal(as_np(buffers[2])[:3], last)
    assert np.array_equal(as_np(buffers[1])[: len(indices2)], indices2)
    q = queries(4, 32, 128, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr2, indices2, lengths)[0])
    # SGLang's form: the indices written into the indices buffer, which is passed itself
    lengths = [300, 1]
    indptr3, indices3, last3 = pool.batch(lengths)
    write(buffers[1], indices3)
    fast_decode_plan(wrapper, pages(np.zeros(3), host), buffers[1], i32(last3, host), 32, 8, 128, 16,
                     global_override_indptr_cpu=i32(indptr3, host))
    assert np.array_equal(as_np(buffers[0])[:4], indptr)
    q = queries(2, 32, 128, host)
    assert_close(wrapper.run(q, pool.cache), reference(pool, q, indptr3, indices3, lengths)[0])


def test_signatures():
    E = inspect.Parameter.empty
    params = inspect.signature(fast_decode_plan).parameters
    assert [(p.name, p.default) for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD] == [
        ("wrapper", E), ("indptr", E), ("indices", E), ("last_page_len", E), ("num_qo_heads", E),
        ("num_kv_heads", E), ("head_dim", E), ("page_size", E), ("pos_encoding_mode", "NONE"), ("window_left", -1),
        ("logits_soft_cap", None), ("q_data_type", None), ("kv_data_type", None), ("data_type", None),
        ("sm_scale", None), ("rope_scale", None), ("rope_theta", None), ("non_blocking", True),
        ("fixed_split_size", None), ("disable_split_kv", False), ("q_len_per_req", 1),
        ("global_override_indptr_cpu", None)]
    params = inspect.signature(CUDAGraphBatchDecodeWithPagedKVCacheWrapper).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("workspace_buffer", E), ("indptr_buffer", E), ("indices_buffer", E), ("last_page_len_buffer", E),
        ("kv_layout", "NHD"), ("use_tensor_cores", False)]
    forward = inspect.signature(ignis.BatchDecodeWithPagedKVCacheWrapper.forward).parameters
    assert [(p.name, p.default) for p in forward.values() if p.kind is p.POSITIONAL_OR_KEYWORD][3:] == [
        ("pos_encoding_mode", "NONE"), ("q_scale", None), ("k_scale", None), ("v_scale", None), ("window_left", -1),
        ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None), ("rope_theta", None)]
    plan = inspect.signature(ignis.BatchDecodeWithPagedKVCacheWrapper.plan).parameters
    assert plan["is_causal"].kind is inspect.Parameter.KEYWORD_ONLY and plan["is_causal"].default is None
    assert "fast_decode_plan" in ignis.decode.__all__
    assert "CUDAGraphBatchDecodeWithPagedKVCacheWrapper" in ignis.decode.__all__


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("graph", [False, True], ids=["plain", "graph_buffers"])
def test_refused_indices_leave_the_previous_plan(host, graph):
    """An indices array plan refuses (not integers, not 1-D, outside int32, longer than the
    CUDA-graph indices buffer) is refused before anything is scheduled or copied: the previous
    plan still runs, with its previous result, on every backend."""
    pool = Pool(12, 16, 2, 64, host)
    lengths = [40, 9]
    indptr, indices, last = pool.batch(lengths)
    if graph:
        buffers = (zeros_i32(4, host), zeros_i32(len(indices), host), zeros_i32(3, host))
        wrapper = CUDAGraphBatchDecodeWithPagedKVCacheWrapper(workspace(host, "sglang"), *buffers)
    else:
        wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(host, "sglang"))
    args = (i32(indptr, host), pages(indices, host), i32(last, host), 8, 2, 64, 16)
    wrapper.plan(*args)
    q = queries(2, 8, 64, host)
    want = reference(pool, q, indptr, indices, lengths)[0]
    assert_close(wrapper.run(q, pool.cache), want)
    other = pool.batch([16, 16, 1])  # another batch: what a half-done plan would leave behind
    bad = [(ignis.DtypeError, on_device(indices, host, "f32")),
           (ignis.InvalidArgumentError, pages(np.stack([indices, indices]), host)),
           (ignis.InvalidArgumentError, on_device(np.append(indices, 2**40), host, "i64"))]
    if graph:
        bad.append((ignis.InvalidArgumentError, pages(np.append(indices, indices), host)))
    for error, refused in bad:
        with pytest.raises(error):
            wrapper.plan(i32(other[0], host), refused, i32(other[2], host), 8, 2, 64, 16)
        with pytest.raises(error):
            fast_decode_plan(wrapper, i32(other[0], host), refused, i32(other[2], host), 8, 2, 64, 16)
        assert_close(wrapper.run(q, pool.cache), want)
