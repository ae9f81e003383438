"""The package's surface: FlashInfer-style signatures and docstrings, version and build facts, the
exception classes, and the DLPack edge cases of the binding (byte_offset, NULL strides, legacy
capsules, dtype and device mapping, read-only and immutable outputs, objects without DLPack,
stream= forwarding, releasing what was exported, threads), plus bf16 through ml_dtypes and the
JAX and array-API allocation paths when those are installed."""

import inspect
import sys
import threading
import types

import numpy as np
import pytest

import ignis
from refs import (DL_BFLOAT, DL_CUDA, DL_CUDA_HOST, DL_FLOAT8_E4M3FN, DL_FLOAT8_E5M2, DL_METAL,
                  LegacyProducer, Producer, activation_ref, assert_close, bf16_numpy, jax, ml_dtypes,
                  rmsnorm_ref, rope_ref, torch)

E = inspect.Parameter.empty
ROPE = [("rotary_dim", None), ("interleave", False), ("rope_scale", 1), ("rope_theta", 1e4)]
LLAMA = [("rotary_dim", None), ("interleave", False), ("rope_scale", 8), ("rope_theta", 5e5),
         ("low_freq_factor", 1), ("high_freq_factor", 4), ("old_context_len", 8192)]
COS_SIN = [("positions", E), ("query", E), ("key", E), ("head_size", E), ("cos_sin_cache", E),
           ("is_neox", True)]
SIGNATURES = {
    "rmsnorm": [("input", E), ("weight", E), ("eps", 1e-6), ("out", None), ("enable_pdl", None)],
    "gemma_rmsnorm": [("input", E), ("weight", E), ("eps", 1e-6), ("out", None), ("enable_pdl", None)],
    "fused_add_rmsnorm": [("input", E), ("residual", E), ("weight", E), ("eps", 1e-6), ("enable_pdl", None)],
    "gemma_fused_add_rmsnorm": [("input", E), ("residual", E), ("weight", E), ("eps", 1e-6),
                                ("enable_pdl", None)],
    "layernorm": [("input", E), ("gemma", E), ("beta", E), ("eps", 1e-6)],
    "silu_and_mul": [("input", E), ("out", None), ("enable_pdl", None)],
    "gelu_and_mul": [("input", E), ("out", None), ("enable_pdl", None)],
    "gelu_tanh_and_mul": [("input", E), ("out", None), ("enable_pdl", None)],
    "apply_rope": [("q", E), ("k", E), ("indptr", E), ("offsets", E)] + ROPE,
    "apply_rope_inplace": [("q", E), ("k", E), ("indptr", E), ("offsets", E)] + ROPE,
    "apply_rope_pos_ids": [("q", E), ("k", E), ("pos_ids", E)] + ROPE,
    "apply_rope_pos_ids_inplace": [("q", E), ("k", E), ("pos_ids", E)] + ROPE,
    "apply_llama31_rope": [("q", E), ("k", E), ("indptr", E), ("offsets", E)] + LLAMA,
    "apply_llama31_rope_inplace": [("q", E), ("k", E), ("indptr", E), ("offsets", E)] + LLAMA,
    "apply_llama31_rope_pos_ids": [("q", E), ("k", E), ("pos_ids", E)] + LLAMA,
    "apply_llama31_rope_pos_ids_inplace": [("q", E), ("k", E), ("pos_ids", E)] + LLAMA,
    "apply_rope_with_cos_sin_cache": COS_SIN,
    "apply_rope_with_cos_sin_cache_inplace": COS_SIN,
}
rng = np.random.default_rng(4)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flashinfer_signature(name):
    fn = getattr(ignis, name)
    params = list(inspect.signature(fn).parameters.values())
    *positional, stream = params
    assert [(p.name, p.default) for p in positional] == SIGNATURES[name]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in positional)
    assert (stream.name, stream.kind, stream.default) == ("stream", inspect.Parameter.KEYWORD_ONLY, None)
    assert fn.__doc__ and fn.__doc__.strip()
    assert name in ignis.__all__


def test_version_and_build_facts():
    assert ignis.__version__ == ignis.version()
    assert [int(part) for part in ignis.version().split(".")] >= [0, 1, 0]
    assert ignis.build_info().startswith("ignis " + ignis.version())
    count = ignis.cuda_device_count()
    assert isinstance(count, int) and count >= 0
    if "CUDA backend not built" in ignis.build_info():
        assert count == 0


def test_error_classes():
    assert issubclass(ignis.InvalidArgumentError, (ignis.Error, ValueError))
    assert issubclass(ignis.DtypeError, ignis.InvalidArgumentError)
    assert issubclass(ignis.DtypeError, TypeError)
    assert issubclass(ignis.UnsupportedError, NotImplementedError)
    assert issubclass(ignis.InsufficientWorkspaceError, ValueError)
    for cls in (ignis.CudaError, ignis.InternalError, ignis.BackendUnavailableError):
        assert issubclass(cls, ignis.Error) and issubclass(cls, RuntimeError)
    assert issubclass(ignis.ArgumentTypeError, ignis.Error) and issubclass(ignis.ArgumentTypeError, TypeError)
    with pytest.raises(ignis.InvalidArgumentError) as info:
        ignis.rmsnorm(f32(2, 8), f32(7))
    assert str(info.value) == "ignis_rmsnorm: weight.shape[0]=7 but it must be 8"


def test_byte_offset_and_null_strides():
    x, weight = f32(3, 40), f32(40)
    out = np.zeros_like(x)
    ignis.rmsnorm(Producer(x, byte_offset=64), Producer(weight, null_strides=True),
                  out=Producer(out, byte_offset=4, null_strides=True))
    assert_close(out, rmsnorm_ref(x.astype(np.float64), weight, 1e-6), "f32")


def test_legacy_capsule_producer():
    x = f32(4, 64)
    out = np.zeros((4, 32), np.float32)
    ignis.silu_and_mul(LegacyProducer(x, byte_offset=8), out=LegacyProducer(out))
    assert_close(out, activation_ref(x.astype(np.float64), "silu"), "f32")


@pytest.mark.parametrize("code,bits,name",
                         [(DL_FLOAT8_E4M3FN, 8, "fp8_e4m3"), (DL_FLOAT8_E5M2, 8, "fp8_e5m2")])
def test_fp8_dtype_mapping(code, bits, name):
    raw = np.zeros((2, 8), np.uint8)
    with pytest.raises(ignis.DtypeError, match=f"input.dtype={name} but"):
        ignis.rmsnorm(Producer(raw, dtype=(code, bits)), f32(8), out=np.zeros((2, 8), np.uint8))


@pytest.mark.parametrize("dtype,name", [(np.int32, "i32"), (np.int64, "i64"), (np.uint8, "u8")])
def test_integer_dtype_mapping(dtype, name):
    with pytest.raises(TypeError, match=f"input.dtype={name} but"):
        ignis.silu_and_mul(np.zeros((2, 8), dtype), out=np.zeros((2, 4), dtype))


@pytest.mark.parametrize("dtype,name", [(np.float64, "float64"), (np.int8, "int8"), (np.bool_, "bool8"),
                                        (np.complex64, "complex64")])
def test_unsupported_dtype(dtype, name):
    with pytest.raises(ignis.DtypeError, match=f"input.dtype={name} is not supported"):
        ignis.silu_and_mul(np.zeros((2, 8), dtype), out=f32(2, 4))


def test_devices():
    with pytest.raises(ignis.UnsupportedError, match="device type 8"):
        ignis.rmsnorm(Producer(f32(2, 8), device=(DL_METAL, 0)), f32(8), out=f32(2, 8))
    x, weight, out = f32(2, 8), f32(8), f32(2, 8)
    ignis.rmsnorm(Producer(x, device=(DL_CUDA_HOST, 0)), weight, out=out)  # pinned host memory
    assert_close(out, rmsnorm_ref(x.astype(np.float64), weight, 1e-6), "f32")


def test_not_a_dlpack_object():
    with pytest.raises(ignis.ArgumentTypeError, match="cannot allocate"):
        ignis.rmsnorm([[1.0, 2.0]], f32(2))
    with pytest.raises(ignis.ArgumentTypeError, match="weight is a list"):
        ignis.rmsnorm(f32(1, 2), [1.0, 2.0], out=f32(1, 2))
    with pytest.raises(TypeError, match="expected 5 arguments"):
        ignis._ext.rmsnorm(f32(1, 2))


def test_read_only_and_too_many_dims():
    x, weight = f32(2, 8), f32(8)
    x.setflags(write=False)
    out = ignis.rmsnorm(x, weight)  # a read-only input is fine
    out.setflags(write=False)
    with pytest.raises(ignis.InvalidArgumentError, match="out is read-only"):
        ignis.rmsnorm(x, weight, out=out)
    with pytest.raises(ignis.InvalidArgumentError, match="at most 8"):
        ignis.rmsnorm(np.zeros((1,) * 9, np.float32), weight)


def test_producer_failure_is_chained():
    class Refuses:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise BufferError("not today")

    with pytest.raises(ignis.ArgumentTypeError, match="exported through DLPack: not today") as info:
        ignis.rmsnorm(f32(2, 8), Refuses(), out=f32(2, 8))
    assert isinstance(info.value.__cause__, BufferError)


def test_stream_forwarding_to_cuda_producers():
    """Tensors that say they live on CUDA get stream= in __dlpack__: the stream ignis launches on,
    1 for the legacy default stream. (Here the call then fails: no GPU, or host memory.)"""
    no_gpu = ignis.cuda_device_count() == 0
    expected_error = ignis.BackendUnavailableError if no_gpu else ignis.InvalidArgumentError
    cases = [(None, 1), (0, 1), (1234, 1234), (types.SimpleNamespace(cuda_stream=77), 77),
             (types.SimpleNamespace(ptr=88), 88)]
    for stream, forwarded in cases:
        x, weight, out = (Producer(a, device=(DL_CUDA, 0)) for a in (f32(2, 8), f32(8), f32(2, 8)))
        with pytest.raises(expected_error):
            ignis.rmsnorm(x, weight, out=out, stream=stream)
        assert x.streams == weight.streams == out.streams == [forwarded]
    host = Producer(f32(2, 8))
    ignis.rmsnorm(host, f32(8), out=f32(2, 8), stream=5)
    assert host.streams == [None]  # host tensors never get a stream


def test_bad_streams():
    x, weight = f32(2, 8), f32(8)
    with pytest.raises(ignis.ArgumentTypeError, match="stream must be"):
        ignis.rmsnorm(x, weight, stream="default")
    with pytest.raises(ignis.InvalidArgumentError, match="non-negative"):
        ignis.rmsnorm(x, weight, stream=-1)
    assert_close(ignis.rmsnorm(x, weight, stream=0), rmsnorm_ref(x.astype(np.float64), weight, 1e-6), "f32")


def test_exports_are_released():
    x, weight, out = f32(3, 16), f32(16), f32(3, 16)
    before = [sys.getrefcount(a) for a in (x, weight, out)]
    for _ in range(50):
        ignis.rmsnorm(x, weight, out=out)
        ignis.fused_add_rmsnorm(out, x, weight)
        with pytest.raises(ignis.Error):
            ignis.rmsnorm(x, f32(15), out=out)
        with pytest.raises(ignis.Error):
            ignis.rmsnorm(x, weight, out=out, stream="bad")
    assert [sys.getrefcount(a) for a in (x, weight, out)] == before


def test_threads():
    """The GIL is released during the op; the last-error message is per thread."""
    failures = []

    def work(hidden):
        x, weight = f32(4, hidden), f32(hidden)
        for _ in range(30):
            try:
                assert_close(ignis.rmsnorm(x, weight), rmsnorm_ref(x.astype(np.float64), weight, 1e-6), "f32")
                ignis.rmsnorm(x, f32(hidden + 1))
            except ignis.InvalidArgumentError as e:
                if f"it must be {hidden}" not in str(e):
                    failures.append(str(e))
            except Exception as e:  # noqa: BLE001 - report anything else
                failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(h,)) for h in (16, 24, 40, 56)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes not installed")
def test_bf16_through_ml_dtypes():
    x, px = bf16_numpy(rng.standard_normal((3, 48)))
    weight, pweight = bf16_numpy(rng.standard_normal(48))
    out, pout = bf16_numpy(np.zeros((3, 48)))
    ignis.rmsnorm(px, pweight, out=pout)
    expected = rmsnorm_ref(x.astype(np.float64), weight.astype(np.float64), 1e-6)
    assert_close(out.astype(np.float64), expected, "bf16")
    half, phalf = bf16_numpy(np.zeros((3, 24)))
    ignis.silu_and_mul(px, out=phalf)
    assert_close(half.astype(np.float64), activation_ref(x.astype(np.float64), "silu"), "bf16")
    q, pq = bf16_numpy(rng.standard_normal((5, 2, 16)))
    k, pk = bf16_numpy(rng.standard_normal((5, 1, 16)))
    q64, k64, pos = q.astype(np.float64), k.astype(np.float64), np.arange(5)
    ignis.apply_rope_pos_ids_inplace(pq, pk, pos)
    assert_close(q.astype(np.float64), rope_ref(q64, pos), "bf16")
    assert_close(k.astype(np.float64), rope_ref(k64, pos), "bf16")
    assert px.streams and pq.dtype == (DL_BFLOAT, 16)


@pytest.mark.skipif(jax is None, reason="JAX not installed")
def test_jax_inputs_and_outputs():
    import jax.numpy as jnp

    host = jax.devices("cpu")[0]  # where JAX also has a GPU, it would be the default device
    x = jax.device_put(f32(3, 32), host)
    weight = jax.device_put(f32(32), host)
    y = ignis.rmsnorm(x, weight)
    assert isinstance(y, jax.Array) and y.shape == (3, 32)
    assert_close(np.asarray(y), rmsnorm_ref(np.asarray(x, np.float64), np.asarray(weight), 1e-6), "f32")
    with pytest.raises(ignis.ArgumentTypeError, match="immutable"):
        ignis.rmsnorm(x, weight, out=y)
    xb = x.astype(jnp.bfloat16)
    with pytest.raises(ignis.UnsupportedError, match="pass out="):
        ignis.silu_and_mul(xb)
    if torch is not None:
        out = torch.empty((3, 16), dtype=torch.bfloat16)
        ignis.silu_and_mul(xb, out=out)
        expected = activation_ref(np.asarray(xb.astype(jnp.float32), np.float64), "silu")
        assert_close(out.float().numpy(), expected, "bf16")


def test_array_api_allocation():
    xp = pytest.importorskip("array_api_strict")
    x = xp.asarray(f32(2, 16))
    weight = xp.asarray(f32(16))
    y = ignis.rmsnorm(x, weight)
    assert type(y) is type(x) and y.dtype == x.dtype and y.shape == (2, 16)
    assert_close(np.asarray(y), rmsnorm_ref(np.asarray(x, np.float64), np.asarray(weight), 1e-6), "f32")
