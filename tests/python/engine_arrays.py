"""Arrays where vLLM 0.33 and SGLang 0.5.23 keep them, for the engine-call tests
(test_decode_engines.py, test_prefill_engines.py, test_sampling_engines.py).

A host names the framework and device of a test's arrays:

- "numpy" (NumPy arrays) and "torch" (PyTorch CPU tensors): ignis' CPU backend;
- "cuda": the engines' own split, on ignis' CUDA backend. What an engine keeps on the GPU (q, the
  KV cache, out, lse, sinks, the workspace, the persistent CUDA-graph index buffers, device index
  arrays such as page indices) is a CUDA tensor; the host metadata it hands FlashInfer's plans
  (vLLM's indptr / last_page_len / seq_lens, SGLang's global_override_indptr_cpu) is a CPU
  tensor, pinned where the engine pins it.

HOSTS lists the hosts present: "cuda" only where PyTorch sees a GPU and ignis has its CUDA backend
(the condition of refs.FRAMES), so a CPU-only machine never generates its cases; CPU_HOSTS leaves
it out, for tests of what only the CPU backend promises. ``on_device`` makes an array of the GPU
side, ``on_host`` one of the host side (both copy), ``as_f64`` / ``as_numpy`` bring either back to
NumPy for the float64 references, ``write`` fills the front of a persistent buffer as the engines
fill theirs, and ``capture`` records a call in a CUDA graph as the engines' graph runners do.
``workspace`` is an engine's float workspace: a 16-byte host buffer on the CPU backend (which plans
on the host and needs none), and on CUDA the engine's real device buffer of its default size (from
its sources), made once per process and shared by every wrapper and test, as an engine shares its
one buffer across its wrappers.
"""

import numpy as np
import pytest

import ignis
from refs import torch

HAVE_CUDA = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
HOSTS = ["numpy"] + (["torch"] if torch is not None else []) + (["cuda"] if HAVE_CUDA else [])
CPU_HOSTS = [host for host in HOSTS if host != "cuda"]
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="needs PyTorch on a GPU and ignis' CUDA backend")

_NUMPY = {"f16": np.float16, "f32": np.float32, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "bool": np.bool_}


def on_device(values, host, dtype="f16"):
    """A copy of `values` as `dtype` where the engine keeps it on the GPU: NumPy, a CPU tensor, or
    a CUDA tensor for "cuda"."""
    array = np.array(values, dtype=_NUMPY[dtype])
    if host == "numpy":
        return array
    tensor = torch.from_numpy(array)
    return tensor.cuda() if host == "cuda" else tensor


def on_host(values, host, dtype="i32", pinned=False):
    """A copy of `values` as `dtype` on the host: NumPy, or a CPU tensor (page-locked for "cuda"
    when `pinned`, as vLLM stages its plan metadata)."""
    array = np.array(values, dtype=_NUMPY[dtype])
    if host == "numpy":
        return array
    tensor = torch.from_numpy(array)
    return tensor.pin_memory() if pinned and host == "cuda" else tensor


def model_dtype(host):
    """The engines' dtype argument for float16 (q_data_type=, kv_data_type=, data_type=): a
    torch.dtype, as they pass it; NumPy's for "numpy"."""
    return np.float16 if host == "numpy" else torch.float16


def as_numpy(x):
    """A NumPy copy (or view) of x in its own dtype, from any device."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def as_f64(x):
    """x as float64 NumPy values, from any device (half precision included)."""
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, np.float64)


def write(buffer, values):
    """Copy `values` into the front of a persistent buffer, on the buffer's device."""
    values = np.ascontiguousarray(values)
    n = values.shape[0]
    if torch is not None and isinstance(buffer, torch.Tensor):
        buffer[:n].copy_(torch.from_numpy(values))
    else:
        buffer[:n] = values


# The engines' float workspace sizes: vllm/envs.py VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (allocated
# with torch.zeros), sglang/srt/environ.py SGLANG_FLASHINFER_WORKSPACE_SIZE (torch.empty).
ENGINE_WORKSPACE_BYTES = {"vllm": 394 << 20, "sglang": 384 << 20}
_cuda_workspaces = {}


def workspace(host, engine):
    """`engine`'s ("vllm" or "sglang") uint8 float workspace for wrappers on `host`."""
    if host == "numpy":
        return np.zeros(16, np.uint8)
    if host == "torch":
        return torch.zeros(16, dtype=torch.uint8)
    buffer = _cuda_workspaces.get(engine)
    if buffer is None:
        make = torch.zeros if engine == "vllm" else torch.empty
        buffer = _cuda_workspaces[engine] = make(ENGINE_WORKSPACE_BYTES[engine], dtype=torch.uint8, device="cuda")
    return buffer


def capture(run):
    """A torch.cuda.CUDAGraph of run(), warmed up on a side stream first as PyTorch requires (and as
    the engines warm up before capturing); returns the graph and what the captured call returned
    (outputs it allocated live in the graph's memory, rewritten by each replay)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = run()
    return graph, result
