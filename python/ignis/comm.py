"""Tensor-parallel all-reduce with FlashInfer's names and arguments (flashinfer.comm): a
communicator over the ranks of one host, all-reduce (sum), and all-reduce fused with the residual
add, RMSNorm and fp8 quantization that follow it in a transformer layer (include/ignis/comm.h).

Creating the workspace is collective: every rank calls ``create_allreduce_fusion_workspace`` with
the same ``world_size``, ``max_token_num``, ``hidden_dim`` and ``dtype``, and its own ``rank``.
The ranks exchange the names of their peer-visible buffers (POSIX shared memory on the CPU, CUDA
IPC handles on a GPU) through an all-gather, taken from the first of these that is given:

    exchange=       ignis's own: a callable ``exchange(bytes) -> bytes`` returning every rank's
                    bytes concatenated in rank order (threads, MPI, a socket...)
    group=          a torch.distributed ProcessGroup (``all_gather_object``; a gloo CPU group is
                    best: vLLM passes its TP group's ``cpu_group``)
    comm_backend=   FlashInfer's CommBackend (``allgather(obj) -> sequence``): vLLM's and SGLang's
                    ``TorchDistBackend`` / ``CommBackend`` subclasses
    (none)          the default torch.distributed group when one is initialized; a world of one
                    rank needs no exchange

The workspace lives on ``device=`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``, a torch.device or a
CUDA ordinal; by default the current CUDA device when PyTorch sees one, else the CPU); its tensors
must be there too. Its capacity is ``max_token_num * hidden_dim * dtype's size`` bytes, the largest
message of a call (any shape whose size fits). ``backend`` "auto", "trtllm" or "ignis" all make
ignis's workspace (``workspace.backend == "ignis"``); "mnnvl" and "mnnvl-cutedsl" (NVLink
multicast, several nodes) raise UnsupportedError. ``gpus_per_node`` below ``world_size`` (several
nodes) is refused; ``force_oneshot_support`` is always met (one-shot runs at any size up to the
capacity); ``use_fp32_lamport`` (SGLang's, for f32) needs nothing: f32 is always supported.

``allreduce_fusion`` takes FlashInfer 0.7.2's arguments. What ignis does with the ones that are
not tensors:

    pattern                 0, 1, 2, 4 (AllReduceFusionPattern); the FP4 (3, 5), MoE and dynamic
                            or grouped FP8 patterns (6-12) raise UnsupportedError. Pattern 2 given
                            a ``norm_out`` runs as 4, writing it too (vLLM passes one)
    use_oneshot             None: ignis picks (see ``workspace.choose``); True one-shot; False
                            two-shot
    fp32_acc                True or False: ignis always sums in f32, in rank order, so every rank
                            gets the same bits (False allows less; f32 is at least as precise)
    launch_with_pdl,        accepted: ignis launches in stream order and signals completion at the
    trigger_completion_at_end   end of the kernel, which every value of the two allows
    scale_out, layout_code  only FP4 and dynamic FP8 use them: non-None raises UnsupportedError
    scale_factor            a float or a one-element f32 tensor on the input's device (fp8 = sat(
                            norm / scale_factor), e4m3, round to nearest even)
    weight_bias             added to rms_gamma (1.0 for Gemma); the norm patterns only

``residual_in`` must hold the same values on every rank (as in tensor parallelism, and as
FlashInfer requires): two-shot adds, to each slice of rows, the residual of the rank that reduces it.

Returns what FlashInfer returns: ``norm_out`` when given, else ``quant_out``, else ``output``
(allocated like ``input`` for pattern 0 when None). Outputs may alias as vLLM passes them:
``output`` may be ``input`` (in place), ``norm_out`` may be ``input``, ``residual_out`` may be
``residual_in`` or ``input``.

Ranks may be threads of one process: every call that waits for peers releases the GIL. A rank that
waits longer than ``timeout_s`` (30 s by default) raises PeerTimeoutError (a TimeoutError). On
CUDA a kernel that timed out leaves its outputs unspecified and ``workspace.check()`` raises it.

``all_reduce(tensor, workspace, algo="auto")`` is the plain sum, in place unless ``out=`` is given.
"""

import sys

from . import _ext
from ._alloc import new_output
from ._errors import ArgumentTypeError, DtypeError, InvalidArgumentError, UnsupportedError
from .quantization import scale_array

__all__ = ["AllReduceFusionPattern", "QuantizationSFLayout", "AllReduceFusionWorkspace",
           "create_allreduce_fusion_workspace", "allreduce_fusion", "all_reduce"]


class AllReduceFusionPattern:
    """FlashInfer's fusion patterns (ints). ignis runs kAllReduce, kARResidualRMSNorm,
    kARResidualRMSNormFP8Quant and kARResidualRMSNormOutFP8Quant."""

    kAllReduce = 0
    kARResidualRMSNorm = 1
    kARResidualRMSNormFP8Quant = 2
    kARResidualRMSNormFP4Quant = 3
    kARResidualRMSNormOutFP8Quant = 4
    kARResidualRMSNormOutFP4Quant = 5
    kMoEReductionARResidualRMSNorm = 6
    kMoEFinalizeARResidualRMSNorm = 7
    kARResidualRMSNormPerTokenGroupFP8PackedQuant = 8
    kARResidualRMSNormOutPerTokenGroupFP8PackedQuant = 9
    kARResidualRMSNormDynamicFP8Quant = 10
    kARResidualRMSNormOutDynamicFP8Quant = 11
    kMoEFinalizeARResidualRMSNormFP8Quant = 12


class QuantizationSFLayout:
    """FlashInfer's NVFP4 scale-factor layouts (``layout_code``); ignis has no FP4 pattern."""

    SWIZZLED_128x4 = 0
    SWIZZLED_8x4 = 1
    LINEAR = 2


_PATTERN_NAMES = {v: k for k, v in vars(AllReduceFusionPattern).items() if k.startswith("k")}
_RUNS = {0: _ext.IGNIS_AR_FUSION_ALLREDUCE, 1: _ext.IGNIS_AR_FUSION_RESIDUAL_RMSNORM,
         2: _ext.IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8, 4: _ext.IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8}
_ALGOS = {"auto": _ext.IGNIS_ALLREDUCE_AUTO, "oneshot": _ext.IGNIS_ALLREDUCE_ONESHOT,
          "twoshot": _ext.IGNIS_ALLREDUCE_TWOSHOT, "nccl": _ext.IGNIS_ALLREDUCE_NCCL}
_ALGO_NAMES = {v: k for k, v in _ALGOS.items()}
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def _dtype_size(fn, dtype):
    name = dtype if isinstance(dtype, str) else str(getattr(dtype, "name", None) or dtype)
    name = name.rsplit(".", 1)[-1]
    name = {"float": "float32", "half": "float16", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}.get(name,
                                                                                                          name)
    if name not in _ITEMSIZE:
        raise DtypeError("%s: dtype=%s but it must be float32, float16 or bfloat16" % (fn, dtype))
    return _ITEMSIZE[name]


def _device_of(fn, device):
    """(IGNIS_DEVICE_*, ordinal) of device= (None: the current CUDA device when PyTorch sees one)."""
    if device is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return _ext.IGNIS_DEVICE_CUDA, torch.cuda.current_device(), "cuda:%d" % torch.cuda.current_device()
        return _ext.IGNIS_DEVICE_CPU, 0, "cpu"
    if isinstance(device, int) and not isinstance(device, bool):
        return _ext.IGNIS_DEVICE_CUDA, device, "cuda:%d" % device
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return _ext.IGNIS_DEVICE_CPU, 0, "cpu"
    if kind == "cuda" and (not index or index.isdigit()):
        if not index:
            torch = sys.modules.get("torch")
            ordinal = None if isinstance(device, str) else getattr(device, "index", None)
            index = ordinal if ordinal is not None else (torch.cuda.current_device() if torch is not None else 0)
        return _ext.IGNIS_DEVICE_CUDA, int(index), "cuda:%d" % int(index)
    raise InvalidArgumentError("%s: device=%r but it must be 'cpu', 'cuda' or 'cuda:N'" % (fn, device))


def _torch_dist():
    import torch.distributed as dist

    return dist


def _group_gather(group):
    dist = _torch_dist()

    def gather(data):
        parts = [None] * dist.get_world_size(group)
        dist.all_gather_object(parts, data, group=group)
        return b"".join(parts)

    return gather


def _exchange_source(fn, exchange, group, comm_backend, world_size):
    """(the exchange callable, the (world_size, rank) its source knows or None)."""
    if exchange is not None:
        if not callable(exchange):
            raise ArgumentTypeError("%s: exchange must be callable, exchange(bytes) -> bytes" % fn)
        return exchange, None
    if group is not None:
        dist = _torch_dist()
        return _group_gather(group), (dist.get_world_size(group), dist.get_rank(group))
    if comm_backend is not None:
        if not callable(getattr(comm_backend, "allgather", None)):
            raise ArgumentTypeError("%s: comm_backend must have allgather(obj) (FlashInfer's CommBackend)" % fn)
        known = None
        if callable(getattr(comm_backend, "Get_size", None)) and callable(getattr(comm_backend, "Get_rank", None)):
            known = (comm_backend.Get_size(), comm_backend.Get_rank())
        return (lambda data: b"".join(comm_backend.allgather(data))), known
    if world_size == 1:
        return (lambda data: data), (1, 0)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return _group_gather(None), (dist.get_world_size(), dist.get_rank())
    if world_size is None:
        return (lambda data: data), (1, 0)
    raise InvalidArgumentError("%s: world_size=%d needs group=, comm_backend= or exchange= (or an initialized "
                               "torch.distributed) to exchange the buffers' names" % (fn, world_size))


class AllReduceFusionWorkspace:
    """This rank's communicator and the facts FlashInfer's workspaces expose: ``backend``
    ("ignis"), ``world_size``, ``rank``, ``max_token_num``, ``hidden_dim``, ``dtype``,
    ``device`` and ``capacity`` (bytes). Made by create_allreduce_fusion_workspace."""

    def __init__(self, handle, world_size, rank, max_token_num, hidden_dim, dtype, device, capacity):
        self._handle = handle
        self.world_size = world_size
        self.rank = rank
        self.max_token_num = max_token_num
        self.hidden_dim = hidden_dim
        self.dtype = dtype
        self.device = device
        self.capacity = capacity
        self._destroyed = False

    @property
    def backend(self):
        return "ignis"

    def is_buffer_size_sufficient(self, tp_size, num_tokens, hidden_dim, dtype, use_oneshot=None):
        """Whether a call of ``num_tokens x hidden_dim`` of ``dtype`` on ``tp_size`` ranks fits
        (one-shot and two-shot need the same room)."""
        fn = "is_buffer_size_sufficient"
        return (not self._destroyed and tp_size == self.world_size
                and num_tokens * hidden_dim * _dtype_size(fn, dtype) <= self.capacity)

    def choose(self, nbytes):
        """The algorithm ignis runs for a message of ``nbytes`` when none is forced: "oneshot",
        "twoshot" or "nccl"."""
        return _ALGO_NAMES[_ext.allreduce_choose(self._live("choose"), nbytes)]

    def check(self):
        """Raise the failure an earlier call recorded (a CUDA kernel that gave up waiting for its
        peers: PeerTimeoutError); CUDA: synchronizes the device."""
        _ext.comm_check(self._live("check"))

    def destroy(self):
        """Release this rank's communicator (not collective; finish the last call first: on CUDA,
        synchronize its stream). Repeated calls do nothing."""
        if not self._destroyed:
            self._destroyed = True
            _ext.comm_destroy(self._handle)

    def _live(self, fn):
        if self._destroyed:
            raise InvalidArgumentError("%s: the workspace was destroyed" % fn)
        return self._handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __repr__(self):
        return "AllReduceFusionWorkspace(backend='ignis', world_size=%d, rank=%d, device=%s, capacity=%d%s)" % (
            self.world_size, self.rank, self.device, self.capacity, ", destroyed" if self._destroyed else "")


_CUTEDSL_ONLY = ("top_k", "rms_eps", "weight_bias", "routed_scaling_factor", "include_shared_expert", "add_residual",
                 "write_residual_output", "apply_rms_norm", "output_dtype", "dynamic_fp8", "write_norm_output", "config")


def create_allreduce_fusion_workspace(backend="auto", world_size=None, rank=None, max_token_num=None, hidden_dim=None,
                                      dtype=None, gpus_per_node=None, comm_backend=None, force_oneshot_support=False,
                                      group=None, *, top_k=None, rms_eps=None, weight_bias=None,
                                      routed_scaling_factor=None, include_shared_expert=None, add_residual=None,
                                      write_residual_output=None, apply_rms_norm=None, output_dtype=None,
                                      dynamic_fp8=None, write_norm_output=None, config=None, exchange=None,
                                      device=None, timeout_s=30.0, use_fp32_lamport=None):
    """Collective: this rank's all-reduce workspace (see the module's text). FlashInfer 0.7.2's
    arguments, plus ignis's ``exchange=``, ``device=`` and ``timeout_s=``."""
    fn = "create_allreduce_fusion_workspace"
    if backend in ("mnnvl", "mnnvl-cutedsl"):
        raise UnsupportedError("%s: backend=%r needs NVLink multicast; ignis's workspace (backend 'auto', 'trtllm' "
                               "or 'ignis') spans the GPUs of one host through CUDA IPC" % (fn, backend))
    if backend not in ("auto", "trtllm", "ignis"):
        raise InvalidArgumentError("%s: backend=%r but it must be 'auto', 'trtllm' or 'ignis'" % (fn, backend))
    given = dict(top_k=top_k, rms_eps=rms_eps, weight_bias=weight_bias, routed_scaling_factor=routed_scaling_factor,
                 include_shared_expert=include_shared_expert, add_residual=add_residual,
                 write_residual_output=write_residual_output, apply_rms_norm=apply_rms_norm,
                 output_dtype=output_dtype, dynamic_fp8=dynamic_fp8, write_norm_output=write_norm_output,
                 config=config)
    cutedsl = [name for name in _CUTEDSL_ONLY if given[name] is not None]
    if cutedsl:
        raise UnsupportedError("%s: %s configure FlashInfer's mnnvl-cutedsl backend, which ignis does not have"
                               % (fn, ", ".join(cutedsl)))
    for name, value in (("max_token_num", max_token_num), ("hidden_dim", hidden_dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError("%s: %s=%r but it must be a positive int" % (fn, name, value))
    if dtype is None:
        raise InvalidArgumentError("%s: dtype is required (the dtype of the tensors to reduce)" % fn)
    itemsize = _dtype_size(fn, dtype)
    send, known = _exchange_source(fn, exchange, group, comm_backend, world_size)
    if known is not None:
        for name, value, expected in (("world_size", world_size, known[0]), ("rank", rank, known[1])):
            if value is not None and value != expected:
                raise InvalidArgumentError("%s: %s=%r but the group says %d" % (fn, name, value, expected))
        world_size = known[0] if world_size is None else world_size
        rank = known[1] if rank is None else rank
    for name, value in (("world_size", world_size), ("rank", rank)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgumentError("%s: %s=%r but it must be an int (or come from group=/comm_backend=)"
                                       % (fn, name, value))
    if gpus_per_node is not None and gpus_per_node < world_size:
        raise UnsupportedError("%s: gpus_per_node=%d < world_size=%d spans several nodes; ignis's communicator "
                               "spans one host" % (fn, gpus_per_node, world_size))
    device_type, device_id, device_name = _device_of(fn, device)
    capacity = max_token_num * hidden_dim * itemsize
    handle = _ext.comm_create(world_size, rank, device_type, device_id, capacity, timeout_s, send)
    world_size, rank, capacity = _ext.comm_info(handle)
    return AllReduceFusionWorkspace(handle, world_size, rank, max_token_num, hidden_dim, dtype, device_name, capacity)


def _workspace_handle(fn, workspace):
    if not isinstance(workspace, AllReduceFusionWorkspace):
        raise ArgumentTypeError("%s: workspace must be made by create_allreduce_fusion_workspace, not %s"
                                % (fn, type(workspace).__name__))
    return workspace._live(fn)


def allreduce_fusion(input, workspace, pattern, launch_with_pdl=False, trigger_completion_at_end=True, output=None,
                     residual_out=None, norm_out=None, quant_out=None, scale_out=None, residual_in=None,
                     rms_gamma=None, rms_eps=1e-6, scale_factor=None, layout_code=None, use_oneshot=None,
                     fp32_acc=False, moe_reduction_device_num_experts=None, moe_reduction_scale_input=None,
                     moe_reduction_active_experts_token_input=None, moe_reduction_token_input=None,
                     expanded_idx_to_permuted_idx=None, expert_scale_factor=None, shared_expert_output=None,
                     block_quant_group_size=None, weight_bias=0.0, *, moe_finalize_backend="trtllm", stream=None):
    """All-reduce (sum over the ranks) of ``input``, fused with what ``pattern`` names; collective
    (every rank calls it with the same pattern, shapes and dtypes). See the module's text."""
    fn = "allreduce_fusion"
    handle = _workspace_handle(fn, workspace)
    if isinstance(pattern, bool) or not isinstance(pattern, int):
        raise ArgumentTypeError("%s: pattern must be an AllReduceFusionPattern value (an int), not %r" % (fn, pattern))
    if pattern not in _RUNS:
        if pattern in _PATTERN_NAMES:
            raise UnsupportedError("%s: pattern=%s (%d) is not supported by ignis (kAllReduce, kARResidualRMSNorm, "
                                   "kARResidualRMSNormFP8Quant and kARResidualRMSNormOutFP8Quant are)"
                                   % (fn, _PATTERN_NAMES[pattern], pattern))
        raise InvalidArgumentError("%s: pattern=%d is not an AllReduceFusionPattern" % (fn, pattern))
    moe = dict(moe_reduction_device_num_experts=moe_reduction_device_num_experts,
               moe_reduction_scale_input=moe_reduction_scale_input,
               moe_reduction_active_experts_token_input=moe_reduction_active_experts_token_input,
               moe_reduction_token_input=moe_reduction_token_input,
               expanded_idx_to_permuted_idx=expanded_idx_to_permuted_idx, expert_scale_factor=expert_scale_factor,
               shared_expert_output=shared_expert_output, block_quant_group_size=block_quant_group_size,
               scale_out=scale_out, layout_code=layout_code)
    refused = [name for name, value in moe.items() if value is not None]
    if refused:
        raise UnsupportedError("%s: %s belong to the MoE, grouped-FP8, dynamic-FP8 and FP4 patterns, which ignis "
                               "does not have" % (fn, ", ".join(refused)))
    if moe_finalize_backend != "trtllm":
        raise UnsupportedError("%s: moe_finalize_backend=%r: ignis has no MoE finalize pattern"
                               % (fn, moe_finalize_backend))
    if use_oneshot is None:
        algo = _ext.IGNIS_ALLREDUCE_AUTO
    else:
        algo = _ext.IGNIS_ALLREDUCE_ONESHOT if use_oneshot else _ext.IGNIS_ALLREDUCE_TWOSHOT
    if pattern == AllReduceFusionPattern.kAllReduce and weight_bias != 0.0:
        raise InvalidArgumentError("%s: weight_bias=%r applies to the norm patterns, not kAllReduce"
                                   % (fn, weight_bias))
    if pattern == AllReduceFusionPattern.kARResidualRMSNormFP8Quant and norm_out is not None:
        pattern = AllReduceFusionPattern.kARResidualRMSNormOutFP8Quant
    finish = None
    if pattern == AllReduceFusionPattern.kAllReduce and output is None:
        output, finish = new_output(input)
    if scale_factor is not None:
        scale_factor = scale_array(scale_factor, input)
        if getattr(scale_factor, "ndim", 1) == 0:
            scale_factor = scale_factor.reshape(1)
    # residual_out may be input itself (vLLM's calls): the C API allows that alias
    _ext.allreduce_fusion(handle, _RUNS[pattern], algo, input, output, residual_in, residual_out, norm_out, quant_out,
                          rms_gamma, scale_factor, rms_eps, weight_bias, stream)
    if norm_out is not None:
        return norm_out
    if quant_out is not None:
        return quant_out
    return finish(output) if finish is not None else output


def all_reduce(tensor, workspace, algo="auto", out=None, *, stream=None):
    """Sum ``tensor`` over the ranks (collective): in place (returns ``tensor``), or into ``out``.
    ``algo``: "auto" (ignis picks by size and world), "oneshot", "twoshot" or "nccl" (CUDA with an
    NCCL communicator only)."""
    fn = "all_reduce"
    handle = _workspace_handle(fn, workspace)
    if algo not in _ALGOS:
        raise InvalidArgumentError("%s: algo=%r but it must be 'auto', 'oneshot', 'twoshot' or 'nccl'" % (fn, algo))
    target = tensor if out is None else out
    _ext.allreduce(handle, tensor, target, _ALGOS[algo], stream)
    return target
