"""What the op modules share, by topic, each fact in one place:

- FlashInfer's argument strings as the C enum values (KV layout, LSE base, position encoding,
  dtypes), and the attention options and dtypes a call or plan resolves them into;
- k / v / q scales given as numbers or one-element host tensors;
- arrays of any framework: dtype names, where they live, dtype changes on their device;
- index arrays as the int32 the C library reads: host copies, device conversions and copies into
  persistent (CUDA-graph) buffers; a value ignis reads that does not fit int32 raises, named;
- K/V as the extension takes them: fp8 NumPy views, paged caches given with or without their page
  axis;
- workspaces: byte views and sizes, the single-request ops' scratch, plan bounds.

The enum values are the extension's constants (``_ext.IGNIS_*``, the C names): nothing here
restates a C value. ``fn`` arguments are the public name an error message starts with. Private to
the package: the names carry no underscore because this module is the private part.
"""

import math
import sys

from . import _ext
from ._alloc import framework_of, new_array, new_output
from ._errors import ArgumentTypeError, DtypeError, InvalidArgumentError, UnsupportedError

# ---- FlashInfer's strings as C enum values; attention options and dtypes --------------------------
_LAYOUTS = {"NHD": _ext.IGNIS_KV_LAYOUT_NHD, "HND": _ext.IGNIS_KV_LAYOUT_HND}
_LSE_BASE_NAMES = {"2": "2", "log2": "2", "ln": "ln"}  # ignis' "2" is FlashInfer's run-time "log2"
_LSE_BASES = {"2": _ext.IGNIS_LSE_BASE2, "ln": _ext.IGNIS_LSE_NATURAL}
_POS_ENCODINGS = {"NONE": _ext.IGNIS_POS_ENCODING_NONE, "ROPE_LLAMA": _ext.IGNIS_POS_ENCODING_ROPE_LLAMA,
                  "ALIBI": _ext.IGNIS_POS_ENCODING_ALIBI}
_F16, _BF16, _E4M3, _E5M2 = _ext.IGNIS_F16, _ext.IGNIS_BF16, _ext.IGNIS_FP8_E4M3, _ext.IGNIS_FP8_E5M2
_DTYPES = {
    "float16": _F16, "half": _F16, "f16": _F16,
    "bfloat16": _BF16, "bf16": _BF16,
    "float8_e4m3fn": _E4M3, "fp8_e4m3": _E4M3, "e4m3": _E4M3,
    "float8_e5m2": _E5M2, "fp8_e5m2": _E5M2, "e5m2": _E5M2,
}
_Q_DTYPES = (_F16, _BF16)
_OUT_NAMES = {_F16: "float16", _BF16: "bfloat16"}  # an fp8 q's out, by its dtype


# The lookups below run on every call: a try costs nothing on success, and the message is only
# formatted on failure.
def layout_code(kv_layout):
    """The ignis_kv_layout of "NHD" / "HND"."""
    try:
        return _LAYOUTS[kv_layout]
    except (KeyError, TypeError):
        raise InvalidArgumentError("kv_layout=%r must be 'NHD' or 'HND'" % (kv_layout,)) from None


def lse_base_name(fn, lse_base):
    """ignis' name of an LSE base, "2" or "ln"; FlashInfer's "log2" is "2"."""
    try:
        return _LSE_BASE_NAMES[lse_base]
    except (KeyError, TypeError):
        raise InvalidArgumentError("%s: lse_base=%r must be 'log2' (also spelled '2') or 'ln'"
                                   % (fn, lse_base)) from None


def lse_base_code(fn, lse_base):
    """The ignis_lse_base of an LSE base, in any of lse_base_name's spellings."""
    return _LSE_BASES[lse_base_name(fn, lse_base)]


def pos_encoding_code(fn, mode):
    """The ignis_pos_encoding of FlashInfer's pos_encoding_mode string."""
    try:
        return _POS_ENCODINGS[mode]
    except (KeyError, TypeError):
        raise InvalidArgumentError("%s: pos_encoding_mode=%r must be 'NONE', 'ROPE_LLAMA' or 'ALIBI'"
                                   % (fn, mode)) from None


def dtype_code(fn, name, dtype):
    """The ignis dtype of a torch, NumPy or ml_dtypes dtype (or scalar type), or of a name."""
    if isinstance(dtype, str):
        text = dtype
    elif isinstance(dtype, type):
        text = dtype.__name__
    else:
        text = str(dtype)
    code = _DTYPES.get(text.replace("torch.", "").replace("numpy.", ""))
    if code is None:
        raise UnsupportedError("%s: %s=%s is not supported: float16, bfloat16, float8_e4m3fn or float8_e5m2"
                               % (fn, name, dtype))
    return code


def attention_dtypes(fn, q_data_type, kv_data_type, o_data_type):
    """The ignis dtypes of a plan's ``q_data_type`` and ``kv_data_type`` (None: q's) and the plan's
    o_dtype from ``o_data_type``: a 16-bit q writes out in its dtype (``o_data_type``
    None or q's; o_dtype IGNIS_DTYPE_OF_Q); an fp8 e4m3 q (FlashInfer's fp8 prefill / decode on an
    fp8 KV cache) needs fp8 K/V and ``o_data_type`` float16 or bfloat16. Returns
    ``(q_code, kv_code, o_dtype)``."""
    q_code = dtype_code(fn, "q_data_type", q_data_type)
    if q_code == _E4M3:
        kv_code = q_code if kv_data_type is None else dtype_code(fn, "kv_data_type", kv_data_type)
        if kv_code not in (_E4M3, _E5M2):
            raise UnsupportedError("%s: q_data_type=%s needs an fp8 kv_data_type, not %s"
                                   % (fn, q_data_type, kv_data_type))
        out_code = None if o_data_type is None else dtype_code(fn, "o_data_type", o_data_type)
        if out_code not in _Q_DTYPES:
            raise UnsupportedError("%s: o_data_type=%s but with an fp8 q_data_type it must be float16 or bfloat16"
                                   % (fn, o_data_type))
        return q_code, kv_code, out_code
    if q_code not in _Q_DTYPES:
        raise UnsupportedError("%s: q_data_type=%s is not supported: float16, bfloat16 or float8_e4m3fn (with an "
                               "fp8 KV cache)" % (fn, q_data_type))
    kv_code = q_code if kv_data_type is None else dtype_code(fn, "kv_data_type", kv_data_type)
    if o_data_type is not None and dtype_code(fn, "o_data_type", o_data_type) != q_code:
        raise UnsupportedError("%s: o_data_type=%s but with a 16-bit q the output has q's dtype (%s)"
                               % (fn, o_data_type, q_data_type))
    return q_code, kv_code, _ext.IGNIS_DTYPE_OF_Q


def attention_output(q, o_dtype, shape=None):
    """An uninitialized output of ``shape`` (q's) for a plan's ``o_dtype`` in q's framework and on
    its device, and the finish to apply to it (as _alloc.new_output): like q when o_dtype is
    IGNIS_DTYPE_OF_Q, else of that dtype (an fp8 q's out)."""
    if o_dtype == _ext.IGNIS_DTYPE_OF_Q:
        return new_output(q, shape=shape)
    return new_array(q, tuple(q.shape) if shape is None else shape, _OUT_NAMES[o_dtype]), None


def q_view(q):
    """q for the extension and its fp8 view (None unless q is a NumPy array of ml_dtypes' fp8)."""
    q, view = _fp8_numpy_view(q)
    return q, -1 if view is None else view


def attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                      rope_theta):
    """FlashInfer's attention arguments as a dict of ignis_attention_options' fields by name (the
    extensions' options=); a None keeps the C default (sm_scale 1/sqrt(head_dim), no soft cap,
    rope_scale 1, rope_theta 1e4)."""
    return {"sm_scale": sm_scale, "logits_soft_cap": logits_soft_cap, "window_left": window_left,
            "lse_base": lse_base_code(fn, lse_base), "pos_encoding_mode": pos_encoding_code(fn, pos_encoding_mode),
            "rope_scale": rope_scale, "rope_theta": rope_theta}


def fixed_split(fixed_split_size):
    """FlashInfer's ``fixed_split_size`` as the C plans': None or <= 0 (FlashInfer's -1, vLLM's
    default) is no fixed split, 0."""
    return 0 if fixed_split_size is None or fixed_split_size <= 0 else fixed_split_size


# ---- scales --------------------------------------------------------------------------------------
def _host_number(fn, name, value):
    """A scale given as a number or a one-element host tensor, as a float (never syncs a device)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    device = getattr(value, "__dlpack_device__", None)
    if device is not None and device()[0] == _ext.DLPACK_CUDA:
        raise UnsupportedError(
            "%s: %s is a CUDA tensor; reading it would synchronize with the device: pass a Python float "
            "(or a one-element host tensor)" % (fn, name))
    item = getattr(value, "item", None)
    if item is None:
        raise ArgumentTypeError("%s: %s must be a float or a one-element host tensor, not %s"
                                % (fn, name, type(value).__qualname__))
    try:
        return float(item())
    except (ValueError, RuntimeError, TypeError):
        raise InvalidArgumentError("%s: %s must hold exactly one value" % (fn, name)) from None


def _scale(fn, name, value):
    if value.__class__ is not float:
        value = _host_number(fn, name, value)
    if not 0.0 < value < math.inf:
        raise InvalidArgumentError("%s: %s=%r but it must be finite and > 0" % (fn, name, value))
    return value


def scales(fn, q_scale, k_scale, v_scale):
    """(k_scale * q_scale, v_scale) as floats, 1.0 for those not given: q_scale multiplies the
    logits, as k_scale does, so it folds into the key scale. Callers skip the call when all three
    are None (the extension's default scales are 1): a call per run costs more than the test."""
    if k_scale is None and q_scale is None:
        k_value = 1.0
    else:
        k_value = 1.0 if k_scale is None else _scale(fn, "k_scale", k_scale)
        if q_scale is not None:
            k_value *= _scale(fn, "q_scale", q_scale)
    return k_value, 1.0 if v_scale is None else _scale(fn, "v_scale", v_scale)


# ---- arrays of any framework ---------------------------------------------------------------------
def dtype_name(x):
    """The dtype of an array of any framework as NumPy names it ("int32", "int64", "bool", ...)."""
    return str(x.dtype).replace("torch.", "")


def on_cuda(x):
    """Whether an array (any DLPack producer) lives on a CUDA device."""
    return x.__dlpack_device__()[0] == _ext.DLPACK_CUDA


def is_cuda(x):
    """on_cuda, cheaper for PyTorch (an attribute read), and False for what is no array (a list)."""
    flag = getattr(x, "is_cuda", None)
    if flag is not None:
        return flag
    device = getattr(x, "__dlpack_device__", None)
    return device is not None and device()[0] == _ext.DLPACK_CUDA


def host_numpy(x):
    """x as a NumPy array on the host: a PyTorch or CuPy array is copied there (a sync on a
    device), anything else goes through numpy.asarray."""
    import numpy

    if hasattr(x, "detach"):  # PyTorch: .cpu() is a no-op on the host
        return x.detach().cpu().numpy()
    if hasattr(x, "get"):  # CuPy
        return x.get()
    return numpy.asarray(x)


def as_dtype(x, name):
    """x converted to the dtype `name` ("int32", "int64", ...) on its device (x itself when it
    already has it)."""
    if dtype_name(x) == name:
        return x
    if framework_of(x) == "torch":
        import torch  # already imported: x is a torch tensor

        return x.to(getattr(torch, name))
    if hasattr(x, "astype"):
        return x.astype(name)
    namespace = x.__array_namespace__()
    return namespace.astype(x, getattr(namespace, name))


def bool_as_u8(x):
    """A bool array as the uint8 view of its bytes (DLPack bools are one byte; zero-copy, on any
    device); other arrays, and None, as given."""
    if x is None or dtype_name(x) != "bool":
        return x
    if framework_of(x) == "torch":
        import torch

        return x.view(torch.uint8)
    if hasattr(x, "view"):
        return x.view("uint8")
    namespace = x.__array_namespace__()
    return namespace.astype(x, namespace.uint8)


def capturing(x):
    """Whether a PyTorch CUDA graph is being captured on the current stream of x's device (False
    for arrays of other frameworks and on the host): where ignis must not make a plan."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor) or not x.is_cuda:
        return False
    return torch.cuda.is_current_stream_capturing()


# ---- index arrays as int32 -----------------------------------------------------------------------
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_INTEGER_DTYPES = frozenset(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))


def _fits_int32(x):
    """Whether every value of an integer array fits int32 (reads its range: a sync on a device)."""
    return 0 in tuple(x.shape) or (int(x.min()) >= INT32_MIN and int(x.max()) <= INT32_MAX)


def _outside_int32(fn, name, x):
    """The InvalidArgumentError for an index array holding a value outside int32, naming the first
    such entry (read on the host)."""
    import numpy

    values = host_numpy(x).reshape(-1)
    at = int(numpy.flatnonzero((values > INT32_MAX) | (values < INT32_MIN))[0])
    return InvalidArgumentError("%s: %s[%d]=%d does not fit int32 (%s holds a value outside int32, the dtype of "
                                "ignis' index arrays)" % (fn, name, at, int(values[at]), name))


def host_i32(fn, name, x):
    """An index array (any integer dtype, any device, or a sequence of ints) as a contiguous 1-D
    int32 NumPy array on the host. A device array is copied (a sync, as FlashInfer's plans copy
    theirs); values are checked to fit int32, never wrapped (InvalidArgumentError naming the first
    that does not); other dtypes raise DtypeError, other shapes InvalidArgumentError. An empty
    sequence is an empty array, whatever its dtype."""
    import numpy

    array = host_numpy(x)
    if array.ndim != 1:
        raise InvalidArgumentError("%s: %s must be 1-D, not %d-D" % (fn, name, array.ndim))
    if array.dtype != numpy.int32:
        if array.size == 0:
            return numpy.zeros(0, numpy.int32)
        if array.dtype.kind not in "iu":
            raise DtypeError("%s: %s.dtype=%s but index arrays must hold integers" % (fn, name, array.dtype))
        if array.dtype.itemsize >= 4 and not _fits_int32(array):
            raise _outside_int32(fn, name, array)
        array = array.astype(numpy.int32)
    return numpy.ascontiguousarray(array)


def device_i32(fn, name, x):
    """A CUDA index array (PyTorch, CuPy) as int32 on its device: int32 as given; another integer
    dtype converted there once every value is checked to fit int32 (reading the range back is a
    sync, as the host copy of a CUDA index array is); other dtypes raise DtypeError."""
    dtype = dtype_name(x)
    if dtype == "int32":
        return x
    if dtype not in _INTEGER_DTYPES:
        raise DtypeError("%s: %s.dtype=%s but index arrays must hold integers" % (fn, name, dtype))
    if not _fits_int32(x):
        raise _outside_int32(fn, name, x)
    return as_dtype(x, "int32")


def i64_as_i32(fn, name, x):
    """An int64 index array as int32 on its device, for the C ops that read int32 where FlashInfer's
    take either. Host values (NumPy, PyTorch) are checked to fit int32; device values are not read
    (that would synchronize) and must fit, as FlashInfer's kernels read them as int32. Other dtypes
    as given: the C op checks them."""
    if dtype_name(x) != "int64":
        return x
    framework = framework_of(x)
    if (framework == "numpy" or (framework == "torch" and not x.is_cuda)) and not _fits_int32(x):
        raise _outside_int32(fn, name, x)
    return as_dtype(x, "int32")


def copy_index_into(fn, name, buffer, source, whole=False):
    """Copy the 1-D array `source` (int32 indices or uint8 mask bytes; a host array, or a tensor on
    buffer's device) into buffer[:len(source)] (all of buffer when `whole`), in buffer's framework
    (PyTorch, CuPy, NumPy): a persistent buffer a captured CUDA graph (or the CPU backend) reads.
    Host to CUDA copies are asynchronous."""
    n = len(source)
    size = buffer.shape[0]
    if n > size or (whole and n != size):
        raise InvalidArgumentError("%s: %s has %d entries but its buffer %s %d" % (
            fn, name, n, "has" if whole else "holds only", size))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buffer, torch.Tensor):
        if not isinstance(source, torch.Tensor):
            source = torch.from_numpy(source)
        buffer[:n].copy_(source, non_blocking=True)
        return
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(buffer, numpy.ndarray):
        buffer[:n] = source
        return
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(buffer, cupy.ndarray):
        if isinstance(source, cupy.ndarray):
            buffer[:n] = source
        else:
            buffer[:n].set(source)
        return
    raise ArgumentTypeError("%s: the %s buffer must be a PyTorch tensor, a CuPy or a NumPy array, not %s"
                            % (fn, name, type(buffer).__qualname__))


def to_device_of(like, x):
    """x (a host array, or a tensor) on the CUDA device of `like` (a PyTorch tensor or a CuPy
    array), in like's framework; a host to device copy is asynchronous."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        source = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
        return source.to(like.device, non_blocking=True)
    cupy = sys.modules["cupy"]
    with like.device:
        return cupy.asarray(x)


# ---- K/V as the extension takes them -------------------------------------------------------------
_FP8_NUMPY = {"float8_e4m3fn": _E4M3, "float8_e5m2": _E5M2}  # ml_dtypes names; passed as uint8 views


def _fp8_numpy_view(x):
    """(x, None), or for a NumPy array of ml_dtypes' fp8 types (which DLPack cannot carry) its uint8
    view and the ignis dtype to read it as (the extension's kv_view)."""
    numpy = sys.modules.get("numpy")
    if numpy is None or x.__class__ is not numpy.ndarray:
        return x, None
    code = _FP8_NUMPY.get(x.dtype.name)
    return (x, None) if code is None else (x.view(numpy.uint8), code)


def kv_views(fn, k, v, k_name, v_name):
    """K and V for the extension: fp8 NumPy arrays as uint8 views, with the dtype they stand for."""
    k, view = _fp8_numpy_view(k)
    if v is None:
        return k, v, view
    v, v_view = _fp8_numpy_view(v)
    if v_view != view:
        raise InvalidArgumentError("%s: %s.dtype=%s but %s.dtype=%s: they must be equal"
                                   % (fn, v_name, v.dtype, k_name, k.dtype))
    return k, v, view


def paged_kv_views(fn, paged_kv_cache, kv_layout):
    """(k_cache, v_cache, kv_view) of a paged cache for the extension, as kv_views gives them: of a
    (k, v) tuple or list, or (cache, None, kv_view) for one combined tensor. A cache of page size 1
    given without its page axis (FlashInfer's shorthand: (k, v) of ``[num_pages, num_kv_heads,
    head_dim]`` or one ``[num_pages, 2, num_kv_heads, head_dim]``, as SGLang passes its token pools)
    gets the axis back as a view: before the heads for NHD, after them for HND (kv_layout is the
    ignis_kv_layout code)."""
    nhd = kv_layout == _ext.IGNIS_KV_LAYOUT_NHD
    if paged_kv_cache.__class__ is tuple or paged_kv_cache.__class__ is list:
        k_cache, v_cache = paged_kv_cache
        if getattr(k_cache, "ndim", 4) == 3:
            k_cache, v_cache = (k_cache[:, None], v_cache[:, None]) if nhd else (k_cache[:, :, None],
                                                                                 v_cache[:, :, None])
        return kv_views(fn, k_cache, v_cache, "k_cache", "v_cache")
    if getattr(paged_kv_cache, "ndim", 5) == 4:
        paged_kv_cache = paged_kv_cache[:, :, None] if nhd else paged_kv_cache[:, :, :, None]
    return kv_views(fn, paged_kv_cache, None, "k_cache", "v_cache")


# ---- workspaces ----------------------------------------------------------------------------------
def byte_workspace(buffer):
    """A workspace buffer as the extension reads it: the uint8 view of its bytes (the same memory;
    DLPack has no int8 or bool there, and the C library counts bytes), so any contiguous dtype
    serves. None, uint8 buffers and those no such view can be taken of (non-contiguous ones, which
    the extension then refuses) as given."""
    if buffer is None or dtype_name(buffer) == "uint8":
        return buffer
    try:
        if framework_of(buffer) == "torch":
            import torch

            return buffer.view(torch.uint8)
        return buffer.view("uint8")  # NumPy and CuPy take the dtype's name
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return buffer


def nbytes_of(buffer):
    """Bytes of a workspace buffer of any element size (0 for None)."""
    if buffer is None:
        return 0
    nbytes = getattr(buffer, "nbytes", None)
    if nbytes is None:  # PyTorch before nbytes
        nbytes = buffer.numel() * buffer.element_size()
    return int(nbytes)


# Scratch for the single-request ops' split-KV partials on CUDA, per (framework type, device), grown
# on demand.
_single_workspaces = {}


def single_workspace(q, nbytes):
    """A CUDA byte buffer of at least nbytes on q's device (None for 0), kept for later calls."""
    if nbytes == 0:
        return None
    key = (type(q), q.__dlpack_device__()[1])
    buffer = _single_workspaces.get(key)
    if buffer is None or buffer.shape[0] < nbytes:
        buffer = new_array(q, (nbytes,), "uint8")
        _single_workspaces[key] = buffer
    return buffer


def next_pow2(n, floor):
    """The least floor * 2**i >= n (a plan bound with room to grow)."""
    p = floor
    while p < n:
        p *= 2
    return p
