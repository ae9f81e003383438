"""Attention-state merges (merge_state, merge_state_in_place, merge_states) against float64 NumPy
references on every framework and dtype present: both LSE bases, empty (-inf) states, large LSEs,
masks, strided views, and the errors."""

import math

import numpy as np
import pytest

import ignis
from refs import FRAME_DTYPE_IDS, FRAME_DTYPES, VIEW_FRAME_IDS, VIEW_FRAMES, assert_close, torch

rng = np.random.default_rng(3)


def merge_ref(v, s, base):
    """v [seq, n, H, D], s [seq, n, H] -> merged (v, s)."""
    ln_base = math.log(2.0) if base == "2" else 1.0
    m = np.max(s, axis=1, keepdims=True)
    empty = np.isneginf(m)
    m = np.where(empty, 0.0, m)
    w = np.exp((s - m) * ln_base)
    total = w.sum(axis=1, keepdims=True)
    s_out = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, total)) / ln_base)
    weights = np.where(empty, 0.0, w / np.where(empty, 1.0, total))
    return (weights[..., None] * v).sum(axis=1), s_out[:, 0]


def lses(shape):
    s = rng.uniform(-6, 6, size=shape)
    s[0] = 500.0 + rng.uniform(-3, 3, size=shape[1:])
    s.reshape(-1)[1::7] = -np.inf
    if shape[0] > 2:
        s[2] = -np.inf
    return s.astype(np.float32).astype(np.float64)


def check_s(got, expected):
    got = np.asarray(got, dtype=np.float64)
    assert np.array_equal(np.isneginf(got), np.isneginf(expected))
    finite = ~np.isneginf(expected)
    assert_close(got[finite], expected[finite], "f32", scale=2.0)


@pytest.mark.parametrize("base", ["2", "ln"])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_merge_state(frame, dtype, base):
    seq, heads, dim = 5, 3, 40
    v_a, v_b = rng.standard_normal((seq, heads, dim)), rng.standard_normal((seq, heads, dim))
    s = lses((seq, 2, heads))
    xa, xb = frame.array(v_a, dtype), frame.array(v_b, dtype)
    v, s_out = ignis.merge_state(xa, frame.array(s[:, 0], "f32"), xb, frame.array(s[:, 1], "f32"), lse_base=base)
    ev, es = merge_ref(np.stack([frame.numpy(xa), frame.numpy(xb)], axis=1), s, base)
    assert type(v) is type(xa) and tuple(v.shape) == (seq, heads, dim)
    assert_close(frame.numpy(v), ev, dtype, scale=2.0)
    check_s(frame.numpy(s_out), es)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
@pytest.mark.parametrize("with_mask", [False, True])
def test_merge_state_in_place(frame, with_mask):
    seq, heads, dim = 6, 2, 16
    v_a, v_b = rng.standard_normal((seq, heads, dim)), rng.standard_normal((seq, heads, dim))
    s = lses((seq, 2, heads))
    v, s_a = frame.array(v_a, "f32"), frame.array(s[:, 0], "f32")
    mask = np.array([1, 0, 1, 1, 0, 1], np.uint8) if with_mask else None
    mask_arg = None
    if with_mask:
        mask_arg = mask if frame.name == "numpy" else frame.index(mask, "i32").to(torch.uint8)
    ignis.merge_state_in_place(v, s_a, frame.array(v_b, "f32"), frame.array(s[:, 1], "f32"), mask_arg,
                               lse_base="ln")
    ev, es = merge_ref(np.stack([v_a, v_b], axis=1), s, "ln")
    if with_mask:
        keep = mask == 0
        ev[keep], es[keep] = v_a[keep], s[keep, 0]
    assert_close(frame.numpy(v), ev, "f32", scale=2.0)
    check_s(frame.numpy(s_a), es)


@pytest.mark.parametrize("base", ["2", "ln"])
@pytest.mark.parametrize("num_states", [1, 4])
@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
def test_merge_states(frame, dtype, num_states, base):
    seq, heads, dim = 4, 2, 24
    v = frame.array(rng.standard_normal((seq, num_states, heads, dim)), dtype)
    s = lses((seq, num_states, heads))
    v_out, s_out = ignis.merge_states(v, frame.array(s, "f32"), lse_base=base)
    ev, es = merge_ref(frame.numpy(v), s, base)
    assert tuple(v_out.shape) == (seq, heads, dim) and tuple(s_out.shape) == (seq, heads)
    assert_close(frame.numpy(v_out), ev, dtype, scale=2.0)
    check_s(frame.numpy(s_out), es)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_merge_state_strided(frame):
    seq, heads, dim = 3, 4, 32
    v_a = frame.transposed(rng.standard_normal((seq, heads, dim)), "f32")
    v_b = frame.padded(rng.standard_normal((seq, heads, dim)), "f32", pad=5)
    s = lses((seq, 2, heads))
    s_all = frame.array(s, "f32")
    v, s_out = ignis.merge_state(v_a, s_all[:, 0], v_b, s_all[:, 1])
    ev, es = merge_ref(np.stack([frame.numpy(v_a), frame.numpy(v_b)], axis=1), s, "2")
    assert_close(frame.numpy(v), ev, "f32", scale=2.0)
    check_s(frame.numpy(s_out), es)


def test_merge_errors():
    v = np.zeros((2, 2, 8), np.float32)
    s = np.zeros((2, 2), np.float32)
    with pytest.raises(ignis.InvalidArgumentError, match="lse_base"):
        ignis.merge_state(v, s, v, s, lse_base="e")
    with pytest.raises(ignis.DtypeError, match="s_b.dtype"):
        ignis.merge_state(v, s, v, s.astype(np.float16))
    with pytest.raises(ignis.InvalidArgumentError, match="v_b.shape"):
        ignis.merge_state(v, s, v[:, :1], s)
    with pytest.raises(ignis.InvalidArgumentError, match="mask"):
        ignis.merge_state_in_place(v, s, v.copy(), s.copy(), np.ones(3, np.uint8))
