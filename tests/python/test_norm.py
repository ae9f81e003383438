"""Norm ops (rmsnorm, gemma_rmsnorm, fused_add_rmsnorm, gemma_fused_add_rmsnorm, layernorm) against
float64 references, on every framework and dtype present: 2-D and 3-D shapes with an odd hidden
size, out= given and allocated, strided views (padded rows, transposed leading dims), in place, and
the errors (dtype, shape, stride)."""

import numpy as np
import pytest

import ignis
from refs import (FRAME_DTYPE_IDS, FRAME_DTYPES, VIEW_FRAME_IDS, VIEW_FRAMES, NumpyFrame, assert_close,
                  layernorm_ref, rmsnorm_ref)

SHAPES = [(5, 100), (2, 3, 72)]
rng = np.random.default_rng(1)


def data(shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("gemma", [False, True], ids=["rmsnorm", "gemma_rmsnorm"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_rmsnorm(frame, dtype, shape, gemma):
    op = ignis.gemma_rmsnorm if gemma else ignis.rmsnorm
    x = frame.array(data(shape), dtype)
    weight = frame.array(data(shape[-1]), dtype)
    expected = rmsnorm_ref(frame.numpy(x), frame.numpy(weight), 1e-5, gemma)
    y = op(x, weight, eps=1e-5)
    assert type(y) is type(x) and tuple(y.shape) == shape and y.dtype == x.dtype
    assert_close(frame.numpy(y), expected, dtype)
    if frame.views:
        out = frame.empty(shape, dtype)
        assert op(x, weight, 1e-5, out) is out
        assert_close(frame.numpy(out), expected, dtype)


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_rmsnorm_f32_weight(frame, dtype):
    x = frame.array(data((3, 40)), dtype)
    weight = frame.array(data(40), "f32")
    expected = rmsnorm_ref(frame.numpy(x), frame.numpy(weight), 1e-6)
    assert_close(frame.numpy(ignis.rmsnorm(x, weight)), expected, dtype)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rmsnorm_strided_views(frame):
    dtype = "f32"
    a, weight = data((6, 50)), frame.array(data(50), dtype)
    x = frame.padded(a, dtype, pad=14)
    out = frame.padded(np.zeros((6, 50)), dtype, pad=6)
    ignis.rmsnorm(x, weight, out=out)
    assert_close(frame.numpy(out), rmsnorm_ref(frame.numpy(x), frame.numpy(weight), 1e-6), dtype)

    a3 = data((2, 3, 50))
    x3 = frame.transposed(a3, dtype)
    expected = rmsnorm_ref(frame.numpy(x3), frame.numpy(weight), 1e-6)
    assert_close(frame.numpy(ignis.rmsnorm(x3, weight)), expected, dtype)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_rmsnorm_in_place_alias(frame):
    x = frame.array(data((4, 30)), "f32")
    weight = frame.array(data(30), "f32")
    expected = rmsnorm_ref(frame.numpy(x), frame.numpy(weight), 1e-6)
    assert ignis.rmsnorm(x, weight, out=x) is x
    assert_close(frame.numpy(x), expected, "f32")


@pytest.mark.parametrize("gemma", [False, True], ids=["fused_add_rmsnorm", "gemma_fused_add_rmsnorm"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_fused_add_rmsnorm(frame, dtype, shape, gemma):
    if not frame.views:
        with pytest.raises(ignis.ArgumentTypeError, match="immutable"):
            ignis.fused_add_rmsnorm(frame.array(data(shape), dtype), frame.array(data(shape), dtype),
                                    frame.array(data(shape[-1]), dtype))
        return
    op = ignis.gemma_fused_add_rmsnorm if gemma else ignis.fused_add_rmsnorm
    x, residual = frame.array(data(shape), dtype), frame.array(data(shape), dtype)
    weight = frame.array(data(shape[-1]), dtype)
    total = frame.numpy(x) + frame.numpy(residual)
    expected = rmsnorm_ref(total, frame.numpy(weight), 1e-6, gemma)
    assert op(x, residual, weight) is None
    assert_close(frame.numpy(residual), total, dtype)
    assert_close(frame.numpy(x), expected, dtype)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_fused_add_rmsnorm_strided(frame):
    dtype = "f32"
    x = frame.padded(data((5, 64)), dtype, pad=8)
    residual = frame.transposed(data((5, 1, 64)), dtype)[:, 0]
    weight = frame.array(data(64), dtype)
    total = frame.numpy(x) + frame.numpy(residual)
    ignis.fused_add_rmsnorm(x, residual, weight, eps=1e-5)
    assert_close(frame.numpy(residual), total, dtype)
    assert_close(frame.numpy(x), rmsnorm_ref(total, frame.numpy(weight), 1e-5), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_layernorm(frame, dtype, shape):
    x = frame.array(data(shape) * 2 + 0.5, dtype)
    for param_dtype in sorted({dtype, "f32"}):
        gamma, beta = frame.array(data(shape[-1]), param_dtype), frame.array(data(shape[-1]), param_dtype)
        y = ignis.layernorm(x, gamma, beta, eps=1e-5)
        assert type(y) is type(x) and tuple(y.shape) == shape
        expected = layernorm_ref(frame.numpy(x), frame.numpy(gamma), frame.numpy(beta), 1e-5)
        assert_close(frame.numpy(y), expected, dtype)


def test_norm_errors():
    frame = NumpyFrame()
    x, weight = frame.array(data((4, 16)), "f32"), frame.array(data(16), "f32")
    with pytest.raises(ignis.DtypeError, match="input.dtype") as info:
        ignis.rmsnorm(x.astype(np.int32), weight, out=np.empty((4, 16), np.int32))
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    with pytest.raises(TypeError, match="weight.dtype"):
        ignis.rmsnorm(x, weight.astype(np.float16))
    with pytest.raises(TypeError, match="float64"):
        ignis.rmsnorm(x.astype(np.float64), weight, out=np.empty((4, 16)))
    with pytest.raises(ValueError, match="weight") as info:
        ignis.rmsnorm(x, frame.array(data(15), "f32"))
    assert isinstance(info.value, ignis.InvalidArgumentError) and not isinstance(info.value, TypeError)
    with pytest.raises(ValueError, match="out"):
        ignis.rmsnorm(x, weight, out=np.empty((4, 17), np.float32))
    with pytest.raises(ValueError, match="input.ndim"):
        ignis.rmsnorm(x[0], weight, out=np.empty(16, np.float32))
    with pytest.raises(ValueError, match="residual"):
        ignis.fused_add_rmsnorm(x, frame.array(data((3, 16)), "f32"), weight)
    with pytest.raises(ValueError, match="eps"):
        ignis.rmsnorm(x, weight, eps=-1.0)
    with pytest.raises(ignis.ArgumentTypeError, match="eps"):
        ignis.rmsnorm(x, weight, eps="small")
    with pytest.raises(ValueError, match="beta"):
        ignis.layernorm(x, weight, frame.array(data(8), "f32"))
    # A last dimension with stride != 1 is valid but has no kernel: NotImplementedError.
    wide = frame.array(data((4, 32)), "f32")
    with pytest.raises(NotImplementedError, match="strides") as info:
        ignis.rmsnorm(wide[:, ::2], weight)
    assert isinstance(info.value, ignis.UnsupportedError)
    # On error nothing is written.
    out = np.full((4, 16), 7.0, np.float32)
    with pytest.raises(ignis.Error):
        ignis.rmsnorm(x, frame.array(data(15), "f32"), out=out)
    assert (out == 7.0).all()


def test_norm_empty_and_3d_edge():
    weight = np.ones(8, np.float32)
    y = ignis.rmsnorm(np.empty((0, 8), np.float32), weight)
    assert y.shape == (0, 8)
    x = np.ones((1, 1, 8), np.float32)
    assert_close(ignis.rmsnorm(x, weight), np.ones((1, 1, 8)), "f32")
