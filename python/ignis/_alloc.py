"""Outputs in the caller's framework.

When an op is called without ``out=``, its output is allocated by the framework of the input it
mirrors, on the input's device and with its dtype:

    PyTorch            input.new_empty(shape)
    NumPy              numpy.empty(shape, dtype=input.dtype)
    CuPy               cupy.empty(shape, dtype=input.dtype) on the input's device
    JAX (host)         a NumPy buffer, returned as a JAX array (jax.device_put onto the input's
                       device); JAX arrays are immutable, so ignis never writes into one. Only
                       for dtypes NumPy exports through DLPack (f32, f16, ints): for bf16 and
                       fp8, UnsupportedError asks for ``out=``
    JAX (CUDA)         not allocated (UnsupportedError): pass ``out=`` a writable CUDA array
                       (PyTorch, CuPy)
    other array-API    x.__array_namespace__().empty(shape, dtype=x.dtype, device=x.device)

Frameworks are found through ``sys.modules`` (never imported here), and the choice is cached per
input type, so the per-call cost is one dict lookup plus the framework's own allocation.

``new_array`` allocates an array of a named dtype instead (LSEs, samples, index arrays, scratch):
in like's framework (PyTorch, NumPy, CuPy, else like's array-API namespace), on its device.
"""

import sys

from ._errors import ArgumentTypeError, UnsupportedError

_allocators = {}


def _same(buffer):
    return buffer


def _module_of(obj, module, attr):
    mod = sys.modules.get(module)
    return mod is not None and isinstance(obj, getattr(mod, attr))


def _numpy(like, shape):
    return sys.modules["numpy"].empty(shape, dtype=like.dtype), _same


def _torch(like, shape):
    return like.new_empty(shape), _same


def _cupy(like, shape):
    with like.device:
        return sys.modules["cupy"].empty(shape, dtype=like.dtype), _same


def _jax(like, shape):
    jax = sys.modules["jax"]
    device = like.device
    numpy = sys.modules["numpy"]  # JAX imports it
    dtype = numpy.dtype(like.dtype)
    if device.platform != "cpu" or dtype.kind not in "fiu":
        raise UnsupportedError(
            "ignis does not allocate outputs for JAX arrays of %s on %s (JAX arrays are immutable, "
            "and NumPy buffers can carry only the standard dtypes through DLPack): pass out= a "
            "writable array (e.g. PyTorch, CuPy)" % (dtype.name, device.platform)
        )
    buffer = numpy.empty(shape, dtype=dtype)
    return buffer, lambda filled: jax.device_put(filled, device)


def _array_api(like, shape):
    namespace = like.__array_namespace__()
    return namespace.empty(shape, dtype=like.dtype, device=like.device), _same


def _pick(like):
    if _module_of(like, "numpy", "ndarray"):
        return _numpy
    if _module_of(like, "torch", "Tensor"):
        return _torch
    if _module_of(like, "cupy", "ndarray"):
        return _cupy
    if _module_of(like, "jax", "Array"):
        return _jax
    if hasattr(like, "__array_namespace__"):
        return _array_api
    return None


def new_output(like, halve_last=False, shape=None):
    """An uninitialized array shaped like ``like`` (with the last dimension halved when
    ``halve_last``; of ``shape`` when given), with its dtype, on its device, in its framework.
    Returns ``(buffer, finish)``: write into buffer, then hand ``finish(buffer)`` to the caller."""
    kind = type(like)
    allocate = _allocators.get(kind)
    if allocate is None:
        allocate = _pick(like)
        if allocate is None:
            raise ArgumentTypeError(
                "ignis cannot allocate an output like a %s.%s: pass out= (an array supporting DLPack)"
                % (kind.__module__, kind.__qualname__)
            )
        _allocators[kind] = allocate
    if shape is None:
        shape = like.shape
        if halve_last:
            shape = tuple(shape[:-1]) + (shape[-1] // 2,) if len(shape) else shape
    return allocate(like, shape)


def new_typed_output(like, shape, dtype):
    """An uninitialized array of ``shape`` and ``dtype`` (NumPy's name) on like's device in its
    framework; a JAX input gets a NumPy buffer (JAX arrays are immutable) handed back as a JAX array
    on like's device. Returns ``(buffer, finish)`` as new_output."""
    if _module_of(like, "jax", "Array"):
        jax, numpy = sys.modules["jax"], sys.modules["numpy"]
        device = like.device
        return numpy.empty(shape, dtype=dtype), lambda filled: jax.device_put(filled, device)
    return new_array(like, shape, dtype), _same


def new_index_output(like, shape):
    """new_typed_output for an op's int32 index output."""
    return new_typed_output(like, shape, "int32")


def framework_of(x):
    """The top-level module of x's type: "torch", "numpy", "cupy", ... (no framework is imported to
    ask)."""
    return type(x).__module__.split(".")[0]


def new_array(like, shape, dtype, fill=None):
    """An array of ``shape`` and ``dtype`` (NumPy's name: "float32", "int32", "int64", "uint8")
    on like's device, in like's framework: uninitialized, or every element ``fill``."""
    framework = framework_of(like)
    if framework == "torch":
        torch = sys.modules["torch"]
        if fill is None:
            return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
        return torch.full(shape, fill, dtype=getattr(torch, dtype), device=like.device)
    if framework == "numpy":
        numpy = sys.modules["numpy"]
        return numpy.empty(shape, dtype=dtype) if fill is None else numpy.full(shape, fill, dtype=dtype)
    if framework == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=dtype) if fill is None else cupy.full(shape, fill, dtype=dtype)
    if hasattr(like, "__array_namespace__"):
        xp = like.__array_namespace__()
        if fill is None:
            return xp.empty(shape, dtype=getattr(xp, dtype), device=like.device)
        return xp.full(shape, fill, dtype=getattr(xp, dtype), device=like.device)
    raise ArgumentTypeError("ignis cannot allocate an array like a %s.%s (PyTorch, NumPy, CuPy or an array-API "
                            "array): pass the output" % (type(like).__module__, type(like).__qualname__))
