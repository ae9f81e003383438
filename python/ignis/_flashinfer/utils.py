"""flashinfer.utils under the switch: the helpers FlashInfer's users call, answered from ignis' own
device facts (``ignis.device_info``), not from any FlashInfer build.

- ``get_device_sm_count(device)``, ``get_compute_capability(device)``: a CUDA device (a
  ``torch.device``, ``"cuda"`` / ``"cuda:N"``, or an index; no index means PyTorch's current device,
  or device 0 without PyTorch's CUDA); another device is an InvalidArgumentError (a ValueError, as in
  FlashInfer), and a build without the CUDA backend a BackendUnavailableError.
- ``get_trtllm_gen_multi_ctas_kv_counter_bytes``: the size of the semaphore buffer FlashInfer's
  TRT-LLM-gen decode takes; vLLM allocates one when it builds its FlashInfer metadata even on the
  wrapper path, so it answers (4 bytes per counter, one per (request, head) or per SM, whichever
  is more, rounded up to 8 counters) although ignis' kernels never read the buffer.
- ``FP4Tensor``: FlashInfer's holder of an NVFP4 tensor (uint8 data, float8_e4m3fn scales), which
  vLLM builds for NVFP4 outputs; ignis has no NVFP4 op that takes one.
"""

import functools
import sys

from ignis import InvalidArgumentError, device_info
from ignis._common import dtype_name


def _cuda_index(fn, device):
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    kind, _, index = str(device).partition(":")
    if kind != "cuda":
        raise InvalidArgumentError("flashinfer.utils.%s: device=%r must be a CUDA device" % (fn, device))
    if index:
        return int(index)
    torch = sys.modules.get("torch")
    return torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0


@functools.lru_cache(maxsize=None)
def _info(index):
    return device_info("cuda", index)


def get_device_sm_count(device):
    """The number of SMs of a CUDA device."""
    return _info(_cuda_index("get_device_sm_count", device))["multiprocessor_count"]


def get_compute_capability(device):
    """(major, minor) of a CUDA device."""
    return divmod(_info(_cuda_index("get_compute_capability", device))["compute_capability"], 10)


def get_trtllm_gen_multi_ctas_kv_counter_bytes(batch_size, num_qo_heads, sm_count):
    """Bytes of FlashInfer's TRT-LLM-gen multi-CTA KV counter buffer."""
    counters = max(batch_size * num_qo_heads, sm_count)
    return (counters + 7) // 8 * 8 * 4


class FP4Tensor:
    """An NVFP4 tensor as FlashInfer passes one: ``data`` (uint8, two values a byte), ``scale``
    (float8_e4m3fn scale factors, rows a multiple of 128), ``scale_start_index`` (the first scale
    row of this tensor), ``original_shape`` (the shape before packing)."""

    def __init__(self, data, scale, scale_start_index=0, original_shape=None):
        if dtype_name(data) != "uint8":
            raise InvalidArgumentError("FP4Tensor: data.dtype=%s but it must be uint8" % data.dtype)
        if dtype_name(scale) != "float8_e4m3fn":
            raise InvalidArgumentError("FP4Tensor: scale.dtype=%s but it must be float8_e4m3fn" % scale.dtype)
        if scale.shape[0] % 128:
            raise InvalidArgumentError("FP4Tensor: scale.shape[0]=%d must be a multiple of 128" % scale.shape[0])
        if scale_start_index < 0 or scale_start_index + data.shape[0] > scale.shape[0]:
            raise InvalidArgumentError("FP4Tensor: scale_start_index=%d with %d data rows exceeds the %d scale rows"
                                       % (scale_start_index, data.shape[0], scale.shape[0]))
        self.data = data
        self.scale = scale
        self.scale_start_index = scale_start_index
        self.original_shape = tuple(data.shape) if original_shape is None else tuple(original_shape)
