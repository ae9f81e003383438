/* What the attention front ends (op_decode.c, op_prefill.c) share: validation of options, heads,
 * dtypes, extras and lse (each check names the function and the parameter in the last-error
 * message), workspace error helpers, and the staging ring through which a CUDA plan uploads its
 * schedule. */
#ifndef IGNIS_CORE_ATTENTION_COMMON_H
#define IGNIS_CORE_ATTENTION_COMMON_H

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
ignis_status ignis_check_attention_extras(const char *fn, const ignis_attention_extras *e, int64_t num_qo_heads,
                                          float *k_scale, float *v_scale, const float **sinks);
/* lse (may be NULL): [rows, num_qo_heads] f32, disjoint from q and out. */
ignis_status ignis_check_attention_lse(const char *fn, const ignis_tensor *lse, const ignis_tensor *q,
                                       const ignis_tensor *out);
/* A plan's config.device: the CPU, or a CUDA device that exists (BACKEND_UNAVAILABLE when none). */
ignis_status ignis_check_plan_device(const char *fn, ignis_device device);
/* A plan update's workspace is memory of CUDA device `device`. The runtime is asked only when
 * workspace differs from `checked` (the buffer of the plan's last update): the query costs about a
 * microsecond of every update otherwise. */
ignis_status ignis_check_plan_workspace(const char *fn, int32_t device, const void *workspace, const void *checked);
/* Claims on plan workspaces. A CUDA plan's update leaves state in its workspace that its runs read
 * (the schedule; decode's merge counters), so a run must not follow another use of the buffer:
 * another plan's update or run, or a single decode / prefill with it as scratch. Each update claims
 * the buffer (ignis_workspace_claim, the claim kept by the plan), every other use releases it
 * (ignis_workspace_release), and a run checks its plan's claim still holds
 * (ignis_check_workspace_claim: a clear error naming fn otherwise) instead of reading what another
 * call left there. Keyed by the buffer's address, in a table of IGNIS_WORKSPACE_CLAIMS entries
 * shared by the process (the least recently used entry is replaced; a run whose entry was replaced
 * cannot tell and is let through). A plan's own runs keep its claim; CUDA-graph replays are not
 * checked. */
#define IGNIS_WORKSPACE_CLAIMS 64
uint64_t ignis_workspace_claim(const void *workspace);
void ignis_workspace_release(const void *workspace);
ignis_status ignis_check_workspace_claim(const char *fn, const void *workspace, uint64_t claim);

/* Bytes a carving in counting mode asks for (0 when it took nothing). */
size_t ignis_attention_required_bytes(const ignis_workspace *ws);
/* The error for a NULL workspace where `counting` needs bytes. */
ignis_status ignis_attention_missing_workspace(const char *fn, const ignis_workspace *counting);

/* A CUDA plan's staging: IGNIS_STAGING_SLOTS pinned host buffers of `bytes` each, with an event
 * per slot. plan_update plans into the next slot's buffer (waiting only when that slot's previous
 * copy has not run yet), copies the used part to the device with one asynchronous copy and records
 * the slot's event, so the host arrays are free at once and nothing synchronizes in steady state. */
#define IGNIS_STAGING_SLOTS 4
typedef struct ignis_staging_ring {
  void *buffers[IGNIS_STAGING_SLOTS];
  void *events[IGNIS_STAGING_SLOTS];
  int next;
} ignis_staging_ring;

/* Allocate the buffers and events on `device` (on failure: what was made is released). */
ignis_status ignis_staging_ring_create(ignis_staging_ring *ring, int32_t device, size_t bytes);
/* Wait for the copies still reading the buffers, then free them (a zeroed ring is fine). */
void ignis_staging_ring_destroy(ignis_staging_ring *ring);
/* The next slot's buffer, once its previous copy has run. */
ignis_status ignis_staging_ring_acquire(ignis_staging_ring *ring, void **buffer);
/* Copy `bytes` of the acquired buffer to `dst` on `stream`, record the slot's event, move on. */
ignis_status ignis_staging_ring_upload(ignis_staging_ring *ring, void *dst, size_t bytes, int32_t device,
                                       void *stream);

#endif
