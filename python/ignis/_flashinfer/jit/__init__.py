"""flashinfer.jit under the switch: ignis compiles nothing at run time; this package holds only
``jit.core.check_cuda_arch``, the gate vLLM's FlashInfer sampler calls."""

from . import core
