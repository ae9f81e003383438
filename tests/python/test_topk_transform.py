"""The fused top-k transforms (ignis.top_k_page_table_transform, ignis.top_k_ragged_transform:
FlashInfer's names and signatures, as SGLang's DSA indexers call them) against a NumPy reference of
include/ignis/topk.h: each row's window clamped into the row, the k largest scores (NaN lowest, ties
by index in the tie_break's direction), the selected local indices ascending, mapped through the page
table or plus the offset, -1 padding. In every framework present (NumPy, PyTorch on the host and on
CUDA), dtypes f32/f16/bf16, with SGLang's argument patterns, a long row on CUDA, and the errors."""

import numpy as np
import pytest

import ignis
from engine_arrays import as_numpy
from refs import FRAME_DTYPE_IDS, FRAME_DTYPES, FRAMES

rng = np.random.default_rng(11)


# ---- reference ------------------------------------------------------------------------------------
def order_keys(x):
    """The order key of each score (as int64): NaN lowest, -0 below +0."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    keys = np.where(bits & 0x80000000, ~bits & 0xFFFFFFFF, bits | 0x80000000)
    return np.where(np.isnan(x), 0, keys)


def selected(x, start, length, k, tie_break):
    """The selected local indices of one row (ascending) and the clamped window."""
    n = x.shape[0]
    start = min(max(start, 0), n)
    length = min(max(length, 0), n - start)
    if length <= k:
        return np.arange(length), start
    keys = order_keys(x[start:start + length])
    idx = np.arange(length)
    order = np.lexsort((-idx if tie_break == ignis.TopKTieBreak.LARGE else idx, -keys))
    return np.sort(order[:k]), start


def ref_page_table(x, table, lengths, k, row_to_batch=None, row_starts=None, pt_starts=None, page_size=1,
                   tie_break=0):
    rows = x.shape[0]
    out = np.full((rows, k), -1, np.int64)
    raw = np.full((rows, k), -1, np.int64)
    for r in range(rows):
        start = 0 if row_starts is None else int(row_starts[r])
        picks, _ = selected(x[r], start, int(lengths[r]), k, tie_break)
        raw[r, :picks.size] = picks
        b = r if row_to_batch is None else int(row_to_batch[r])
        pt_start = int(pt_starts[r]) if pt_starts is not None else (start if page_size == 1 else 0)
        for i, j in enumerate(picks):
            slot = pt_start + j // page_size
            if 0 <= b < table.shape[0] and 0 <= slot < table.shape[1]:
                out[r, i] = int(table[b, slot]) * page_size + j % page_size
    return out, raw


def ref_ragged(x, offsets, lengths, k, row_starts=None, tie_break=0):
    out = np.full((x.shape[0], k), -1, np.int64)
    for r in range(x.shape[0]):
        start = 0 if row_starts is None else int(row_starts[r])
        picks, _ = selected(x[r], start, int(lengths[r]), k, tie_break)
        out[r, :picks.size] = picks + int(offsets[r])
    return out


def scores(rows, n, ties=True):
    x = rng.standard_normal((rows, n))
    if ties:
        x[:, ::3] = rng.integers(-2, 3, x[:, ::3].shape)
    return x


def out_array(frame, shape):
    """A caller's int32 output for inputs of `frame`: NumPy for JAX, whose arrays are immutable."""
    if frame.name.startswith("jax"):
        return np.zeros(shape, np.int32)
    return frame.index(np.zeros(shape), "i32")


def as_i64(frame, a):
    return as_numpy(a).astype(np.int64)


def windows(rows, n, k):
    """Lengths and starts: full, partial, shorter than k, empty, out of range."""
    starts = rng.integers(0, max(n // 3, 1), rows)
    lengths = np.array([n - s - int(rng.integers(0, max(n // 4, 1))) for s in starts])
    lengths[1::5] = rng.integers(0, k + 1, lengths[1::5].shape)
    lengths[2::5] = 0
    starts[3::5], lengths[3::5] = -2, n + 7
    starts[0], lengths[0] = 0, n
    return starts.astype(np.int32), lengths.astype(np.int32)


# ---- page table -----------------------------------------------------------------------------------
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
@pytest.mark.parametrize("page_size", [1, 16])
def test_page_table_transform(frame, dtype, page_size):
    rows, n, batch = 11, 700, 4
    x = frame.array(scores(rows, n), dtype)
    xr = frame.numpy(x)
    width = n // page_size + 3
    table = rng.integers(0, 1 << 20, (batch, width)).astype(np.int32)
    row_to_batch = rng.integers(0, batch, rows).astype(np.int32)
    row_to_batch[-1] = batch  # outside the table: every slot -1
    starts, lengths = windows(rows, n, 64)
    pt_starts = rng.integers(0, 3, rows).astype(np.int32)
    for k in (1, 64, 900):
        for tie in ignis.TopKTieBreak:
            out_raw = out_array(frame, (rows, k))
            out = ignis.top_k_page_table_transform(
                x, frame.index(table, "i32"), frame.index(lengths, "i32"), k,
                row_to_batch=frame.index(row_to_batch, "i32"), tie_break=tie, dsa_graph_safe=True,
                row_starts=frame.index(starts, "i32"), page_table_row_starts=frame.index(pt_starts, "i32"),
                page_size=page_size, out_raw_indices=out_raw)
            want, want_raw = ref_page_table(xr, table, lengths, k, row_to_batch, starts, pt_starts, page_size, tie)
            np.testing.assert_array_equal(as_i64(frame, out), want)
            np.testing.assert_array_equal(as_i64(frame, out_raw), want_raw)


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_page_table_defaults_and_out(frame, dtype):
    """No row_to_batch (row i reads table row i), page_table_row_starts falling back to row_starts,
    a caller's out (returned as is), deterministic=True."""
    rows, n, k = 6, 300, 32
    x = frame.array(scores(rows, n), dtype)
    table = rng.integers(0, 1 << 16, (rows, n)).astype(np.int32)
    starts, lengths = windows(rows, n, k)
    out = out_array(frame, (rows, k))
    got = ignis.top_k_page_table_transform(x, frame.index(table, "i32"), frame.index(lengths, "i32"), k,
                                           deterministic=True, row_starts=frame.index(starts, "i32"), out=out)
    assert got is out
    want, _ = ref_page_table(frame.numpy(x), table, lengths, k, row_starts=starts)
    np.testing.assert_array_equal(as_i64(frame, got), want)
    got = ignis.top_k_page_table_transform(x, frame.index(table, "i32"), frame.index(lengths, "i32"), k)
    np.testing.assert_array_equal(as_i64(frame, got), ref_page_table(frame.numpy(x), table, lengths, k)[0])


# ---- ragged -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_ragged_transform(frame, dtype):
    rows, n = 9, 1000
    x = frame.array(scores(rows, n), dtype)
    xr = frame.numpy(x)
    offsets = rng.integers(0, 1 << 20, rows).astype(np.int32)
    starts, lengths = windows(rows, n, 100)
    for k in (1, 100, 2048):
        for tie in ignis.TopKTieBreak:
            got = ignis.top_k_ragged_transform(x, frame.index(offsets, "i32"), frame.index(lengths, "i32"), k,
                                               tie_break=tie, row_starts=frame.index(starts, "i32"))
            assert tuple(got.shape) == (rows, k)
            np.testing.assert_array_equal(as_i64(frame, got), ref_ragged(xr, offsets, lengths, k, starts, tie))
        got = ignis.top_k_ragged_transform(x, frame.index(offsets, "i32"), frame.index(lengths, "i32"), k)
        np.testing.assert_array_equal(as_i64(frame, got), ref_ragged(xr, offsets, lengths, k))


def test_special_scores():
    """NaN ranks below -inf, -0 below +0, and -inf scores are selected like any other."""
    x = np.array([[np.nan, -np.inf, 0.0, -0.0, np.nan, -np.inf, 1.0, np.nan]], np.float32)
    lengths = np.array([8], np.int32)
    got = ignis.top_k_ragged_transform(x, np.zeros(1, np.int32), lengths, 4)
    np.testing.assert_array_equal(got, [[1, 2, 3, 6]])
    got = ignis.top_k_ragged_transform(x, np.zeros(1, np.int32), lengths, 4, tie_break=ignis.TopKTieBreak.LARGE)
    np.testing.assert_array_equal(got, [[2, 3, 5, 6]])


# ---- the engines' calls -------------------------------------------------------------------------------
def test_sglang_call_patterns():
    """dsa_topk_backend.py (paged with row_to_batch and row starts; ragged with offsets), dsv4's
    indexer (page_size with out and out_raw_indices) and qsa (ragged, zero offsets, SMALL)."""
    rows, n, k = 8, 2500, 2048
    logits = scores(rows, n, ties=False).astype(np.float32)
    lengths = rng.integers(1, n + 1, rows).astype(np.int32)
    lengths[0] = n
    page_table_1 = rng.integers(0, 1 << 20, (3, n)).astype(np.int32)
    row_to_batch = rng.integers(0, 3, rows).astype(np.int32)
    starts = np.zeros(rows, np.int32)
    got = ignis.top_k_page_table_transform(logits, page_table_1, lengths, k, row_to_batch=row_to_batch,
                                           deterministic=False, tie_break=0, dsa_graph_safe=True, row_starts=starts,
                                           page_table_row_starts=starts)
    want, _ = ref_page_table(logits, page_table_1, lengths, k, row_to_batch, starts, starts)
    np.testing.assert_array_equal(got, want)
    offsets = np.cumsum(lengths).astype(np.int32) - lengths
    got = ignis.top_k_ragged_transform(logits, offsets, lengths, k, deterministic=False, tie_break=0,
                                       dsa_graph_safe=True, row_starts=None)
    np.testing.assert_array_equal(got, ref_ragged(logits, offsets, lengths, k))
    page_size = 64
    tables = rng.integers(0, 1 << 14, (rows, n // page_size + 1)).astype(np.int32)
    out = np.empty((rows, k), np.int32)
    raw = np.empty((rows, k), np.int32)
    ignis.top_k_page_table_transform(logits, tables, lengths, k, deterministic=True, tie_break=1, dsa_graph_safe=True,
                                     page_size=page_size, out=out, out_raw_indices=raw)
    want, want_raw = ref_page_table(logits, tables, lengths, k, page_size=page_size)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(raw, want_raw)
    starts = rng.integers(0, 100, rows).astype(np.int32)
    got = ignis.top_k_ragged_transform(logits, np.zeros_like(starts), lengths - starts.clip(max=lengths), 512,
                                       deterministic=True, tie_break=ignis.TopKTieBreak.SMALL, dsa_graph_safe=True,
                                       row_starts=starts)
    np.testing.assert_array_equal(got, ref_ragged(logits, np.zeros(rows), lengths - starts.clip(max=lengths), 512,
                                                  starts, 1))


CUDA_FRAMES = [f for f in FRAMES if f.name == "torch-cuda"]


@pytest.mark.parametrize("frame", CUDA_FRAMES, ids=[f.name for f in CUDA_FRAMES])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_long_rows_on_cuda(frame, dtype):
    """DSA shapes: rows of 128K scores, k = 2048, many ties in bf16; CUDA against the reference."""
    rows, n, k = 4, 131072, 2048
    x = frame.array(scores(rows, n), dtype)
    xr = frame.numpy(x)
    lengths = np.array([n, n - 5, 100000, 2048], np.int32)
    offsets = np.arange(rows, dtype=np.int32) * n
    for tie in ignis.TopKTieBreak:
        got = ignis.top_k_ragged_transform(x, frame.index(offsets, "i32"), frame.index(lengths, "i32"), k,
                                           tie_break=tie)
        np.testing.assert_array_equal(as_i64(frame, got), ref_ragged(xr, offsets, lengths, k, tie_break=tie))
    equal = frame.array(np.ones((rows, n)), dtype)
    got = ignis.top_k_ragged_transform(equal, frame.index(offsets, "i32"), frame.index(lengths, "i32"), k)
    np.testing.assert_array_equal(as_i64(frame, got), ref_ragged(np.ones((rows, n)), offsets, lengths, k))


# ---- errors -----------------------------------------------------------------------------------------------
def test_errors_name_the_parameter():
    x = np.zeros((3, 16), np.float32)
    lengths = np.full(3, 16, np.int32)
    table = np.zeros((3, 16), np.int32)
    starts = np.zeros(3, np.int32)
    with pytest.raises(ignis.InvalidArgumentError, match="tie_break"):
        ignis.top_k_ragged_transform(x, starts, lengths, 4, tie_break=3)
    with pytest.raises(ignis.InvalidArgumentError, match="k=0"):
        ignis.top_k_ragged_transform(x, starts, lengths, 0)
    with pytest.raises(ignis.InvalidArgumentError, match="page_size=3"):
        ignis.top_k_page_table_transform(x, table, lengths, 4, page_size=3)
    with pytest.raises(ignis.InvalidArgumentError, match="page_table_row_starts"):
        ignis.top_k_page_table_transform(x, table, lengths, 4, row_starts=starts, page_size=4)
    with pytest.raises(ignis.InvalidArgumentError, match="lengths.dtype"):
        ignis.top_k_ragged_transform(x, starts, lengths.astype(np.int64), 4)
    with pytest.raises(ignis.InvalidArgumentError, match="src_page_table.shape"):
        ignis.top_k_page_table_transform(x, table[:2], lengths, 4)
    with pytest.raises(ignis.InvalidArgumentError, match="out.shape"):
        ignis.top_k_page_table_transform(x, table, lengths, 4, out=np.zeros((3, 5), np.int32))
    with pytest.raises(ignis.UnsupportedError, match="input.strides"):
        ignis.top_k_ragged_transform(np.zeros((16, 3), np.float32).T, starts, lengths, 4)
