/* rec_state.c — see rec_state.h. Slots live in a small array searched linearly: a server
 * runs tens of sequences at once, so O(n_slots) per row per step is noise next to a
 * forward. Resetting and loading replace the buffer (alloc is zeroed, upload copies), which
 * needs no extra backend op. */
#include "kv/rec_state.h"
#include <stdlib.h>
#include <string.h>

void rec_pool_init(rec_pool_t *p, backend_t *be, size_t floats_per_slot) {
    memset(p, 0, sizeof *p);
    p->be = be;
    p->floats = floats_per_slot;
}

void rec_pool_free(rec_pool_t *p) {
    for (int i = 0; i < p->n_slots; i++) p->be->ops->free(p->be, p->slots[i].data);
    free(p->slots);
    memset(p, 0, sizeof *p);
}

rec_slot_t *rec_find(rec_pool_t *p, const void *owner) {
    for (int i = 0; i < p->n_slots; i++)
        if (p->slots[i].owner == owner) return &p->slots[i];
    return NULL;
}

static rec_slot_t *slot_for(rec_pool_t *p, const void *owner, err_t *e) {
    rec_slot_t *s = rec_find(p, owner);
    if (!s) s = rec_find(p, NULL);
    if (!s) {
        rec_slot_t *ns = realloc(p->slots, sizeof(rec_slot_t) * (p->n_slots + 1));
        if (!ns) { err_set(e, "out of memory for a recurrent state slot"); return NULL; }
        p->slots = ns;
        s = &p->slots[p->n_slots++];
        memset(s, 0, sizeof *s);
    }
    s->owner = owner;
    return s;
}

rec_slot_t *rec_acquire(rec_pool_t *p, const void *owner, err_t *e) {
    rec_slot_t *s = slot_for(p, owner, e);
    if (!s) return NULL;
    p->be->ops->free(p->be, s->data);
    s->data = p->be->ops->alloc(p->be, sizeof(float) * p->floats);
    s->n_tokens = 0;
    if (!s->data) {
        s->owner = NULL;
        err_set(e, "out of backend memory for a recurrent state slot (%.1f MB)", sizeof(float) * p->floats / 1e6);
        return NULL;
    }
    return s;
}

int rec_load(rec_pool_t *p, const void *owner, const float *src, int n_tokens, err_t *e) {
    rec_slot_t *s = slot_for(p, owner, e);
    if (!s) return -1;
    p->be->ops->free(p->be, s->data);
    s->data = p->be->ops->upload(p->be, src, sizeof(float) * p->floats);
    s->n_tokens = n_tokens;
    if (!s->data) {
        s->owner = NULL;
        return err_set(e, "out of backend memory restoring a recurrent state");
    }
    return 0;
}

void rec_release(rec_pool_t *p, const void *owner) {
    rec_slot_t *s = owner ? rec_find(p, owner) : NULL;
    if (!s) return;
    p->be->ops->free(p->be, s->data);
    memset(s, 0, sizeof *s);
}

int rec_in_use(const rec_pool_t *p) {
    int n = 0;
    for (int i = 0; i < p->n_slots; i++) n += p->slots[i].owner != NULL;
    return n;
}
