"""Sampling ops with FlashInfer's names and arguments (flashinfer.sampling), plus ``top_k`` selection
(flashinfer.top_k).

Inputs are ``[batch, vocab]`` probabilities or logits (f32, f16 or bf16; the last dimension
contiguous, any row stride) on the host or a CUDA device. The rules (what is allowed, how NaN, Inf
and all-zero rows behave, how ties are kept) are those of ``include/ignis/sampling.h``: nothing is
sorted (a radix search finds the thresholds), the sample is drawn by inverse transform over the
allowed set's exact fixed-point masses, and a sample is always in ``[0, vocab)``. Samples come back
as arrays in the input's framework: int32, or the dtype of ``indices`` when it is given (FlashInfer's
contract). ``return_valid=True`` (on the ``*_from_probs`` samplers, as in FlashInfer) also returns a
bool ``[batch]`` array: False for an output row whose distribution row holds no finite positive
probability (so nothing could be drawn and the sample is token 0) or whose ``indices`` entry is
outside ``[0, rows)``; computed with the input framework's own operations on its device.

Thresholds (``top_k``, ``top_p``, ``min_p``) are a scalar or one value per row (an int tensor for
top_k, a float32 tensor for top_p and min_p). ``indices`` (int32/int64 ``[batch]``) maps output row b
to distribution row ``indices[b]``.

Random numbers come from Philox 4x32-10 keyed by ``seed`` at ``offset``: the same seed and offset
give the same samples on every run and on both backends. Each may be an int or an int64 tensor
(one element, or one per row) on the input's device, read by the kernel, so a captured CUDA graph
draws new numbers when the caller advances the offset tensor in place. Without ``seed``, a seed and
an offset are taken from ``generator`` (a torch.Generator: its initial seed, and its offset when it
has one, advanced by 1 per call) or from a process-wide counter with a random seed.
``deterministic`` (``is_deterministic`` on the renorms) is accepted: results are always
deterministic. ``check_nan=True`` raises ValueError when the input holds a NaN (this reads the data on
the host: it synchronizes).

For PyTorch CUDA tensors, calls of few rows (up to 32, as the GPU allows) over a vocabulary of at
least 4096 take the library's multi-block path (each row shared among many blocks of the GPU; the
same samples): the package keeps the zero-filled workspace it needs, one per device and stream
(PyTorch's current stream), allocated at the first such call (not inside a CUDA graph capture:
capture after one eager call, as engines do after warm-up). An explicit ``stream`` argument runs
without it (one block per row).

``top_k`` is FlashInfer's ``top_k`` selection, with its ``TopKTieBreak``: at the k-th largest value
ignis keeps the lowest indices, which honours ``NONE`` (any choice) and ``SMALL``; ``LARGE`` raises
UnsupportedError.

``top_k_page_table_transform`` and ``top_k_ragged_transform`` are FlashInfer's fused top-k transforms
of sparse attention (SGLang's DSA indexers): the k largest scores of each row's window
``[row_starts[i], row_starts[i] + lengths[i])``, returned as int32 KV slots (through a page table, or
plus an offset), ``-1`` padded (``include/ignis/topk.h``). Every tie_break is honoured; the selected
indices always come in ascending order (what FlashInfer gives with ``deterministic=True``).
"""

import enum
import os
import sys

from . import _ext
from ._alloc import framework_of, new_array, new_index_output, new_output
from ._common import capturing, dtype_name
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = [
    "softmax",
    "sampling_from_probs",
    "sampling_from_logits",
    "top_p_sampling_from_probs",
    "top_k_sampling_from_probs",
    "min_p_sampling_from_probs",
    "top_k_top_p_sampling_from_probs",
    "top_k_top_p_sampling_from_logits",
    "top_p_renorm_probs",
    "top_k_renorm_probs",
    "top_k_mask_logits",
    "chain_speculative_sampling",
    "top_k",
    "TopKTieBreak",
    "top_k_page_table_transform",
    "top_k_ragged_transform",
]

_counter = {"seed": int.from_bytes(os.urandom(8), "little") >> 1, "offset": 0, "generators": {}}


def _is_scalar(x):
    return isinstance(x, (int, float)) or (hasattr(x, "ndim") and x.ndim == 0 and not hasattr(x, "__dlpack__"))


def _threshold(x, default=None):
    """(array or None, scalar value or default): a threshold given per row or as one value."""
    if x is None:
        return None, default
    if _is_scalar(x):
        return None, x.item() if hasattr(x, "item") else x
    return x, default


def _seed_offset(generator, seed, offset):
    if seed is not None:
        return seed, 0 if offset is None else offset
    if generator is not None and hasattr(generator, "initial_seed"):
        seed = generator.initial_seed()
        if offset is not None:
            return seed, offset
        try:
            offset = generator.get_offset()
            generator.set_offset(offset + 1)
        except (AttributeError, RuntimeError):
            key = id(generator)
            offset = _counter["generators"].get(key, 0)
            _counter["generators"][key] = offset + 1
        return seed, offset
    if offset is None:
        offset = _counter["offset"]
        _counter["offset"] += 1
    return _counter["seed"], offset


def _has_nan(x):
    if hasattr(x, "isnan"):
        return bool(x.isnan().any())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        return bool(numpy.isnan(numpy.from_dlpack(x)).any())
    return False


_FILTER_ORDERS = {"top_k_first": _ext.IGNIS_FILTER_TOP_K_FIRST, "joint": _ext.IGNIS_FILTER_JOINT}


def _valid_rows(probs, indices):
    """valid[b] of the samplers' return_valid: output row b's distribution row holds an entry that
    is finite and > 0 (the allowed set of every filter then holds its largest one), and its
    indices[b] is in range."""
    rows = probs.shape[0]
    module = framework_of(probs)
    if module == "torch":
        drawable = ((probs > 0) & probs.isfinite()).any(dim=-1)
        if indices is None:
            return drawable
        index = indices.long()
        inside = (index >= 0) & (index < rows)
        return drawable[index.clamp(0, max(rows - 1, 0))] & inside if rows else inside
    xp = sys.modules[module] if module in ("numpy", "cupy") else probs.__array_namespace__()
    drawable = xp.any((probs > 0) & xp.isfinite(probs), axis=-1)
    if indices is None:
        return drawable
    index = xp.astype(indices, xp.int64) if not hasattr(indices, "astype") else indices.astype("int64")
    inside = (index >= 0) & (index < rows)
    return xp.take(drawable, xp.clip(index, 0, max(rows - 1, 0))) & inside if rows else inside


_workspaces = {}


def _workspace(input, batch, stream):
    """The zero-filled workspace of the multi-block path (include/ignis/sampling.h) for a call of
    `batch` rows of a PyTorch CUDA tensor, kept per device and stream (calls on one stream run in
    order, so they may share it; calls on other streams get their own); None where the path cannot
    apply: other frameworks and the host, above 32 rows or below a vocabulary of 4096 (the C size
    query says 0), an explicit `stream`, and while a CUDA graph is captured before a large enough
    buffer exists (the buffer must not come from the graph's private memory pool)."""
    if stream is not None or framework_of(input) != "torch" or not input.is_cuda:
        return None
    rows = 8
    while rows < batch:
        rows *= 2
    nbytes = _ext.sampling_workspace_size(rows, input.shape[-1])
    if nbytes == 0:
        return None
    torch = sys.modules["torch"]
    key = (input.device.index, torch.cuda.current_stream(input.device).cuda_stream)
    buffer = _workspaces.get(key)
    if buffer is None or buffer.shape[0] < nbytes:
        if capturing(input):
            return None
        buffer = new_array(input, (nbytes,), "uint8", fill=0)
        _workspaces[key] = buffer
    return buffer


def _sample(sample, input, input_name, indices, generator, check_nan, seed, offset, stream, top_k=None, top_p=None,
            min_p=None, filter_apply_order="top_k_first", return_valid=False):
    """Samples of `sample` (the _ext binding of the C sampling function) from input, in the dtype
    of indices (int32 without); a threshold not given leaves the C default (no filtering)."""
    if check_nan and _has_nan(input):
        raise ValueError("Input %s contains NaN." % input_name)
    order = _FILTER_ORDERS.get(filter_apply_order)
    if order is None:
        raise ValueError("filter_apply_order=%r but it must be 'top_k_first' or 'joint'" % (filter_apply_order,))
    batch = indices.shape[0] if indices is not None else input.shape[0]
    samples = new_array(input, (batch,), "int32" if indices is None else dtype_name(indices))
    k_arr, k_val = _threshold(top_k)
    p_arr, p_val = _threshold(top_p)
    m_arr, m_val = _threshold(min_p)
    seed, offset = _seed_offset(generator, seed, offset)
    sample(input, samples, indices=indices, top_k_arr=k_arr, top_k=k_val, top_p_arr=p_arr, top_p=p_val,
           min_p_arr=m_arr, min_p=m_val, filter_apply_order=order, seed=seed, offset=offset,
           workspace=_workspace(input, batch, stream), stream=stream)
    if return_valid:
        return samples, _valid_rows(input, indices)
    return samples


def softmax(logits, temperature=None, enable_pdl=None, *, stream=None):
    """``softmax(logits / temperature)`` per row, as float32 ``[batch, vocab]``.

    temperature: None (1), a positive scalar, or a float32 tensor ``[batch]`` (a row whose value is
    NaN or <= 0 becomes one-hot at its largest logit)."""
    probs = new_array(logits, tuple(logits.shape), "float32")
    arr, value = _threshold(temperature, 1.0)
    _ext.softmax(logits, arr, value, probs, stream)
    return probs


def sampling_from_probs(probs, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                        offset=None, return_valid=False, *, stream=None):
    """Sample a token per row of ``probs`` (unnormalized rows are fine). Returns ``[batch]`` samples
    (and the valid mask when ``return_valid``)."""
    return _sample(_ext.sampling_from_probs, probs, "probs", indices, generator, check_nan, seed, offset, stream,
                   return_valid=return_valid)


def sampling_from_logits(logits, indices=None, deterministic=True, generator=None, check_nan=False, seed=None,
                         offset=None, *, stream=None):
    """Sample a token per row from ``softmax(logits)``. Returns int32 ``[batch]``."""
    return _sample(_ext.sampling_from_logits, logits, "logits", indices, generator, check_nan, seed, offset, stream)


def top_p_sampling_from_probs(probs, top_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False, *, stream=None):
    """Top-p (nucleus) sampling: the smallest set of largest probabilities reaching ``top_p`` of the
    row's mass (ties kept). top_p: a float in (0, 1] or a float32 tensor ``[batch]``."""
    return _sample(_ext.top_p_sampling_from_probs, probs, "probs",
                   indices, generator, check_nan, seed, offset, stream, top_p=top_p, return_valid=return_valid)


def top_k_sampling_from_probs(probs, top_k, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False, *, stream=None):
    """Top-k sampling (ties at the k-th largest kept; 0 or >= vocab: no filtering). top_k: an int or
    an int tensor ``[batch]``."""
    return _sample(_ext.top_k_sampling_from_probs, probs, "probs",
                   indices, generator, check_nan, seed, offset, stream, top_k=top_k, return_valid=return_valid)


def min_p_sampling_from_probs(probs, min_p, indices=None, deterministic=True, generator=None, check_nan=False,
                              seed=None, offset=None, return_valid=False, *, stream=None):
    """Min-p sampling: tokens with probability >= min_p * max. min_p: a float in [0, 1] or a float32
    tensor ``[batch]``."""
    return _sample(_ext.min_p_sampling_from_probs, probs, "probs",
                   indices, generator, check_nan, seed, offset, stream, min_p=min_p, return_valid=return_valid)


def top_k_top_p_sampling_from_probs(probs, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                    deterministic=True, generator=None, check_nan=False, seed=None, offset=None,
                                    return_valid=False, *, stream=None):
    """Top-k and top-p sampling. filter_apply_order "top_k_first": top-p within the renormalized
    top-k set; "joint": both filters on the original row."""
    return _sample(_ext.top_k_top_p_sampling_from_probs, probs, "probs", indices, generator, check_nan, seed, offset,
                   stream, top_k=top_k, top_p=top_p, filter_apply_order=filter_apply_order,
                   return_valid=return_valid)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first",
                                     deterministic=True, generator=None, check_nan=False, seed=None, offset=None, *,
                                     stream=None):
    """Top-k and top-p sampling from logits (the filters apply to ``softmax(logits)``, fused: no
    probabilities are written)."""
    return _sample(_ext.top_k_top_p_sampling_from_logits, logits, "logits", indices, generator, check_nan, seed,
                   offset, stream, top_k=top_k, top_p=top_p, filter_apply_order=filter_apply_order)


def top_p_renorm_probs(probs, top_p, is_deterministic=False, *, stream=None):
    """Probabilities restricted to the top-p set and renormalized (others 0); probs' shape and dtype."""
    out, finish = new_output(probs)
    arr, value = _threshold(top_p, 1.0)
    _ext.top_p_renorm_probs(probs, arr, value, out, stream)
    return finish(out)


def top_k_renorm_probs(probs, top_k, is_deterministic=False, *, stream=None):
    """Probabilities restricted to the top-k set and renormalized (others 0); probs' shape and dtype."""
    out, finish = new_output(probs)
    arr, value = _threshold(top_k, 0)
    _ext.top_k_renorm_probs(probs, arr, value, out, stream)
    return finish(out)


def top_k_mask_logits(logits, top_k, *, stream=None):
    """Logits outside the top-k set set to -inf; logits' shape and dtype."""
    out, finish = new_output(logits)
    arr, value = _threshold(top_k, 0)
    _ext.top_k_mask_logits(logits, arr, value, out, stream)
    return finish(out)


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None, *, stream=None):
    """Speculative sampling over a chain of n draft tokens.

    draft_probs ``[batch, n, vocab]``, draft_token_ids ``[batch, n]``, target_probs
    ``[batch, n + 1, vocab]``. Returns (output_token_ids int32 ``[batch, n + 1]`` padded with -1,
    output_accepted_token_num, output_emitted_draft_token_num); the two counts are added to the
    given arrays (int32 zeros when None)."""
    batch, n = draft_token_ids.shape[0], draft_token_ids.shape[1]
    out = new_array(draft_probs, (batch, n + 1), "int32")
    accepted = maybe_output_accepted_token_num
    if accepted is None:
        accepted = new_array(draft_probs, (batch,), "int32", fill=0)
    emitted = maybe_output_emitted_draft_token_num
    if emitted is None:
        emitted = new_array(draft_probs, (batch,), "int32", fill=0)
    seed, offset = _seed_offset(generator, seed, offset)
    _ext.chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, out, accepted, emitted, seed, offset,
                                    stream)
    return out, accepted, emitted


class TopKTieBreak(enum.IntEnum):
    """FlashInfer's choice among equal values at the k-th largest (int values as FlashInfer's):
    NONE any, SMALL the lower indices, LARGE the higher ones."""

    NONE = 0
    SMALL = 1
    LARGE = 2


def top_k(input, k, sorted=False, deterministic=False, tie_break=TopKTieBreak.NONE, dsa_graph_safe=False, *,
          stream=None):
    """The k largest entries of each row of ``input [batch, d]`` (0 <= k <= d): (values in input's
    dtype, int64 indices), both ``[batch, k]``. sorted=True: descending values (lower index first
    among equals); False: the entries above the k-th largest in index order, then those equal to it.
    NaN ranks below -inf. Among entries equal to the k-th largest the lowest indices are kept
    (``TopKTieBreak.SMALL``, which also satisfies ``NONE``; ``LARGE`` raises UnsupportedError).
    ``deterministic`` is accepted (results are always deterministic), and so is ``dsa_graph_safe``
    (the call never synchronizes and is safe inside CUDA-graph capture)."""
    if tie_break not in (TopKTieBreak.NONE, TopKTieBreak.SMALL):
        if tie_break == TopKTieBreak.LARGE:
            raise UnsupportedError("ignis.top_k: tie_break=TopKTieBreak.LARGE is not supported: among values equal "
                                   "to the k-th largest ignis keeps the lowest indices (TopKTieBreak.SMALL)")
        raise InvalidArgumentError("ignis.top_k: tie_break=%r but it must be a TopKTieBreak (0, 1 or 2)"
                                   % (tie_break,))
    batch = input.shape[0]
    values, finish = new_output(input, shape=(batch, k))
    indices = new_array(input, (batch, k), "int64")
    _ext.top_k(input, k, 1 if sorted else 0, values, indices, stream)
    return finish(values), indices


def _tie_break_value(fn, tie_break):
    if tie_break not in (TopKTieBreak.NONE, TopKTieBreak.SMALL, TopKTieBreak.LARGE):
        raise InvalidArgumentError("ignis.%s: tie_break=%r but it must be a TopKTieBreak (0, 1 or 2)" % (fn, tie_break))
    return int(tie_break)


def top_k_page_table_transform(input, src_page_table, lengths, k, row_to_batch=None, deterministic=False,
                               tie_break=TopKTieBreak.NONE, dsa_graph_safe=False, row_starts=None,
                               page_table_row_starts=None, *, page_size=1, out=None, out_raw_indices=None,
                               stream=None):
    """Top-k of each row's score window mapped through a page table (FlashInfer's
    ``top_k_page_table_transform``): ``input [rows, max_len]`` (f32/f16/bf16, last dimension
    contiguous), int32 ``src_page_table [batch, width]``, ``lengths`` and the optional ``row_to_batch``,
    ``row_starts``, ``page_table_row_starts`` int32 ``[rows]``. A selected local index j of row i
    becomes ``src_page_table[b, pt_start + j // page_size] * page_size + j % page_size`` with b =
    ``row_to_batch[i]`` (or i) and pt_start = ``page_table_row_starts[i]`` (default ``row_starts[i]``,
    which page_size > 1 does not allow). Returns ``out`` (int32 ``[rows, k]``, allocated when None);
    ``out_raw_indices`` (int32 ``[rows, k]``) also receives j. Rows with ``lengths[i] <= k`` select
    every index; unused positions are -1. ``deterministic`` and ``dsa_graph_safe`` are accepted: results
    are always deterministic and the call never synchronizes (safe inside CUDA-graph capture)."""
    tie = _tie_break_value("top_k_page_table_transform", tie_break)
    finish = None
    if out is None:
        out, finish = new_index_output(input, (input.shape[0], max(int(k), 0)))
    _ext.top_k_page_table_transform(input, src_page_table, lengths, int(k), row_to_batch, row_starts,
                                    page_table_row_starts, int(page_size), tie, out, out_raw_indices, stream)
    return out if finish is None else finish(out)


def top_k_ragged_transform(input, offsets, lengths, k, deterministic=False, tie_break=TopKTieBreak.NONE,
                           dsa_graph_safe=False, row_starts=None, *, stream=None):
    """Top-k of each row's score window plus a per-row offset (FlashInfer's
    ``top_k_ragged_transform``): ``input [rows, max_len]`` (f32/f16/bf16), int32 ``offsets``,
    ``lengths`` and optional ``row_starts`` ``[rows]``. Returns int32 ``[rows, k]``: the selected local
    indices j (relative to ``row_starts[i]``) plus ``offsets[i]``, -1 in unused positions. Rows with
    ``lengths[i] <= k`` select every index. ``deterministic`` and ``dsa_graph_safe`` are accepted, as
    for ``top_k_page_table_transform``."""
    tie = _tie_break_value("top_k_ragged_transform", tie_break)
    out, finish = new_index_output(input, (input.shape[0], max(int(k), 0)))
    _ext.top_k_ragged_transform(input, offsets, lengths, int(k), row_starts, tie, out, stream)
    return finish(out)
