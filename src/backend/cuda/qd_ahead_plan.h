/* qd_ahead_plan.h — the bookkeeping of matmul_dequant.cu's conversion ahead (KILN_CUDA_QD_AHEAD): which prefill
 * matmul group a call belongs to, which group comes after it (learned), which slot this call reads and which slot
 * the next group's weights are converted into. Plain C with no CUDA in it, so tests/unit/test_qd_ahead_plan.c checks
 * the plan without a GPU; matmul_dequant.cu turns each decision into its stream, event and kernel calls.
 *
 * A group is one qd_one_ex call's weights (q/k/v, o, gate/up, down), named by their addresses. Each call records
 * itself as the successor of the call before it (the latest order seen wins), so after one forward every group
 * knows the one after it. The rules the caller relies on:
 *   - a call reads a slot only if the slot holds its group (filled by an earlier call's conversion);
 *   - the slot a call converts into is never the slot it reads, and nothing converts a group a slot already holds
 *     or the call's own group;
 *   - a weight that is released retires every group that names it (no slot holds one, no later call matches one,
 *     even a group of new weights at the same addresses). */
#ifndef KILN_CUDA_QD_AHEAD_PLAN_H
#define KILN_CUDA_QD_AHEAD_PLAN_H

#include <stddef.h>
#include <string.h>

#define QDA_SLOTS 2
#define QDA_MAXG 2048 /* groups remembered (retired ones included); past it, new groups convert in their own stream */
#define QDA_MAXW 3    /* weights of a group (qd_one_ex's QD_MAXW) */

typedef struct {
    const void *w[QDA_MAXW];
    int n;        /* 0: retired */
    int next;     /* the group seen after this one, -1: none yet */
    size_t bytes; /* its weights' f16 forms, laid out as a slot holds them */
} qda_group_t;

typedef struct {
    int last;                  /* the group of the call before, -1: none */
    int n_seq, turn;           /* groups remembered; the slot the next conversion tries first */
    size_t max_bytes;          /* the largest group's bytes: every slot's size */
    int slot_g[QDA_SLOTS];     /* the group each slot holds (or is being filled with), -1: none */
    qda_group_t seq[QDA_MAXG];
} qda_plan_t;

/* what one call does: read its weights from read_slot (-1: convert them itself), convert group conv_g into
 * conv_slot (-1: nothing to convert) */
typedef struct {
    int g, read_slot, conv_g, conv_slot;
} qda_step_t;

static inline void qda_plan_init(qda_plan_t *p) {
    memset(p, 0, sizeof *p);
    p->last = -1;
    for (int i = 0; i < QDA_SLOTS; i++) p->slot_g[i] = -1;
}

/* the group of these n weights (bytes: their f16 layout's size), appended when new; -1 where the table is full */
static inline int qda_plan_index(qda_plan_t *p, int n, const void *const *w, size_t bytes) {
    for (int g = 0; g < p->n_seq; g++) {
        const qda_group_t *G = &p->seq[g];
        int same = G->n == n;
        for (int i = 0; same && i < n; i++) same = G->w[i] == w[i];
        if (same) return g;
    }
    if (p->n_seq == QDA_MAXG || n < 1 || n > QDA_MAXW) return -1;
    qda_group_t *G = &p->seq[p->n_seq];
    G->n = n;
    G->next = -1;
    for (int i = 0; i < n; i++) G->w[i] = w[i];
    G->bytes = bytes;
    if (bytes > p->max_bytes) p->max_bytes = bytes;
    return p->n_seq++;
}

/* the slot holding group g, or -1 */
static inline int qda_plan_held(const qda_plan_t *p, int g) {
    for (int i = 0; i < QDA_SLOTS; i++)
        if (g >= 0 && p->slot_g[i] == g) return i;
    return -1;
}

/* A call of the group of these weights: learn its place after the call before, pick the slot it reads and the
 * conversion it starts (the slot is marked as holding conv_g at once: the caller issues the conversion, or calls
 * qda_plan_empty on failure). */
static inline qda_step_t qda_plan_enter(qda_plan_t *p, int n, const void *const *w, size_t bytes) {
    qda_step_t s = {-1, -1, -1, -1};
    const int g = qda_plan_index(p, n, w, bytes);
    if (g < 0) return s;
    s.g = g;
    if (p->last >= 0 && p->last != g) p->seq[p->last].next = g; /* the latest successor seen */
    p->last = g;
    s.read_slot = qda_plan_held(p, g);
    const int nx = p->seq[g].next;
    if (nx < 0 || nx == g || p->seq[nx].n == 0 || qda_plan_held(p, nx) >= 0) return s;
    for (int k = 0; k < QDA_SLOTS; k++) {
        const int t = (p->turn + k) % QDA_SLOTS;
        if (t == s.read_slot) continue;
        s.conv_g = nx;
        s.conv_slot = t;
        p->turn = (t + 1) % QDA_SLOTS;
        p->slot_g[t] = nx;
        break;
    }
    return s;
}

/* slot i holds nothing (its buffer was freed, or its conversion was not issued) */
static inline void qda_plan_empty(qda_plan_t *p, int i) {
    if (i >= 0 && i < QDA_SLOTS) p->slot_g[i] = -1;
}

/* weight w is about to be freed: retire every group naming it and empty the slots holding one */
static inline void qda_plan_forget(qda_plan_t *p, const void *w) {
    for (int g = 0; g < p->n_seq; g++) {
        qda_group_t *G = &p->seq[g];
        int has = 0;
        for (int i = 0; i < G->n; i++) has |= G->w[i] == w;
        if (!has) continue;
        G->n = 0;
        for (int i = 0; i < QDA_SLOTS; i++)
            if (p->slot_g[i] == g) p->slot_g[i] = -1;
        if (p->last == g) p->last = -1;
    }
}

#endif
