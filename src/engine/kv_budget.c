/* kv_budget.c — how big the KV cache is when nobody says (--kv-cache-gb auto, the default).
 *
 * A device backend (CUDA) owns its memory and has nothing else to spend it on: once the
 * weights are uploaded the cache takes what is free, less a reserve for what is allocated
 * later — the activation buffers of the largest step (step_bytes: the model's per-token
 * widths × the step's token budget, counted twice for the kernels' own scratch), every batch
 * row's logits and recurrent state (row_bytes), and a margin for CUDA graphs, cuBLASLt, the
 * split-K and staging rings and the allocator's rounding: 6 % of the device, at least 2 GiB —
 * and what the weight cache may still take (quantized weights kept dequantized for prefill:
 * backend_ops_t.weight_cache, --weight-cache-gb), which fills lazily at the first long prompts.
 * vLLM's --gpu-memory-utilization (0.9 by default) makes the same bet; the trade-off is that
 * a second process on the same GPU finds little room — it should pass --kv-cache-gb. It stops at four
 * times what max_batch rows at the full context hold, which only a small model reaches.
 *
 * The host (CPU backend) shares its memory with everything else on the machine, and the CPU
 * pool is zeroed (touched) when made, so the cache there is what one request at the full
 * context needs (ctx_len × token_bytes): at least 1 GB (the old fixed default, room for some
 * concurrency at short contexts), at most a quarter of physical memory.
 *
 * Hybrid models' recurrent-state snapshots are host memory on every backend. On the host the
 * engine takes their share out of this budget (as with an explicit size); on a device the
 * budget is device memory, so snapshots get their own cap: at most 10 % of the host. */
#include "engine/kv_budget.h"
#include <stdio.h>

/* what a device keeps free for the steps: the runtime margin, twice a step's buffers, every row's logits and state */
static double steps_reserve(const kv_budget_in_t *in) {
    double margin = in->dev_total * KV_AUTO_DEV_MARGIN_SHARE;
    if (margin < KV_AUTO_DEV_MARGIN_MIN) margin = KV_AUTO_DEV_MARGIN_MIN;
    return margin + 2 * in->step_bytes + (double)in->max_batch * in->row_bytes;
}

double kv_weight_cache_room(const kv_budget_in_t *in) {
    const double room = in->dev_free - steps_reserve(in);
    return room > 0 ? room : 0;
}

kv_budget_t kv_auto_budget(const kv_budget_in_t *in) {
    kv_budget_t b = {0};
    const double GB = 1e9;
    if (in->device) {
        b.reserve_bytes = steps_reserve(in) + in->cache_bytes;
        b.kv_bytes = in->dev_free - b.reserve_bytes;
        if (b.kv_bytes < 0) b.kv_bytes = 0;
        b.snap_cap = in->host_total * KV_AUTO_SNAP_HOST_SHARE;
        /* no more than every row at the full context, four times over (the rest for cached prefixes):
         * a tiny model on a big GPU would otherwise get tens of millions of blocks and their host-side
         * tables for nothing */
        const double cap = KV_AUTO_DEV_CTX_ROUNDS * (double)in->max_batch * (double)in->ctx_len * in->token_bytes;
        const int capped = cap > 0 && b.kv_bytes > cap;
        if (capped) b.kv_bytes = cap;
        char wc[64] = "";
        if (in->cache_bytes > 0) snprintf(wc, sizeof wc, " (%.1f GB of it for the weight cache)", in->cache_bytes / GB);
        snprintf(b.why, sizeof b.why, "auto: %.1f GB free on the device after the weights, %.1f GB kept for activations and the runtime%s%s",
                 in->dev_free / GB, b.reserve_bytes / GB, wc, capped ? "; capped at 4 x max-batch full contexts" : "");
        return b;
    }
    double one_ctx = in->token_bytes * (double)in->ctx_len, cap = in->host_total * KV_AUTO_HOST_SHARE;
    b.kv_bytes = one_ctx > KV_AUTO_HOST_MIN ? one_ctx : KV_AUTO_HOST_MIN;
    if (b.kv_bytes > cap) b.kv_bytes = cap;
    snprintf(b.why, sizeof b.why, "auto: one %ld-token context needs %.2f GB; at least %.0f GB, at most a quarter of %.1f GB of host memory",
             in->ctx_len, one_ctx / GB, KV_AUTO_HOST_MIN / GB, in->host_total / GB);
    return b;
}
