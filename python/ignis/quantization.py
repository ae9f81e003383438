"""Bit packing of boolean masks, with FlashInfer's names and arguments (flashinfer.quantization).

``packbits(x, bitorder)`` packs the booleans of ``x`` (flattened; nonzero is True) into uint8,
eight to a byte, the last byte zero-padded, like ``numpy.packbits``: ``bitorder="big"`` (the
default, as FlashInfer) puts element 8n at the most significant bit of byte n, ``"little"`` at the
least significant. ``segment_packbits(x, indptr, bitorder)`` packs each segment
``x[indptr[i]:indptr[i+1]]`` on its own and returns ``(packed, indptr_new)`` with
``indptr_new[i+1] - indptr_new[i] = ceil(segment length / 8)``. Prefill custom masks use
``bitorder="little"`` (include/ignis/prefill.h). NumPy arrays are packed by NumPy, PyTorch tensors
(host or CUDA) by torch ops on their device; ``indptr`` is read on the host (a CUDA indptr is
copied: a sync, as FlashInfer's).
"""

import sys

from ._errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["packbits", "segment_packbits"]


def _check_order(bitorder):
    if bitorder not in ("big", "little"):
        raise InvalidArgumentError("bitorder=%r must be 'big' or 'little'" % (bitorder,))


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _pack_torch(x, bitorder):
    import torch

    bits = (x.reshape(-1) != 0).to(torch.uint8)
    bits = torch.nn.functional.pad(bits, (0, (-bits.numel()) % 8)).view(-1, 8)
    weights = [1 << i for i in range(8)]
    if bitorder == "big":
        weights.reverse()
    weights = torch.tensor(weights, dtype=torch.uint8, device=bits.device)
    return (bits * weights).sum(dim=1).to(torch.uint8)


def _pack_numpy(x, bitorder):
    import numpy

    return numpy.packbits(numpy.asarray(x).reshape(-1) != 0, bitorder=bitorder)


def _as_packable(x):
    if _is_torch(x):
        return x
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(x, numpy.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        import numpy

        return numpy.from_dlpack(x)
    raise ArgumentTypeError("packbits: x must be a PyTorch tensor or an array supporting DLPack, not %s"
                            % type(x).__qualname__)


def packbits(x, bitorder="big"):
    """Pack the booleans of ``x`` into a uint8 array of ``ceil(x.size / 8)`` bytes."""
    _check_order(bitorder)
    x = _as_packable(x)
    return _pack_torch(x, bitorder) if _is_torch(x) else _pack_numpy(x, bitorder)


def segment_packbits(x, indptr, bitorder="big"):
    """Pack each segment ``x[indptr[i]:indptr[i+1]]`` separately; returns ``(packed, indptr_new)``
    (``indptr_new`` in indptr's framework, on its device)."""
    _check_order(bitorder)
    import numpy

    x = _as_packable(x)
    bounds = numpy.asarray(indptr.detach().cpu() if _is_torch(indptr) else indptr).astype(numpy.int64)
    if bounds.ndim != 1 or bounds.size < 1 or (numpy.diff(bounds) < 0).any():
        raise InvalidArgumentError("segment_packbits: indptr must be a non-empty, non-decreasing 1-D array")
    flat = x.reshape(-1)
    lengths = (numpy.diff(bounds) + 7) // 8
    new_bounds = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int32)
    pack = _pack_torch if _is_torch(x) else _pack_numpy
    pieces = [pack(flat[int(bounds[i]):int(bounds[i + 1])], bitorder) for i in range(bounds.size - 1)]
    if _is_torch(x):
        import torch

        packed = torch.cat(pieces) if pieces else torch.empty((0,), dtype=torch.uint8, device=x.device)
        new_indptr = torch.from_numpy(new_bounds)
        if _is_torch(indptr):
            new_indptr = new_indptr.to(device=indptr.device, dtype=indptr.dtype)
        return packed, new_indptr
    packed = numpy.concatenate(pieces) if pieces else numpy.empty((0,), dtype=numpy.uint8)
    return packed, new_bounds
