"""Attention-state merges (merge_state, merge_state_in_place, merge_states) against float64 NumPy
references on every framework and dtype present: both LSE bases, empty (-inf) states, large LSEs,
masks, strided views, and the errors. MultiLevelCascadeAttentionWrapper with FlashInfer 0.7.2's
signature (causal the 9th positional argument of plan; run takes only q and the cache) and its
CUDA-graph buffer arrays (buffer i to level i), against refs.prefill_ref of each request over its
levels' keys. The shared-prefix wrappers with FlashInfer 0.7.2's signatures, against
refs.decode_ref / refs.prefill_ref over the shared prefix followed by each request's own keys:
every option reaches both parts (plan's on the decode one, each forward's on the prefill one), and
the position-dependent ones, which the shared part cannot place, are refused."""

import inspect
import math

import numpy as np
import pytest

import ignis
from refs import (FRAME_DTYPE_IDS, FRAME_DTYPES, VIEW_FRAME_IDS, VIEW_FRAMES, assert_close, decode_ref, prefill_ref,
                  torch)

rng = np.random.default_rng(3)


def merge_ref(v, s, base):
    """v [seq, n, H, D], s [seq, n, H] -> merged (v, s)."""
    ln_base = math.log(2.0) if base == "2" else 1.0
    m = np.max(s, axis=1, keepdims=True)
    empty = np.isneginf(m)
    m = np.where(empty, 0.0, m)
    w = np.exp((s - m) * ln_base)
    total = w.sum(axis=1, keepdims=True)
    s_out = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, total)) / ln_base)
    weights = np.where(empty, 0.0, w / np.where(empty, 1.0, total))
    return (weights[..., None] * v).sum(axis=1), s_out[:, 0]


def lses(shape):
    s = rng.uniform(-6, 6, size=shape)
    s[0] = 500.0 + rng.uniform(-3, 3, size=shape[1:])
    s.reshape(-1)[1::7] = -np.inf
    if shape[0] > 2:
        s[2] = -np.inf
    return s.astype(np.float32).astype(np.float64)


def check_s(got, expected):
    got = np.asarray(got, dtype=np.float64)
    assert np.array_equal(np.isneginf(got), np.isneginf(expected))
    finite = ~np.isneginf(expected)
    assert_close(got[finite], expected[finite], "f32", scale=2.0)


@pytest.mark.parametrize("base", ["2", "ln"])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_merge_state(frame, dtype, base):
    seq, heads, dim = 5, 3, 40
    v_a, v_b = rng.standard_normal((seq, heads, dim)), rng.standard_normal((seq, heads, dim))
    s = lses((seq, 2, heads))
    xa, xb = frame.array(v_a, dtype), frame.array(v_b, dtype)
    v, s_out = ignis.merge_state(xa, frame.array(s[:, 0], "f32"), xb, frame.array(s[:, 1], "f32"), lse_base=base)
    ev, es = merge_ref(np.stack([frame.numpy(xa), frame.numpy(xb)], axis=1), s, base)
    assert type(v) is type(xa) and tuple(v.shape) == (seq, heads, dim)
    assert_close(frame.numpy(v), ev, dtype, scale=2.0)
    check_s(frame.numpy(s_out), es)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
@pytest.mark.parametrize("with_mask", [False, True])
def test_merge_state_in_place(frame, with_mask):
    seq, heads, dim = 6, 2, 16
    v_a, v_b = rng.standard_normal((seq, heads, dim)), rng.standard_normal((seq, heads, dim))
    s = lses((seq, 2, heads))
    v, s_a = frame.array(v_a, "f32"), frame.array(s[:, 0], "f32")
    mask = np.array([1, 0, 1, 1, 0, 1], np.uint8) if with_mask else None
    mask_arg = None
    if with_mask:
        mask_arg = mask if frame.name == "numpy" else frame.index(mask, "i32").to(torch.uint8)
    ignis.merge_state_in_place(v, s_a, frame.array(v_b, "f32"), frame.array(s[:, 1], "f32"), mask_arg,
                               lse_base="ln")
    ev, es = merge_ref(np.stack([v_a, v_b], axis=1), s, "ln")
    if with_mask:
        keep = mask == 0
        ev[keep], es[keep] = v_a[keep], s[keep, 0]
    assert_close(frame.numpy(v), ev, "f32", scale=2.0)
    check_s(frame.numpy(s_a), es)


@pytest.mark.parametrize("base", ["2", "ln"])
@pytest.mark.parametrize("num_states", [1, 4])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_merge_states(frame, dtype, num_states, base):
    seq, heads, dim = 4, 2, 24
    v = frame.array(rng.standard_normal((seq, num_states, heads, dim)), dtype)
    s = lses((seq, num_states, heads))
    v_out, s_out = ignis.merge_states(v, frame.array(s, "f32"), lse_base=base)
    ev, es = merge_ref(frame.numpy(v), s, base)
    assert tuple(v_out.shape) == (seq, heads, dim) and tuple(s_out.shape) == (seq, heads)
    assert_close(frame.numpy(v_out), ev, dtype, scale=2.0)
    check_s(frame.numpy(s_out), es)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_merge_state_strided(frame):
    seq, heads, dim = 3, 4, 32
    v_a = frame.transposed(rng.standard_normal((seq, heads, dim)), "f32")
    v_b = frame.padded(rng.standard_normal((seq, heads, dim)), "f32", pad=5)
    s = lses((seq, 2, heads))
    s_all = frame.array(s, "f32")
    v, s_out = ignis.merge_state(v_a, s_all[:, 0], v_b, s_all[:, 1])
    ev, es = merge_ref(np.stack([frame.numpy(v_a), frame.numpy(v_b)], axis=1), s, "2")
    assert_close(frame.numpy(v), ev, "f32", scale=2.0)
    check_s(frame.numpy(s_out), es)


def test_merge_errors():
    v = np.zeros((2, 2, 8), np.float32)
    s = np.zeros((2, 2), np.float32)
    with pytest.raises(ignis.InvalidArgumentError, match="lse_base"):
        ignis.merge_state(v, s, v, s, lse_base="e")
    with pytest.raises(ignis.DtypeError, match="s_b.dtype"):
        ignis.merge_state(v, s, v, s.astype(np.float16))
    with pytest.raises(ignis.InvalidArgumentError, match="v_b.shape"):
        ignis.merge_state(v, s, v[:, :1], s)
    with pytest.raises(ignis.InvalidArgumentError, match="mask"):
        ignis.merge_state_in_place(v, s, v.copy(), s.copy(), np.ones(3, np.uint8))


# ---- MultiLevelCascadeAttentionWrapper ----------------------------------------------------------
# FlashInfer 0.7.2.post1's parameters (name, default; REQ: none), from its cascade.py.
REQ = inspect.Parameter.empty
CASCADE_INIT = [("num_levels", REQ), ("float_workspace_buffer", REQ), ("kv_layout", "NHD"), ("use_cuda_graph", False),
                ("qo_indptr_buf_arr", None), ("paged_kv_indptr_buf_arr", None), ("paged_kv_indices_buf_arr", None),
                ("paged_kv_last_page_len_buf_arr", None)]
CASCADE_PLAN = [("qo_indptr_arr", REQ), ("paged_kv_indptr_arr", REQ), ("paged_kv_indices_arr", REQ),
                ("paged_kv_last_page_len", REQ), ("num_qo_heads", REQ), ("num_kv_heads", REQ), ("head_dim", REQ),
                ("page_size", REQ), ("causal", False), ("pos_encoding_mode", "NONE"),
                ("use_fp16_qk_reduction", False), ("sm_scale", None), ("window_left", -1), ("logits_soft_cap", None),
                ("rope_scale", None), ("rope_theta", None), ("q_data_type", "float16"), ("kv_data_type", None)]
HEADS, KV_HEADS, DIM, PAGE = 4, 2, 64, 8


@pytest.mark.parametrize("fn, expected", [(ignis.MultiLevelCascadeAttentionWrapper.__init__, CASCADE_INIT),
                                          (ignis.MultiLevelCascadeAttentionWrapper.plan, CASCADE_PLAN),
                                          (ignis.MultiLevelCascadeAttentionWrapper.begin_forward, CASCADE_PLAN)],
                         ids=["init", "plan", "begin_forward"])
def test_cascade_signatures(fn, expected):
    """FlashInfer's parameters in its order; ignis' extras (custom_mask, ...) only by keyword."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    assert [(p.name, p.default) for p in params[:len(expected)]] == expected
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[len(expected):])


class Levels:
    """A cascade batch in one paged cache (f16, NHD, shuffled pages): level 0 one prefix every
    query shares, level 1 a prefix per group of requests, level 2 each request's own keys (at least
    as many as its queries, so that causal attention over the levels is causal attention over the
    concatenated keys)."""

    def __init__(self, q_lens, group_of, shared, group_lens, unique):
        self.q_lens = np.asarray(q_lens)
        self.qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        self.q = (rng.standard_normal((self.qo[-1], HEADS, DIM))).astype(np.float16)
        self.keys, self.values, self.tables = [], [], []
        pages = 0
        for level in ([shared], group_lens, unique):
            ks = [rng.standard_normal((n, KV_HEADS, DIM)).astype(np.float16) for n in level]
            vs = [rng.standard_normal((n, KV_HEADS, DIM)).astype(np.float16) for n in level]
            counts = [(n + PAGE - 1) // PAGE for n in level]
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
            self.tables.append((pages + indptr[:-1], counts, level))
            self.keys.append(ks)
            self.values.append(vs)
            pages += indptr[-1]
        groups = np.asarray(group_of)
        # queries of level 0: all; of level 1: each group's requests (consecutive); of level 2: each request's
        group_q = [self.q_lens[groups == g].sum() for g in range(len(group_lens))]
        self.level_qo = [np.array([0, self.qo[-1]], np.int32),
                         np.concatenate([[0], np.cumsum(group_q)]).astype(np.int32), self.qo]
        self.group_of = groups
        self.order = rng.permutation(pages + 3).astype(np.int32)
        self.cache = np.zeros((pages + 3, 2, PAGE, KV_HEADS, DIM), np.float16)
        self.indptr, self.indices, self.last = [], [], []
        for (first, counts, lengths), ks, vs in zip(self.tables, self.keys, self.values):
            level_indices = []
            for start, count, n, k, v in zip(first, counts, lengths, ks, vs):
                slots = self.order[start:start + count]
                level_indices.append(slots)
                for j in range(n):
                    self.cache[slots[j // PAGE], 0, j % PAGE] = k[j]
                    self.cache[slots[j // PAGE], 1, j % PAGE] = v[j]
            self.indptr.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            self.indices.append(np.concatenate(level_indices).astype(np.int32))
            self.last.append(np.array([n - (c - 1) * PAGE for n, c in zip(lengths, counts)], np.int32))

    def reference(self, causal, **options):
        """out of each request over its level 0, 1 and 2 keys, concatenated."""
        outs = []
        for b in range(self.q_lens.size):
            g = self.group_of[b]
            k = np.concatenate([self.keys[0][0], self.keys[1][g], self.keys[2][b]])
            v = np.concatenate([self.values[0][0], self.values[1][g], self.values[2][b]])
            outs.append(prefill_ref(self.q[self.qo[b]:self.qo[b + 1]], k, v, causal=causal, **options)[0])
        return np.concatenate(outs)


def three_levels(scale=1):
    return Levels([3, 5, 2, 4], [0, 0, 1, 1], 20 * scale, [9 * scale, 17], [6, 11 * scale, 2, 30])


@pytest.mark.parametrize("causal", [False, True])
def test_cascade_plan_takes_flashinfer_order(causal):
    batch = three_levels()
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(3, None)
    assert not wrapper.is_cuda_graph_enabled
    # FlashInfer's positional order: causal 9th, then pos_encoding_mode, use_fp16_qk_reduction, sm_scale
    wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE, causal,
                 "NONE", False, None)
    assert_close(wrapper.run(batch.q, batch.cache), batch.reference(causal), "f16")
    with pytest.raises(TypeError):  # ignis' mask arguments are keyword-only now
        wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE, False,
                     "NONE", False, None, -1, None, None, None, "float16", None, None)


def paged(k, v, kv):
    """Ragged k / v (request b: rows kv[b]:kv[b+1]) in pages of PAGE, in reversed page order:
    (cache, indptr, indices, last_page_len)."""
    counts = [(n + PAGE - 1) // PAGE for n in np.diff(kv)]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = np.arange(indptr[-1])[::-1].astype(np.int32)
    cache = np.zeros((indptr[-1], 2, PAGE, k.shape[1], k.shape[2]), k.dtype)
    for b in range(len(counts)):
        for j in range(kv[b + 1] - kv[b]):
            cache[indices[indptr[b] + j // PAGE], :, j % PAGE] = k[kv[b] + j], v[kv[b] + j]
    last = np.array([n - (c - 1) * PAGE for n, c in zip(np.diff(kv), counts)], np.int32)
    return cache, indptr, indices, last


def test_cascade_run_takes_flashinfer_arguments():
    """run(q, paged_kv_cache) as in FlashInfer 0.7.2 (and ignis' keyword-only stream): run's other
    keywords are refused (TypeError, as FlashInfer's), not handed to every level, where out= / lse=
    made each level write the merged buffers and lse_base="ln" broke the (base-2) merge."""
    params = list(inspect.signature(ignis.MultiLevelCascadeAttentionWrapper.run).parameters.values())[1:]
    assert [(p.name, p.default) for p in params[:2]] == [("q", REQ), ("paged_kv_cache", REQ)]
    assert [(p.name, p.kind) for p in params[2:]] == [("stream", inspect.Parameter.KEYWORD_ONLY)]
    batch = three_levels()
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(3, None)
    wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE, causal=True,
                 sm_scale=0.2, logits_soft_cap=4.0)
    out = np.full(batch.q.shape, 7, np.float16)
    lse = np.full(batch.q.shape[:2], 7, np.float32)
    for extra in (dict(out=out), dict(lse=lse), dict(out=out, lse=lse), dict(lse_base="ln"), dict(return_lse=True),
                  dict(window_left=4), dict(sinks=np.zeros(HEADS, np.float32))):
        with pytest.raises(TypeError):
            wrapper.run(batch.q, batch.cache, **extra)
    assert np.all(out == 7) and np.all(lse == 7)
    assert_close(wrapper.run(batch.q, batch.cache), batch.reference(True, sm_scale=0.2, logits_soft_cap=4.0), "f16")


@pytest.mark.parametrize("option", [dict(pos_encoding_mode="ROPE_LLAMA"), dict(pos_encoding_mode="ALIBI"),
                                    dict(window_left=10)], ids=["rope", "alibi", "window"])
def test_cascade_refuses_level_positions(option):
    """Each level attends with its own positions (level 0 holds every query as one request), so
    an option that depends on where a query and a key sit gives garbage on all but the last level:
    refused with more than one level (one level is one paged prefill, right with them)."""
    batch = three_levels()
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(3, None)
    with pytest.raises(ignis.UnsupportedError, match=next(iter(option))):
        wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE,
                     causal=True, **option)
    single = ignis.MultiLevelCascadeAttentionWrapper(1, None)
    keys = [np.concatenate([batch.keys[0][0], batch.keys[1][g], batch.keys[2][b]])
            for b, g in enumerate(batch.group_of)]
    values = [np.concatenate([batch.values[0][0], batch.values[1][g], batch.values[2][b]])
              for b, g in enumerate(batch.group_of)]
    kv = np.concatenate([[0], np.cumsum([k.shape[0] for k in keys])]).astype(np.int32)
    cache, indptr, indices, last = paged(np.concatenate(keys), np.concatenate(values), kv)
    single.plan([batch.qo], [indptr], [indices], [last], HEADS, KV_HEADS, DIM, PAGE, causal=True, **option)
    assert_close(single.run(batch.q, cache), batch.reference(True, **option), "f16")


def cuda_graph_arrays(frame, batches, max_pages):
    """Per level (batch sizes `batches`): qo / kv indptr buffers, indices and last_page_len buffers."""
    make = (lambda n: np.zeros(n, np.int32)) if frame == "numpy" else (lambda n: torch.zeros(n, dtype=torch.int32))
    return dict(qo_indptr_buf_arr=[make(b + 1) for b in batches],
                paged_kv_indptr_buf_arr=[make(b + 1) for b in batches],
                paged_kv_indices_buf_arr=[make(max_pages) for _ in batches],
                paged_kv_last_page_len_buf_arr=[make(b) for b in batches])


def host(x):
    return x.numpy() if hasattr(x, "numpy") else x


@pytest.mark.parametrize("frame", ["numpy"] + (["torch"] if torch is not None else []))
def test_cascade_cuda_graph_buffers_per_level(frame):
    arrays = cuda_graph_arrays(frame, [1, 2, 4], 64)
    workspace = np.zeros(1 << 20, np.uint8) if frame == "numpy" else torch.zeros(1 << 20, dtype=torch.uint8)
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(3, workspace, "NHD", True, **arrays)
    assert wrapper.is_cuda_graph_enabled
    for i, level in enumerate(wrapper._wrappers):
        assert level.is_cuda_graph_enabled
        for name, buffers in arrays.items():
            assert getattr(level, "_" + name[:-len("_arr")]) is buffers[i]
    for batch in (three_levels(), three_levels(scale=2)):  # re-plan: same batch sizes, other lengths
        wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE,
                     causal=True)
        for i in range(3):
            np.testing.assert_array_equal(host(arrays["qo_indptr_buf_arr"][i]), batch.level_qo[i])
            np.testing.assert_array_equal(host(arrays["paged_kv_indptr_buf_arr"][i]), batch.indptr[i])
            np.testing.assert_array_equal(host(arrays["paged_kv_indices_buf_arr"][i])[:batch.indices[i].size],
                                          batch.indices[i])
            np.testing.assert_array_equal(host(arrays["paged_kv_last_page_len_buf_arr"][i]), batch.last[i])
        q, cache = batch.q, batch.cache
        if frame == "torch":
            q, cache = torch.from_numpy(q), torch.from_numpy(cache)
        assert_close(host(wrapper.run(q, cache)), batch.reference(True), "f16")
    # the runs read the buffers: the last level's pages moved, and its indices buffer rewritten to match
    moved = batch.cache.copy()
    spare = [p for p in range(moved.shape[0]) if p not in set(np.concatenate(batch.indices).tolist())]
    first = batch.indices[2][0]
    moved[spare[0]], moved[first] = batch.cache[first], 0
    arrays["paged_kv_indices_buf_arr"][2][0] = int(spare[0])
    q, cache = (batch.q, moved) if frame == "numpy" else (torch.from_numpy(batch.q), torch.from_numpy(moved))
    assert_close(host(wrapper.run(q, cache)), batch.reference(True), "f16")


def test_cascade_buffer_arrays_checked():
    arrays = cuda_graph_arrays("numpy", [1, 4], 64)
    with pytest.raises(ignis.InvalidArgumentError, match="paged_kv_indices_buf_arr, paged_kv_last_page_len_buf_arr"):
        ignis.MultiLevelCascadeAttentionWrapper(2, None, use_cuda_graph=True,
                                                qo_indptr_buf_arr=arrays["qo_indptr_buf_arr"],
                                                paged_kv_indptr_buf_arr=arrays["paged_kv_indptr_buf_arr"])
    with pytest.raises(ignis.InvalidArgumentError, match="qo_indptr_buf_arr has 2 entries but there are 3 levels"):
        ignis.MultiLevelCascadeAttentionWrapper(3, None, use_cuda_graph=True, **arrays)
    batch = three_levels()
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(3, None)
    with pytest.raises(ignis.InvalidArgumentError, match="paged_kv_last_page_len has 2 entries"):
        wrapper.plan(batch.level_qo, batch.indptr, batch.indices, batch.last[:2], HEADS, KV_HEADS, DIM, PAGE)


# ---- the shared-prefix wrappers -----------------------------------------------------------------
class SharedPrefix:
    """A batch whose requests share a prefix (k_shared / v_shared, f16) and then have keys of their
    own (unique_lens) in a paged cache, with q_lens query tokens each."""

    def __init__(self, shared_len, unique_lens, q_lens):
        self.k_shared = rng.standard_normal((shared_len, KV_HEADS, DIM)).astype(np.float16)
        self.v_shared = rng.standard_normal((shared_len, KV_HEADS, DIM)).astype(np.float16)
        self.kv = np.concatenate([[0], np.cumsum(unique_lens)]).astype(np.int32)
        self.k = rng.standard_normal((self.kv[-1], KV_HEADS, DIM)).astype(np.float16)
        self.v = rng.standard_normal((self.kv[-1], KV_HEADS, DIM)).astype(np.float16)
        self.cache, self.indptr, self.indices, self.last = paged(self.k, self.v, self.kv)
        self.qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        self.q = rng.standard_normal((self.qo[-1], HEADS, DIM)).astype(np.float16)

    def reference(self, ref, **options):
        """ref (decode_ref or prefill_ref) of each request's queries over the shared prefix
        followed by its own keys, concatenated."""
        outs = []
        for b in range(self.kv.size - 1):
            k = np.concatenate([self.k_shared, self.k[self.kv[b]:self.kv[b + 1]]])
            v = np.concatenate([self.v_shared, self.v[self.kv[b]:self.kv[b + 1]]])
            outs.append(ref(self.q[self.qo[b]:self.qo[b + 1]], k, v, **options)[0])
        return np.concatenate(outs)


def parameters(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "self" and p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]


SHARED_INIT = [("float_workspace_buffer", REQ), ("kv_layout", "NHD")]
SHARED_DECODE_PLAN = [("unique_kv_indptr", REQ), ("unique_kv_indices", REQ), ("unique_kv_last_page_len", REQ),
                      ("num_qo_heads", REQ), ("num_kv_heads", REQ), ("head_dim", REQ), ("page_size", REQ),
                      ("data_type", "float16")]
SHARED_PREFILL_PLAN = [("qo_indptr", REQ), ("paged_kv_indptr", REQ), ("paged_kv_indices", REQ),
                       ("paged_kv_last_page_len", REQ), ("num_qo_heads", REQ), ("num_kv_heads", REQ),
                       ("head_dim", REQ), ("page_size", REQ)]
SHARED_OPERANDS = [("q", REQ), ("k_shared", REQ), ("v_shared", REQ), ("unique_kv_cache", REQ)]
SHARED_PREFILL_FORWARD = SHARED_OPERANDS + [("causal", False), ("use_fp16_qk_reduction", False), ("sm_scale", None),
                                            ("rope_scale", None), ("rope_theta", None)]


@pytest.mark.parametrize("fn, expected", [
    (ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper.__init__, SHARED_INIT),
    (ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper.begin_forward, SHARED_DECODE_PLAN),
    (ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper.forward, SHARED_OPERANDS),
    (ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper.__init__, SHARED_INIT),
    (ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper.begin_forward, SHARED_PREFILL_PLAN),
    (ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper.forward, SHARED_PREFILL_FORWARD)],
    ids=["decode-init", "decode-begin_forward", "decode-forward", "prefill-init", "prefill-begin_forward",
         "prefill-forward"])
def test_shared_prefix_signatures(fn, expected):
    """FlashInfer 0.7.2's positional parameters exactly (ignis' extras only by keyword)."""
    assert parameters(fn) == expected


@pytest.mark.parametrize("cls", [ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper,
                                 ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper], ids=["decode", "prefill"])
def test_shared_prefix_init_takes_nothing_more(cls):
    """FlashInfer 0.7.2's constructors take the workspace and the layout only: anything more (a
    CUDA-graph request, say) is a TypeError, not dropped."""
    with pytest.raises(TypeError):
        cls(None, "NHD", use_cuda_graph=True)


@pytest.mark.parametrize("lse_base", ["2", "ln"])
@pytest.mark.parametrize("q_len_per_req", [1, 3])
def test_shared_prefix_decode_options_reach_both_parts(q_len_per_req, lse_base):
    """begin_forward's options (ignis' keywords; FlashInfer reads the decode wrapper's sm_scale and
    rope values for the shared part too) apply to the shared prefix as to the unique keys, and the
    merge uses the LSE base the plan asked for."""
    batch = SharedPrefix(37, [9, 20, 3], [q_len_per_req] * 3)
    wrapper = ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(np.empty(1 << 20, np.uint8))
    wrapper.begin_forward(batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE, sm_scale=0.3,
                          logits_soft_cap=6.0, q_len_per_req=q_len_per_req, lse_base=lse_base)
    out = wrapper.forward(batch.q, batch.k_shared, batch.v_shared, batch.cache)
    assert_close(out, batch.reference(decode_ref, sm_scale=0.3, logits_soft_cap=6.0), "f16")
    assert_close(wrapper.run(batch.q, batch.k_shared, batch.v_shared, batch.cache), out, "f16")


@pytest.mark.parametrize("option", [dict(pos_encoding_mode="ROPE_LLAMA"), dict(pos_encoding_mode="ALIBI"),
                                    dict(window_left=8)], ids=["rope", "alibi", "window"])
def test_shared_prefix_refuses_positions(option):
    """A query's position in its request is past the shared prefix, which the shared part (one
    single prefill for the whole batch) cannot place: position-dependent options are refused by
    both wrappers' begin_forward, and by the decode forward when set on the wrapper since."""
    batch = SharedPrefix(12, [5, 9], [2, 3])
    name = next(iter(option))
    decode = ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(np.empty(1 << 20, np.uint8))
    with pytest.raises(ignis.UnsupportedError, match=name):
        decode.begin_forward(batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE, **option)
    decode.begin_forward(batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE)
    setattr(decode._decode, "_" + name, option[name])  # as an engine may write FlashInfer's attributes
    with pytest.raises(ignis.UnsupportedError, match=name):
        decode.forward(batch.q[:2], batch.k_shared, batch.v_shared, batch.cache)
    prefill = ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(None)
    with pytest.raises(ignis.UnsupportedError, match=name):
        prefill.begin_forward(batch.qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE,
                              **option)


def test_shared_prefix_prefill_applies_every_forward_option():
    """Each forward's causal and sm_scale reach the unique part (re-planned by the paged wrapper's
    forward, as FlashInfer's forward sets them) as well as the shared one, whichever of them
    changed since the last call; begin_forward's logits_soft_cap (an ignis keyword) stays on both,
    and its lse_base changes only what the kernel writes (the merge gets base 2 from the run)."""
    batch = SharedPrefix(29, [11, 4, 17], [6, 4, 9])
    wrapper = ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(None)
    wrapper.begin_forward(batch.qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE,
                          logits_soft_cap=5.0, lse_base="ln")
    operands = (batch.q, batch.k_shared, batch.v_shared, batch.cache)
    for causal, sm_scale in ((True, None), (True, 0.25), (False, 0.25), (False, None), (True, 0.4)):
        out = wrapper.forward(*operands, causal=causal, sm_scale=sm_scale)
        # the reference's query positions are the request's: causal over the unique keys, all of the prefix seen
        ref = batch.reference(prefill_ref, causal=causal, sm_scale=sm_scale, logits_soft_cap=5.0)
        assert_close(out, ref, "f16")
    assert_close(wrapper.forward(*operands, True, False, 0.4, 1.0, 1e4), ref, "f16")  # FlashInfer's order
    for name in ("causal", "sm_scale", "rope_theta"):  # forward's arguments: forward sets them on every call
        with pytest.raises(ignis.UnsupportedError, match=name):
            wrapper.begin_forward(batch.qo, batch.indptr, batch.indices, batch.last, HEADS, KV_HEADS, DIM, PAGE,
                                  **{name: 1.0})
