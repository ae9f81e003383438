"""Grouped GEMMs (ignis.gemm: grouped_mm_bf16, group_gemm_fp8_nt_groupwise, SegmentGEMMWrapper)
against float64 references.

- NumPy (the CPU backend, always): float16 groups with empty ones and rows past the last offset
  (left unwritten), float32 output; fp8 (ml_dtypes) block-scaled groups in both scale-major modes
  and with UE8M0 scales; SegmentGEMMWrapper with seg_lens and seg_indptr, both weight layouts and
  weight_indices; FlashInfer's signatures; the refusals.
- PyTorch on CUDA when present (ignis' grouped kernel): bf16 MoE-like groups (empty groups, one
  huge group, odd row counts, f32 output), fp8 block-scaled groups in both modes, LoRA segment
  GEMM with both weight layouts, and a CUDA-graph capture replayed after the group sizes change on
  the device (the kernel reads m_indptr there: no host sync).
"""

import inspect

import numpy as np
import pytest

import ignis
from ignis import gemm
from refs import ml_dtypes, torch

rng = np.random.default_rng(19)
E = inspect.Parameter.empty
CUDA = torch is not None and torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not CUDA, reason="needs PyTorch with CUDA")


def close(actual, expected, rtol):
    actual = np.asarray(actual, dtype=np.float64)
    if expected.size == 0:
        return
    scale = np.abs(expected).max() + 1e-30
    err = np.abs(actual - expected).max() / scale
    assert err <= rtol, f"max error {err:.3g} of the largest |ref| > {rtol}"


def grouped_ref(a, b, indptr, weight_indices=None):
    """float64 rows indptr[0]..indptr[-1] of the grouped product (others 0)."""
    out = np.zeros((a.shape[0], b.shape[1]))
    for g in range(len(indptr) - 1):
        w = g if weight_indices is None else int(weight_indices[g])
        out[indptr[g]:indptr[g + 1]] = a[indptr[g]:indptr[g + 1]] @ b[w].T
    return out


def grouped_blockwise_ref(a, b, a_scale, b_scale, indptr):
    """float64 grouped block-scaled product: a_scale [m, kb], b_scale [g, nb, kb] (scale values)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for g in range(len(indptr) - 1):
        lo, hi = indptr[g], indptr[g + 1]
        for kb in range(-(-k // 128)):
            part = a[lo:hi, kb * 128:(kb + 1) * 128] @ b[g, :, kb * 128:(kb + 1) * 128].T
            out[lo:hi] += part * a_scale[lo:hi, kb:kb + 1] * np.repeat(b_scale[g, :, kb], 128)[None, :n]
    return out


def ue8m0(e):
    return np.ldexp(1.0, e.astype(np.int64) - 127)


def offsets(lens, first=0):
    return np.concatenate([[first], first + np.cumsum(lens)]).astype(np.int32)


SIGNATURES = {
    "grouped_mm_bf16": [("a", E), ("b", E), ("m_indptr", E), ("out", None), ("out_dtype", "bfloat16")],
    "group_gemm_fp8_nt_groupwise": [("a", E), ("b", E), ("a_scale", E), ("b_scale", E), ("m_indptr", E),
                                    ("scale_granularity_mnk", (1, 128, 128)), ("scale_major_mode", "MN"),
                                    ("mma_sm", 1), ("out", None), ("out_dtype", None), ("backend", "trtllm"),
                                    ("segment_alignment", 1)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flashinfer_signature(name):
    params = list(inspect.signature(getattr(gemm, name)).parameters.values())
    positional = [p for p in params if p.kind != inspect.Parameter.KEYWORD_ONLY]
    keyword = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]
    assert [(p.name, p.default) for p in positional] == SIGNATURES[name]
    assert keyword[-1] == "stream"


def test_segment_wrapper_signature():
    params = list(inspect.signature(gemm.SegmentGEMMWrapper.run).parameters.values())
    assert [(p.name, p.default) for p in params[:9]] == [
        ("self", E), ("x", E), ("weights", E), ("batch_size", E), ("weight_column_major", E), ("out", None),
        ("seg_lens", None), ("seg_indptr", None), ("weight_indices", None)]
    assert ignis.SegmentGEMMWrapper is gemm.SegmentGEMMWrapper


# ---- NumPy (CPU backend) -------------------------------------------------------------------------
@pytest.mark.parametrize("lens", [[7], [3, 0, 40, 1], [0, 0, 0], [0, 300, 0, 2, 5]])
def test_grouped_mm_numpy(lens):
    n, k, tail = 48, 40, 3
    indptr = offsets(lens)
    m = int(indptr[-1]) + tail
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((len(lens), n, k)).astype(np.float16)
    out = np.full((m, n), np.nan, np.float32)
    assert gemm.grouped_mm_bf16(a, b, indptr, out=out) is out
    ref = grouped_ref(a.astype(np.float64), b.astype(np.float64), indptr)
    close(out[:indptr[-1]], ref[:indptr[-1]], 1e-5)
    assert np.isnan(out[indptr[-1]:]).all()  # rows past the last offset are not written
    out16 = gemm.grouped_mm_bf16(a, b, indptr.astype(np.int64), out_dtype="float16")
    close(out16[:indptr[-1]], ref[:indptr[-1]], 2e-3)


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
@pytest.mark.parametrize("mode", ["K", "MN"])
@pytest.mark.parametrize("scale_dtype", ["float32", "ue8m0"])
def test_group_gemm_fp8_numpy(mode, scale_dtype):
    lens, n, k = [5, 0, 131, 2], 256, 384
    indptr = offsets(lens)
    m, g = int(indptr[-1]), len(lens)
    a = (2 * rng.standard_normal((m, k))).astype(ml_dtypes.float8_e4m3fn)
    b = (2 * rng.standard_normal((g, n, k))).astype(ml_dtypes.float8_e4m3fn)
    if scale_dtype == "float32":
        sa = rng.uniform(0.01, 0.1, (m, 3)).astype(np.float32)
        sb = rng.uniform(0.01, 0.1, (g, 2, 3)).astype(np.float32)
        sa64, sb64 = sa.astype(np.float64), sb.astype(np.float64)
    else:
        sa = rng.integers(116, 128, (m, 3)).astype(np.uint8)
        sb = rng.integers(116, 128, (g, 2, 3)).astype(np.uint8)
        sa64, sb64 = ue8m0(sa), ue8m0(sb)
    ga, gb = (np.ascontiguousarray(sa.T), np.ascontiguousarray(sb.swapaxes(1, 2))) if mode == "MN" else (sa, sb)
    out = np.empty((m, n), np.float16)
    gemm.group_gemm_fp8_nt_groupwise(a, b, ga, gb, indptr, scale_major_mode=mode, out=out)
    close(out, grouped_blockwise_ref(a.astype(np.float64), b.astype(np.float64), sa64, sb64, indptr), 2e-3)


@pytest.mark.parametrize("column_major", [True, False])
@pytest.mark.parametrize("use_indices", [False, True])
def test_segment_gemm_numpy(column_major, use_indices):
    lens = np.array([1, 2, 0, 7], np.int64)
    d_in, d_out = 64, 24
    x = rng.standard_normal((int(lens.sum()), d_in)).astype(np.float16)
    w = rng.standard_normal((3, d_out, d_in)).astype(np.float16)  # [W, d_out, d_in]
    weights = w if column_major else np.ascontiguousarray(w.swapaxes(1, 2))
    indices = np.array([2, 0, 1, 2], np.int64) if use_indices else None
    wrapper = ignis.SegmentGEMMWrapper(np.empty(16, np.int8))
    if not use_indices:
        w = np.concatenate([w, w[:1]])  # 4 segments need 4 weights
        weights = w if column_major else np.ascontiguousarray(w.swapaxes(1, 2))
    out = wrapper.run(x, weights, 4, column_major, seg_lens=lens, weight_indices=indices)
    indptr = offsets(lens)
    close(out, grouped_ref(x.astype(np.float64), w.astype(np.float64), indptr, indices), 2e-3)
    out2 = wrapper.run(x, weights, 4, column_major, seg_indptr=indptr.astype(np.int64), weight_indices=indices)
    np.testing.assert_array_equal(out, out2)


def test_refusals_numpy():
    a = np.zeros((8, 64), np.float16)
    b = np.zeros((2, 32, 64), np.float16)
    indptr = np.array([0, 3, 8], np.int32)
    with pytest.raises(ignis.InvalidArgumentError, match="m_indptr"):
        gemm.grouped_mm_bf16(a, b, np.array([0, 5, 3], np.int32), out_dtype="float32")
    with pytest.raises(ignis.InvalidArgumentError, match="b.shape"):
        gemm.grouped_mm_bf16(a, b[:, :, :32], indptr, out_dtype="float32")
    with pytest.raises(ignis.InvalidArgumentError, match="backend"):
        gemm.grouped_mm_bf16(a, b, indptr, out_dtype="float32", backend="nope")
    with pytest.raises(ignis.UnsupportedError, match="tactic"):
        gemm.grouped_mm_bf16(a, b, indptr, out_dtype="float32", tactic=3)
    with pytest.raises(ignis.UnsupportedError, match="scale_granularity_mnk"):
        gemm.group_gemm_fp8_nt_groupwise(a, b, None, None, indptr, scale_granularity_mnk=(1, 64, 64))
    wrapper = ignis.SegmentGEMMWrapper(np.empty(16, np.int8))
    with pytest.raises(ignis.InvalidArgumentError, match="seg_lens or seg_indptr"):
        wrapper.run(a, b, 2, True)
    with pytest.raises(ignis.InvalidArgumentError, match="weight_indices"):
        wrapper.run(a, b, 2, True, seg_indptr=indptr, weight_indices=np.array([0, 2], np.int64))


# ---- PyTorch on CUDA (ignis' grouped kernel) -------------------------------------------------------
def t64(x):
    return x.double().cpu().numpy()


@cuda_only
@pytest.mark.parametrize("lens", [[1], [0, 4096, 0], [3, 0, 130, 17, 1, 255, 0, 64], [128] * 8,
                                  [int(v) for v in np.random.default_rng(3).integers(0, 300, 16)]])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16 if torch else None, torch.float32 if torch else None])
def test_grouped_mm_cuda(lens, out_dtype):
    n, k = 512, 1024
    indptr = torch.tensor(offsets(lens), device="cuda")
    m = int(sum(lens)) + 5
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(len(lens), n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    gemm.grouped_mm_bf16(a, b, indptr, out=out)
    ref = grouped_ref(t64(a), t64(b), offsets(lens))
    end = int(sum(lens))
    close(out[:end].double().cpu().numpy(), ref[:end], 1e-2)
    assert torch.isnan(out[end:]).all()


@cuda_only
@pytest.mark.parametrize("mode", ["K", "MN"])
@pytest.mark.parametrize("lens", [[0, 1000, 0], [3, 0, 130, 17, 200, 1, 64, 9]])
def test_group_gemm_fp8_cuda(mode, lens):
    n, k = 512, 1024
    g, m = len(lens), int(sum(lens))
    indptr = torch.tensor(offsets(lens), device="cuda")
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(g, n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(m, k // 128, device="cuda") * 0.1 + 0.01
    sb = torch.rand(g, n // 128, k // 128, device="cuda") * 0.1 + 0.01
    ga, gb = (sa.t().contiguous(), sb.transpose(1, 2).contiguous()) if mode == "MN" else (sa, sb)
    out = gemm.group_gemm_fp8_nt_groupwise(a, b, ga, gb, indptr, scale_major_mode=mode)
    ref = grouped_blockwise_ref(t64(a), t64(b), t64(sa), t64(sb), offsets(lens))
    close(out.double().cpu().numpy(), ref, 1e-2)


@cuda_only
@pytest.mark.parametrize("column_major", [True, False])
def test_segment_gemm_cuda(column_major):
    lens = torch.tensor([1, 17, 0, 64, 300], device="cuda")
    d_in, d_out = 4096, 16  # LoRA A: a rank-16 down projection
    x = torch.randn(int(lens.sum()), d_in, device="cuda", dtype=torch.float16)
    w = torch.randn(3, d_out, d_in, device="cuda", dtype=torch.float16)
    weights = w if column_major else w.transpose(1, 2).contiguous()
    indices = torch.tensor([2, 0, 1, 1, 0], device="cuda")
    out = ignis.SegmentGEMMWrapper(torch.empty(1 << 20, dtype=torch.int8, device="cuda")).run(
        x, weights, 5, column_major, seg_lens=lens, weight_indices=indices)
    ref = grouped_ref(t64(x), t64(w), offsets(lens.cpu().numpy()), indices.cpu().numpy())
    close(out.double().cpu().numpy(), ref, 1e-2)


@cuda_only
def test_grouped_cuda_graph_new_sizes():
    """Captured once; the replay sees new group sizes written into m_indptr on the device."""
    g, n, k, m = 8, 256, 512, 2048
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    indptr = torch.tensor(offsets([256] * g), device="cuda")
    out = torch.zeros(m, n, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        gemm.grouped_mm_bf16(a, b, indptr, out=out)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        gemm.grouped_mm_bf16(a, b, indptr, out=out)
    lens = [0, 1500, 3, 0, 0, 200, 1, 7]
    indptr.copy_(torch.tensor(offsets(lens), device="cuda"))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    close(out.double().cpu().numpy(), grouped_ref(t64(a), t64(b), offsets(lens)), 1e-2)
