"""GEMM ops (ignis.gemm: mm_bf16, bmm_bf16, bmm_fp8, gemm_fp8_nt_groupwise, fp8_blockscale_gemm_sm90,
tinygemm_bf16) against float64 references.

- NumPy (the CPU backend, always): float16 products with both layouts of b, bias, float32 output,
  batches; fp8 (ml_dtypes arrays) with per-tensor scales; block-scaled fp8 in both scale-major
  modes and with UE8M0 scales, per-token (1x128) weight scales; FlashInfer's signatures; the
  refusals (unknown backend, other scale granularities, shapes that do not multiply).
- PyTorch on CUDA when present (cuBLASLt): the same products at engine shapes against float64,
  SGLang's two call patterns (bmm_fp8 on unsqueezed 2-D tensors, fp8_blockscale_gemm_sm90 with a
  bf16 input quantized on the fly, M 1..64 so the M % 4 padding runs), per-token weight scales,
  both scale-major modes and UE8M0, and a CUDA-graph capture of each op after one warm-up call;
  the small-M shapes ignis' own kernel takes (M 1..64, f16 and bf16, bias, ragged K, a padded
  weight) and tinygemm_bf16 at 1 to 8 rows.
"""

import inspect

import numpy as np
import pytest

import ignis
from ignis import gemm
from refs import ml_dtypes, torch

rng = np.random.default_rng(18)
E = inspect.Parameter.empty
CUDA = torch is not None and torch.cuda.is_available()


def close(actual, expected, rtol):
    actual = np.asarray(actual, dtype=np.float64)
    scale = np.abs(expected).max() + 1e-30
    err = np.abs(actual - expected).max() / scale
    assert err <= rtol, f"max error {err:.3g} of the largest |ref| > {rtol}"


def blockwise_ref(a, w, a_scale, w_scale, rows_per_scale=128):
    """float64 sum over 128-wide k blocks of (a_blk @ w_blk.T) * a_scale[:, kb] * w_scale[n // 128, kb]
    (w_scale[n, kb] with rows_per_scale 1: per-row weight scales)."""
    m, k = a.shape
    n = w.shape[0]
    out = np.zeros((m, n))
    for kb in range(-(-k // 128)):
        part = a[:, kb * 128:(kb + 1) * 128] @ w[:, kb * 128:(kb + 1) * 128].T
        out += part * a_scale[:, kb:kb + 1] * np.repeat(w_scale[:, kb], rows_per_scale)[None, :n]
    return out


def ue8m0(e):
    return np.ldexp(1.0, e.astype(np.int64) - 127)


# ---- signatures ------------------------------------------------------------------------------------
SIGNATURES = {
    "mm_bf16": [("a", E), ("b", E), ("bias", None), ("pdl", False), ("out", None), ("out_dtype", "bfloat16"),
                ("backend", "cudnn")],
    "bmm_bf16": [("A", E), ("B", E), ("out", None), ("out_dtype", "bfloat16"), ("backend", "cudnn")],
    "bmm_fp8": [("A", E), ("B", E), ("A_scale", E), ("B_scale", E), ("dtype", E), ("out", None),
                ("backend", "cublas")],
    "gemm_fp8_nt_groupwise": [("a", E), ("b", E), ("a_scale", E), ("b_scale", E), ("scale_major_mode", None),
                              ("mma_sm", 1), ("scale_granularity_mnk", (1, 128, 128)), ("out", None),
                              ("out_dtype", None), ("backend", "cutlass")],
    "fp8_blockscale_gemm_sm90": [("input", E), ("weight", E), ("input_scale", None), ("weight_scale", None),
                                 ("out", None), ("out_dtype", None)],
    "tinygemm_bf16": [("input", E), ("weight", E), ("out", E), ("bias", None), ("use_pdl", False)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flashinfer_signature(name):
    params = list(inspect.signature(getattr(gemm, name)).parameters.values())
    *positional, stream = params
    assert [(p.name, p.default) for p in positional] == SIGNATURES[name]
    assert (stream.name, stream.kind) == ("stream", inspect.Parameter.KEYWORD_ONLY)


# ---- NumPy (CPU backend) -------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("nt", [True, False], ids=["NT", "row-major"])
def test_mm_numpy(m, nt):
    n, k = 96, 80
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.standard_normal((n, k)).astype(np.float16)
    b = w.T if nt else np.ascontiguousarray(w.T)
    bias = rng.standard_normal(n).astype(np.float32)
    ref = a.astype(np.float64) @ w.T.astype(np.float64)
    out = ignis.mm_bf16(a, b, out_dtype="float32")
    assert out.dtype == np.float32 and out.shape == (m, n)
    close(out, ref, 1e-5)
    out16 = np.empty((m, n), np.float16)
    assert ignis.mm_bf16(a, b, bias=bias, out=out16, out_dtype=None) is out16
    close(out16, ref + bias, 2e-3)


def test_tinygemm_numpy():
    a = rng.standard_normal((3, 64)).astype(np.float16)
    w = rng.standard_normal((40, 64)).astype(np.float16)
    bias = rng.standard_normal(40).astype(np.float32)
    out = np.empty((3, 40), np.float32)
    assert gemm.tinygemm_bf16(a, w, out, bias=bias, use_pdl=True) is None
    close(out, a.astype(np.float64) @ w.astype(np.float64).T + bias, 1e-5)
    with pytest.raises(ignis.InvalidArgumentError, match="use_pdl"):
        gemm.tinygemm_bf16(a, w, out, use_pdl="yes")


def test_bmm_numpy():
    a = rng.standard_normal((3, 5, 64)).astype(np.float16)
    w = rng.standard_normal((3, 40, 64)).astype(np.float16)
    out = ignis.bmm_bf16(a, w.swapaxes(1, 2), out_dtype=np.float32)
    close(out, a.astype(np.float64) @ w.astype(np.float64).swapaxes(1, 2), 1e-5)


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
@pytest.mark.parametrize("pair", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e4m3fn", "float8_e5m2"),
                                  ("float8_e5m2", "float8_e4m3fn")])
def test_bmm_fp8_numpy(pair):
    a = (2 * rng.standard_normal((2, 9, 64))).astype(getattr(ml_dtypes, pair[0]))
    w = (2 * rng.standard_normal((2, 48, 64))).astype(getattr(ml_dtypes, pair[1]))
    sa, sb = np.array([0.5], np.float32), np.array(1.5, np.float32)
    out = ignis.bmm_fp8(a, w.swapaxes(1, 2), sa, sb, "float16")
    ref = 0.75 * (a.astype(np.float64) @ w.astype(np.float64).swapaxes(1, 2))
    close(out, ref, 2e-3)


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
@pytest.mark.parametrize("mode", [None, "K", "MN"])
@pytest.mark.parametrize("scale_dtype", ["float32", "ue8m0"])
def test_groupwise_numpy(mode, scale_dtype):
    m, n, k = 5, 256, 384
    a = (2 * rng.standard_normal((m, k))).astype(ml_dtypes.float8_e4m3fn)
    w = (2 * rng.standard_normal((n, k))).astype(ml_dtypes.float8_e4m3fn)
    if scale_dtype == "float32":
        sa = rng.uniform(0.01, 0.1, (m, 3)).astype(np.float32)
        sb = rng.uniform(0.01, 0.1, (2, 3)).astype(np.float32)
        sa64, sb64 = sa.astype(np.float64), sb.astype(np.float64)
    else:
        sa = rng.integers(116, 128, (m, 3)).astype(np.uint8)
        sb = rng.integers(116, 128, (2, 3)).astype(np.uint8)
        sa64, sb64 = ue8m0(sa), ue8m0(sb)
    ga, gb = (np.ascontiguousarray(sa.T), np.ascontiguousarray(sb.T)) if mode == "MN" else (sa, sb)
    out = np.empty((m, n), np.float16)
    gemm.gemm_fp8_nt_groupwise(a, w, ga, gb, scale_major_mode=mode, out=out)
    close(out, blockwise_ref(a.astype(np.float64), w.astype(np.float64), sa64, sb64), 2e-3)


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
def test_blockscale_sm90_fp8_numpy():
    m, n, k = 3, 128, 256
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
    sa = rng.uniform(0.5, 2, (m, 2)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (1, 2)).astype(np.float32)
    out = np.empty((m, n), np.float16)
    gemm.fp8_blockscale_gemm_sm90(a, w, sa, sb, out=out)
    close(out, blockwise_ref(a.astype(np.float64), w.astype(np.float64), sa, sb), 2e-3)
    per_row = rng.uniform(0.5, 2, (n, 2)).astype(np.float32)  # FlashInfer's per-token weight scales
    gemm.fp8_blockscale_gemm_sm90(a, w, sa, per_row, out=out)
    close(out, blockwise_ref(a.astype(np.float64), w.astype(np.float64), sa, per_row, rows_per_scale=1), 2e-3)
    with pytest.raises(ignis.InvalidArgumentError, match="input_scale"):
        gemm.fp8_blockscale_gemm_sm90(a, w, None, sb, out=out)


def test_refusals_numpy():
    a = np.zeros((4, 64), np.float16)
    w = np.zeros((32, 64), np.float16)
    with pytest.raises(ignis.InvalidArgumentError, match="backend"):
        ignis.mm_bf16(a, w.T, backend="magic")
    with pytest.raises(ignis.InvalidArgumentError, match="do not multiply"):
        ignis.mm_bf16(a, w, out_dtype="float32")
    with pytest.raises(ignis.UnsupportedError, match="out_dtype"):
        ignis.mm_bf16(a, w.T, out_dtype="int8")
    with pytest.raises(ignis.UnsupportedError, match="scale_granularity_mnk"):
        gemm.gemm_fp8_nt_groupwise(a, w, None, None, scale_granularity_mnk=(1, 64, 64))
    with pytest.raises(ignis.InvalidArgumentError, match="mma_sm"):
        gemm.gemm_fp8_nt_groupwise(a, w, None, None, mma_sm=3)


# ---- PyTorch on CUDA (cuBLASLt) --------------------------------------------------------------------
cuda_only = pytest.mark.skipif(not CUDA, reason="needs PyTorch with CUDA")


def t64(x):
    return x.double().cpu().numpy()


@cuda_only
@pytest.mark.parametrize("m", [1, 16, 64, 4096])
def test_mm_bf16_cuda(m):
    n, k = 7168, 2048
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = ignis.mm_bf16(a, w.t(), bias=bias)
    ref = t64(a) @ t64(w).T + t64(bias)
    close(out.float().cpu().numpy(), ref, 1e-2)
    out32 = ignis.mm_bf16(a, w.t().contiguous(), out_dtype=torch.float32)
    close(out32.cpu().numpy(), ref - t64(bias), 1e-4)


@cuda_only
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (5, 2112, 7168), (31, 7168, 2048), (64, 1000, 1032),
                                   (48, 24576, 512)], ids=str)
def test_mm_small_m_cuda(shape, dtype):
    """The shapes ignis' own small-M kernel takes, against float64 and torch.matmul."""
    m, n, k = shape
    dt = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt)
    w_padded = torch.randn(n, k + 8, device="cuda", dtype=dt)
    w = w_padded[:, :k]  # row stride k + 8: still 16-byte rows
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    out = ignis.mm_bf16(a, w.t(), bias=bias, out_dtype=dt)
    ref = t64(a) @ t64(w).T + t64(bias)
    close(out.float().cpu().numpy(), ref, 1e-2)
    again = ignis.mm_bf16(a, w.t(), bias=bias, out_dtype=dt)
    assert torch.equal(out, again), "a repeated call changed its output"
    torch_out = torch.matmul(a, w.t()).float() + bias
    close(out.float().cpu().numpy(), t64(torch_out), 1e-2)


@cuda_only
@pytest.mark.parametrize("m", [1, 2, 5, 8])
def test_tinygemm_bf16_cuda(m):
    n, k = 256, 7168  # a router GEMM's shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    gemm.tinygemm_bf16(a, w, out, bias=bias, use_pdl=True)
    close(out.float().cpu().numpy(), t64(a) @ t64(w).T + t64(bias), 1e-2)
    gemm.tinygemm_bf16(a, w, out)
    close(out.float().cpu().numpy(), t64(a) @ t64(w).T, 1e-2)


@cuda_only
def test_bmm_bf16_cuda():
    a = torch.randn(4, 64, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4, 256, 512, device="cuda", dtype=torch.bfloat16)
    out = ignis.bmm_bf16(a, w.transpose(1, 2), out_dtype=torch.float16)
    close(out.float().cpu().numpy(), t64(a) @ t64(w).transpose(0, 2, 1), 2e-3)


@cuda_only
@pytest.mark.parametrize("m", [1, 64, 4096])
def test_bmm_fp8_cuda_sglang_pattern(m):
    n, k = 7168, 2048
    x = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    xs = torch.tensor(0.5, device="cuda")
    ws = torch.tensor(0.25, device="cuda")
    # SGLang's flashinfer_bmm_fp8: [M, K] and the column-major [K, N] weight, unsqueezed
    out = ignis.bmm_fp8(x.unsqueeze(0), w.t().unsqueeze(0), xs.reshape(1), ws.reshape(1), torch.bfloat16,
                        backend="cublas").view(m, n)
    close(out.float().cpu().numpy(), 0.125 * (t64(x) @ t64(w).T), 1e-2)


def quantize_ref(x, rows):
    """FlashInfer's recipe in float64: scale = max(amax, 1e-4) / 448 per rows x 128 block."""
    r, k = x.shape
    blocks = x.reshape(r // rows, rows, k // 128, 128)
    return np.maximum(np.abs(blocks).max(axis=(1, 3)), 1e-4) / 448.0


@cuda_only
@pytest.mark.parametrize("m", [1, 3, 16, 64, 4096])
def test_fp8_blockscale_gemm_sm90_bf16_input(m):
    n, k = 2112, 7168
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    w, ws = gemm._quantize_groups("test", w_bf16, 128)
    out = gemm.fp8_blockscale_gemm_sm90(x, w, None, ws, out_dtype=torch.bfloat16)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    # against the unquantized product: fp8's 3 mantissa bits on both sides
    close(out.float().cpu().numpy(), t64(x) @ t64(w_bf16).T, 8e-2)
    # against the exact blockwise sum of the quantized operands
    xq, xs = gemm._quantize_groups("test", x, 1)
    ref = blockwise_ref(t64(xq), t64(w), t64(xs), t64(ws))
    close(out.float().cpu().numpy(), ref, 1e-2)


@cuda_only
@pytest.mark.parametrize("m", [1, 16, 64])
def test_fp8_blockscale_gemm_sm90_per_token_weight_scales(m):
    n, k = 4096, 7168
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    ws = torch.rand(n, k // 128, device="cuda") * 0.1 + 0.01
    out = gemm.fp8_blockscale_gemm_sm90(x, w, None, ws)
    xq, xs = gemm._quantize_groups("test", x, 1)
    close(out.float().cpu().numpy(), blockwise_ref(t64(xq), t64(w), t64(xs), t64(ws), rows_per_scale=1), 1e-2)


@cuda_only
@pytest.mark.parametrize("mode", ["K", "MN"])
@pytest.mark.parametrize("ue8m0_scales", [False, True])
@pytest.mark.parametrize("shape", [(64, 2112, 7168), (4096, 7168, 2048), (4, 256, 640)], ids=str)
def test_gemm_fp8_nt_groupwise_cuda(mode, ue8m0_scales, shape):
    m, n, k = shape
    kb, nb = -(-k // 128), -(-n // 128)
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    if ue8m0_scales:
        sa = torch.randint(120, 134, (m, kb), device="cuda", dtype=torch.uint8)
        sb = torch.randint(120, 134, (nb, kb), device="cuda", dtype=torch.uint8)
        sa64, sb64 = ue8m0(sa.cpu().numpy()), ue8m0(sb.cpu().numpy())
    else:
        sa = torch.rand(m, kb, device="cuda") * 0.1 + 0.01
        sb = torch.rand(nb, kb, device="cuda") * 0.1 + 0.01
        sa64, sb64 = t64(sa), t64(sb)
    ga, gb = (sa.t().contiguous(), sb.t().contiguous()) if mode == "MN" else (sa, sb)
    out = gemm.gemm_fp8_nt_groupwise(a, w, ga, gb, scale_major_mode=mode)
    close(out.float().cpu().numpy(), blockwise_ref(t64(a), t64(w), sa64, sb64), 1e-2)


@cuda_only
def test_cuda_graph_capture():
    a = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(7168, 2048, device="cuda", dtype=torch.bfloat16)
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    sa = torch.ones(64, 16, device="cuda")
    sw = torch.ones(56, 16, device="cuda")
    one = torch.ones(1, device="cuda")
    out = torch.empty(64, 7168, device="cuda", dtype=torch.bfloat16)
    out8 = torch.empty_like(out)
    outb = torch.empty_like(out)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # warm-up on the capture stream: its workspace and algorithms
        ignis.mm_bf16(a, w.t(), out=out)
        ignis.bmm_fp8(a8.unsqueeze(0), w8.t().unsqueeze(0), one, one, torch.bfloat16, out=out8.unsqueeze(0))
        gemm.gemm_fp8_nt_groupwise(a8, w8, sa, sw, out=outb)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        ignis.mm_bf16(a, w.t(), out=out)
        ignis.bmm_fp8(a8.unsqueeze(0), w8.t().unsqueeze(0), one, one, torch.bfloat16, out=out8.unsqueeze(0))
        gemm.gemm_fp8_nt_groupwise(a8, w8, sa, sw, out=outb)
    a.copy_(torch.randn_like(a))
    a8.copy_(a.to(torch.float8_e4m3fn))
    graph.replay()
    torch.cuda.synchronize()
    close(out.float().cpu().numpy(), t64(a) @ t64(w).T, 1e-2)
    ref8 = t64(a8) @ t64(w8).T
    close(out8.float().cpu().numpy(), ref8, 1e-2)
    close(outb.float().cpu().numpy(), ref8, 1e-2)
