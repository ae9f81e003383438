"""What the op modules share: FlashInfer's argument strings as the C enum values, scale and dtype
parsing, K/V views, host index arrays and the allocations the attention wrappers make.

The enum values are the extension's constants (``_ext.IGNIS_*``, the C names): nothing here
restates a C value. Private to the package: the names carry no underscore because this module is
the private part.
"""

import math
import sys

from . import _ext
from ._errors import ArgumentTypeError, InvalidArgumentError, UnsupportedError

INT32_MAX = 2**31 - 1

_LAYOUTS = {"NHD": _ext.IGNIS_KV_LAYOUT_NHD, "HND": _ext.IGNIS_KV_LAYOUT_HND}
_BASES = {"2": _ext.IGNIS_LSE_BASE2, "ln": _ext.IGNIS_LSE_NATURAL}
_POS_ENCODINGS = {"NONE": _ext.IGNIS_POS_ENCODING_NONE, "ROPE_LLAMA": _ext.IGNIS_POS_ENCODING_ROPE_LLAMA,
                  "ALIBI": _ext.IGNIS_POS_ENCODING_ALIBI}
_F16, _BF16, _E4M3, _E5M2 = _ext.IGNIS_F16, _ext.IGNIS_BF16, _ext.IGNIS_FP8_E4M3, _ext.IGNIS_FP8_E5M2
_DTYPES = {
    "float16": _F16, "half": _F16, "f16": _F16,
    "bfloat16": _BF16, "bf16": _BF16,
    "float8_e4m3fn": _E4M3, "fp8_e4m3": _E4M3, "e4m3": _E4M3,
    "float8_e5m2": _E5M2, "fp8_e5m2": _E5M2, "e5m2": _E5M2,
}
Q_DTYPES = (_F16, _BF16)
_FP8_NUMPY = {"float8_e4m3fn": _E4M3, "float8_e5m2": _E5M2}  # ml_dtypes names; passed as uint8 views


# The lookups below run on every call: a try costs nothing on success, and the message is only
# formatted on failure.
def layout_code(kv_layout):
    """The ignis_kv_layout of "NHD" / "HND"."""
    try:
        return _LAYOUTS[kv_layout]
    except (KeyError, TypeError):
        raise InvalidArgumentError("kv_layout=%r must be 'NHD' or 'HND'" % (kv_layout,)) from None


def lse_base_code(lse_base):
    """The ignis_lse_base of "2" / "ln"."""
    try:
        return _BASES[lse_base]
    except (KeyError, TypeError):
        raise InvalidArgumentError("lse_base=%r must be '2' or 'ln'" % (lse_base,)) from None


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


def attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                      rope_theta):
    """FlashInfer's attention arguments as a dict of ignis_attention_options' fields by name (the
    extensions' options=); a None keeps the C default (sm_scale 1/sqrt(head_dim), no soft cap,
    rope_scale 1, rope_theta 1e4)."""
    return {"sm_scale": sm_scale, "logits_soft_cap": logits_soft_cap, "window_left": window_left,
            "lse_base": lse_base_code(lse_base), "pos_encoding_mode": pos_encoding_code(fn, pos_encoding_mode),
            "rope_scale": rope_scale, "rope_theta": rope_theta}


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


def paged_kv_views(fn, paged_kv_cache):
    """(k_cache, v_cache, kv_view) of a (k, v) tuple or list, or (cache, None, kv_view) for one
    combined tensor, as kv_views gives them to the extension."""
    if paged_kv_cache.__class__ is tuple or paged_kv_cache.__class__ is list:
        k_cache, v_cache = paged_kv_cache
        return kv_views(fn, k_cache, v_cache, "k_cache", "v_cache")
    return kv_views(fn, paged_kv_cache, None, "k_cache", "v_cache")


def new_f32(like, shape):
    """An uninitialized float32 array on like's device, in like's framework."""
    if hasattr(like, "new_empty"):  # PyTorch
        import torch  # already imported: like is a torch tensor

        return like.new_empty(shape, dtype=torch.float32)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(like, numpy.ndarray):
        return numpy.empty(shape, dtype=numpy.float32)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        with like.device:
            return cupy.empty(shape, dtype=cupy.float32)
    if hasattr(like, "__array_namespace__"):
        namespace = like.__array_namespace__()
        return namespace.empty(shape, dtype=namespace.float32, device=like.device)
    raise ArgumentTypeError("ignis cannot allocate an array like a %s: pass lse=" % type(like).__qualname__)


def on_cuda(x):
    return x.__dlpack_device__()[0] == _ext.DLPACK_CUDA


def is_cuda(x):
    flag = getattr(x, "is_cuda", None)  # PyTorch: an attribute read, cheaper than __dlpack_device__
    return flag if flag is not None else on_cuda(x)


def new_device_array(like, n, dtype_name):
    """An uninitialized 1-D array of n elements of dtype_name ("uint8", "int32") on like's CUDA
    device, in like's framework (PyTorch or CuPy)."""
    if hasattr(like, "new_empty"):
        import torch

        return like.new_empty((n,), dtype=getattr(torch, dtype_name))
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        with like.device:
            return cupy.empty((n,), dtype=getattr(cupy, dtype_name))
    raise ArgumentTypeError("ignis cannot allocate CUDA arrays like a %s (PyTorch and CuPy are supported)"
                            % type(like).__qualname__)


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
        buffer = new_device_array(q, nbytes, "uint8")
        _single_workspaces[key] = buffer
    return buffer


def host_i32(x, name):
    """x as a contiguous int32 NumPy array on the host (a CUDA tensor is copied: a sync)."""
    import numpy

    if hasattr(x, "detach"):  # PyTorch: .cpu() is a no-op on the host
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):  # CuPy
        x = x.get()
    array = numpy.ascontiguousarray(numpy.asarray(x), dtype=numpy.int32)
    if array.ndim != 1:
        raise InvalidArgumentError("%s must be 1-D, not %d-D" % (name, array.ndim))
    return array


def next_pow2(n, floor):
    """The least floor * 2**i >= n (a plan bound with room to grow)."""
    p = floor
    while p < n:
        p *= 2
    return p


# --- prefill engine compatibility (eng-pre17) ---
# Index arrays as engines pass them (int64 or int32, host or device) and the persistent CUDA-graph
# buffers FlashInfer's wrappers copy them into.
def host_index_i32(x, name):
    """x as a contiguous int32 NumPy array on the host, like host_i32, but refusing what int32
    cannot hold: non-integer dtypes and values outside the int32 range (int64 index arrays from
    engines are converted, not wrapped)."""
    import numpy

    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):
        x = x.get()
    array = numpy.asarray(x)
    if array.dtype.kind not in "iu" and array.size:
        raise InvalidArgumentError("%s must hold integers, not %s" % (name, array.dtype))
    if array.ndim != 1:
        raise InvalidArgumentError("%s must be 1-D, not %d-D" % (name, array.ndim))
    if array.dtype.itemsize > 4 or array.dtype == numpy.uint32:
        if array.size and (int(array.min()) < -INT32_MAX - 1 or int(array.max()) > INT32_MAX):
            raise InvalidArgumentError("%s holds values outside the int32 range" % name)
    return numpy.ascontiguousarray(array, dtype=numpy.int32)


def copy_index_into(fn, buffer, source, name, whole):
    """Copy the 1-D array `source` (int32 indices or uint8 mask bytes; a host array, or a tensor on
    buffer's device) into buffer[:len(source)] (all of buffer when `whole`), in buffer's framework
    (PyTorch, CuPy, NumPy); host to CUDA copies are asynchronous."""
    n = source.shape[0]
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


def nbytes_of(buffer):
    """Bytes of a workspace buffer of any element size (0 for None)."""
    if buffer is None:
        return 0
    nbytes = getattr(buffer, "nbytes", None)
    if nbytes is None:  # PyTorch
        nbytes = buffer.numel() * buffer.element_size()
    return int(nbytes)


# --- decode engine compatibility (eng-dec17) ---
# What the decode wrapper needs to take the engines' arguments as FlashInfer takes them: its
# run-time LSE base name, workspaces of any byte-sized dtype, integer index arrays of any width
# (checked into int32, never wrapped), and page-size-1 caches given without their page axis.


def lse_base_name(lse_base):
    """ignis' name of an LSE base: FlashInfer's "log2" is ignis' "2"; any other value unchanged
    (lse_base_code validates it)."""
    return "2" if lse_base == "log2" else lse_base


def byte_workspace(workspace):
    """A workspace buffer the extension takes: one of a byte-sized dtype other than uint8 (int8,
    bool, ...) as its uint8 view (same memory); any other buffer unchanged."""
    if hasattr(workspace, "element_size"):  # PyTorch
        import torch

        if workspace.element_size() == 1 and workspace.dtype != torch.uint8:
            return workspace.view(torch.uint8)
        return workspace
    dtype = getattr(workspace, "dtype", None)
    if getattr(dtype, "itemsize", 0) == 1 and getattr(dtype, "name", "uint8") != "uint8":
        return workspace.view("uint8")  # NumPy and CuPy take the dtype's name
    return workspace


def checked_host_i32(x, name):
    """x as a contiguous 1-D int32 NumPy array on the host (a CUDA tensor is copied: a sync). Any
    integer dtype is taken, each entry checked to fit int32 (InvalidArgumentError naming the first
    that does not); other dtypes raise DtypeError. An empty list is an empty array."""
    import numpy

    if hasattr(x, "detach"):  # PyTorch
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):  # CuPy
        x = x.get()
    array = numpy.asarray(x)
    if array.ndim != 1:
        raise InvalidArgumentError("%s must be 1-D, not %d-D" % (name, array.ndim))
    if array.dtype != numpy.int32:
        if array.size == 0:
            return numpy.zeros(0, numpy.int32)
        if array.dtype.kind not in "iu":
            from ._errors import DtypeError

            raise DtypeError("%s.dtype=%s but index arrays must hold integers" % (name, array.dtype))
        outside = (array > INT32_MAX) | (array < -INT32_MAX - 1)
        if outside.any():
            at = int(numpy.flatnonzero(outside)[0])
            raise InvalidArgumentError("%s[%d]=%d does not fit int32 (ignis' index arrays are int32)"
                                       % (name, at, int(array[at])))
        array = array.astype(numpy.int32)
    return numpy.ascontiguousarray(array)


def device_i32(x, name):
    """A CUDA index array (PyTorch or CuPy) as int32 on its device: an int32 one unchanged; another
    integer dtype converted there after checking that every entry fits int32 (reading the range
    back is a sync, like plan's host copy of its other CUDA index arrays); other dtypes raise
    DtypeError."""
    if hasattr(x, "new_empty"):  # PyTorch
        import torch

        if x.dtype is torch.int32:
            return x
        integer = not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype is torch.bool)
    else:  # CuPy: a NumPy dtype
        if x.dtype == "int32":
            return x
        integer = x.dtype.kind in "iu"
    if not integer:
        from ._errors import DtypeError

        raise DtypeError("%s.dtype=%s but index arrays must hold integers" % (name, x.dtype))
    if x.shape[0] and (int(x.max()) > INT32_MAX or int(x.min()) < -INT32_MAX - 1):
        raise InvalidArgumentError("%s holds a value that does not fit int32 (ignis' index arrays are int32)" % name)
    return x.to(torch.int32) if hasattr(x, "new_empty") else x.astype("int32")


def page_axis_views(paged_kv_cache, kv_layout):
    """A paged KV cache of page size 1 given without its page axis (FlashInfer takes (k, v) of
    [num_pages, num_kv_heads, head_dim] and a combined [num_pages, 2, num_kv_heads, head_dim], as
    SGLang passes its token pools) as views with that axis; anything else unchanged. kv_layout is
    the ignis_kv_layout code: NHD puts the axis before the heads, HND after them."""
    nhd = kv_layout == _ext.IGNIS_KV_LAYOUT_NHD
    if paged_kv_cache.__class__ is tuple or paged_kv_cache.__class__ is list:
        k_cache, v_cache = paged_kv_cache
        if getattr(k_cache, "ndim", 4) != 3:
            return paged_kv_cache
        return (k_cache[:, None], v_cache[:, None]) if nhd else (k_cache[:, :, None], v_cache[:, :, None])
    if getattr(paged_kv_cache, "ndim", 5) != 4:
        return paged_kv_cache
    return paged_kv_cache[:, :, None] if nhd else paged_kv_cache[:, :, :, None]


# --- switch and sampling compatibility (eng-sw17) ---
INT32_MIN = -(2**31)


def dtype_name(x):
    """The dtype of an array of any framework as NumPy names it ("int32", "int64", "bool", ...)."""
    return str(x.dtype).replace("torch.", "")


def _framework(x):
    return type(x).__module__.split(".")[0]


def index_i32(fn, name, x):
    """An index array as int32, which the C ops read: int32 (or anything else, which the C op then
    checks) as given, int64 converted on its device. Host values outside int32 raise; device values
    are not read (that would synchronize) and must fit int32, as FlashInfer's kernels read them."""
    if dtype_name(x) != "int64":
        return x
    if _framework(x) == "torch":
        import torch  # already imported: x is a torch tensor

        if not x.is_cuda and x.numel() and (int(x.min()) < INT32_MIN or int(x.max()) > INT32_MAX):
            raise InvalidArgumentError("%s: %s holds a value outside int32" % (fn, name))
        return x.to(torch.int32)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(x, numpy.ndarray) and x.size and (x.min() < INT32_MIN or x.max() > INT32_MAX):
        raise InvalidArgumentError("%s: %s holds a value outside int32" % (fn, name))
    if hasattr(x, "astype"):
        return x.astype("int32")
    namespace = x.__array_namespace__()
    return namespace.astype(x, namespace.int32)


def as_dtype(x, name):
    """x converted to the integer dtype `name` ("int32", "int64") on its device (x itself when it
    already has it)."""
    if dtype_name(x) == name:
        return x
    if _framework(x) == "torch":
        import torch

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
    if _framework(x) == "torch":
        import torch

        return x.view(torch.uint8)
    if hasattr(x, "view"):
        return x.view("uint8")
    namespace = x.__array_namespace__()
    return namespace.astype(x, namespace.uint8)
