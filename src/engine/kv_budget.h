/* kv_budget.h — the KV cache's size when the user does not give one (--kv-cache-gb auto).
 * A pure function of a few numbers (memory, per-token bytes, widths), so a test can check it
 * without a device; engine.c gathers the numbers (kv_budget.c says how they are used). */
#ifndef KILN_KV_BUDGET_H
#define KILN_KV_BUDGET_H
#include <stddef.h>

typedef struct kv_budget_in {
    int device;            /* 1: the pool lives in the backend's own memory (dev_free/dev_total) */
    double dev_free;       /* device bytes free now, with the weights uploaded                   */
    double dev_total;      /* device bytes in all                                                */
    double host_total;     /* host physical memory in bytes                                      */
    double token_bytes;    /* K/V bytes one token takes over all layers                          */
    long ctx_len;          /* the longest request's tokens (the context limit)                   */
    double step_bytes;     /* activation bytes one step of step_tokens may allocate (estimate)   */
    double row_bytes;      /* backend bytes each batch row holds beyond K/V (logits, states)     */
    int max_batch;
    double cache_bytes;    /* device: what the backend's weight cache may still allocate (model_t.weight_cache_bytes) */
} kv_budget_in_t;

typedef struct kv_budget {
    double kv_bytes;       /* the pool (0: nothing fits; why says so)                             */
    double reserve_bytes;  /* device: what was kept free for activations and the runtime         */
    double snap_cap;       /* hybrids on a device: the most host memory snapshots may take       */
    char why[224];         /* one line for the log: where the number came from                   */
} kv_budget_t;

/* Floor and ceiling of the host's automatic cache, and the device's fixed margin. */
#define KV_AUTO_HOST_MIN 1e9
#define KV_AUTO_HOST_SHARE 0.25
#define KV_AUTO_DEV_MARGIN_SHARE 0.06
#define KV_AUTO_DEV_MARGIN_MIN (2.0 * 1073741824.0)
#define KV_AUTO_SNAP_HOST_SHARE 0.10
#define KV_AUTO_DEV_CTX_ROUNDS 4.0 /* the device pool's cap: this many times max_batch full contexts */

kv_budget_t kv_auto_budget(const kv_budget_in_t *in);
/* Device: what is free now (dev_free, the KV pool made) less the reserve the automatic pool keeps for
 * the steps (margin, step buffers, rows) — the most an automatic weight cache may still take once
 * the pool was given a size (engine.c weight_cache_fit); 0 when nothing is left. */
double kv_weight_cache_room(const kv_budget_in_t *in);

#endif
