"""The switch (ignis.switch, IGNIS_AS_FLASHINFER=1) and the FlashInfer namespace it loads.

- In fresh interpreters that start as an installed ignis does (the .pth run by site): every name
  vLLM's and SGLang's FlashInfer attention backends and samplers import (ENGINES.md, Appendix C,
  and the call-time imports beside them) resolves at its FlashInfer path; the FlashInfer modules
  ignis has nothing of are not found; the switch is off by default, never shadows a real
  FlashInfer (a fake `flashinfer` package on sys.path, present at start-up or appearing later),
  and is reversible in-process; versions answer honestly and no distribution metadata appears.
- In this process (installed and removed around each test): what the load-time names do when
  called (the absent features raise UnsupportedError naming them; flashinfer.utils answers from
  ignis' device facts), and the tensor contract of the page and cascade ops the backends call
  (int64 index arrays, bool masks, FlashInfer's output buffers).
"""

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ignis
import ignis.switch
from refs import VIEW_FRAME_IDS, VIEW_FRAMES, ml_dtypes, torch

HAVE_CUDA = ignis.cuda_device_count() > 0
REAL_FLASHINFER = ignis.switch._real_flashinfer_findable(ignis.switch._FINDER)
pytestmark = pytest.mark.skipif(REAL_FLASHINFER, reason="a real FlashInfer is installed: the switch stays off")

# The directory holding the ignis package (site-packages, or <build>/python); the .pth is there.
SITE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(ignis.__file__)))

# (module, name): what the engines import, by the file that imports it.
ENGINE_IMPORTS = {
    "vllm/v1/attention/backends/flashinfer.py": [
        ("flashinfer", "BatchAttentionWithAttentionSinkWrapper"),
        ("flashinfer", "BatchDecodeWithPagedKVCacheWrapper"),
        ("flashinfer", "BatchPrefillWithPagedKVCacheWrapper"),
        ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper"),
        ("flashinfer", "get_seq_lens"),
        ("flashinfer", "nvfp4_quantize_append_paged_kv_cache_with_slot_mapping"),
        ("flashinfer.decode", "fast_decode_plan"),
        ("flashinfer.decode", "trtllm_batch_decode_with_kv_cache"),
        ("flashinfer.prefill", "trtllm_batch_context_with_kv_cache"),
        ("flashinfer.utils", "FP4Tensor"),
        ("flashinfer.utils", "get_device_sm_count"),
        ("flashinfer.utils", "get_trtllm_gen_multi_ctas_kv_counter_bytes"),
    ],
    "vllm/utils/flashinfer.py (call time)": [
        ("flashinfer.decode", "xqa_batch_decode_with_kv_cache"),
        ("flashinfer.decode", "trtllm_batch_decode_with_kv_cache_mla"),
        ("flashinfer.mla", "BatchMLAPagedAttentionWrapper"),
    ],
    "vllm/v1/attention/backends/mla/flashinfer_mla.py": [
        ("flashinfer.decode", "trtllm_batch_decode_with_kv_cache_mla"),
        ("flashinfer.utils", "get_device_sm_count"),
        ("flashinfer.utils", "get_trtllm_gen_multi_ctas_kv_counter_bytes"),
    ],
    "vllm/model_executor/layers/attention/mla prefill (flashinfer.py)": [
        ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper"),
    ],
    "vllm/v1/sample/ops/topk_topp_sampler.py": [
        ("flashinfer.jit.core", "check_cuda_arch"),
        ("flashinfer.sampling", "top_p_sampling_from_probs"),
        ("flashinfer.sampling", "top_k_sampling_from_probs"),
        ("flashinfer.sampling", "top_k_top_p_sampling_from_logits"),
    ],
    "sglang/srt/layers/attention/flashinfer_backend.py": [
        ("flashinfer", "BatchDecodeWithPagedKVCacheWrapper"),
        ("flashinfer", "BatchPrefillWithPagedKVCacheWrapper"),
        ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper"),
        ("flashinfer", "fast_decode_plan"),
        ("flashinfer.cascade", "merge_state"),
    ],
    "sglang/srt/layers/attention/flashinfer_mla_backend.py": [
        ("flashinfer", "BatchMLAPagedAttentionWrapper"),
        ("flashinfer", "BatchPrefillWithRaggedKVCacheWrapper"),
    ],
    "sglang samplers (sampler.py, renorm.py, dspark, uno_tree, dflash, dsa, qsa)": [
        ("flashinfer.sampling", "top_k_top_p_sampling_from_probs"),
        ("flashinfer.sampling", "min_p_sampling_from_probs"),
        ("flashinfer.sampling", "top_k_renorm_probs"),
        ("flashinfer.sampling", "top_p_renorm_probs"),
        ("flashinfer.sampling", "softmax"),
        ("flashinfer", "top_k"),
        ("flashinfer", "TopKTieBreak"),
        ("flashinfer", "top_k_ragged_transform"),
        ("flashinfer", "top_k_page_table_transform"),
        ("flashinfer", "__version__"),
    ],
    "sglang/srt/layers/quantization/fp8_utils.py (SM90)": [
        ("flashinfer", "bmm_fp8"),
        ("flashinfer.gemm", "fp8_blockscale_gemm_sm90"),
        ("flashinfer.gemm", "gemm_fp8_nt_groupwise"),
    ],
    "sglang/kernels/ops/gemm/nvfp4_gemm_swiglu_nvfp4_quant.py": [
        ("flashinfer.utils", "get_compute_capability"),
    ],
    "vllm and sglang MoE layers (flashinfer.fused_moe, ENGINES.md section 1)": [
        ("flashinfer.fused_moe", "cutlass_fused_moe"),
        ("flashinfer.fused_moe", "trtllm_bf16_routed_moe"),
        ("flashinfer.fused_moe", "trtllm_fp8_block_scale_routed_moe"),
        ("flashinfer.fused_moe", "trtllm_fp8_per_tensor_scale_moe"),
        ("flashinfer.fused_moe", "trtllm_fp4_block_scale_moe"),
        ("flashinfer.fused_moe", "convert_to_block_layout"),
        ("flashinfer.fused_moe.core", "ActivationType"),
        ("flashinfer.fused_moe.core", "get_w2_permute_indices_with_cache"),
        ("flashinfer.fused_moe.core", "_maybe_get_cached_w3_w1_permute_indices"),
        ("flashinfer", "cutlass_fused_moe"),
        ("flashinfer", "trtllm_fp8_block_scale_moe"),
    ],
    "vllm and sglang all-reduce fusion (flashinfer.comm, ENGINES.md section 1)": [
        ("flashinfer.comm", "allreduce_fusion"),
        ("flashinfer.comm", "create_allreduce_fusion_workspace"),
        ("flashinfer.comm", "AllReduceFusionPattern"),
        ("flashinfer.comm", "MoeAlltoAll"),
        ("flashinfer.comm", "moe_a2a_get_workspace_size_per_rank"),
        ("flashinfer.comm.mapping", "Mapping"),
        ("flashinfer.comm.mnnvl", "TorchDistBackend"),
        ("flashinfer.comm.mnnvl", "CommBackend"),
        ("flashinfer.comm.mnnvl", "MnnvlConfig"),
    ],
}
IMPORTS = sorted({pair for pairs in ENGINE_IMPORTS.values() for pair in pairs})

# FlashInfer modules ignis has nothing of: engines probe them with find_spec and must see None.
ABSENT_MODULES = ["flashinfer.cute_dsl",
                  "flashinfer.compilation_context", "flashinfer.fp4_quantization", "flashinfer.autotuner"]


def run_python(code, env_var="1", extra_path=None):
    """Run `code` in a fresh interpreter that starts as an installed ignis does: the site directory
    holding ignis is added with site.addsitedir, which runs ignis_as_flashinfer.pth. Returns the
    completed process (stdout: the last line is JSON when the code prints one)."""
    env = dict(os.environ)
    env.pop(ignis.switch.ENV_VAR, None)
    if env_var is not None:
        env[ignis.switch.ENV_VAR] = env_var
    path = [p for p in [extra_path, SITE_DIR, env.get("PYTHONPATH")] if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    prologue = "import site, sys, json; site.addsitedir(%r)\n" % SITE_DIR
    return subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def result_of(process):
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout.strip().splitlines()[-1])


# ---- resolution through the switch, in fresh interpreters ----------------------------------------
@pytest.fixture(scope="module")
def resolved():
    code = """
        import importlib, importlib.util
        out = {"imports": {}, "absent": {}}
        for module, name in %r:
            try:
                value = getattr(importlib.import_module(module), name)
                out["imports"][module + ":" + name] = "ok" if value is not None else "None"
            except Exception as e:
                out["imports"][module + ":" + name] = "%%s: %%s" %% (type(e).__name__, e)
        for module in %r:
            out["absent"][module] = importlib.util.find_spec(module) is None
        import flashinfer
        out["spec_origin"] = importlib.util.find_spec("flashinfer").origin
        out["modules"] = sorted(m for m in sys.modules if m.startswith("flashinfer"))
        out["module_names"] = sorted({sys.modules[m].__name__ for m in out["modules"]})
        print(json.dumps(out))
    """ % (IMPORTS, ABSENT_MODULES)
    return result_of(run_python(code))


@pytest.mark.parametrize("module,name", IMPORTS, ids=["%s:%s" % pair for pair in IMPORTS])
def test_engine_import_resolves(resolved, module, name):
    assert resolved["imports"][module + ":" + name] == "ok"


@pytest.mark.parametrize("module", ABSENT_MODULES)
def test_modules_ignis_lacks_are_not_found(resolved, module):
    assert resolved["absent"][module]


def test_namespace_is_loaded_under_flashinfer_names(resolved):
    assert resolved["spec_origin"].startswith(os.path.join(SITE_DIR, "ignis", "_flashinfer"))
    assert resolved["modules"] == resolved["module_names"]  # no module loaded under an ignis._flashinfer name
    for module in ("flashinfer.decode", "flashinfer.prefill", "flashinfer.utils", "flashinfer.sampling",
                   "flashinfer.jit.core", "flashinfer.cascade", "flashinfer.mla", "flashinfer.topk"):
        assert module in resolved["modules"]


def test_versions_and_no_metadata():
    code = """
        import importlib.metadata, importlib.util, flashinfer, ignis
        missing = []
        for dist in ("flashinfer_python", "flashinfer-python", "flashinfer"):
            try:
                importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                missing.append(dist)
        print(json.dumps([flashinfer.__version__, flashinfer.__ignis_version__, ignis.__version__, missing,
                          importlib.util.find_spec("flashinfer") is not None]))
    """
    version, ignis_version, library_version, missing, found = result_of(run_python(code))
    assert version == "0.7.2"
    assert ignis_version == library_version == ignis.__version__
    assert missing == ["flashinfer_python", "flashinfer-python", "flashinfer"]
    assert found  # vLLM's has_flashinfer() and SGLang's is_flashinfer_available() start with find_spec


@pytest.mark.parametrize("env_var", [None, "0", ""])
def test_off_by_default(env_var):
    code = """
        import importlib.util, ignis.switch
        try:
            import flashinfer
            imported = True
        except ModuleNotFoundError:
            imported = False
        print(json.dumps([imported, importlib.util.find_spec("flashinfer") is None, ignis.switch.installed()]))
    """
    assert result_of(run_python(code, env_var=env_var)) == [False, True, False]


@pytest.fixture
def fake_flashinfer(tmp_path):
    """A directory holding a package `flashinfer` that says it is the real one."""
    package = tmp_path / "flashinfer"
    package.mkdir()
    (package / "__init__.py").write_text("REAL = True\n__version__ = '9.9.9'\n")
    (package / "decode.py").write_text("REAL_DECODE = True\n")
    return str(tmp_path)


def test_never_shadows_a_real_flashinfer(fake_flashinfer):
    code = """
        import ignis.switch, flashinfer, flashinfer.decode
        print(json.dumps([flashinfer.REAL, flashinfer.decode.REAL_DECODE, flashinfer.__version__,
                          ignis.switch.installed(), ignis.switch.install()]))
    """
    process = run_python(code, extra_path=fake_flashinfer)
    assert result_of(process) == [True, True, "9.9.9", False, False]
    assert "IGNIS_AS_FLASHINFER=1 is ignored" in process.stderr


def test_defers_to_a_flashinfer_that_appears_later(fake_flashinfer):
    code = """
        import ignis.switch
        on = ignis.switch.installed()
        sys.path.insert(0, %r)
        import flashinfer
        print(json.dumps([on, getattr(flashinfer, "REAL", False)]))
    """ % fake_flashinfer
    assert result_of(run_python(code)) == [True, True]


def test_a_bare_flashinfer_directory_is_not_a_flashinfer(tmp_path):
    (tmp_path / "flashinfer").mkdir()  # no __init__.py: at most a namespace package
    code = """
        import flashinfer
        print(json.dumps(flashinfer.__version__))
    """
    assert result_of(run_python(code, extra_path=str(tmp_path))) == "0.7.2"


def test_reversible_in_process():
    code = """
        import ignis.switch
        import flashinfer, flashinfer.sampling
        kept = flashinfer.sampling.top_k
        steps = [ignis.switch.uninstall(), ignis.switch.installed(),
                 any(m == "flashinfer" or m.startswith("flashinfer.") for m in sys.modules)]
        try:
            import flashinfer
            steps.append("imported")
        except ModuleNotFoundError:
            steps.append("not found")
        steps.append(ignis.switch.uninstall())
        steps.append(kept(__import__("numpy").ones((1, 4), "float32"), 2)[1].shape[1])
        steps.append(ignis.switch.install())
        import flashinfer
        steps.append(flashinfer.__version__)
        print(json.dumps(steps))
    """
    assert result_of(run_python(code)) == [True, False, False, "not found", False, 2, True, "0.7.2"]


def test_install_without_the_variable():
    code = """
        import ignis.switch
        first = ignis.switch.installed()
        print(json.dumps([first, ignis.switch.install(), ignis.switch.install(), __import__("flashinfer").__version__]))
    """
    assert result_of(run_python(code, env_var=None)) == [False, True, True, "0.7.2"]


# ---- the namespace's names when called, in this process -------------------------------------------
@pytest.fixture
def flashinfer():
    """The switch's flashinfer package, imported in this process and removed afterwards."""
    was_on = ignis.switch.installed()
    assert ignis.switch.install()
    try:
        yield importlib.import_module("flashinfer")
    finally:
        if not was_on:
            ignis.switch.uninstall()


def test_reexports_are_ignis_objects(flashinfer):
    import flashinfer.decode
    import flashinfer.prefill
    import flashinfer.sampling

    assert flashinfer.BatchDecodeWithPagedKVCacheWrapper is ignis.BatchDecodeWithPagedKVCacheWrapper
    assert flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper is ignis.decode.BatchDecodeWithPagedKVCacheWrapper
    assert flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper is ignis.BatchPrefillWithPagedKVCacheWrapper
    assert flashinfer.sampling.top_k_top_p_sampling_from_probs is ignis.top_k_top_p_sampling_from_probs
    assert flashinfer.cascade.merge_state is ignis.merge_state
    assert flashinfer.TopKTieBreak is ignis.TopKTieBreak and flashinfer.top_k is ignis.top_k
    for name in ignis.__all__:
        assert getattr(flashinfer, name) is getattr(ignis, name)
    # SGLang's old-FlashInfer probe must fail, so it sizes tensor cores by GQA group instead
    assert not hasattr(flashinfer.decode, "_grouped_size_compiled_for_decode_kernels")


ABSENT_CALLS = [
    ("decode", "trtllm_batch_decode_with_kv_cache_mla", "MLA"),
    ("page", "nvfp4_quantize_append_paged_kv_cache_with_slot_mapping", "NVFP4"),
    ("page", "nvfp4_quantize_append_paged_kv_cache", "NVFP4"),
]


@pytest.mark.parametrize("module,name,feature", ABSENT_CALLS, ids=[c[1] for c in ABSENT_CALLS])
def test_absent_features_raise_naming_them(flashinfer, module, name, feature):
    fn = getattr(importlib.import_module("flashinfer." + module), name)
    with pytest.raises(ignis.UnsupportedError, match=feature) as raised:
        fn(np.zeros(4, np.float32), kv_layout="HND")
    assert isinstance(raised.value, NotImplementedError) and name in str(raised.value)


def test_mla_wrapper_answers_signature_probes(flashinfer):
    # vLLM's has_flashinfer_sm90_nope_mla(): inspect.signature(run) must work and lack ckv_scale_arr
    # (with it vLLM drives FlashInfer internals ignis does not have)
    params = inspect.signature(flashinfer.mla.BatchMLAPagedAttentionWrapper.run).parameters
    assert "ckv_scale_arr" not in params
    assert flashinfer.mla.BatchMLAPagedAttentionWrapper is ignis.BatchMLAPagedAttentionWrapper
    assert flashinfer.page.append_paged_mla_kv_cache is ignis.append_paged_mla_kv_cache


def test_utils_counter_bytes(flashinfer):
    counter_bytes = flashinfer.utils.get_trtllm_gen_multi_ctas_kv_counter_bytes
    assert counter_bytes(2, 3, 132) == 136 * 4  # the SMs dominate, rounded up to 8 counters
    assert counter_bytes(64, 32, 132) == 2048 * 4
    assert counter_bytes(3, 3, 1) == 16 * 4


def test_utils_device_facts(flashinfer):
    utils = flashinfer.utils
    with pytest.raises(ValueError, match="CUDA device"):
        utils.get_device_sm_count("cpu")
    with pytest.raises(ValueError, match="CUDA device"):
        utils.get_compute_capability("cpu")
    if not HAVE_CUDA:
        with pytest.raises(ignis.BackendUnavailableError):
            utils.get_device_sm_count("cuda")
        with pytest.raises(RuntimeError, match="cannot run CUDA kernels"):
            flashinfer.jit.core.check_cuda_arch()
        return
    info = ignis.device_info("cuda", 0)
    assert utils.get_device_sm_count(0) == utils.get_device_sm_count("cuda:0") == info["multiprocessor_count"] > 0
    assert utils.get_compute_capability("cuda:0") == divmod(info["compute_capability"], 10)
    if torch is not None and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        assert utils.get_device_sm_count(torch.device("cuda")) == props.multi_processor_count
        assert utils.get_compute_capability(torch.device("cuda:0")) == (props.major, props.minor)
    flashinfer.jit.core.check_cuda_arch()  # the CUDA backend serves this GPU (H100/H200: sm_90a)


def test_device_info():
    cpu = ignis.device_info("cpu")
    assert cpu["compute_capability"] == 0 and cpu["multiprocessor_count"] >= 1 and cpu["name"]
    with pytest.raises(ignis.InvalidArgumentError, match="device_type"):
        ignis.device_info("tpu")
    with pytest.raises(ignis.InvalidArgumentError):
        ignis.device_info("cuda", -1)


@pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes for a float8_e4m3fn array")
def test_utils_fp4_tensor(flashinfer):
    data = np.zeros((4, 8), np.uint8)
    scale = np.zeros((128, 4), ml_dtypes.float8_e4m3fn)
    t = flashinfer.utils.FP4Tensor(data, scale, scale_start_index=2, original_shape=(4, 16))
    assert t.data is data and t.scale is scale and t.scale_start_index == 2 and t.original_shape == (4, 16)
    assert flashinfer.utils.FP4Tensor(data, scale).original_shape == (4, 8)
    with pytest.raises(ValueError, match="uint8"):
        flashinfer.utils.FP4Tensor(data.astype(np.int8), scale)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        flashinfer.utils.FP4Tensor(data, np.zeros((128, 4), np.float32))
    with pytest.raises(ValueError, match="multiple of 128"):
        flashinfer.utils.FP4Tensor(data, scale[:100])
    with pytest.raises(ValueError, match="scale_start_index"):
        flashinfer.utils.FP4Tensor(data, scale, scale_start_index=126)


# ---- the page and cascade tensor contract of the backends' calls ----------------------------------
def page_batch(page_size=4):
    """kv_indptr, kv_indices, kv_last_page_len (int32) of 3 requests (7, 0 and 9 tokens), the
    append_indptr of 3 + 0 + 2 new tokens, and the number of pages."""
    kv_indptr = np.array([0, 2, 2, 5], np.int32)
    kv_indices = np.array([4, 0, 1, 3, 2], np.int32)
    last = np.array([3, 0, 1], np.int32)
    append_indptr = np.array([0, 3, 3, 5], np.int32)
    return kv_indptr, kv_indices, last, append_indptr, 6


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_page_ops_take_int64_indices(frame):
    kv_indptr, kv_indices, last, append_indptr, pages = page_batch()
    seq32 = ignis.get_seq_lens(frame.index(kv_indptr, "i32"), frame.index(last, "i32"), 4)
    seq64 = ignis.get_seq_lens(frame.index(kv_indptr, "i64"), frame.index(last, "i64"), 4)
    mixed = ignis.get_seq_lens(frame.index(kv_indptr, "i64"), frame.index(last, "i32"), 4)
    assert ignis._common.dtype_name(seq32) == "int32"
    assert ignis._common.dtype_name(seq64) == ignis._common.dtype_name(mixed) == "int64"  # torch's promotion
    for got in (seq32, seq64, mixed):
        np.testing.assert_array_equal(frame.numpy(got), [7, 0, 9])

    b64, p64 = ignis.get_batch_indices_positions(frame.index(append_indptr, "i64"), seq64, 7)
    assert ignis._common.dtype_name(b64) == ignis._common.dtype_name(p64) == "int32"
    np.testing.assert_array_equal(frame.numpy(b64), [0, 0, 0, 2, 2, -1, -1])  # -1 past the batch's tokens
    np.testing.assert_array_equal(frame.numpy(p64), [4, 5, 6, 7, 8, 0, 0])
    out_b, out_p = frame.index(np.full(7, 99), "i32"), frame.index(np.full(7, 0), "i32")
    got_b, got_p = ignis.get_batch_indices_positions(frame.index(append_indptr, "i32"), seq32, 7, out_b, out_p)
    assert got_b is out_b and got_p is out_p
    np.testing.assert_array_equal(frame.numpy(out_b), frame.numpy(b64))
    np.testing.assert_array_equal(frame.numpy(out_p), frame.numpy(p64))

    key = np.arange(5 * 2 * 8, dtype=np.float64).reshape(5, 2, 8)
    caches = []
    for dtype in ("i32", "i64"):
        cache = frame.array(np.zeros((pages, 2, 4, 2, 8)), "f32")
        ignis.append_paged_kv_cache(frame.array(key, "f32"), frame.array(-key, "f32"),
                                    frame.index(frame.numpy(b64)[:5], dtype), frame.index(frame.numpy(p64)[:5], dtype),
                                    cache, frame.index(kv_indices, dtype), frame.index(kv_indptr, dtype),
                                    frame.index(last, dtype))
        caches.append(frame.numpy(cache))
    np.testing.assert_array_equal(caches[0], caches[1])
    # request 0's positions 4..6: page kv_indices[0 + 1] = 0, slots 0..2; request 2's 7 and 8: pages
    # kv_indices[2 + 1] = 3 (slot 3) and kv_indices[2 + 2] = 2 (slot 0)
    np.testing.assert_array_equal(caches[1][0, 0, :3], key[:3])
    np.testing.assert_array_equal(caches[1][3, 1, 3], -key[3])
    np.testing.assert_array_equal(caches[1][2, 0, 0], key[4])


def test_int64_indices_outside_int32_raise():
    big = np.array([0, 2**31], np.int64)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_indptr holds a value outside int32"):
        ignis.get_seq_lens(big, np.array([1], np.int64), 4)
    if torch is not None:
        with pytest.raises(ignis.InvalidArgumentError, match="append_indptr"):
            ignis.get_batch_indices_positions(torch.tensor([0, -2**40]), torch.tensor([1]), 1)


@pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
def test_merge_state_in_place_takes_a_bool_mask(frame):
    rng = np.random.default_rng(3)
    v, v_other = rng.standard_normal((2, 5, 2, 8))
    s, s_other = rng.standard_normal((2, 5, 2))
    mask = np.array([True, False, True, True, False])
    results = []
    for m in (mask.astype(np.uint8), mask):
        vv, ss = frame.array(v, "f32"), frame.array(s, "f32")
        m_frame = torch.from_numpy(m).to(vv.device) if frame.name.startswith("torch") else m
        ignis.merge_state_in_place(vv, ss, frame.array(v_other, "f32"), frame.array(s_other, "f32"), m_frame)
        results.append((frame.numpy(vv), frame.numpy(ss)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    np.testing.assert_allclose(results[1][0][~mask], v[~mask], rtol=1e-6)
    assert not np.allclose(results[1][0][mask], v[mask])
