/* moe_route.h — the MoE router's top-k on the host: one definition for the families' host
 * path (model/qwen35.c, model/gemma.c) and the backends' reference moe_route
 * (backend/cpu/moe.c), which the CUDA kernel must match bit for bit (backend/cuda/moe.cu). */
#ifndef KILN_MOE_ROUTE_H
#define KILN_MOE_ROUTE_H

#include <stdint.h>

/* Softmax over logits[E] (E ≤ 1024), then the k largest (ties: lower id first), weights
 * renormalized to sum 1 when renorm. idx/wt: [k], in descending probability. The operation
 * order is the contract: max, expf(l − max), a running sum in id order, divisions, k passes
 * of "the first unused id, replaced by a strictly larger p", the k weights summed in
 * selection order. */
void moe_topk(const float *logits, int E, int k, int renorm, int32_t *idx, float *wt);

#endif
