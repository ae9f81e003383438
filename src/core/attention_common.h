/* What the attention front ends (op_decode.c, op_prefill.c) share: validation of options, heads,
 * dtypes, extras and lse (each check names the function and the parameter in the last-error
 * message) and the workspace error helpers. The plan machinery is in core/attention_plan.h. */
#ifndef IGNIS_CORE_ATTENTION_COMMON_H
#define IGNIS_CORE_ATTENTION_COMMON_H

#include "core/params.h"
#include "core/workspace.h"
#include "ignis/decode.h"

/* ignis_attention_options resolved into what the kernels take. */
typedef struct ignis_attention_resolved {
  float sm_scale_log2;   /* sm_scale * log2(e) */
  float logits_soft_cap;
  int32_t window_left;
  float lse_scale;       /* 1 (base 2) or ln 2 (natural) */
  int32_t pos_encoding;
  float rope_rcp_scale;
  float rope_log2_theta;
} ignis_attention_resolved;

/* Options (NULL: the defaults) checked and resolved; sm_scale 0 becomes 1 / sqrt(head_dim). */
ignis_status ignis_check_attention_options(const char *fn, const char *name, const ignis_attention_options *o,
                                           int64_t head_dim, ignis_attention_resolved *r);
/* num_kv_heads >= 1 and num_qo_heads a positive multiple of it. */
ignis_status ignis_check_attention_heads(const char *fn, const char *qo_what, int64_t num_qo_heads,
                                         const char *kv_what, int64_t num_kv_heads);
/* q / out dtype: f16 or bf16. */
ignis_status ignis_check_attention_dtype(const char *fn, const char *name, ignis_dtype dtype);
/* K/V dtype: q's, or fp8 (e4m3 / e5m2) with any q. */
ignis_status ignis_check_attention_kv_dtype(const char *fn, const char *name, ignis_dtype kv_dtype,
                                            const char *q_name, ignis_dtype q_dtype);
/* Run extras (NULL: the defaults): finite positive scales, sinks [num_qo_heads] f32 contiguous. */
/* A plan's q / K/V / out dtypes (config.q_dtype, config.kv_dtype, config.o_dtype): a 16-bit q with
 * K/V of its dtype or fp8, out in q's dtype; or an fp8 e4m3 q with fp8 K/V and out f16 / bf16, the
 * dtype its kernels compute in. *out_dtype: out's dtype. */
ignis_status ignis_check_attention_plan_dtypes(const char *fn, ignis_dtype q_dtype, ignis_dtype kv_dtype,
                                             ignis_dtype o_dtype, ignis_dtype *out_dtype);
ignis_status ignis_check_attention_extras(const char *fn, const ignis_attention_extras *e, int64_t num_qo_heads,
                                          float *k_scale, float *v_scale, const float **sinks);
/* lse (may be NULL): [rows, num_qo_heads] f32, disjoint from q and out. */
ignis_status ignis_check_attention_lse(const char *fn, const ignis_tensor *lse, const ignis_tensor *q,
                                       const ignis_tensor *out);
/* Bytes a carving in counting mode asks for (0 when it took nothing). */
/* The name of an attention kernel (core/params.h), as ignis_decode_plan_kernel reports it. */
const char *ignis_attention_kernel_name(ignis_attention_kernel kernel);
/* out's dtype: out_dtype, which is q's (checked as "out" against "q") or a plan's o_dtype. */
ignis_status ignis_check_attention_out_dtype(const char *fn, const ignis_tensor *out, const ignis_tensor *q,
                                             ignis_dtype out_dtype);
/* A plan's converted copy of an fp8 q (core/params.h: q_scratch) of `elements` in o_dtype, carved
 * from ws when q_dtype is not o_dtype; *q_scratch NULL otherwise. */
ignis_status ignis_attention_carve_q_scratch(ignis_workspace *ws, const char *fn, ignis_dtype q_dtype,
                                             ignis_dtype o_dtype, int64_t elements, void **q_scratch);
size_t ignis_attention_required_bytes(const ignis_workspace *ws);
/* The error for a NULL workspace where `counting` needs bytes. */
ignis_status ignis_attention_missing_workspace(const char *fn, const ignis_workspace *counting);

#endif
