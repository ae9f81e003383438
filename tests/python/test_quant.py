"""fp8 quantization from Python (ignis.quantization, the fp8 forms of ignis.norm and
ignis.silu_and_mul) against NumPy references: the plain quantizations bit for bit (the reference
does the header's f32 arithmetic and rounds with ml_dtypes, round to nearest even after
saturation), the fused forms within one fp8 step of the float64 reference. On the CPU with NumPy
arrays (f32 / f16 inputs, ml_dtypes fp8 outputs), and on CUDA with PyTorch tensors (bf16 inputs)
when a GPU is present. Also FlashInfer's calling conventions (out first, float or tensor scales,
the column-major TMA-aligned block_scale buffer) and the errors."""

import inspect

import numpy as np
import pytest

import ignis
from refs import ml_dtypes, torch

pytestmark = pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes for the fp8 reference")

CUDA = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
rng = np.random.default_rng(18)


def fp8_np(name):
    return getattr(ml_dtypes, name)


def as_input(x, device, dtype="float32"):
    """float64 values as the device's input array (CPU: NumPy of dtype; CUDA: torch bf16)."""
    if device == "cpu":
        return x.astype(dtype)
    return torch.from_numpy(x.astype(np.float32)).to("cuda").to(torch.bfloat16)


def values_of(x):
    """The values an input array holds, as float64."""
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def fp8_values(q):
    if hasattr(q, "detach"):
        return q.detach().float().cpu().numpy().astype(np.float64)
    return q.astype(np.float64)


def quant_ref(x, s, name):
    """fp8(sat(x * (1 / s))) in f32 arithmetic, rounded by ml_dtypes (s broadcast)."""
    x = np.asarray(x, np.float32)
    inv = np.float32(1.0) / np.asarray(s, np.float32)
    t = x * inv
    t = np.where(np.isnan(t), t, np.clip(t, -MAX[name], MAX[name]))
    return t.astype(fp8_np(name)).astype(np.float64)


def scale_ref(absmax, eps, name, ue8m0=False):
    a = np.minimum(np.maximum(np.float32(absmax), np.float32(eps)), np.finfo(np.float32).max).astype(np.float32)
    s = (a / np.float32(MAX[name])).astype(np.float32)
    if ue8m0:
        s = np.exp2(np.ceil(np.log2(s.astype(np.float64)))).astype(np.float32)
    return s


def absmax_of(v, axis=None, keepdims=False):
    return np.nanmax(np.abs(v), axis=axis, keepdims=keepdims)


def same(a, b):
    return np.array_equal(a, b, equal_nan=True)


def data(shape, specials=False):
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-2, 2, size=shape[:-1] + (1,)))
    if specials:
        flat = x.reshape(-1)
        flat[3::97] = 1e6
        flat[5::101] = np.nan
        flat[7::89] = -np.inf
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("mode", ["static", "dynamic", "per_token"])
def test_fp8_quantize(device, name, mode):
    x = as_input(data((7, 300), specials=mode == "static"), device)
    v = values_of(x)
    dtype = name if device == "cpu" else getattr(torch, name)
    if mode == "static":
        q, s = ignis.fp8_quantize(x, 0.05, dtype=dtype)
        want = quant_ref(v, np.float32(0.05), name)
    elif mode == "dynamic":
        q, s = ignis.fp8_quantize(x, dtype=dtype)
        ref_s = scale_ref(absmax_of(v), 1e-10, name)
        assert same(fp8_values(s), np.array([ref_s], np.float64))
        want = quant_ref(v, ref_s, name)
    else:
        q, s = ignis.fp8_quantize(x, per_token=True, dtype=dtype)
        ref_s = scale_ref(absmax_of(v, axis=1, keepdims=True), 1e-10, name)
        assert same(fp8_values(s), ref_s.astype(np.float64))
        want = quant_ref(v, ref_s, name)
    assert same(fp8_values(q), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["row", "col", "col_tma"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("shape,group", [((5, 256), 128), ((3, 4, 384), 128), ((9, 42), 7), ((33, 1024), 64)])
def test_per_token_group_quant_8bit(device, layout, ue8m0, shape, group):
    if layout != "row" and len(shape) != 2:
        pytest.skip("column-major scales are 2-D")
    x = as_input(data(shape, specials=True), device)
    v = values_of(x)
    q, s = ignis.per_token_group_quant_8bit(x, group, column_major_scales=layout != "row",
                                            scale_tma_aligned=layout == "col_tma", scale_ue8m0=ue8m0)
    assert tuple(q.shape) == shape and tuple(s.shape) == shape[:-1] + (shape[-1] // group,)
    if layout != "row":  # column-major: the scales of consecutive rows are adjacent
        assert (s.stride(0) if hasattr(s, "stride") else s.strides[0] // s.itemsize) == 1
    groups = v.reshape(shape[:-1] + (shape[-1] // group, group))
    ref_s = scale_ref(absmax_of(groups, axis=-1), 1e-10, "float8_e4m3fn", ue8m0)
    assert same(fp8_values(s), ref_s.astype(np.float64))
    want = quant_ref(groups, ref_s[..., None], "float8_e4m3fn").reshape(shape)
    assert same(fp8_values(q), want)


def test_per_token_group_quant_8bit_e8m0_bytes():
    x = data((6, 256))
    q = np.empty((6, 256), ml_dtypes.float8_e4m3fn)
    s = np.empty((6, 2), np.uint8)
    ignis.per_token_group_quant_8bit(x.astype(np.float32), 128, scale_ue8m0=True, out=q, scale=s)
    ref_s = scale_ref(absmax_of(x.astype(np.float32).reshape(6, 2, 128), axis=-1), 1e-10, "float8_e4m3fn", True)
    assert same(np.exp2(s.astype(np.float64) - 127), ref_s.astype(np.float64))


def rms_ref(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def assert_within_step(q, ref, name):
    """Each fp8 value within one fp8 step (at the reference's magnitude) of the saturated reference."""
    m = MAX[name]
    ref = np.clip(ref, -m, m)
    mant, emin = (3, -6) if name == "float8_e4m3fn" else (2, -14)
    e = np.maximum(np.floor(np.log2(np.maximum(np.abs(ref), 1e-30))), emin)
    step = np.exp2(e - mant)
    assert np.all(np.abs(q - ref) <= step * 1.02 + 1e-3 * np.abs(ref)), float(np.max(np.abs(q - ref) / step))


def new_out(device, shape, name="float8_e4m3fn"):
    if device == "cpu":
        return np.empty(shape, fp8_np(name))
    return torch.empty(shape, dtype=getattr(torch, name), device="cuda")


def new_like(device, shape, scales=False):
    """Zeros of shape: f32 on the CPU (the inputs' dtype there, and the scales'); on CUDA f32 for
    scales, else bf16 (the inputs' dtype there)."""
    if device == "cpu":
        return np.zeros(shape, np.float32)
    return torch.zeros(shape, dtype=torch.float32 if scales else torch.bfloat16, device="cuda")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["rmsnorm_quant", "fused_add_rmsnorm_quant", "layernorm_quant"])
def test_norm_quant(device, op):
    shape, name, scale = (5, 384), "float8_e4m3fn", 0.02
    x = as_input(data(shape), device)
    w = as_input(1 + 0.2 * rng.standard_normal(shape[-1]), device)
    out = new_out(device, shape)
    v, wv = values_of(x), values_of(w)
    scale_arg = scale if op != "layernorm_quant" else (np.array([scale], np.float32) if device == "cpu" else
                                                       torch.tensor([scale], device="cuda"))
    if op == "rmsnorm_quant":
        ignis.rmsnorm_quant(out, x, w, scale_arg)
        ref = rms_ref(v, wv, 1e-6)
    elif op == "fused_add_rmsnorm_quant":
        res = as_input(data(shape), device)
        rv = values_of(res)
        ignis.fused_add_rmsnorm_quant(out, x, res, w, scale_arg)
        total = (v + rv).astype(np.float32).astype(np.float64)
        assert np.allclose(values_of(res), total, rtol=1e-2 if device == "cuda" else 1e-6)
        assert same(values_of(x), v)
        ref = rms_ref(total, wv, 1e-6)
    else:
        b = as_input(0.1 * rng.standard_normal(shape[-1]), device)
        ignis.layernorm_quant(out, x, w, b, scale_arg)
        mean = v.mean(-1, keepdims=True)
        ref = (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * wv + values_of(b)
    assert_within_step(fp8_values(out), ref / scale, name)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_add_rmsnorm_fp8_block_quant(device):
    m, k = 6, 512
    x, res = as_input(data((m, k)), device), as_input(data((m, k)), device)
    w = as_input(1 + 0.2 * rng.standard_normal(k), device)
    v, rv, wv = values_of(x), values_of(res), values_of(w)
    out, normed = new_out(device, (m, k)), new_like(device, (m, k))
    padded = (m + 3) // 4 * 4
    block_scale = new_like(device, (k // 128, padded), scales=True)
    ignis.fused_add_rmsnorm_fp8_block_quant(out, block_scale, normed, x, res, w)
    total = (v + rv).astype(np.float32).astype(np.float64)
    nv = values_of(normed)
    tol = 1.6e-2 if device == "cuda" else 1e-5
    assert np.allclose(nv, rms_ref(total, wv, 1e-6), rtol=tol, atol=tol)
    s = values_of(block_scale)[:, :m].T  # [m, k // 128]
    groups = nv.reshape(m, k // 128, 128)
    ref_s = scale_ref(np.maximum(absmax_of(groups, axis=-1), 1e-4), 1e-4, "float8_e4m3fn")
    assert same(s, ref_s.astype(np.float64))
    assert same(fp8_values(out), quant_ref(groups, ref_s[..., None], "float8_e4m3fn").reshape(m, k))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["tensor", "block", "block_col_tma"])
def test_silu_and_mul_quant(device, mode):
    m, h = 5, 256
    x = as_input(data((m, 2 * h)), device)
    v = values_of(x)
    ref = v[:, :h] / (1 + np.exp(-v[:, :h])) * v[:, h:]
    if mode == "tensor":
        out = ignis.silu_and_mul_quant(x, 0.01)
        assert_within_step(fp8_values(out), ref / 0.01, "float8_e4m3fn")
        return
    col = mode == "block_col_tma"
    out, block_scale = ignis.silu_and_mul_quant_per_token_group(x, 128, column_major_scales=col,
                                                                 scale_tma_aligned=col)
    s = values_of(block_scale)
    assert s.shape == (m, h // 128)
    ref_s = scale_ref(absmax_of(ref.reshape(m, -1, 128), axis=-1), 1e-10, "float8_e4m3fn")
    assert np.allclose(s, ref_s, rtol=1e-2)
    assert_within_step(fp8_values(out), (ref.reshape(m, -1, 128) / s[..., None]).reshape(m, h), "float8_e4m3fn")


E = inspect.Parameter.empty
SIGNATURES = {  # FlashInfer 0.7.2's positional parameters (flashinfer.norm, flashinfer.quantization)
    "rmsnorm_quant": [("out", E), ("input", E), ("weight", E), ("scale", E), ("eps", 1e-6), ("enable_pdl", None)],
    "fused_add_rmsnorm_quant": [("out", E), ("input", E), ("residual", E), ("weight", E), ("scale", E),
                                ("eps", 1e-6), ("enable_pdl", None)],
    "layernorm_quant": [("out", E), ("input", E), ("gemma", E), ("beta", E), ("scale", E), ("eps", 1e-6)],
    "fused_add_rmsnorm_fp8_block_quant": [("out", E), ("block_scale", E), ("normed_out", E), ("input", E),
                                          ("residual", E), ("weight", E), ("eps", 1e-6), ("enable_pdl", None)],
    "per_token_group_quant_8bit": [("x", E), ("group_size", E), ("eps", 1e-10), ("dst_dtype", None),
                                   ("column_major_scales", False), ("scale_tma_aligned", False),
                                   ("scale_ue8m0", False), ("backend", "cutile")],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flashinfer_signature(name):
    fn = getattr(ignis, name)
    params = inspect.signature(fn).parameters.values()
    positional = [(p.name, p.default) for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert positional == SIGNATURES[name]
    assert name in ignis.__all__ and fn.__doc__


def test_errors():
    x = np.zeros((4, 256), np.float32)
    with pytest.raises(ignis.InvalidArgumentError, match="group_size"):
        ignis.per_token_group_quant_8bit(x, 100)
    with pytest.raises(ignis.UnsupportedError, match="dst_dtype"):
        ignis.per_token_group_quant_8bit(x, 128, dst_dtype="int8")
    with pytest.raises(ignis.InvalidArgumentError, match="scale_tma_aligned"):
        ignis.per_token_group_quant_8bit(x, 128, scale_tma_aligned=True)
    out = np.full((4, 256), 7, np.uint8).view(ml_dtypes.float8_e4m3fn)
    with pytest.raises(ignis.InvalidArgumentError, match="scale has 2"):
        ignis.rmsnorm_quant(out, x, np.ones(256, np.float32), np.ones(2, np.float32))
    with pytest.raises(ignis.InvalidArgumentError, match="out.dtype"):
        ignis.rmsnorm_quant(np.zeros((4, 256), np.float32), x, np.ones(256, np.float32), 1.0)
    assert (out.view(np.uint8) == 7).all()


def test_flashinfer_namespace():
    from ignis._flashinfer import norm, quantization
    assert norm.rmsnorm_quant is ignis.rmsnorm_quant
    assert norm.fused_add_rmsnorm_fp8_block_quant is ignis.fused_add_rmsnorm_fp8_block_quant
    assert quantization.per_token_group_quant_8bit is ignis.per_token_group_quant_8bit
