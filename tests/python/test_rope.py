"""RoPE ops against float64 references on every framework and dtype present: positions from
indptr/offsets and from pos_ids, plain and Llama 3.1 frequencies, NeoX and interleaved pairs,
partial rotary_dim, GQA head counts, the cos/sin-cache form (2-D and 3-D), in place and not, q/k
as strided views of a fused qkv buffer, and the errors.

The fused RoPE + fp8 forms (rope_quantize_fp8, mla_rope_quantize_fp8 and the paged append, MLA and
GQA NHD/HND) on NumPy and PyTorch (host, and CUDA when present): every fp8 value must be the code
of the float64 reference, or its neighbour where the reference lies within f32 rounding of a
boundary; the caches read back slot by slot; padding tokens write nothing."""

import ml_dtypes
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


# ---- RoPE + fp8 quantization ---------------------------------------------------------------------
FP8 = {"e4m3": ("float8_e4m3fn", 448.0), "e5m2": ("float8_e5m2", 57344.0)}
HALF_FRAME_DTYPES = [(f, d) for f, d in FRAME_DTYPES if f.views and d in ("f16", "bf16")]
HALF_FRAME_DTYPE_IDS = [f"{f.name}-{d}" for f, d in HALF_FRAME_DTYPES]


def fp8_round(x, fmt):
    """float64 values to the fp8 format's values: saturated, rounded to nearest even."""
    name, top = FP8[fmt]
    return np.clip(x, -top, top).astype(getattr(ml_dtypes, name)).astype(np.float64)


def assert_fp8(got, ref, tol, fmt):
    """Each code lies between those of ref - tol and ref + tol (tol: the f32 arithmetic's reach)."""
    got = np.asarray(got, dtype=np.float64)
    lo, hi = fp8_round(ref - tol, fmt), fp8_round(ref + tol, fmt)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    bad = ~((got >= lo) & (got <= hi))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} fp8 values off, e.g. got {got[bad][:4]} want {ref[bad][:4]}"


def rope_quant_ref(x, positions, cache, is_neox, scale):
    """(rotated x * scale, tolerance) in float64; x [nnz, ..., rope_dim]."""
    rope_dim = cache.shape[1]
    half = rope_dim // 2
    rows = cache[np.asarray(positions)].astype(np.float64)
    cos = rows[:, :half].reshape((rows.shape[0],) + (1,) * (x.ndim - 2) + (half,))
    sin = rows[:, half:].reshape(cos.shape)
    if is_neox:
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    ta, tb = np.abs(a * cos) + np.abs(b * sin), np.abs(a * sin) + np.abs(b * cos)
    out, tol = np.empty_like(x), np.empty_like(x)
    if is_neox:
        out[..., :half], out[..., half:], tol[..., :half], tol[..., half:] = ra, rb, ta, tb
    else:
        out[..., 0::2], out[..., 1::2], tol[..., 0::2], tol[..., 1::2] = ra, rb, ta, tb
    return out * scale, tol * scale * 2.0 ** -20


def quant_inputs(frame, dtype, nnz, hq, hk, rope, nope, amp=1.0):
    """q_rope, k_rope, q_nope, k_nope (k 2-D when hk is None) and their float64 values."""
    k_lead = (nnz,) if hk is None else (nnz, hk)
    arrays = [frame.array(amp * rng.standard_normal(shape), dtype)
              for shape in ((nnz, hq, rope), k_lead + (rope,), (nnz, hq, nope), k_lead + (nope,))]
    return arrays, [frame.numpy(a) for a in arrays]


QUANT_SHAPES = [("mla", 4, None, 64, 32), ("gqa", 4, 2, 32, 16), ("llama", 4, 2, 128, 0)]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("shape", QUANT_SHAPES, ids=[s[0] for s in QUANT_SHAPES])
@pytest.mark.parametrize("frame,dtype", HALF_FRAME_DTYPES, ids=HALF_FRAME_DTYPE_IDS)
def test_rope_quantize_fp8(frame, dtype, shape, is_neox, fmt):
    _, hq, hk, rope, nope = shape
    nnz = 9
    (qr, kr, qn, kn), (qr64, kr64, qn64, kn64) = quant_inputs(frame, dtype, nnz, hq, hk, rope, nope, amp=30.0)
    cache = make_cos_sin_cache(128, rope)
    scale_q, scale_kv = 0.75, 12.0  # k * 12 passes e4m3's 448 for the largest values: saturation
    fn = ignis.mla_rope_quantize_fp8 if hk is None else ignis.rope_quantize_fp8
    outs = fn(qr, kr, qn if nope else None, kn if nope else None, frame.array(cache, "f32"),
              frame.index(POS_IDS), is_neox, FP8[fmt][0], scale_q, scale_kv)
    q_rope_out, k_rope_out, q_nope_out, k_nope_out = outs
    assert type(q_rope_out) is type(qr)
    assert tuple(q_nope_out.shape) == (nnz, hq, nope) and tuple(k_nope_out.shape) == tuple(kn.shape)
    for got, x, scale in ((q_rope_out, qr64, scale_q), (k_rope_out, kr64, scale_kv)):
        ref, tol = rope_quant_ref(x, POS_IDS, cache, is_neox, scale)
        assert_fp8(frame.numpy(got), ref, tol, fmt)
    for got, x, scale in ((q_nope_out, qn64, scale_q), (k_nope_out, kn64, scale_kv)):
        assert_fp8(frame.numpy(got), x * scale, np.abs(x) * scale * 2.0 ** -20, fmt)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rope_quantize_fp8_views_and_outputs(frame):
    """SGLang's q: one [nnz, H, nope + rope] buffer split into q_nope and q_rope views, and likewise its
    fp8 output; outputs given (their dtype sets quantize_dtype); a padded k row stride."""
    nnz, hq, rope, nope = 9, 4, 64, 32
    q = frame.array(rng.standard_normal((nnz, hq, nope + rope)), "f16")
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    k_rope = frame.padded(rng.standard_normal((nnz, rope)), "f16", pad=8)
    k_nope = frame.array(rng.standard_normal((nnz, nope)), "f16")
    cache = make_cos_sin_cache(64, rope)
    outs = ignis.mla_rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, frame.array(cache, "f32"),
                                       frame.index(POS_IDS), quantize_dtype="float8_e5m2")
    given = [ignis.quantization.new_fp8(q, tuple(o.shape), "float8_e5m2") for o in outs]
    q_out = ignis.quantization.new_fp8(q, (nnz, hq, nope + rope), "float8_e5m2")  # SGLang's fused q output
    given[0], given[2] = q_out[..., nope:], q_out[..., :nope]
    again = ignis.mla_rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, frame.array(cache, "f32"),
                                        frame.index(POS_IDS), q_rope_out=given[0], k_rope_out=given[1],
                                        q_nope_out=given[2], k_nope_out=given[3])
    for a, b, g in zip(outs, again, given):
        assert b is g
        assert (frame.numpy(a) == frame.numpy(b)).all()
    ref, tol = rope_quant_ref(frame.numpy(q_rope), POS_IDS, cache, True, 1.0)
    assert_fp8(frame.numpy(outs[0]), ref, tol, "e5m2")


def paged_setup(frame, nnz, page_size, batch=3):
    """A page table: request b of tokens t with t % batch == b, its pages shuffled; the last token
    padding (batch_indices -1)."""
    pages_per_req = (nnz + page_size - 1) // page_size + 1
    num_pages = batch * pages_per_req + 1
    perm = rng.permutation(num_pages)[: batch * pages_per_req]
    indptr = np.arange(batch + 1) * pages_per_req
    batch_indices = np.array([t % batch for t in range(nnz)])
    positions = np.array([t // batch + (page_size - 1 if t % batch == 1 else 0) for t in range(nnz)])
    batch_indices[-1] = -1
    slots = [(perm[indptr[b] + p // page_size], p % page_size) if b >= 0 else None
             for b, p in zip(batch_indices, positions)]
    return (frame.index(perm, "i32"), frame.index(indptr, "i32"), frame.index(batch_indices, "i32"),
            frame.index(positions, "i32"), num_pages, slots)


def zeros_fp8(like, shape, name):
    out = ignis.quantization.new_fp8(like, shape, name)
    out[...] = 0
    return out


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rope_quantize_fp8_append_mla(frame):
    nnz, hq, rope, nope, page = 9, 4, 64, 32, 4
    (qr, kr, qn, kn), (qr64, kr64, qn64, kn64) = quant_inputs(frame, "f16", nnz, hq, None, rope, nope)
    cache = make_cos_sin_cache(64, rope)
    indices, indptr, batch_indices, positions, num_pages, slots = paged_setup(frame, nnz, page)
    ckv = zeros_fp8(qr, (num_pages, page, nope), "float8_e4m3fn")
    kpe = zeros_fp8(qr, (num_pages, page, rope), "float8_e4m3fn")
    q_rope_out, q_nope_out = ignis.rope_quantize_fp8_append_paged_kv_cache(
        qr, kr, qn, kn, None, frame.array(cache, "f32"), frame.index(POS_IDS), (ckv, kpe), indices, indptr,
        batch_indices, positions, page_size=page, quant_scale_kv=2.0)
    ref_q, tol_q = rope_quant_ref(qr64, POS_IDS, cache, True, 1.0)
    ref_k, tol_k = rope_quant_ref(kr64, POS_IDS, cache, True, 2.0)
    ckv64, kpe64, qro = frame.numpy(ckv), frame.numpy(kpe), frame.numpy(q_rope_out)
    written = np.zeros(ckv64.shape[:2], dtype=bool)
    for t, slot in enumerate(slots):
        if slot is None:  # padding: nothing written, its q rows neither
            continue
        assert_fp8(qro[t], ref_q[t], tol_q[t], "e4m3")
        assert_fp8(kpe64[slot], ref_k[t], tol_k[t], "e4m3")
        assert_fp8(ckv64[slot], kn64[t] * 2.0, np.abs(kn64[t]) * 2.0 ** -19, "e4m3")
        written[slot] = True
    assert (ckv64[~written] == 0).all() and (kpe64[~written] == 0).all()
    assert tuple(q_nope_out.shape) == (nnz, hq, nope)


@pytest.mark.parametrize("kv_layout", ["NHD", "HND"])
@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rope_quantize_fp8_append_gqa(frame, kv_layout):
    nnz, hq, hk, rope, nope, page = 9, 4, 2, 32, 16, 4
    (qr, kr, qn, kn), (qr64, kr64, qn64, kn64) = quant_inputs(frame, "f16", nnz, hq, hk, rope, nope)
    v = frame.array(rng.standard_normal((nnz, hk, rope + nope)), "f16")
    cache = make_cos_sin_cache(64, rope)
    indices, indptr, batch_indices, positions, num_pages, slots = paged_setup(frame, nnz, page)
    shape = (num_pages, page, hk, rope + nope) if kv_layout == "NHD" else (num_pages, hk, page, rope + nope)
    k_cache, v_cache = (zeros_fp8(qr, shape, "float8_e5m2") for _ in range(2))
    ignis.rope_quantize_fp8_append_paged_kv_cache(
        qr, kr, qn, kn, v, frame.array(cache, "f32"), frame.index(POS_IDS), (k_cache, v_cache), indices, indptr,
        batch_indices, positions, is_neox=False, quantize_dtype="float8_e5m2", page_size=page, kv_layout=kv_layout)
    k64, v64 = frame.numpy(k_cache), frame.numpy(v_cache)
    if kv_layout == "HND":
        k64, v64 = k64.transpose(0, 2, 1, 3), v64.transpose(0, 2, 1, 3)
    ref_k, tol_k = rope_quant_ref(kr64, POS_IDS, cache, False, 1.0)
    vv = frame.numpy(v)
    for t, slot in enumerate(slots):
        if slot is None:
            continue
        assert_fp8(k64[slot][..., :rope], ref_k[t], tol_k[t], "e5m2")
        assert_fp8(k64[slot][..., rope:], kn64[t], np.abs(kn64[t]) * 2.0 ** -20, "e5m2")
        assert_fp8(v64[slot], vv[t], np.abs(vv[t]) * 2.0 ** -20, "e5m2")


def test_rope_quantize_fp8_errors():
    frame = NumpyFrame()
    (qr, kr, qn, kn), _ = quant_inputs(frame, "f16", 9, 4, None, 64, 32)
    cache = make_cos_sin_cache(64, 64)
    pos = frame.index(POS_IDS)
    with pytest.raises(ValueError, match="backend"):
        ignis.rope_quantize_fp8(qr, kr, qn, kn, cache, pos, backend="triton")
    with pytest.raises(ValueError, match="cos_sin_cache.dtype"):
        ignis.rope_quantize_fp8(qr, kr, qn, kn, cache.astype(np.float16), pos)
    with pytest.raises(NotImplementedError, match="quantize_dtype"):
        ignis.rope_quantize_fp8(qr, kr, qn, kn, cache, pos, quantize_dtype="bfloat16")
    with pytest.raises(NotImplementedError, match="q_rope.dtype"):
        ignis.rope_quantize_fp8(qr.astype(np.float32), kr.astype(np.float32), qn.astype(np.float32),
                                kn.astype(np.float32), cache, pos)
    with pytest.raises(ValueError, match="quant_scale_q"):
        ignis.rope_quantize_fp8(qr, kr, qn, kn, cache, pos, quant_scale_q=float("nan"))
    with pytest.raises(ValueError, match="pos_ids"):
        ignis.rope_quantize_fp8(qr, kr, qn, kn, cache, frame.index(POS_IDS + 60))
    with pytest.raises(ValueError, match="k_nope"):
        ignis.rope_quantize_fp8(qr, kr, qn, None, cache, pos)
    indices, indptr, batch_indices, positions, num_pages, _ = paged_setup(frame, 9, 4)
    ckv = zeros_fp8(qr, (num_pages, 4, 32), "float8_e4m3fn")
    kpe = zeros_fp8(qr, (num_pages, 4, 64), "float8_e4m3fn")
    args = (cache, pos, (ckv, kpe), indices, indptr, batch_indices, positions)
    with pytest.raises(ValueError, match="MLA should not have V"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, kr, qn, kn, qn, *args, page_size=4)
    with pytest.raises(ValueError, match="page_size"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, kr, qn, kn, None, *args, page_size=16)
    with pytest.raises(ValueError, match="kv_layout"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, kr, qn, kn, None, *args, page_size=4, kv_layout="NDH")
    with pytest.raises(ValueError, match="ckv_cache.dtype"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, kr, qn, kn, None, *args, page_size=4,
                                                      quantize_dtype="float8_e5m2")
    k3 = kr.reshape(9, 1, 64)
    with pytest.raises(ValueError, match="V tensor"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, k3, qn, kn.reshape(9, 1, 32), None, *args, page_size=4)
    bad_bi = frame.index([5] * 9, "i32")
    with pytest.raises(ValueError, match="batch_indices"):
        ignis.rope_quantize_fp8_append_paged_kv_cache(qr, kr, qn, kn, None, cache, pos, (ckv, kpe), indices, indptr,
                                                      bad_bi, positions, page_size=4)
    assert (frame.numpy(ckv) == 0).all() and (frame.numpy(kpe) == 0).all()


def test_rope_quantize_fp8_flashinfer_names():
    assert ignis.rope.__all__[-3:] == ["rope_quantize_fp8", "mla_rope_quantize_fp8",
                                       "rope_quantize_fp8_append_paged_kv_cache"]
