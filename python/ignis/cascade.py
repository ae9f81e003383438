"""Merging attention states, with FlashInfer's names and arguments (flashinfer.cascade).

A state is ``(v, s)``: ``v`` ``[seq_len, num_heads, head_dim]`` (f16, bf16 or f32), the attention
output over a set of keys, and ``s`` ``[seq_len, num_heads]`` float32, the log-sum-exp of the
scores. ``lse_base`` says which logarithm ``s`` uses: ``"2"`` (default; FlashInfer's kernels
return log2 of the sum of exp2) or ``"ln"`` (FlashAttention, PyTorch). Empty states
(``s = -inf``) contribute nothing; merging only empty states gives ``v = 0, s = -inf``. Leading
dimensions may have any strides; ``v``'s last dimension must be contiguous. Every op takes a
keyword-only ``stream=``.
"""

from . import _ext
from ._alloc import new_output
from ._errors import InvalidArgumentError

__all__ = ["merge_state", "merge_state_in_place", "merge_states"]

_BASES = {"2": 0, "ln": 1}


def _base(lse_base):
    try:
        return _BASES[lse_base]
    except (KeyError, TypeError):
        raise InvalidArgumentError("lse_base=%r must be '2' or 'ln'" % (lse_base,)) from None


def merge_state(v_a, s_a, v_b, s_b, *, lse_base="2", stream=None):
    """Merge two states: returns ``(v, s)`` with ``s = log(base**s_a + base**s_b)`` and
    ``v = base**(s_a - s) * v_a + base**(s_b - s) * v_b``, allocated like ``v_a`` / ``s_a``."""
    base = _base(lse_base)
    v_out, finish_v = new_output(v_a)
    s_out, finish_s = new_output(s_a)
    _ext.merge_state(v_a, s_a, v_b, s_b, base, v_out, s_out, stream)
    return finish_v(v_out), finish_s(s_out)


def merge_state_in_place(v, s, v_other, s_other, mask=None, *, lse_base="2", stream=None):
    """Merge ``(v_other, s_other)`` into ``(v, s)`` in place, for the rows where ``mask``
    (``[seq_len]`` uint8 or bool-as-uint8, optional) is nonzero. Returns None."""
    _ext.merge_state_in_place(v, s, v_other, s_other, mask, _base(lse_base), stream)


def merge_states(v, s, *, lse_base="2", stream=None):
    """Merge ``num_states`` states per row: ``v`` ``[seq_len, num_states, num_heads, head_dim]``,
    ``s`` ``[seq_len, num_states, num_heads]``; returns ``(v, s)`` of shapes
    ``[seq_len, num_heads, head_dim]`` and ``[seq_len, num_heads]``."""
    base = _base(lse_base)
    v_out, finish_v = new_output(v[:, 0])
    s_out, finish_s = new_output(s[:, 0])
    _ext.merge_states(v, s, base, v_out, s_out, stream)
    return finish_v(v_out), finish_s(s_out)
