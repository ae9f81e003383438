"""RoPE ops against float64 references on every framework and dtype present: positions from
indptr/offsets and from pos_ids, plain and Llama 3.1 frequencies, NeoX and interleaved pairs,
partial rotary_dim, GQA head counts, the cos/sin-cache form (2-D and 3-D), in place and not, q/k
as strided views of a fused qkv buffer, and the errors."""

import numpy as np
import pytest

import ignis
from refs import (FRAME_DTYPE_IDS, FRAME_DTYPES, VIEW_FRAME_IDS, VIEW_FRAMES, NumpyFrame, assert_close,
                  cos_sin_cache_ref, make_cos_sin_cache, positions_from_indptr, rope_ref)

rng = np.random.default_rng(3)
NNZ, HQ, HK, D = 9, 4, 2, 64
INDPTR = np.array([0, 4, 5, 9])
OFFSETS = np.array([3, 0, 40])
POS_IDS = np.array([5, 0, 17, 3, 3, 60, 1, 2, 33])
LLAMA = dict(rope_scale=8, rope_theta=5e5, low_freq_factor=1, high_freq_factor=4, old_context_len=8192)
# (name, keyword arguments, reference keyword arguments)
CONFIGS = [
    ("default", {}, {}),
    ("interleave-partial", dict(rotary_dim=32, interleave=True, rope_scale=2.0, rope_theta=500.0),
     dict(rotary_dim=32, interleave=True, rope_scale=2.0, rope_theta=500.0)),
]
ROPE_TOL = 10.0  # angles are formed in f32 (position * frequency): allow 10x the dtype tolerance


def qk(frame, dtype):
    q = frame.array(rng.standard_normal((NNZ, HQ, D)), dtype)
    k = frame.array(rng.standard_normal((NNZ, HK, D)), dtype)
    return q, k


def check_pair(frame, dtype, result, q_expected, k_expected, like):
    q_rope, k_rope = result
    assert type(q_rope) is type(like[0]) and tuple(q_rope.shape) == tuple(like[0].shape)
    assert tuple(k_rope.shape) == tuple(like[1].shape)
    assert_close(frame.numpy(q_rope), q_expected, dtype, ROPE_TOL)
    assert_close(frame.numpy(k_rope), k_expected, dtype, ROPE_TOL)


@pytest.mark.parametrize("config", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_apply_rope_forms(frame, dtype, config):
    _, kwargs, ref_kwargs = config
    q, k = qk(frame, dtype)
    q64, k64 = frame.numpy(q), frame.numpy(k)
    positions = positions_from_indptr(INDPTR, OFFSETS)
    indptr, offsets = frame.index(INDPTR, "i32"), frame.index(OFFSETS, "i32")
    check_pair(frame, dtype, ignis.apply_rope(q, k, indptr, offsets, **kwargs),
               rope_ref(q64, positions, **ref_kwargs), rope_ref(k64, positions, **ref_kwargs), (q, k))
    pos_ids = frame.index(POS_IDS)
    check_pair(frame, dtype, ignis.apply_rope_pos_ids(q, k, pos_ids, **kwargs),
               rope_ref(q64, POS_IDS, **ref_kwargs), rope_ref(k64, POS_IDS, **ref_kwargs), (q, k))
    if frame.views:
        assert ignis.apply_rope_pos_ids_inplace(q, k, pos_ids, **kwargs) is None
        assert_close(frame.numpy(q), rope_ref(q64, POS_IDS, **ref_kwargs), dtype, ROPE_TOL)
        assert_close(frame.numpy(k), rope_ref(k64, POS_IDS, **ref_kwargs), dtype, ROPE_TOL)
        q, k = qk(frame, dtype)
        q64, k64 = frame.numpy(q), frame.numpy(k)
        assert ignis.apply_rope_inplace(q, k, indptr, offsets, **kwargs) is None
        assert_close(frame.numpy(q), rope_ref(q64, positions, **ref_kwargs), dtype, ROPE_TOL)
        assert_close(frame.numpy(k), rope_ref(k64, positions, **ref_kwargs), dtype, ROPE_TOL)


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_llama31_rope(frame, dtype):
    q, k = qk(frame, dtype)
    q64, k64 = frame.numpy(q), frame.numpy(k)
    # Large positions make the three frequency bands (scaled, blended, kept) all matter.
    big_pos = POS_IDS * 1000
    llama = (1.0, 4.0, 8192.0)
    ref = dict(rope_scale=8.0, rope_theta=5e5, llama31=llama)
    tol = ROPE_TOL * (100 if dtype == "f32" else 4)  # f32 angles at positions ~6e4
    pos_ids = frame.index(big_pos)
    q_rope, k_rope = ignis.apply_llama31_rope_pos_ids(q, k, pos_ids)
    assert_close(frame.numpy(q_rope), rope_ref(q64, big_pos, **ref), dtype, tol)
    assert_close(frame.numpy(k_rope), rope_ref(k64, big_pos, **ref), dtype, tol)
    offsets = OFFSETS * 100
    positions = positions_from_indptr(INDPTR, offsets)
    indptr, offsets_t = frame.index(INDPTR), frame.index(offsets)
    q_rope, k_rope = ignis.apply_llama31_rope(q, k, indptr, offsets_t, rotary_dim=48, **LLAMA)
    ref48 = dict(ref, rotary_dim=48)
    assert_close(frame.numpy(q_rope), rope_ref(q64, positions, **ref48), dtype, tol)
    assert_close(frame.numpy(k_rope), rope_ref(k64, positions, **ref48), dtype, tol)
    if frame.views:
        ignis.apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, interleave=True)
        assert_close(frame.numpy(q), rope_ref(q64, big_pos, interleave=True, **ref), dtype, tol)
        q, k = qk(frame, dtype)
        q64 = frame.numpy(q)
        ignis.apply_llama31_rope_inplace(q, k, indptr, offsets_t)
        assert_close(frame.numpy(q), rope_ref(q64, positions, **ref), dtype, tol)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_apply_rope_with_cos_sin_cache(frame, dtype, is_neox):
    cache = make_cos_sin_cache(64, 48)
    q, k = qk(frame, dtype)
    q64, k64 = frame.numpy(q), frame.numpy(k)
    positions = frame.index(POS_IDS)
    cache_t = frame.array(cache, "f32")
    query, key = q.reshape(NNZ, HQ * D), k.reshape(NNZ, HK * D)
    q_out, k_out = ignis.apply_rope_with_cos_sin_cache(positions, query, key, D, cache_t, is_neox)
    assert tuple(q_out.shape) == (NNZ, HQ * D)
    q_expected = cos_sin_cache_ref(q64, POS_IDS, cache.astype(np.float64), is_neox)
    k_expected = cos_sin_cache_ref(k64, POS_IDS, cache.astype(np.float64), is_neox)
    assert_close(frame.numpy(q_out).reshape(NNZ, HQ, D), q_expected, dtype)
    assert_close(frame.numpy(k_out).reshape(NNZ, HK, D), k_expected, dtype)
    q3, k3 = ignis.apply_rope_with_cos_sin_cache(positions, q, k, D, cache_t, is_neox=is_neox)
    assert_close(frame.numpy(q3), q_expected, dtype)
    if frame.views:
        assert ignis.apply_rope_with_cos_sin_cache_inplace(positions, query, key, D, cache_t, is_neox) is None
        assert_close(frame.numpy(query).reshape(NNZ, HQ, D), q_expected, dtype)
        assert_close(frame.numpy(key).reshape(NNZ, HK, D), k_expected, dtype)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rope_on_strided_views(frame):
    """q and k as slices of one [nnz, Hq + 2 Hk, D] qkv buffer; heads transposed; padded rows."""
    qkv = frame.array(rng.standard_normal((NNZ, HQ + 2 * HK, D)), "f32")
    q, k = qkv[:, :HQ], qkv[:, HQ:HQ + HK]
    pos_ids = frame.index(POS_IDS, "i32")
    q_rope, k_rope = ignis.apply_rope_pos_ids(q, k, pos_ids)
    assert_close(frame.numpy(q_rope), rope_ref(frame.numpy(q), POS_IDS), "f32", ROPE_TOL)
    assert_close(frame.numpy(k_rope), rope_ref(frame.numpy(k), POS_IDS), "f32", ROPE_TOL)
    qt = frame.transposed(rng.standard_normal((NNZ, HQ, D)), "f32")  # head stride > token stride
    kt = frame.padded(rng.standard_normal((NNZ, HK, D)), "f32", pad=8)
    q64, k64 = frame.numpy(qt), frame.numpy(kt)
    q_rope, k_rope = ignis.apply_rope_pos_ids(qt, kt, pos_ids, rotary_dim=16)
    assert_close(frame.numpy(q_rope), rope_ref(q64, POS_IDS, rotary_dim=16), "f32", ROPE_TOL)
    assert_close(frame.numpy(k_rope), rope_ref(k64, POS_IDS, rotary_dim=16), "f32", ROPE_TOL)
    ignis.apply_rope_pos_ids_inplace(qt, kt, pos_ids, rotary_dim=16)
    assert_close(frame.numpy(qt), rope_ref(q64, POS_IDS, rotary_dim=16), "f32", ROPE_TOL)
    assert_close(frame.numpy(kt), rope_ref(k64, POS_IDS, rotary_dim=16), "f32", ROPE_TOL)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rope_inplace_on_fused_qkv(frame):
    """The vLLM/SGLang pattern: rotate q and k in place as views of the fused qkv projection (they
    interleave in memory without sharing an element)."""
    qkv = frame.array(rng.standard_normal((NNZ, (HQ + 2 * HK) * D)), "f32")
    query, key = qkv[:, :HQ * D], qkv[:, HQ * D:(HQ + HK) * D]
    q64 = frame.numpy(query).reshape(NNZ, HQ, D)
    k64 = frame.numpy(key).reshape(NNZ, HK, D)
    v_before = frame.numpy(qkv[:, (HQ + HK) * D:])
    cache = make_cos_sin_cache(64, D)
    positions, cache_t = frame.index(POS_IDS), frame.array(cache, "f32")
    ignis.apply_rope_with_cos_sin_cache_inplace(positions, query, key, D, cache_t)
    cache64 = cache.astype(np.float64)
    q_expected = cos_sin_cache_ref(q64, POS_IDS, cache64, True)
    assert_close(frame.numpy(query).reshape(NNZ, HQ, D), q_expected, "f32")
    assert_close(frame.numpy(key).reshape(NNZ, HK, D), cos_sin_cache_ref(k64, POS_IDS, cache64, True), "f32")
    assert (frame.numpy(qkv[:, (HQ + HK) * D:]) == v_before).all()


def test_rope_errors():
    frame = NumpyFrame()
    q, k = qk(frame, "f32")
    pos_ids = frame.index(POS_IDS)
    with pytest.raises(ValueError, match="pos_ids"):
        ignis.apply_rope_pos_ids(q, k, pos_ids[:-1])
    with pytest.raises(TypeError, match="pos_ids.dtype"):
        ignis.apply_rope_pos_ids(q, k, pos_ids.astype(np.float32))
    with pytest.raises(ValueError, match="rotary_dim"):
        ignis.apply_rope_pos_ids(q, k, pos_ids, rotary_dim=7)
    with pytest.raises(ValueError, match="rotary_dim"):
        ignis.apply_rope_pos_ids(q, k, pos_ids, rotary_dim=0)
    with pytest.raises(ValueError, match="rope_scale"):
        ignis.apply_rope_pos_ids(q, k, pos_ids, rope_scale=0)
    with pytest.raises(ValueError, match="k"):
        ignis.apply_rope_pos_ids(q, k[:-1], pos_ids)
    with pytest.raises(TypeError, match="k.dtype"):
        ignis.apply_rope_pos_ids(q, k.astype(np.float16), pos_ids)
    with pytest.raises(ValueError, match="indptr"):
        ignis.apply_rope(q, k, frame.index([0, 4, 5, 8]), frame.index(OFFSETS))
    with pytest.raises(TypeError, match="offsets.dtype"):
        ignis.apply_rope(q, k, frame.index(INDPTR, "i32"), frame.index(OFFSETS, "i64"))
    with pytest.raises(ValueError, match="positions"):
        ignis.apply_rope_with_cos_sin_cache(frame.index(POS_IDS + 100), q, k, D, make_cos_sin_cache(64, 64))
    with pytest.raises(ValueError, match="head_size"):
        ignis.apply_rope_with_cos_sin_cache(pos_ids, q.reshape(NNZ, -1), k.reshape(NNZ, -1), 60,
                                            make_cos_sin_cache(64, 32))
    with pytest.raises(TypeError, match="cos_sin_cache.dtype"):
        ignis.apply_rope_with_cos_sin_cache(pos_ids, q, k, D, make_cos_sin_cache(64, 64).astype(np.float16))
    with pytest.raises(ignis.ArgumentTypeError, match="head_size"):
        ignis.apply_rope_with_cos_sin_cache(pos_ids, q, k, 64.0, make_cos_sin_cache(64, 64))
    with pytest.raises(NotImplementedError, match="head_dim"):
        big = frame.array(rng.standard_normal((2, 1, 1024)), "f32")
        ignis.apply_rope_pos_ids(big, big.copy(), frame.index([0, 1]))
