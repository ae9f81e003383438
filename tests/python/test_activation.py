"""Gated activations (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul) against float64 references on
every framework and dtype present: 1-D to 3-D, out= given and allocated, strided views, errors."""

import numpy as np
import pytest

import ignis
from refs import (FRAME_DTYPE_IDS, FRAME_DTYPES, VIEW_FRAME_IDS, VIEW_FRAMES, NumpyFrame, activation_ref,
                  assert_close)

OPS = {"silu": ignis.silu_and_mul, "gelu": ignis.gelu_and_mul, "gelu_tanh": ignis.gelu_tanh_and_mul}
rng = np.random.default_rng(2)


@pytest.mark.parametrize("kind", sorted(OPS))
@pytest.mark.parametrize("shape", [(22,), (5, 2 * 45), (2, 3, 2 * 64)], ids=str)
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_gated_activation(frame, dtype, shape, kind):
    x = frame.array(rng.standard_normal(shape) * 2, dtype)
    expected = activation_ref(frame.numpy(x), kind)
    y = OPS[kind](x)
    assert type(y) is type(x) and tuple(y.shape) == shape[:-1] + (shape[-1] // 2,) and y.dtype == x.dtype
    assert_close(frame.numpy(y), expected, dtype)
    if frame.views:
        out = frame.empty(shape[:-1] + (shape[-1] // 2,), dtype)
        assert OPS[kind](x, out) is out
        assert_close(frame.numpy(out), expected, dtype)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_activation_strided_views(frame):
    x = frame.padded(rng.standard_normal((6, 80)), "f32", pad=12)
    out = frame.padded(np.zeros((6, 40)), "f32", pad=3)
    ignis.silu_and_mul(x, out=out)
    assert_close(frame.numpy(out), activation_ref(frame.numpy(x), "silu"), "f32")
    x3 = frame.transposed(rng.standard_normal((2, 3, 80)), "f32")
    assert_close(frame.numpy(ignis.gelu_and_mul(x3)), activation_ref(frame.numpy(x3), "gelu"), "f32")


def test_activation_errors():
    frame = NumpyFrame()
    x = frame.array(rng.standard_normal((4, 16)), "f32")
    with pytest.raises(ValueError, match="even"):
        ignis.silu_and_mul(frame.array(rng.standard_normal((4, 15)), "f32"))
    with pytest.raises(ValueError, match="out.shape"):
        ignis.silu_and_mul(x, out=np.empty((4, 16), np.float32))
    with pytest.raises(TypeError, match="out.dtype"):
        ignis.silu_and_mul(x, out=np.empty((4, 8), np.float16))
    with pytest.raises(TypeError, match="input.dtype"):
        ignis.gelu_and_mul(x.astype(np.int64), out=np.empty((4, 8), np.int64))
    with pytest.raises(ValueError, match="overlap"):
        ignis.silu_and_mul(x, out=x[:, :8])
    with pytest.raises(NotImplementedError):
        ignis.silu_and_mul(frame.array(rng.standard_normal((4, 32)), "f32")[:, ::2])
