"""Tensor-parallel all-reduce from Python (ignis.comm, FlashInfer's flashinfer.comm names) on the
CPU backend, against float64 references.

Worlds of 1, 2 and 4 ranks run as Python threads of this process sharing one exchange (a
threading.Barrier and a list), which also shows that the waiting calls release the GIL; one test
runs 2 processes spawned by torch.multiprocessing that exchange through a torch.distributed gloo
group (group=) and through a FlashInfer-style comm_backend. Every supported pattern (kAllReduce,
kARResidualRMSNorm, kARResidualRMSNormFP8Quant, kARResidualRMSNormOutFP8Quant) in f32, f16 and
bf16 (NumPy arrays, bf16 through a DLPack producer, and PyTorch CPU tensors where PyTorch is
installed), one-shot, two-shot and ignis's choice, in place and out of place; the calls vLLM and
SGLang make, with their aliases; the plain all_reduce; and the errors: arguments ignis refuses by
name, bad tensors (outputs untouched), a message over the capacity, shapes that differ across
ranks, a peer that never arrives (PeerTimeoutError), a failing exchange. Skipped, with the reason,
when the loaded libignis has no communicator."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ignis
from ignis import comm
from refs import DL_BFLOAT, DL_FLOAT8_E4M3FN, Producer, assert_close, ml_dtypes, torch

P = comm.AllReduceFusionPattern
E4M3_MAX = 448.0
WORLDS = [1, 2, 4]
FRAMES = ["numpy"] + (["torch"] if torch is not None else [])
DTYPES = ["f32", "f16"] + (["bf16"] if ml_dtypes is not None or torch is not None else [])
NEEDS_FP8 = pytest.mark.skipif(ml_dtypes is None and torch is None, reason="needs ml_dtypes or torch for fp8")


# ---- arrays of either framework, and their values as float64 -------------------------------------
class Arrays:
    """Makes the arrays of one framework and dtype on the host: NumPy (bf16 and fp8 exported through
    a DLPack Producer over their bits) or PyTorch CPU tensors."""

    def __init__(self, frame, dtype):
        self.frame, self.dtype = frame, dtype

    def array(self, values):
        values = np.asarray(values, dtype=np.float64)
        if self.frame == "torch":
            kind = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.dtype]
            return torch.from_numpy(values.astype(np.float32)).to(kind)
        if self.dtype == "bf16":
            if ml_dtypes is None:
                pytest.skip("NumPy bf16 needs ml_dtypes")
            bits = values.astype(np.float32).astype(ml_dtypes.bfloat16)
            return Producer(bits.view(np.uint16), dtype=(DL_BFLOAT, 16))
        return np.ascontiguousarray(values.astype({"f32": np.float32, "f16": np.float16}[self.dtype]))

    def empty(self, shape):
        return self.array(np.full(shape, 7.0))

    def fp8(self, shape):
        if self.frame == "torch":
            return torch.full(shape, 3.0).to(torch.float8_e4m3fn)
        if ml_dtypes is None:
            pytest.skip("NumPy fp8 needs ml_dtypes")
        bits = np.full(shape, 3.0, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
        return Producer(bits.view(np.uint8), dtype=(DL_FLOAT8_E4M3FN, 8))

    def scale(self, value):
        if self.frame == "torch":
            return torch.tensor([value], dtype=torch.float32)
        return np.array([value], dtype=np.float32)


def values(x):
    """The values an array of Arrays holds, as float64 (fp8 and bf16 producers decoded)."""
    if isinstance(x, Producer):
        bits = x.array
        kind = ml_dtypes.bfloat16 if bits.dtype == np.uint16 else ml_dtypes.float8_e4m3fn
        return bits.view(kind).astype(np.float64)
    if torch is not None and isinstance(x, torch.Tensor):
        return x.float().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def raw(x):
    """The bytes of an array of Arrays (to compare ranks bit for bit)."""
    if isinstance(x, Producer):
        return x.array.tobytes()
    if torch is not None and isinstance(x, torch.Tensor):
        return x.view(torch.uint8).numpy().tobytes() if x.element_size() == 1 else x.contiguous().view(
            torch.int16 if x.element_size() == 2 else torch.int32).numpy().tobytes()
    return np.ascontiguousarray(x).tobytes()


# ---- ranks as threads ------------------------------------------------------------------------
class ThreadExchange:
    """The all-gather of `world` threads: each rank's exchange(bytes) posts its bytes, waits for all
    of them, and returns them concatenated in rank order."""

    def __init__(self, world):
        self.barrier = threading.Barrier(world, timeout=60)
        self.slots = [None] * world

    def for_rank(self, rank):
        def exchange(data):
            self.slots[rank] = bytes(data)
            self.barrier.wait()
            gathered = b"".join(self.slots)
            self.barrier.wait()
            return gathered

        return exchange


def run_ranks(world, body):
    """body(rank, exchange) in `world` threads at once; their results in rank order. The exceptions
    come back as results, so a test can check that every rank failed."""
    exchange = ThreadExchange(world)
    results = [None] * world

    def run(rank):
        try:
            results[rank] = body(rank, exchange.for_rank(rank))
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            results[rank] = e

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a rank hangs"
    return results


def unwrap(results):
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def workspace(rank, world, exchange, tokens=8, hidden=136, dtype="float32", **kwargs):
    return comm.create_allreduce_fusion_workspace(backend="trtllm", world_size=world, rank=rank,
                                                  max_token_num=tokens, hidden_dim=hidden, dtype=dtype,
                                                  device="cpu", exchange=exchange, **kwargs)


# ---- references ------------------------------------------------------------------------------
def fused_ref(total, residual, gamma, eps, weight_bias):
    s = total + residual
    n = s / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + eps) * (gamma + weight_bias)
    return s, n


def fp8_ref(n, scale):
    t = np.clip(n.astype(np.float32) * (np.float32(1.0) / np.float32(scale)), -E4M3_MAX, E4M3_MAX)
    return t


def assert_fp8_close(q, n, scale):
    """Within one e4m3 step of fp8(n / scale), n computed in float64 (ignis's is f32)."""
    expected = fp8_ref(n, scale)
    step = np.maximum(np.abs(expected) * 2.0 ** -3, 2.0 ** -9)
    assert np.all(np.abs(q - expected) <= step), float(np.max(np.abs(q - expected) / step))


rng = np.random.default_rng(23)


def rank_data(world, shape):
    return [rng.standard_normal(shape) for _ in range(world)]


# ---- the patterns ----------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", [P.kAllReduce, P.kARResidualRMSNorm, P.kARResidualRMSNormFP8Quant,
                                     P.kARResidualRMSNormOutFP8Quant],
                         ids=["allreduce", "rmsnorm", "rmsnorm_fp8", "rmsnorm_out_fp8"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("frame", FRAMES)
@pytest.mark.parametrize("world", WORLDS)
def test_pattern(world, frame, dtype, pattern):
    if pattern in (P.kARResidualRMSNormFP8Quant, P.kARResidualRMSNormOutFP8Quant) and ml_dtypes is None \
            and frame == "numpy":
        pytest.skip("NumPy fp8 needs ml_dtypes")
    arrays = Arrays(frame, dtype)
    shape, eps, weight_bias, scale = (5, 136), 1e-5, 0.5, 0.25
    xs = [values(arrays.array(x)) for x in rank_data(world, shape)]
    residuals = [values(arrays.array(rank_data(1, shape)[0]))] * world  # the same on every rank
    gamma = values(arrays.array(rng.standard_normal(shape[-1])))
    total = np.sum(xs, axis=0)

    def body(rank, exchange):
        ws = workspace(rank, world, exchange, dtype={"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype])
        outs = []
        for use_oneshot in (None, True, False):
            x = arrays.array(xs[rank])
            kw = dict(use_oneshot=use_oneshot, fp32_acc=use_oneshot is None, launch_with_pdl=True,
                      trigger_completion_at_end=use_oneshot is not False)
            if pattern == P.kAllReduce:
                out = arrays.empty(shape)
                got = comm.allreduce_fusion(x, ws, pattern, output=out, **kw)
                assert got is out
                inplace = comm.allreduce_fusion(x, ws, pattern, output=x, **kw)
                assert inplace is x
                outs.append({"output": out, "in_place": x})
                continue
            residual_out, norm_out = arrays.empty(shape), arrays.empty(shape)
            quant_out = arrays.fp8(shape) if pattern != P.kARResidualRMSNorm else None
            got = comm.allreduce_fusion(
                x, ws, pattern, residual_in=arrays.array(residuals[rank]), rms_gamma=arrays.array(gamma),
                rms_eps=eps, weight_bias=weight_bias, residual_out=residual_out,
                norm_out=norm_out if pattern != P.kARResidualRMSNormFP8Quant else None, quant_out=quant_out,
                scale_factor=None if quant_out is None else arrays.scale(scale) if rank % 2 or isinstance(
                    x, Producer) else scale, **kw)
            assert got is (quant_out if pattern == P.kARResidualRMSNormFP8Quant else norm_out)
            outs.append({"residual_out": residual_out, "norm_out": norm_out, "quant_out": quant_out})
        ws.destroy()
        return outs

    results = unwrap(run_ranks(world, body))
    for rank, outs in enumerate(results):
        for algo_outs in outs:
            if pattern == P.kAllReduce:
                assert_close(values(algo_outs["output"]), total, dtype, scale=world)
                assert raw(algo_outs["in_place"]) == raw(algo_outs["output"])
            else:
                s, n = fused_ref(total, residuals[rank], gamma, eps, weight_bias)
                assert_close(values(algo_outs["residual_out"]), s, dtype, scale=world)
                if pattern == P.kARResidualRMSNormFP8Quant:
                    assert np.all(values(algo_outs["norm_out"]) == 7.0)  # not passed, not written
                else:
                    assert_close(values(algo_outs["norm_out"]), n, dtype, scale=world)
                if algo_outs["quant_out"] is not None:
                    assert_fp8_close(values(algo_outs["quant_out"]), n, scale)
    if pattern == P.kAllReduce:
        # The sum is formed in rank order in f32 whatever the algorithm: every rank, every algorithm,
        # the same bits.
        first = raw(results[0][0]["output"])
        assert all(raw(outs["output"]) == first for r in results for outs in r)


@pytest.mark.parametrize("world", WORLDS)
def test_all_reduce_plain(world):
    shape = (3, 4, 50)
    xs = [x.astype(np.float32) for x in rank_data(world, shape)]

    def body(rank, exchange):
        with workspace(rank, world, exchange, tokens=12, hidden=50) as ws:
            outs = []
            for algo in ("auto", "oneshot", "twoshot"):
                out = np.zeros(shape, np.float32)
                assert comm.all_reduce(xs[rank], ws, algo=algo, out=out) is out
                outs.append(out)
            x = xs[rank].copy()
            assert comm.all_reduce(x, ws) is x
            outs.append(x)
            choice = ws.choose(x.nbytes)
        assert ws._destroyed
        return outs, choice

    results = unwrap(run_ranks(world, body))
    total = np.sum([x.astype(np.float64) for x in xs], axis=0)
    for outs, choice in results:
        assert choice in ("oneshot", "twoshot")
        for out in outs:
            assert_close(out, total, "f32", scale=world)
            assert out.tobytes() == results[0][0][0].tobytes()


# ---- the engines' calls ----------------------------------------------------------------------
@pytest.mark.parametrize("frame", FRAMES)
def test_vllm_calls(frame):
    """vLLM's custom op: norm_out None -> norm_out=input, residual_out=residual (in place);
    norm_out given -> residual_out=input (the sum written over the input); the FP8 pattern with a
    norm_out runs as kARResidualRMSNormOutFP8Quant; the standalone all-reduce returns output."""
    world, shape, eps = 2, (4, 64), 1e-6
    arrays = Arrays(frame, "f32")
    xs, residuals = rank_data(world, shape), rank_data(1, shape) * world
    gamma = rng.standard_normal(shape[-1])
    total = np.sum(xs, axis=0)

    def body(rank, exchange):
        ws = workspace(rank, world, exchange, tokens=4, hidden=64)
        assert ws.backend == "ignis" and ws.is_buffer_size_sufficient(world, 4, 64, "float32")
        x, residual = arrays.array(xs[rank]), arrays.array(residuals[rank])
        comm.allreduce_fusion(input=x, workspace=ws, pattern=P.kARResidualRMSNorm, launch_with_pdl=True, output=None,
                              residual_out=residual, norm_out=x, quant_out=None, scale_out=None,
                              residual_in=residual, rms_gamma=arrays.array(gamma), rms_eps=eps, scale_factor=None,
                              layout_code=None, use_oneshot=True, fp32_acc=True, weight_bias=0.0,
                              trigger_completion_at_end=True)
        first = (values(x), values(residual))
        x, zeros, rms = arrays.array(xs[rank]), arrays.array(np.zeros(shape)), arrays.empty(shape)
        quant = arrays.fp8(shape) if (frame == "torch" or ml_dtypes is not None) else None
        comm.allreduce_fusion(input=x, workspace=ws, pattern=P.kARResidualRMSNormFP8Quant if quant is not None
                              else P.kARResidualRMSNorm, launch_with_pdl=True, output=None, residual_out=x,
                              norm_out=rms, quant_out=quant, scale_out=None, residual_in=zeros,
                              rms_gamma=arrays.array(gamma), rms_eps=eps,
                              scale_factor=arrays.scale(0.5) if quant is not None else None, layout_code=None,
                              use_oneshot=False, fp32_acc=True, weight_bias=0.0, trigger_completion_at_end=False)
        second = (values(x), values(rms), None if quant is None else values(quant))
        plain = comm.allreduce_fusion(input=arrays.array(xs[rank]), workspace=ws, pattern=P.kAllReduce,
                                      launch_with_pdl=True, trigger_completion_at_end=False)
        ws.destroy()
        return first, second, values(plain)

    for rank, (first, second, plain) in enumerate(unwrap(run_ranks(world, body))):
        s, n = fused_ref(total, residuals[rank], gamma, eps, 0.0)
        assert_close(first[0], n, "f32")
        assert_close(first[1], s, "f32")
        s0, n0 = fused_ref(total, 0.0, gamma, eps, 0.0)
        assert_close(second[0], s0, "f32")
        assert_close(second[1], n0, "f32")
        if second[2] is not None:
            assert_fp8_close(second[2], n0, 0.5)
        assert_close(plain, total, "f32")


def test_sglang_call():
    """SGLang's flashinfer_allreduce_residual_rmsnorm: fresh residual_out and norm_out, use_oneshot
    None, trigger_completion_at_end False; its workspace manager's is_buffer_size_sufficient."""
    world, shape = 2, (3, 96)
    xs, residuals, gamma = rank_data(world, shape), rank_data(1, shape) * world, rng.standard_normal(96)

    def body(rank, exchange):
        ws = comm.create_allreduce_fusion_workspace(backend="auto", world_size=world, rank=rank, max_token_num=16,
                                                    hidden_dim=96, dtype="float32", gpus_per_node=world,
                                                    comm_backend=None, force_oneshot_support=True,
                                                    exchange=exchange, device="cpu")
        assert ws.is_buffer_size_sufficient(tp_size=world, num_tokens=16, hidden_dim=96, dtype="float32",
                                            use_oneshot=None)
        assert not ws.is_buffer_size_sufficient(tp_size=world, num_tokens=17, hidden_dim=96, dtype="float32")
        assert not ws.is_buffer_size_sufficient(tp_size=world + 1, num_tokens=1, hidden_dim=96, dtype="float32")
        residual_out, norm_out = np.empty(shape, np.float32), np.empty(shape, np.float32)
        comm.allreduce_fusion(input=xs[rank].astype(np.float32), workspace=ws, pattern=P.kARResidualRMSNorm,
                              launch_with_pdl=True, trigger_completion_at_end=False, residual_out=residual_out,
                              norm_out=norm_out, residual_in=residuals[rank].astype(np.float32),
                              rms_gamma=gamma.astype(np.float32), rms_eps=1e-6, use_oneshot=None, fp32_acc=False)
        ws.destroy()
        return residual_out, norm_out

    total = np.sum([x.astype(np.float32).astype(np.float64) for x in xs], axis=0)
    for rank, (residual_out, norm_out) in enumerate(unwrap(run_ranks(world, body))):
        s, n = fused_ref(total, residuals[rank].astype(np.float32), gamma.astype(np.float32), 1e-6, 0.0)
        assert_close(residual_out, s, "f32")
        assert_close(norm_out, n, "f32")


class ListCommBackend:
    """A FlashInfer CommBackend over ThreadExchange (allgather of Python objects)."""

    def __init__(self, world, rank, exchange):
        self.world, self.rank, self.exchange = world, rank, exchange

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.world

    def allgather(self, data):
        gathered = self.exchange(data)
        n = len(data)
        return [gathered[i * n:(i + 1) * n] for i in range(self.world)]


def test_comm_backend_exchange():
    world = 2

    def body(rank, exchange):
        ws = comm.create_allreduce_fusion_workspace(max_token_num=2, hidden_dim=8, dtype="float32", device="cpu",
                                                    comm_backend=ListCommBackend(world, rank, exchange))
        assert (ws.world_size, ws.rank) == (world, rank)
        out = comm.all_reduce(np.full((2, 8), rank + 1.0, np.float32), ws)
        ws.destroy()
        return out

    for out in unwrap(run_ranks(world, body)):
        assert np.all(out == 3.0)


# ---- errors ----------------------------------------------------------------------------------
def single(**kwargs):
    return workspace(0, 1, None, **kwargs)


@pytest.mark.parametrize("kwargs,cls,name", [
    (dict(scale_out=np.zeros(1, np.float32)), ignis.UnsupportedError, "scale_out"),
    (dict(layout_code=0), ignis.UnsupportedError, "layout_code"),
    (dict(block_quant_group_size=128), ignis.UnsupportedError, "block_quant_group_size"),
    (dict(expert_scale_factor=np.zeros(1, np.float32)), ignis.UnsupportedError, "expert_scale_factor"),
    (dict(moe_reduction_device_num_experts=8), ignis.UnsupportedError, "moe_reduction_device_num_experts"),
    (dict(moe_finalize_backend="cake"), ignis.UnsupportedError, "moe_finalize_backend"),
    (dict(pattern=P.kARResidualRMSNormFP4Quant), ignis.UnsupportedError, "kARResidualRMSNormFP4Quant"),
    (dict(pattern=P.kARResidualRMSNormOutFP4Quant), ignis.UnsupportedError, "kARResidualRMSNormOutFP4Quant"),
    (dict(pattern=P.kMoEFinalizeARResidualRMSNorm), ignis.UnsupportedError, "kMoEFinalizeARResidualRMSNorm"),
    (dict(pattern=P.kARResidualRMSNormDynamicFP8Quant), ignis.UnsupportedError, "kARResidualRMSNormDynamicFP8"),
    (dict(pattern=99), ignis.InvalidArgumentError, "pattern=99"),
    (dict(pattern="kAllReduce"), ignis.ArgumentTypeError, "pattern"),
    (dict(weight_bias=1.0), ignis.InvalidArgumentError, "weight_bias"),
    (dict(rms_gamma=np.ones(8, np.float32)), ignis.InvalidArgumentError, "rms_gamma"),
    (dict(residual_in=np.ones((2, 8), np.float32)), ignis.InvalidArgumentError, "residual_in"),
    (dict(pattern=P.kARResidualRMSNorm, residual_in=np.ones((2, 8), np.float32), rms_gamma=np.ones(8, np.float32)),
     ignis.InvalidArgumentError, "norm_out"),
    (dict(pattern=P.kARResidualRMSNorm, residual_in=np.ones((2, 8), np.float32), rms_gamma=np.ones(7, np.float32),
          norm_out=np.zeros((2, 8), np.float32)), ignis.InvalidArgumentError, "rms_gamma"),
    (dict(pattern=P.kARResidualRMSNorm, residual_in=np.ones((2, 8), np.float16), rms_gamma=np.ones(8, np.float32),
          norm_out=np.zeros((2, 8), np.float32)), ignis.DtypeError, "residual_in"),
    (dict(pattern=P.kARResidualRMSNormOutFP8Quant, residual_in=np.ones((2, 8), np.float32),
          rms_gamma=np.ones(8, np.float32), norm_out=np.zeros((2, 8), np.float32),
          quant_out=np.zeros((2, 8), np.float32), scale_factor=1.0), ignis.InvalidArgumentError, "quant_out"),
    (dict(output=np.zeros((2, 9), np.float32)), ignis.InvalidArgumentError, "output"),
    (dict(input=np.zeros((2, 8), np.int32)), ignis.InvalidArgumentError, "input"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_refused(kwargs, cls, name):
    ws = single(tokens=2, hidden=8)
    kwargs = dict(kwargs)
    x = kwargs.pop("input", np.ones((2, 8), np.float32))
    pattern = kwargs.pop("pattern", P.kAllReduce)
    outputs = [v for k, v in kwargs.items() if k in ("output", "norm_out") and isinstance(v, np.ndarray)]
    before = [o.copy() for o in outputs]
    if pattern == P.kAllReduce and "output" not in kwargs:
        kwargs["output"] = np.zeros((2, 8), np.float32)
        outputs.append(kwargs["output"])
        before.append(kwargs["output"].copy())
    with pytest.raises(cls, match=name):
        comm.allreduce_fusion(x, ws, pattern, **kwargs)
    for o, b in zip(outputs, before):
        assert np.array_equal(o, b), "an output was written by a refused call"
    ws.destroy()


def test_over_capacity():
    ws = single(tokens=2, hidden=8)
    out = np.zeros((3, 8), np.float32)
    with pytest.raises(ignis.InsufficientWorkspaceError, match="capacity"):
        comm.allreduce_fusion(np.ones((3, 8), np.float32), ws, P.kAllReduce, output=out)
    assert not out.any()
    assert not ws.is_buffer_size_sufficient(1, 3, 8, "float32")
    with pytest.raises(ignis.InsufficientWorkspaceError):
        comm.all_reduce(np.ones(17, np.float32), ws)
    ws.destroy()


def test_workspace_state():
    ws = single(tokens=2, hidden=8, dtype="bfloat16")
    assert (ws.world_size, ws.rank, ws.capacity, ws.device, ws.backend) == (1, 0, 32, "cpu", "ignis")
    assert "world_size=1" in repr(ws)
    ws.check()
    ws.destroy()
    ws.destroy()
    with pytest.raises(ignis.InvalidArgumentError, match="destroyed"):
        comm.all_reduce(np.ones(4, np.float32), ws)
    with pytest.raises(ignis.InvalidArgumentError, match="destroyed"):
        ws.check()
    with pytest.raises(ignis.ArgumentTypeError, match="workspace"):
        comm.allreduce_fusion(np.ones(4, np.float32), object(), P.kAllReduce)
    ws = single()
    with pytest.raises(ignis.InvalidArgumentError, match="algo"):
        comm.all_reduce(np.ones(4, np.float32), ws, algo="ring")
    with pytest.raises(ignis.UnsupportedError, match="NCCL"):
        comm.all_reduce(np.ones(4, np.float32), ws, algo="nccl")
    ws.destroy()


@pytest.mark.parametrize("kwargs,cls,name", [
    (dict(backend="mnnvl"), ignis.UnsupportedError, "mnnvl"),
    (dict(backend="mnnvl-cutedsl"), ignis.UnsupportedError, "mnnvl-cutedsl"),
    (dict(backend="nccl"), ignis.InvalidArgumentError, "backend"),
    (dict(top_k=8, apply_rms_norm=False), ignis.UnsupportedError, "top_k, apply_rms_norm"),
    (dict(gpus_per_node=1, world_size=2, exchange=lambda b: b + b), ignis.UnsupportedError, "gpus_per_node"),
    (dict(dtype="int32"), ignis.DtypeError, "dtype"),
    (dict(dtype=None), ignis.InvalidArgumentError, "dtype"),
    (dict(max_token_num=0), ignis.InvalidArgumentError, "max_token_num"),
    (dict(hidden_dim=None), ignis.InvalidArgumentError, "hidden_dim"),
    (dict(world_size=2), ignis.InvalidArgumentError, "exchange="),
    (dict(world_size=2, rank=2, exchange=lambda b: b + b), ignis.InvalidArgumentError, "rank"),
    (dict(exchange=3), ignis.ArgumentTypeError, "exchange"),
    (dict(comm_backend=object()), ignis.ArgumentTypeError, "comm_backend"),
    (dict(device="tpu"), ignis.InvalidArgumentError, "device"),
    (dict(timeout_s=0.0), ignis.InvalidArgumentError, "timeout_s"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_create_refused(kwargs, cls, name):
    args = dict(world_size=1, rank=0, max_token_num=4, hidden_dim=8, dtype="float32", device="cpu")
    args.update(kwargs)
    with pytest.raises(cls, match=name):
        comm.create_allreduce_fusion_workspace(**args)


def test_exchange_failures():
    class Boom(Exception):
        pass

    def raising(rank, exchange):
        def bad(data):
            raise Boom("rank %d" % rank)

        return workspace(rank, 2, bad)

    results = run_ranks(2, raising)
    assert all(isinstance(r, Boom) for r in results), results

    def short(rank, exchange):
        return workspace(rank, 2, lambda data: exchange(data)[:-1])

    results = run_ranks(2, short)
    assert all(isinstance(r, ignis.InvalidArgumentError) and "exchange returned" in str(r) for r in results), results


def test_shapes_differ_across_ranks():
    def body(rank, exchange):
        ws = workspace(rank, 2, exchange, timeout_s=10.0)
        out = np.zeros((2 + rank, 8), np.float32)
        try:
            comm.allreduce_fusion(np.ones((2 + rank, 8), np.float32), ws, P.kAllReduce, output=out)
        finally:
            ws.destroy()

    results = run_ranks(2, body)
    assert all(isinstance(r, ignis.InvalidArgumentError) for r in results), results


def test_peer_never_arrives():
    def body(rank, exchange):
        ws = workspace(rank, 2, exchange, timeout_s=0.5)
        try:
            if rank == 0:
                comm.all_reduce(np.ones(8, np.float32), ws)
        finally:
            if rank == 0:
                ws.destroy()
        return ws

    results = run_ranks(2, body)
    assert isinstance(results[0], ignis.PeerTimeoutError) and isinstance(results[0], TimeoutError), results
    assert "rank 1" in str(results[0])
    results[1].destroy()


# ---- torch.distributed (gloo), two processes: on the CPU, and sharing one GPU -----------------
GLOO_SHAPE = (3, 40)


def _gloo_inputs(world):
    generator = np.random.default_rng(100)
    xs = [generator.standard_normal(GLOO_SHAPE) for _ in range(world + 1)]
    return xs[:world], xs[world], generator.standard_normal(GLOO_SHAPE[-1])


def _gloo_rank(rank, world, device, init_file, out_dir):
    """One process: the exchange through the gloo group (group=) and through a CommBackend over it;
    on CUDA also a fused call captured in a CUDA graph and replayed with new inputs."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        if device == "cuda":
            torch.cuda.set_device(0)
        xs, residual_values, gamma_values = _gloo_inputs(world)
        bf16 = lambda a: torch.from_numpy(a).to(torch.bfloat16).to(device)  # noqa: E731
        ws = comm.create_allreduce_fusion_workspace(backend="trtllm", max_token_num=GLOO_SHAPE[0],
                                                    hidden_dim=GLOO_SHAPE[1], dtype=torch.bfloat16, device=device,
                                                    group=dist.group.WORLD)
        x, residual, gamma = bf16(xs[rank]), bf16(residual_values), bf16(gamma_values)
        norm_out = torch.empty_like(x)
        comm.allreduce_fusion(x, ws, P.kARResidualRMSNorm, residual_in=residual, residual_out=residual,
                              norm_out=norm_out, rms_gamma=gamma)
        result = {"rank": [ws.rank, ws.world_size], "residual": residual.float().cpu().tolist(),
                  "norm": norm_out.float().cpu().tolist()}
        backend = ListCommBackend(world, rank, lambda data: b"".join(_all_gather(dist, data)))
        ws2 = comm.create_allreduce_fusion_workspace(max_token_num=GLOO_SHAPE[0], hidden_dim=GLOO_SHAPE[1],
                                                     dtype=torch.float32, device=device, comm_backend=backend)
        result["plain"] = comm.all_reduce(torch.from_numpy(xs[rank]).float().to(device), ws2).cpu().tolist()
        if device == "cuda":
            result["graph"] = _graph_replays(ws, rank, bf16, gamma, dist)
            ws.check()
            torch.cuda.synchronize()
        dist.barrier()
        ws.destroy()
        ws2.destroy()
        with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


def _graph_replays(ws, rank, bf16, gamma, dist):
    """kARResidualRMSNormOutFP8Quant captured once, replayed with inputs 2 * x and 3 * x."""
    xs, residual_values, _ = _gloo_inputs(ws.world_size)
    x, residual = bf16(xs[rank]), bf16(residual_values)
    residual_out, norm_out = torch.empty_like(x), torch.empty_like(x)
    quant_out = torch.empty(GLOO_SHAPE, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.tensor([0.5], dtype=torch.float32, device=x.device)
    kw = dict(residual_in=residual, residual_out=residual_out, norm_out=norm_out, quant_out=quant_out,
              rms_gamma=gamma, scale_factor=scale)
    comm.allreduce_fusion(x, ws, P.kARResidualRMSNormOutFP8Quant, **kw)  # warm-up outside the graph
    torch.cuda.synchronize()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.allreduce_fusion(x, ws, P.kARResidualRMSNormOutFP8Quant, **kw)
    replays = []
    for factor in (2.0, 3.0):
        x.copy_(bf16(xs[rank] * factor))
        graph.replay()
        torch.cuda.synchronize()
        replays.append({"factor": factor, "residual": residual_out.float().cpu().tolist(),
                        "norm": norm_out.float().cpu().tolist(), "quant": quant_out.float().cpu().tolist()})
    return replays


def _all_gather(dist, data):
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, data)
    return parts


CUDA = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_distributed_gloo(tmp_path, device):
    """Two processes exchanging through a gloo group; on CUDA both share GPU 0 (peer memory through
    CUDA IPC within one device), with a CUDA graph captured and replayed."""
    if torch is None:
        pytest.skip("needs torch (torch.distributed gloo)")
    if device == "cuda" and not CUDA:
        pytest.skip("needs a GPU and ignis's CUDA backend")
    import torch.multiprocessing as mp

    world = 2
    mp.start_processes(_gloo_rank, args=(world, device, str(tmp_path / "init"), str(tmp_path)), nprocs=world,
                       start_method="spawn", join=True)
    xs, residual_values, gamma_values = _gloo_inputs(world)
    as_bf16 = lambda a: torch.from_numpy(a).to(torch.bfloat16).double().numpy()  # noqa: E731
    total = np.sum([as_bf16(x) for x in xs], axis=0)
    s, n = fused_ref(total, as_bf16(residual_values), as_bf16(gamma_values), 1e-6, 0.0)
    plain = np.sum([x.astype(np.float32).astype(np.float64) for x in xs], axis=0)
    for rank in range(world):
        with open(tmp_path / ("rank%d.json" % rank)) as f:
            got = json.load(f)
        assert got["rank"] == [rank, world]
        assert_close(np.array(got["residual"]), s, "bf16", scale=2)
        assert_close(np.array(got["norm"]), n, "bf16", scale=2)
        assert_close(np.array(got["plain"]), plain, "f32")
        for replay in got.get("graph", []):
            scaled = np.sum([as_bf16(x * replay["factor"]) for x in xs], axis=0)
            s2, n2 = fused_ref(scaled, as_bf16(residual_values), as_bf16(gamma_values), 1e-6, 0.0)
            assert_close(np.array(replay["residual"]), s2, "bf16", scale=2)
            assert_close(np.array(replay["norm"]), n2, "bf16", scale=2)
            assert_fp8_close(np.array(replay["quant"]), n2, 0.5)
        assert device == "cpu" or len(got["graph"]) == 2


# ---- flashinfer.comm under the switch --------------------------------------------------------
def test_flashinfer_comm_names():
    code = textwrap.dedent("""
        import json, os, sys
        os.environ["IGNIS_AS_FLASHINFER"] = "1"
        import ignis.switch
        ignis.switch.install()
        import flashinfer.comm as c, flashinfer.comm.mnnvl as mnnvl, ignis.comm
        out = {"same": c.allreduce_fusion is ignis.comm.allreduce_fusion
                       and c.create_allreduce_fusion_workspace is ignis.comm.create_allreduce_fusion_workspace,
               "pcie": hasattr(c, "PcieIpcAllReduceWorkspace"), "cutedsl": c.is_mnnvl_cutedsl_supported(),
               "multicast": mnnvl.is_multicast_supported(0), "fabric": mnnvl.is_mnnvl_fabric_supported(0),
               "backend": issubclass(mnnvl.TorchDistBackend, mnnvl.CommBackend), "raises": {}}
        for name, make in [("Mapping", lambda: c.Mapping(world_size=2, rank=0)), ("MoeAlltoAll", c.MoeAlltoAll),
                           ("moe_a2a", lambda: c.moe_a2a_get_workspace_size_per_rank(8, 2)),
                           ("MnnvlConfig", mnnvl.MnnvlConfig), ("MnnvlMemory", mnnvl.MnnvlMemory)]:
            try:
                make()
                out["raises"][name] = None
            except NotImplementedError as e:
                out["raises"][name] = str(e)
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same"] and out["backend"]
    assert not (out["pcie"] or out["cutedsl"] or out["multicast"] or out["fabric"])
    for name, message in out["raises"].items():
        assert message, name
    assert "Mapping" in out["raises"]["Mapping"] and "MNNVL" in out["raises"]["MnnvlConfig"]
