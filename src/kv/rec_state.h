/* rec_state.h — recurrent state slots for hybrid models (DESIGN §5).
 *
 * Recurrent layers (gated DeltaNet) are not paged: a sequence's whole history is folded
 * into a fixed-size state (a short conv window and an f32 [dk][dv] matrix per value head,
 * for every recurrent layer). Each sequence running on a hybrid model holds one slot: one
 * backend buffer of `floats` f32, laid out by the model. A slot also records how many
 * positions it has absorbed, so a row that does not continue exactly where its state
 * stands is refused instead of silently mixing histories.
 *
 * Slots are keyed by their owner (the kv_seq_t): the model takes one when a row starts at
 * position 0, and gives it back on model_seq_release. Snapshots (model_state_save/restore)
 * copy a slot out and in whole. */
#ifndef KILN_REC_STATE_H
#define KILN_REC_STATE_H

#include <stddef.h>
#include "backend/backend.h"

typedef struct rec_slot {
    const void *owner;        /* NULL: free                                       */
    int n_tokens;             /* positions [0, n_tokens) are folded into the state */
    float *data;              /* backend memory, [floats]                          */
} rec_slot_t;

typedef struct rec_pool {
    backend_t *be;
    size_t floats;            /* per slot */
    rec_slot_t *slots;
    int n_slots;
} rec_pool_t;

void rec_pool_init(rec_pool_t *p, backend_t *be, size_t floats_per_slot);
void rec_pool_free(rec_pool_t *p);
/* The owner's slot, or NULL. */
rec_slot_t *rec_find(rec_pool_t *p, const void *owner);
/* The owner's slot reset to the empty state (n_tokens 0), taking a free one if needed. */
rec_slot_t *rec_acquire(rec_pool_t *p, const void *owner, err_t *e);
/* Replaces the owner's state with src[floats] (host memory) standing at n_tokens. */
int rec_load(rec_pool_t *p, const void *owner, const float *src, int n_tokens, err_t *e);
void rec_release(rec_pool_t *p, const void *owner);
/* Slots in use. */
int rec_in_use(const rec_pool_t *p);

#endif
