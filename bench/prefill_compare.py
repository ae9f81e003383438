"""Prefill attention: ignis (single, ragged and paged batch prefill, cascade) side by side with
PyTorch SDPA's flash and cuDNN backends on the same data, in one process, bf16, head dim 128.

Rows (the prefill issue's shapes):
  - single causal prefill, 32 query / 8 KV heads, 4k and 16k tokens (ignis single_prefill);
  - non-causal batch 4 x 4k, 32 / 32 heads (ignis ragged batch prefill);
  - the same batch causal, 32 / 8 heads, ragged and paged (page 16, pages in random order): the
    paged time must be within 10% of the ragged one;
  - chunked prefill: 512 new tokens against a 16k cached prefix (causal aligned to the end of the
    keys; SDPA gets the same mask as causal_lower_right);
  - cascade decode: batch 128 sharing a 32k prefix, 256 own keys each, one query token per request:
    ignis MultiLevelCascadeAttentionWrapper (2 levels) against plain ignis batch decode of the same
    paged data (must be at least 5x faster).
TFLOP/s count 4 * heads * head_dim * (visible query-key pairs). Times are GPU time per call
(gpu_timing.median_us: bursts of calls queued behind a GPU sleep; the host's cost of issuing a
call, larger for SDPA than for ignis, stays out). The ignis output is checked against SDPA (max |a - b| / max |b|).
Exit status 1 when a bar fails or an output is off (error above 2e-2).

    PYTHONPATH=build/python python3 bench/prefill_compare.py [--markdown FILE] [--iters N]
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_timing import BURST, median_us  # noqa: E402
from report import emit, target_table  # noqa: E402

import ignis  # noqa: E402

D = 128
PAGE = 16
WORKSPACE = 512 << 20


def sdpa(q, k, v, causal, lower_right, iters):
    """{backend: (us, out [B, Hq, S, D])} of SDPA on q [B, Hq, S, D], k / v [B, Hkv, L, D]."""
    results = {}
    kwargs = {"enable_gqa": k.shape[1] != q.shape[1]}
    if causal and lower_right and q.shape[2] != k.shape[2]:
        from torch.nn.attention.bias import causal_lower_right
        kwargs["attn_mask"] = causal_lower_right(q.shape[2], k.shape[2])
    else:
        kwargs["is_causal"] = causal
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, **kwargs)
                results[name] = (median_us(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs), iters), out)
        except RuntimeError as error:
            print(f"  {name} unavailable: {str(error).splitlines()[0]}")
            results[name] = (float("nan"), None)
    return results


def rel_err(got, ref):
    if ref is None:
        return float("nan")
    return ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def pairs(qo_len, kv_len, causal):
    """Visible (query, key) pairs of one request, causal aligned to the end of the keys."""
    if not causal:
        return qo_len * kv_len
    return sum(min(kv_len, kv_len - qo_len + i + 1) for i in range(qo_len))


def to_paged(ks, vs):
    """Per-request k / v [L_b, Hkv, D] into one NHD paged cache [pages, 2, PAGE, Hkv, D], pages in
    random order; returns cache, indptr (host), indices (device), last_page_len (host)."""
    counts = [(x.shape[0] + PAGE - 1) // PAGE for x in ks]
    total = sum(counts)
    hkv = ks[0].shape[1]
    perm = torch.randperm(total, device="cuda")
    cache = torch.zeros(total, 2, PAGE, hkv, D, dtype=ks[0].dtype, device="cuda")
    at = 0
    for k, v, n in zip(ks, vs, counts):
        pad = n * PAGE - k.shape[0]
        pages = perm[at:at + n]
        cache[pages, 0] = F.pad(k, (0, 0, 0, 0, 0, pad)).reshape(n, PAGE, hkv, D)
        cache[pages, 1] = F.pad(v, (0, 0, 0, 0, 0, pad)).reshape(n, PAGE, hkv, D)
        at += n
    indptr = torch.tensor([0] + list(torch.tensor(counts).cumsum(0).tolist()), dtype=torch.int32)
    last = torch.tensor([x.shape[0] - (n - 1) * PAGE for x, n in zip(ks, counts)], dtype=torch.int32)
    return cache, indptr, perm.to(torch.int32), last


def row(shape, us, flops, base, err):
    flash_us, cudnn_us = base.get("flash", (float("nan"), None))[0], base.get("cudnn", (float("nan"), None))[0]
    return {"shape": shape, "ignis_us": us, "ignis_tf": flops / us / 1e6, "flash_us": flash_us,
            "flash_tf": flops / flash_us / 1e6, "cudnn_us": cudnn_us, "cudnn_tf": flops / cudnn_us / 1e6, "err": err}


def single(seq, hq, hkv, causal, iters, rows):
    q = torch.randn(seq, hq, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(seq, hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    out = ignis.single_prefill_with_kv_cache(q, k, v, causal=causal)
    us = median_us(lambda: ignis.single_prefill_with_kv_cache(q, k, v, causal=causal), iters)
    base = sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], causal, True, iters)
    ref = base["flash"][1] if base["flash"][1] is not None else base["cudnn"][1]
    err = rel_err(out, ref[0].transpose(0, 1) if ref is not None else None)
    flops = 4 * hq * D * pairs(seq, seq, causal)
    rows.append(row(f"single S{seq} {hq}/{hkv} {'causal' if causal else 'full'}", us, flops, base, err))


def batch(nreq, seq, hq, hkv, causal, iters, rows, paged_too):
    q = torch.randn(nreq * seq, hq, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(nreq * seq, hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    indptr = torch.arange(0, (nreq + 1) * seq, seq, dtype=torch.int32)
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    ragged = ignis.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")
    ragged.plan(indptr, indptr, hq, hkv, D, causal=causal, q_data_type=torch.bfloat16)
    out = ragged.run(q, k, v)
    us = median_us(lambda: ragged.run(q, k, v), iters)
    sq = q.reshape(nreq, seq, hq, D).transpose(1, 2)
    sk, sv = (x.reshape(nreq, seq, hkv, D).transpose(1, 2) for x in (k, v))
    base = sdpa(sq, sk, sv, causal, True, iters)
    ref = base["flash"][1] if base["flash"][1] is not None else base["cudnn"][1]
    err = rel_err(out, ref.transpose(1, 2).reshape(nreq * seq, hq, D) if ref is not None else None)
    flops = 4 * hq * D * nreq * pairs(seq, seq, causal)
    name = f"ragged B{nreq} S{seq} {hq}/{hkv} {'causal' if causal else 'full'}"
    rows.append(row(name, us, flops, base, err))
    if paged_too:
        cache, kv_indptr, indices, last = to_paged(list(k.split(seq)), list(v.split(seq)))
        paged = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
        paged.plan(indptr, kv_indptr, indices, last, hq, hkv, D, PAGE, causal=causal, q_data_type=torch.bfloat16)
        pout = paged.run(q, cache)
        pus = median_us(lambda: paged.run(q, cache), iters)
        rows.append(row(f"paged{PAGE} B{nreq} S{seq} {hq}/{hkv} {'causal' if causal else 'full'}", pus, flops, base,
                        rel_err(pout, out)))


def chunked(new, prefix, hq, hkv, iters, rows):
    kv_len = prefix + new
    q = torch.randn(new, hq, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(kv_len, hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    cache, kv_indptr, indices, last = to_paged([k], [v])
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    paged = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
    qo_indptr = torch.tensor([0, new], dtype=torch.int32)
    paged.plan(qo_indptr, kv_indptr, indices, last, hq, hkv, D, PAGE, causal=True, q_data_type=torch.bfloat16)
    out = paged.run(q, cache)
    us = median_us(lambda: paged.run(q, cache), iters)
    base = sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], True, True, iters)
    ref = base["flash"][1] if base["flash"][1] is not None else base["cudnn"][1]
    err = rel_err(out, ref[0].transpose(0, 1) if ref is not None else None)
    flops = 4 * hq * D * pairs(new, kv_len, True)
    rows.append(row(f"chunked {new} new + {prefix} cached, paged{PAGE} {hq}/{hkv}", us, flops, base, err))


def cascade(nreq, prefix, suffix, hq, hkv, iters):
    """(cascade us, plain batch decode us, error of the cascade vs plain decode)."""
    ks = [torch.randn(prefix, hkv, D, dtype=torch.bfloat16, device="cuda")]
    vs = [torch.randn_like(ks[0])]
    for _ in range(nreq):
        ks.append(torch.randn(suffix, hkv, D, dtype=torch.bfloat16, device="cuda"))
        vs.append(torch.randn_like(ks[-1]))
    cache, indptr, indices, last = to_paged(ks, vs)
    prefix_pages = indices[:int(indptr[1])]
    q = torch.randn(nreq, hq, D, dtype=torch.bfloat16, device="cuda")
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    # plain batch decode: every request's pages are the shared prefix then its own
    own = [indices[int(indptr[b + 1]):int(indptr[b + 2])] for b in range(nreq)]
    flat = torch.cat([torch.cat([prefix_pages, o]) for o in own])
    per = int(indptr[1]) + (suffix + PAGE - 1) // PAGE
    dec_indptr = torch.arange(0, (nreq + 1) * per, per, dtype=torch.int32)
    dec_last = last[1:].clone()
    decode = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    decode.plan(dec_indptr, flat, dec_last, hq, hkv, D, PAGE, q_data_type=torch.bfloat16)
    want = decode.run(q, cache)
    decode_us = median_us(lambda: decode.run(q, cache), iters)
    # cascade: level 0 = all queries against the shared prefix, level 1 = each query its own keys
    wrapper = ignis.MultiLevelCascadeAttentionWrapper(2, workspace, "NHD")
    qo = [torch.tensor([0, nreq], dtype=torch.int32), torch.arange(0, nreq + 1, dtype=torch.int32)]
    kv_indptr = [torch.tensor([0, int(indptr[1])], dtype=torch.int32),
                 (indptr[1:] - indptr[1]).to(torch.int32)]
    kv_indices = [prefix_pages, indices[int(indptr[1]):]]
    kv_last = [last[:1].clone(), last[1:].clone()]
    wrapper.plan(qo, kv_indptr, kv_indices, kv_last, hq, hkv, D, PAGE, q_data_type=torch.bfloat16)
    got = wrapper.run(q, cache)
    cascade_us = median_us(lambda: wrapper.run(q, cache), iters)
    return cascade_us, decode_us, rel_err(got, want)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    single(4096, 32, 8, True, args.iters, rows)
    single(16384, 32, 8, True, args.iters, rows)
    batch(4, 4096, 32, 32, False, args.iters, rows, paged_too=False)
    batch(4, 4096, 32, 8, True, args.iters, rows, paged_too=True)
    chunked(512, 16384, 32, 8, args.iters, rows)
    cascade_us, decode_us, cascade_err = cascade(128, 32768, 256, 32, 8, args.iters)

    lines = [f"- torch {torch.__version__}; {torch.cuda.get_device_name()}; ignis {ignis.__version__}",
             f"- us: GPU time per call (median of {args.iters} bursts of {BURST} calls queued behind a GPU sleep)", "",
             "| shape | ignis us | ignis TF/s | flash us | flash TF/s | cuDNN us | cuDNN TF/s | flash/ignis | "
             "cuDNN/ignis | err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['ignis_us']:.1f} | {r['ignis_tf']:.0f} | {r['flash_us']:.1f} | "
                     f"{r['flash_tf']:.0f} | {r['cudnn_us']:.1f} | {r['cudnn_tf']:.0f} | "
                     f"{r['flash_us'] / r['ignis_us']:.2f}x | {r['cudnn_us'] / r['ignis_us']:.2f}x | {r['err']:.1e} |")
    lines += ["", f"cascade decode, B128 sharing a 32k prefix + 256 own keys, 32/8 heads: cascade "
              f"{cascade_us:.1f} us, plain batch decode {decode_us:.1f} us ({decode_us / cascade_us:.2f}x), "
              f"error vs plain decode {cascade_err:.1e}", ""]
    targets = []
    for r in rows:
        if r["shape"].startswith(("single", "ragged B4 S4096 32/32", "chunked")):
            ratio = r["flash_us"] / r["ignis_us"]
            targets.append((f"{r['shape']}: flash time / ignis time", f"{ratio:.2f}", ">= 1.0", ratio >= 1.0))
    ragged = next(r for r in rows if r["shape"].startswith("ragged B4 S4096 32/8"))
    paged = next(r for r in rows if r["shape"].startswith("paged"))
    slow = paged["ignis_us"] / ragged["ignis_us"]
    targets.append(("paged time / ragged time (B4 S4096 causal)", f"{slow:.2f}", "<= 1.10", slow <= 1.10))
    speedup = decode_us / cascade_us
    targets.append(("cascade speedup over plain batch decode", f"{speedup:.2f}", ">= 5", speedup >= 5.0))
    lines += target_table(targets)
    errors_ok = all(not (r["err"] > 2e-2) for r in rows) and not (cascade_err > 2e-2)
    lines += ["", f"{sum(ok for *_, ok in targets)}/{len(targets)} targets met; outputs "
              f"{'agree' if errors_ok else 'DISAGREE'} (error <= 2e-2)"]
    emit(lines, args.markdown)
    return 0 if errors_ok and all(ok for *_, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
