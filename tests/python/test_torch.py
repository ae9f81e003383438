"""PyTorch specifics, when torch is importable: ignis against torch's own ops (rms_norm, layer_norm,
silu, gelu) on the host and, with a GPU and ignis's CUDA backend, on CUDA; parameters that require
grad; the path for PyTorch builds without DLPack's C exchange table (a subclass hiding it); and on
CUDA the stream rules: the default is torch's current stream (checked by capturing ignis calls in
a CUDA graph, which only records work launched on the capturing stream), an explicit stream= is
used as given, and a stream that differs from torch's current one is ordered after torch's pending
work (PyTorch's __dlpack__(stream=) synchronization)."""

import numpy as np
import pytest

import ignis
from refs import TOLERANCE

torch = pytest.importorskip("torch")
F = torch.nn.functional

DEVICES = ["cpu"]
if torch.cuda.is_available() and ignis.cuda_device_count() > 0:
    DEVICES.append("cuda")
cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and ignis's CUDA backend")
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class OldTorchTensor(torch.Tensor):
    """A tensor whose type hides the DLPack C exchange table, as PyTorch builds before it had one."""

    __dlpack_c_exchange_api__ = None


def close(actual, expected, dtype):
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=tol, atol=tol)


def reference_rmsnorm(x, weight, eps, gemma=False):
    x64 = x.double()
    w64 = weight.double() + (1.0 if gemma else 0.0)
    return (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)) * w64


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("device", DEVICES)
def test_against_torch_ops(device, dtype):
    torch.manual_seed(0)
    td = DTYPES[dtype]
    x = torch.randn(7, 3, 96, device=device, dtype=td)
    weight = torch.randn(96, device=device, dtype=td)
    close(ignis.rmsnorm(x, weight, 1e-5), F.rms_norm(x.double(), (96,), weight.double(), 1e-5), dtype)
    close(ignis.gemma_rmsnorm(x, weight, 1e-5), reference_rmsnorm(x, weight, 1e-5, gemma=True), dtype)
    gamma, beta = torch.randn(96, device=device), torch.randn(96, device=device)
    expected = F.layer_norm(x.double(), (96,), gamma.double(), beta.double(), 1e-5)
    close(ignis.layernorm(x, gamma, beta, 1e-5), expected, dtype)
    gate, up = x.double().chunk(2, dim=-1)
    close(ignis.silu_and_mul(x), F.silu(gate) * up, dtype)
    close(ignis.gelu_and_mul(x), F.gelu(gate) * up, dtype)
    close(ignis.gelu_tanh_and_mul(x), F.gelu(gate, approximate="tanh") * up, dtype)
    residual = torch.randn_like(x)
    total = x.double() + residual.double()
    expected = F.rms_norm(total, (96,), weight.double(), 1e-6)
    ignis.fused_add_rmsnorm(x, residual, weight)
    close(residual, total, dtype)
    close(x, expected, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_rope_against_torch(device):
    torch.manual_seed(1)
    q = torch.randn(6, 4, 64, device=device)
    k = torch.randn(6, 2, 64, device=device)
    pos = torch.tensor([0, 1, 2, 7, 8, 30], device=device)
    freqs = 1e4 ** (-torch.arange(0, 64, 2, dtype=torch.float64, device=device) / 64)
    angles = pos.double()[:, None] * freqs[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]

    def neox(t):
        a, b = t.double().chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    q_rope, k_rope = ignis.apply_rope_pos_ids(q, k, pos)
    close(q_rope, neox(q), "f32")
    close(k_rope, neox(k), "f32")
    cache = torch.cat([angles.cos(), angles.sin()], dim=-1).float()  # row i is position pos[i]
    rows = torch.arange(6, device=device)
    q_out, k_out = ignis.apply_rope_with_cos_sin_cache(rows, q.flatten(1), k.flatten(1), 64, cache)
    close(q_out.view(6, 4, 64), neox(q), "f32")
    close(k_out.view(6, 2, 64), neox(k), "f32")


@pytest.mark.parametrize("device", DEVICES)
def test_parameters_and_old_torch_path(device):
    x = torch.randn(4, 32, device=device)
    weight = torch.nn.Parameter(torch.randn(32, device=device))
    expected = F.rms_norm(x.double(), (32,), weight.detach().double(), 1e-6)
    close(ignis.rmsnorm(x, weight), expected, "f32")
    old_x, old_weight = x.as_subclass(OldTorchTensor), weight.detach().as_subclass(OldTorchTensor)
    old_weight.requires_grad_(True)
    out = torch.empty_like(x)
    ignis.rmsnorm(old_x, old_weight, out=out.as_subclass(OldTorchTensor))
    close(out, expected, "f32")


@pytest.mark.parametrize("device", DEVICES)
def test_strided_torch_views(device):
    qkv = torch.randn(5, 8, 32, device=device)
    q, k = qkv[:, :4], qkv[:, 4:6]
    pos = torch.arange(5, device=device, dtype=torch.int32)
    q_rope, k_rope = ignis.apply_rope_pos_ids(q, k, pos)
    expected_q, expected_k = ignis.apply_rope_pos_ids(q.contiguous(), k.contiguous(), pos)
    close(q_rope, expected_q, "f32")
    close(k_rope, expected_k, "f32")
    x = torch.randn(64, 6, device=device).t()  # [6, 64] with row stride 1: last dim not contiguous
    with pytest.raises(NotImplementedError):
        ignis.rmsnorm(x, torch.ones(64, device=device))


@cuda_only
def test_mixed_devices_rejected():
    with pytest.raises(ignis.InvalidArgumentError, match="is on"):
        ignis.rmsnorm(torch.randn(2, 8, device="cuda"), torch.ones(8))


@cuda_only
def test_default_stream_is_torch_current_stream_graph_capture():
    x = torch.randn(8, 128, device="cuda")
    weight = torch.randn(128, device="cuda")
    out = torch.empty_like(x)
    act = torch.empty(8, 64, device="cuda")
    q, k = torch.randn(8, 4, 64, device="cuda"), torch.randn(8, 2, 64, device="cuda")
    pos = torch.arange(8, device="cuda")
    q_rot, k_rot = torch.empty_like(q), torch.empty_like(k)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the default stream, as graph capture requires
        ignis.rmsnorm(x, weight, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ignis.rmsnorm(x, weight, out=out)
        ignis.silu_and_mul(out, out=act)
        q_rot.copy_(q)
        k_rot.copy_(k)
        ignis.apply_rope_pos_ids_inplace(q_rot, k_rot, pos)
    x.copy_(torch.randn_like(x))
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    expected = F.rms_norm(x.double(), (128,), weight.double(), 1e-6)
    close(out, expected, "f32")
    gate, up = expected.chunk(2, dim=-1)
    close(act, F.silu(gate) * up, "f32")
    q_expected, _ = ignis.apply_rope_pos_ids(q, k, pos)
    close(q_rot, q_expected, "f32")


@cuda_only
def test_explicit_streams():
    x = torch.randn(4, 64, device="cuda")
    weight = torch.randn(64, device="cuda")
    expected = F.rms_norm(x.double(), (64,), weight.double(), 1e-6)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for stream in (s, s.cuda_stream, 0):
        out = torch.zeros_like(x)
        s.wait_stream(torch.cuda.current_stream())
        ignis.rmsnorm(x, weight, out=out, stream=stream)
        torch.cuda.synchronize()
        close(out, expected, "f32")


@cuda_only
def test_explicit_stream_is_ordered_after_torch_work():
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        pytest.skip("torch.cuda._sleep not available")
    x = torch.zeros(4, 256, device="cuda")
    weight = torch.ones(256, device="cuda")
    out = torch.zeros_like(x)
    other = torch.cuda.Stream()
    torch.cuda.synchronize()
    sleep(200_000_000)  # keep torch's current stream busy, then fill x behind it
    x.fill_(3.0)
    ignis.rmsnorm(x, weight, out=out, stream=other)  # must wait for the fill
    torch.cuda.synchronize()
    close(out, torch.ones_like(out), "f32")


@cuda_only
def test_cuda_dlpack_path_without_exchange_table():
    x = torch.randn(4, 64, device="cuda")
    weight = torch.randn(64, device="cuda")
    expected = F.rms_norm(x.double(), (64,), weight.double(), 1e-6)
    out = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ignis.rmsnorm(x.as_subclass(OldTorchTensor), weight.as_subclass(OldTorchTensor),
                      out=out.as_subclass(OldTorchTensor))
    torch.cuda.synchronize()
    close(out, expected, "f32")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the fallback also launches on torch's current stream
        ignis.rmsnorm(x.as_subclass(OldTorchTensor), weight, out=out)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    close(out, F.rms_norm(x.double(), (64,), weight.double(), 1e-6), "f32")


def test_numpy_and_torch_mixed_on_host():
    x = torch.randn(3, 16)
    weight = np.ones(16, np.float32)
    close(ignis.rmsnorm(x, weight), F.rms_norm(x.double(), (16,), None, 1e-6), "f32")
