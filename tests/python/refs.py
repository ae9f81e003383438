"""Shared pieces of the Python tests.

- float64 NumPy references of every op, written as plainly as the math in the C headers;
- tolerances tied to the dtype (f32 ~1e-5, f16 ~1e-3, bf16 ~1e-2 relative);
- the frameworks present on this machine (NumPy always; PyTorch on the host, PyTorch on CUDA when
  a GPU and ignis's CUDA backend are both there, JAX on the host), each able to turn a float64
  NumPy array into one of its arrays of a given dtype, into strided views of it, and back;
- Producer: a DLPack producer wrapping a NumPy array that rewrites its export (byte_offset, NULL
  strides, dtype code, device, legacy capsule), to reach paths the common producers rarely take.
"""

import ctypes
import math

import numpy as np

import ignis

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

try:
    import torch
except ImportError:
    torch = None

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    jax = None

TOLERANCE = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}


def assert_close(actual, expected, dtype, scale=1.0):
    """|actual - expected| <= tol * (1 + |expected|) elementwise, tol from the dtype."""
    tol = TOLERANCE[dtype] * scale
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = np.abs(actual - expected) / (1.0 + np.abs(expected))
    worst = float(err.max()) if err.size else 0.0
    assert worst <= tol, f"max scaled error {worst:.3g} > {tol:.3g} ({dtype})"


# ---- references (float64) --------------------------------------------------------------------
def rmsnorm_ref(x, weight, eps, gemma=False):
    scale = weight + 1.0 if gemma else weight
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def layernorm_ref(x, gamma, beta, eps):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


_erf = np.vectorize(math.erf)


def activation_ref(x, kind):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    if kind == "silu":
        act = a / (1.0 + np.exp(-a))
    elif kind == "gelu":
        act = 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0)))
    else:
        act = 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3)))
    return act * b


def rope_frequencies(rotary_dim, rope_scale, rope_theta, llama31=None):
    i = np.arange(rotary_dim // 2, dtype=np.float64)
    f = rope_theta ** (-2.0 * i / rotary_dim)
    if llama31 is None:
        return f / rope_scale
    low, high, old_context_len = llama31
    smooth = np.clip((old_context_len * f / (2 * math.pi) - low) / (high - low), 0.0, 1.0)
    return (1.0 - smooth) * f / rope_scale + smooth * f


def rotate(x, cos, sin, rotary_dim, interleave):
    """x [nnz, heads, head_dim]; cos, sin [nnz, rotary_dim/2]."""
    out = x.copy()
    cos, sin = cos[:, None, :], sin[:, None, :]
    if interleave:
        a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = a * cos - b * sin
        out[..., 1:rotary_dim:2] = a * sin + b * cos
    else:
        half = rotary_dim // 2
        a, b = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = a * cos - b * sin
        out[..., half:rotary_dim] = a * sin + b * cos
    return out


def rope_ref(x, positions, rotary_dim=None, interleave=False, rope_scale=1.0, rope_theta=1e4, llama31=None):
    rotary_dim = rotary_dim or x.shape[-1]
    angles = np.asarray(positions, dtype=np.float64)[:, None] * rope_frequencies(
        rotary_dim, rope_scale, rope_theta, llama31)[None, :]
    return rotate(x, np.cos(angles), np.sin(angles), rotary_dim, interleave)


def positions_from_indptr(indptr, offsets):
    return np.concatenate([offsets[b] + np.arange(indptr[b + 1] - indptr[b]) for b in range(len(offsets))])


def cos_sin_cache_ref(x, positions, cache, is_neox):
    rotary_dim = cache.shape[1]
    rows = cache[np.asarray(positions)]
    return rotate(x, rows[:, : rotary_dim // 2], rows[:, rotary_dim // 2 :], rotary_dim, not is_neox)


def make_cos_sin_cache(max_position, rotary_dim, theta=1e4):
    f = rope_frequencies(rotary_dim, 1.0, theta)
    angles = np.arange(max_position, dtype=np.float64)[:, None] * f[None, :]
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


# ---- frameworks --------------------------------------------------------------------------------
class NumpyFrame:
    name = "numpy"
    views = True
    dtypes = ("f32", "f16")
    _np = {"f32": np.float32, "f16": np.float16}

    def array(self, a, dtype):
        return np.ascontiguousarray(np.asarray(a).astype(self._np[dtype]))

    def index(self, a, dtype="i64"):
        return np.asarray(a, dtype=np.int32 if dtype == "i32" else np.int64)

    def numpy(self, x):
        return np.asarray(x, dtype=np.float64)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=self._np[dtype])

    def padded(self, a, dtype, pad):
        """A view of a copy of a whose rows are padded by `pad` elements (row stride > width)."""
        base = np.zeros(a.shape[:-1] + (a.shape[-1] + pad,), dtype=self._np[dtype])
        view = base[..., : a.shape[-1]]
        view[...] = a
        return view

    def transposed(self, a, dtype):
        """a [B, T, ...] as a view of a [T, B, ...] buffer (leading dims transposed)."""
        base = np.ascontiguousarray(np.swapaxes(a, 0, 1)).astype(self._np[dtype])
        return np.swapaxes(base, 0, 1)


class TorchFrame:
    views = True
    dtypes = ("f32", "f16", "bf16")

    def __init__(self, device):
        self.device = device
        self.name = "torch-" + device
        self._dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

    def array(self, a, dtype):
        return torch.from_numpy(np.asarray(a, dtype=np.float32).copy()).to(self._dtype[dtype]).to(self.device)

    def index(self, a, dtype="i64"):
        values = np.asarray(a, dtype=np.int32 if dtype == "i32" else np.int64).copy()
        return torch.from_numpy(values).to(self.device)

    def numpy(self, x):
        return x.detach().float().cpu().numpy().astype(np.float64)

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=self._dtype[dtype], device=self.device)

    def padded(self, a, dtype, pad):
        base = torch.zeros(a.shape[:-1] + (a.shape[-1] + pad,), dtype=self._dtype[dtype], device=self.device)
        view = base[..., : a.shape[-1]]
        view.copy_(self.array(a, dtype))
        return view

    def transposed(self, a, dtype):
        base = self.array(np.ascontiguousarray(np.swapaxes(a, 0, 1)), dtype)
        return base.transpose(0, 1)


class JaxFrame:
    """JAX on the host. bf16 is left out: ignis allocates JAX outputs as NumPy buffers, which cannot
    carry bf16 through DLPack (test_api.py checks the error, and bf16 JAX inputs)."""

    name = "jax-cpu"
    views = False
    dtypes = ("f32", "f16")

    def _dt(self, dtype):
        return {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}[dtype]

    # Pinned to the host: where JAX also has a GPU, its default device would be the GPU.
    def array(self, a, dtype):
        host = jax.devices("cpu")[0]
        return jax.device_put(np.asarray(a, dtype=np.float32), host).astype(self._dt(dtype))

    def index(self, a, dtype="i64"):
        return jax.device_put(np.asarray(a, dtype=np.int32), jax.devices("cpu")[0])

    def numpy(self, x):
        return np.asarray(x.astype(jnp.float32), dtype=np.float64)

    def empty(self, shape, dtype):
        raise NotImplementedError("JAX arrays are immutable")


def available_frames():
    frames = [NumpyFrame()]
    if torch is not None:
        frames.append(TorchFrame("cpu"))
        if torch.cuda.is_available() and ignis.cuda_device_count() > 0:
            frames.append(TorchFrame("cuda"))
    if jax is not None:
        frames.append(JaxFrame())
    return frames


FRAMES = available_frames()
FRAME_DTYPES = [(f, d) for f in FRAMES for d in f.dtypes]
FRAME_DTYPE_IDS = [f"{f.name}-{d}" for f, d in FRAME_DTYPES]
VIEW_FRAMES = [f for f in FRAMES if f.views]
VIEW_FRAME_IDS = [f.name for f in VIEW_FRAMES]


# ---- a DLPack producer that rewrites its export ----------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_METAL = 1, 2, 3, 8
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT = 0, 1, 2, 4
DL_FLOAT8_E4M3FN, DL_FLOAT8_E5M2 = 10, 12


class Producer:
    """Exports a NumPy array through DLPack, then rewrites the export: moves `byte_offset` bytes
    from the data pointer into byte_offset, drops the strides (NULL means row-major), replaces the
    dtype (code, bits) or the device. Records the stream= it was asked for."""

    def __init__(self, array, byte_offset=0, null_strides=False, dtype=None, device=(DL_CPU, 0)):
        self.array = array
        self.byte_offset = byte_offset
        self.null_strides = null_strides
        self.dtype = dtype
        self.device = device
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        capsule = self.array.__dlpack__(max_version=max_version) if max_version else self.array.__dlpack__()
        name = _capsule_name(capsule)
        address = _capsule_pointer(capsule, name)
        if name == b"dltensor_versioned":
            tensor = _DLManagedTensorVersioned.from_address(address).dl_tensor
        else:
            tensor = _DLTensor.from_address(address)
        tensor.data -= self.byte_offset
        tensor.byte_offset += self.byte_offset
        if self.null_strides:
            tensor.strides = ctypes.POINTER(ctypes.c_int64)()
        if self.dtype is not None:
            tensor.dtype.code, tensor.dtype.bits = self.dtype
        tensor.device.device_type, tensor.device.device_id = self.device
        return capsule


class LegacyProducer(Producer):
    """A producer from before DLPack 1.0: __dlpack__ takes no max_version (legacy capsule only)."""

    def __dlpack__(self, *, stream=None):
        return super().__dlpack__(stream=stream)


def bf16_numpy(a):
    """(ml_dtypes bfloat16 array of a, a Producer exporting it as DLPack bfloat16)."""
    values = np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16)
    return values, Producer(values.view(np.uint16), dtype=(DL_BFLOAT, 16))


# ---- decode attention (include/ignis/decode.h) -------------------------------------------------
def alibi_slopes(num_heads):
    """ALiBi slope of each head: 2^(-8(h+1)/n) for h < n, else 2^(-4(2(h-n)+1)/n), n the largest
    power of two <= num_heads."""
    n = 1 << (num_heads.bit_length() - 1)
    return np.array([2.0 ** (-8.0 * (h + 1) / n) if h < n else 2.0 ** (-4.0 * (2 * (h - n) + 1) / n)
                     for h in range(num_heads)])


def decode_ref(q, k, v, sm_scale=None, logits_soft_cap=None, window_left=-1, lse_base="2",
               pos_encoding_mode="NONE", rope_scale=1.0, rope_theta=1e4, k_scale=1.0, v_scale=1.0, sinks=None):
    """Decode attention of one request, as stated in include/ignis/decode.h: q [q_len, H, D] (the
    request's query tokens, last at position kv_len - 1), k / v [kv_len, Hkv, D] as stored ->
    out [q_len, H, D], lse [q_len, H] (base 2 or e)."""
    q = np.asarray(q, dtype=np.float64)
    q_len, heads, dim = q.shape
    kv_len, kv_heads = k.shape[0], k.shape[1]
    k = k_scale * np.asarray(k, dtype=np.float64)
    v = v_scale * np.asarray(v, dtype=np.float64)
    scale = sm_scale if sm_scale else 1.0 / math.sqrt(dim)
    positions = kv_len - q_len + np.arange(q_len)
    if pos_encoding_mode == "ROPE_LLAMA":
        q = rope_ref(q, positions, rope_scale=rope_scale, rope_theta=rope_theta)
        k = rope_ref(k, np.arange(kv_len), rope_scale=rope_scale, rope_theta=rope_theta)
    slopes = alibi_slopes(heads)
    divisor = math.log(2.0) if lse_base == "2" else 1.0
    out, lse = np.zeros((q_len, heads, dim)), np.full((q_len, heads), -np.inf)
    for i, q_pos in enumerate(positions):
        first = max(0, q_pos - window_left) if window_left >= 0 else 0
        keys = np.arange(first, max(first, q_pos + 1))
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            x = scale * (k[keys, kvh] @ q[i, h])
            if pos_encoding_mode == "ALIBI":
                x = x + slopes[h] * (keys - q_pos)
            if logits_soft_cap:
                x = logits_soft_cap * np.tanh(x / logits_soft_cap)
            sink = -np.inf if sinks is None else float(sinks[h])
            if x.size == 0 and sink == -np.inf:
                continue
            m = max(x.max() if x.size else -np.inf, sink)
            w = np.exp(x - m)
            total = w.sum() + math.exp(sink - m)
            out[i, h] = (w @ v[keys, kvh]) / total if x.size else 0.0
            lse[i, h] = (m + math.log(total)) / divisor
    return out, lse


# ---- prefill attention (include/ignis/prefill.h) -----------------------------------------------
def prefill_ref(q, k, v, causal=False, mask=None, sm_scale=None, logits_soft_cap=None, window_left=-1,
                lse_base="2", pos_encoding_mode="NONE", rope_scale=1.0, rope_theta=1e4, k_scale=1.0, v_scale=1.0,
                sinks=None):
    """Prefill attention of one request, as stated in include/ignis/prefill.h: q [q_len, H, Dqk]
    (token i at position kv_len - q_len + i), k [kv_len, Hkv, Dqk], v [kv_len, Hkv, Dvo], mask
    None or booleans [q_len, kv_len] -> out [q_len, H, Dvo], lse [q_len, H] (base 2 or e)."""
    q = np.asarray(q, dtype=np.float64)
    q_len, heads, dim = q.shape
    kv_len, kv_heads = k.shape[0], k.shape[1]
    k = k_scale * np.asarray(k, dtype=np.float64)
    v = v_scale * np.asarray(v, dtype=np.float64)
    scale = sm_scale if sm_scale else 1.0 / math.sqrt(dim)
    positions = kv_len - q_len + np.arange(q_len)
    if pos_encoding_mode == "ROPE_LLAMA":
        q = rope_ref(q, positions, rope_scale=rope_scale, rope_theta=rope_theta)
        k = rope_ref(k, np.arange(kv_len), rope_scale=rope_scale, rope_theta=rope_theta)
    slopes = alibi_slopes(heads)
    divisor = math.log(2.0) if lse_base == "2" else 1.0
    out, lse = np.zeros((q_len, heads, v.shape[2])), np.full((q_len, heads), -np.inf)
    all_keys = np.arange(kv_len)
    for i, q_pos in enumerate(positions):
        visible = np.ones(kv_len, dtype=bool)
        if window_left >= 0:
            visible &= all_keys >= q_pos - window_left
        if mask is not None:
            visible &= np.asarray(mask[i], dtype=bool)
        elif causal:
            visible &= all_keys <= q_pos
        keys = all_keys[visible]
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            x = scale * (k[keys, kvh] @ q[i, h])
            if pos_encoding_mode == "ALIBI":
                x = x + slopes[h] * (keys - q_pos)
            if logits_soft_cap:
                x = logits_soft_cap * np.tanh(x / logits_soft_cap)
            sink = -np.inf if sinks is None else float(sinks[h])
            if x.size == 0 and sink == -np.inf:
                continue
            m = max(x.max() if x.size else -np.inf, sink)
            w = np.exp(x - m)
            total = w.sum() + math.exp(sink - m)
            out[i, h] = (w @ v[keys, kvh]) / total if x.size else 0.0
            lse[i, h] = (m + math.log(total)) / divisor
    return out, lse
