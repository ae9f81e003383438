"""Paged KV cache ops (append_paged_kv_cache, get_batch_indices_positions, get_seq_lens) against
NumPy references, on every framework present that takes writes: NHD and HND, one [pages, 2, ...]
tensor or a (k, v) tuple, page sizes 1, 5 and 16, requests with no tokens or ending mid-page, and
the errors (bad layout, out-of-range index, dtype)."""

import numpy as np
import pytest

import ignis
from refs import VIEW_FRAME_IDS, VIEW_FRAMES

rng = np.random.default_rng(7)


def make_batch(page_size, batch=4):
    seq_lens = rng.integers(0, 3 * page_size + 2, size=batch)
    seq_lens[0] = 0
    appended = np.array([rng.integers(0, s + 1) for s in seq_lens])
    pages = (seq_lens + page_size - 1) // page_size
    kv_indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    num_pages = int(kv_indptr[-1]) + 2
    kv_indices = rng.permutation(num_pages)[: kv_indptr[-1]].astype(np.int32)
    last = np.where(pages > 0, seq_lens - (pages - 1) * page_size, 0).astype(np.int32)
    append_indptr = np.concatenate([[0], np.cumsum(appended)]).astype(np.int32)
    return seq_lens, appended, kv_indptr, kv_indices, last, append_indptr, num_pages


def idx(frame, a):
    return frame.index(a, "i32")


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
@pytest.mark.parametrize("page_size", [1, 5, 16])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("combined", [True, False], ids=["combined", "tuple"])
def test_append_paged_kv_cache(frame, page_size, layout, combined):
    heads, dim = 2, 8
    seq_lens, appended, kv_indptr, kv_indices, last, append_indptr, num_pages = make_batch(page_size)
    nnz = int(append_indptr[-1])

    got_lens = ignis.get_seq_lens(idx(frame, kv_indptr), idx(frame, last), page_size)
    np.testing.assert_array_equal(frame.numpy(got_lens), seq_lens)
    batch_indices, positions = ignis.get_batch_indices_positions(idx(frame, append_indptr), got_lens, nnz)
    expected_b = np.repeat(np.arange(len(seq_lens)), appended)
    expected_p = np.concatenate([np.arange(s - n, s) for s, n in zip(seq_lens, appended)]).astype(np.int64)
    np.testing.assert_array_equal(frame.numpy(batch_indices), expected_b)
    np.testing.assert_array_equal(frame.numpy(positions), expected_p)

    key, value = rng.standard_normal((nnz, heads, dim)), rng.standard_normal((nnz, heads, dim))
    inner = (page_size, heads, dim) if layout == "NHD" else (heads, page_size, dim)
    if combined:
        cache = frame.array(np.zeros((num_pages, 2) + inner), "f32")
        arg = cache
    else:
        cache = (frame.array(np.zeros((num_pages,) + inner), "f32"), frame.array(np.zeros((num_pages,) + inner), "f32"))
        arg = cache
    ignis.append_paged_kv_cache(frame.array(key, "f32"), frame.array(value, "f32"), batch_indices, positions, arg,
                                idx(frame, kv_indices), idx(frame, kv_indptr), idx(frame, last), kv_layout=layout)
    k = frame.numpy(cache[:, 0] if combined else cache[0])
    v = frame.numpy(cache[:, 1] if combined else cache[1])
    expected_k, expected_v = np.zeros_like(k), np.zeros_like(v)
    for t in range(nnz):
        b, p = expected_b[t], expected_p[t]
        page, slot = kv_indices[kv_indptr[b] + p // page_size], p % page_size
        if layout == "NHD":
            expected_k[page, slot], expected_v[page, slot] = key[t], value[t]
        else:
            expected_k[page, :, slot], expected_v[page, :, slot] = key[t], value[t]
    np.testing.assert_allclose(k, expected_k.astype(np.float32), rtol=0, atol=1e-6)
    np.testing.assert_allclose(v, expected_v.astype(np.float32), rtol=0, atol=1e-6)


def test_append_errors():
    cache = np.zeros((3, 2, 4, 1, 8), np.float32)
    key = np.ones((1, 1, 8), np.float32)
    i32 = lambda *a: np.array(a, np.int32)  # noqa: E731
    with pytest.raises(ignis.InvalidArgumentError, match="kv_layout"):
        ignis.append_paged_kv_cache(key, key, i32(0), i32(0), cache, i32(0), i32(0, 1), i32(1), kv_layout="NDH")
    with pytest.raises(ignis.InvalidArgumentError, match="cache.indices"):
        ignis.append_paged_kv_cache(key, key, i32(0), i32(0), cache, i32(3), i32(0, 1), i32(1))
    with pytest.raises(ignis.InvalidArgumentError, match="positions"):
        ignis.append_paged_kv_cache(key, key, i32(0), i32(4), cache, i32(0), i32(0, 1), i32(1))
    with pytest.raises(ignis.DtypeError, match="append_key.dtype"):
        ignis.append_paged_kv_cache(key.astype(np.float16), key, i32(0), i32(0), cache, i32(0), i32(0, 1), i32(1))
    with pytest.raises(ignis.InvalidArgumentError, match="paged_kv_cache"):
        ignis.append_paged_kv_cache(key, key, i32(0), i32(0), cache[:, 0], i32(0), i32(0, 1), i32(1))
    assert not cache.any()
    with pytest.raises(ignis.InvalidArgumentError, match="kv_last_page_len"):
        ignis.get_seq_lens(i32(0, 1), i32(5), 4)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_indptr"):
        ignis.get_seq_lens(i32(0, 2, 1), i32(1, 1), 4)
