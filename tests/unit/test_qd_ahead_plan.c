/* test_qd_ahead_plan.c — the bookkeeping of the CUDA backend's conversion ahead (src/backend/cuda/qd_ahead_plan.h,
 * the plain-C plan matmul_dequant.cu's KILN_CUDA_QD_AHEAD follows; CI checks it without a GPU). A small simulator
 * plays the side stream: each conversion the plan starts writes "group g" into its slot, each read takes what the
 * slot holds. Checked on every call:
 *   - a call reads only its own group's weights, converted by an earlier call;
 *   - it never converts into the slot it reads, never its own group, never a group a slot already holds;
 *   - what it converts is the successor it learned (the group seen after it last time);
 * and the counts: a repeating prefill of G groups reads nothing in the pass that learns the order, G − 1 groups in
 * the next (its first group's successor link closes at that pass's start), all G after; a wrong order still
 * reads only right slots; a released weight's groups are never read again, not even by new weights at the same
 * addresses; a full table stops learning without breaking anything. */
#include "../common/test_util.h"
#include "backend/cuda/qd_ahead_plan.h"

/* the simulated device: what each slot holds (-1: nothing written) */
typedef struct { int slot[QDA_SLOTS]; long reads, converts; } sim_t;

/* one call of group (n, w) under plan p: the checks above, then the simulated reads and writes; returns the step */
static qda_step_t call(qda_plan_t *p, sim_t *sm, int n, const void *const *w) {
    qda_step_t s = qda_plan_enter(p, n, w, 1000 * (size_t)n);
    if (s.g < 0) {
        assert_int_equal(s.read_slot, -1);
        assert_int_equal(s.conv_slot, -1);
        return s;
    }
    if (s.conv_slot >= 0) {
        assert_true(s.conv_slot < QDA_SLOTS);
        assert_int_not_equal(s.conv_slot, s.read_slot);
        assert_int_not_equal(s.conv_g, s.g);
        assert_int_equal(s.conv_g, p->seq[s.g].next);
        assert_true(p->seq[s.conv_g].n > 0);
        for (int i = 0; i < QDA_SLOTS; i++)
            if (i != s.conv_slot) assert_int_not_equal(sm->slot[i], s.conv_g); /* not already held elsewhere */
    }
    if (s.read_slot >= 0) { /* the weights it reads were written by an earlier call, for this group */
        assert_int_equal(sm->slot[s.read_slot], s.g);
        sm->reads++;
    }
    if (s.conv_slot >= 0) { /* the side stream writes after this call's reads were ordered (another slot anyway) */
        sm->slot[s.conv_slot] = s.conv_g;
        sm->converts++;
    }
    return s;
}

static void sim_init(sim_t *sm) {
    for (int i = 0; i < QDA_SLOTS; i++) sm->slot[i] = -1;
    sm->reads = sm->converts = 0;
}

/* a forward of L layers, four groups a layer (q/k/v, o, gate/up, down) over the weight addresses in wt[L][7] */
static void forward(qda_plan_t *p, sim_t *sm, int L, const void *(*wt)[7], const int *order) {
    for (int li = 0; li < L; li++) {
        const void *const *w = wt[order ? order[li] : li];
        call(p, sm, 3, w);     /* q, k, v */
        call(p, sm, 1, w + 3); /* o */
        call(p, sm, 2, w + 4); /* gate, up */
        call(p, sm, 1, w + 6); /* down */
    }
}

static char arena[64][7]; /* distinct addresses for the weights */

static void test_repeating_prefill(void **st) {
    (void)st;
    static qda_plan_t p;
    sim_t sm;
    qda_plan_init(&p);
    sim_init(&sm);
    const int L = 5, G = 4 * L;
    const void *wt[5][7];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) wt[l][k] = &arena[l][k];
    const long want_reads[4] = {0, G - 1, G, G}, want_conv[4] = {0, G, G, G};
    for (int pass = 0; pass < 4; pass++) {
        const long r0 = sm.reads, c0 = sm.converts;
        forward(&p, &sm, L, wt, NULL);
        assert_int_equal(sm.reads - r0, want_reads[pass]);
        assert_int_equal(sm.converts - c0, want_conv[pass]);
    }
    assert_int_equal(p.n_seq, G);
    assert_int_equal(p.max_bytes, 3000); /* the q/k/v groups' (1000 a weight in call()) */
}

static void test_wrong_order_and_single_groups(void **st) {
    (void)st;
    static qda_plan_t p;
    sim_t sm;
    qda_plan_init(&p);
    sim_init(&sm);
    const int L = 4;
    const void *wt[4][7];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) wt[l][k] = &arena[8 + l][k];
    const int order[4][4] = {{0, 1, 2, 3}, {0, 1, 2, 3}, {3, 1, 0, 2}, {2, 0, 3, 1}};
    for (int pass = 0; pass < 4; pass++) forward(&p, &sm, L, wt, order[pass]); /* every read checked in call() */
    /* the same group called again and again never converts itself, and reads only what was converted for it */
    const void *one[1] = {&arena[20][0]};
    for (int i = 0; i < 5; i++) {
        const qda_step_t s = call(&p, &sm, 1, one);
        assert_int_not_equal(s.conv_g, s.g);
    }
    /* two groups alternating: once learned, each call reads its own and the other is already held */
    const void *a[1] = {&arena[21][0]}, *b[1] = {&arena[22][0]};
    for (int i = 0; i < 6; i++) call(&p, &sm, 1, i % 2 ? b : a);
    const long r0 = sm.reads;
    for (int i = 0; i < 6; i++) call(&p, &sm, 1, i % 2 ? b : a);
    assert_int_equal(sm.reads - r0, 6);
}

/* the slot a call reads is the one the next conversion would try first (the older one): A, B, C learned in a ring,
 * then A, C, B — B reads the slot its conversion at A filled, and C must go into the other slot */
static void test_read_slot_is_next_in_turn(void **st) {
    (void)st;
    static qda_plan_t p;
    sim_t sm;
    qda_plan_init(&p);
    sim_init(&sm);
    const void *a[1] = {&arena[40][0]}, *b[1] = {&arena[41][0]}, *c[1] = {&arena[42][0]};
    call(&p, &sm, 1, a);
    call(&p, &sm, 1, b);
    call(&p, &sm, 1, c); /* learned: a → b → c */
    call(&p, &sm, 1, a); /* c → a learned; a converts b into slot turn */
    const int sb = qda_plan_held(&p, 1);
    assert_true(sb >= 0);
    call(&p, &sm, 1, c); /* out of order: converts a (c's successor) into the other slot */
    assert_int_equal(p.turn, sb); /* the slot next in turn is b's */
    const qda_step_t s = call(&p, &sm, 1, b); /* reads b's slot, converts c: not into it */
    assert_int_equal(s.read_slot, sb);
    assert_int_equal(s.conv_g, 2);
    assert_int_not_equal(s.conv_slot, sb);
}

static void test_forget(void **st) {
    (void)st;
    static qda_plan_t p;
    sim_t sm;
    qda_plan_init(&p);
    sim_init(&sm);
    const int L = 2;
    const void *wt[2][7];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) wt[l][k] = &arena[30 + l][k];
    for (int pass = 0; pass < 3; pass++) forward(&p, &sm, L, wt, NULL);
    /* after the passes, the last group (layer 1's down) has converted layer 0's q/k/v: releasing one of those weights
     * must empty that slot and retire the group */
    const int g0 = 0;
    assert_true(qda_plan_held(&p, g0) >= 0);
    const int seq_before = p.n_seq;
    qda_plan_forget(&p, wt[0][1]); /* k of layer 0 */
    for (int i = 0; i < QDA_SLOTS; i++) {
        assert_int_not_equal(p.slot_g[i], g0);
        if (p.slot_g[i] < 0) sm.slot[i] = -1; /* the simulated device follows: an emptied slot holds nothing */
    }
    assert_int_equal(p.seq[g0].n, 0);
    /* new weights at the same addresses: a new group, read only after it is converted anew */
    const long r0 = sm.reads;
    const qda_step_t s = call(&p, &sm, 3, wt[0]);
    assert_int_equal(s.g, seq_before); /* appended, not the retired group 0 */
    assert_int_equal(s.read_slot, -1);
    assert_int_equal(sm.reads, r0);
    forward(&p, &sm, L, wt, NULL); /* relearned; every read checked */
    const long r1 = sm.reads;
    forward(&p, &sm, L, wt, NULL);
    assert_int_equal(sm.reads - r1, 4 * L);
    /* a retired group is never converted: forget layer 1's gate while a slot may hold it, then run */
    qda_plan_forget(&p, wt[1][4]);
    for (int i = 0; i < QDA_SLOTS; i++)
        if (p.slot_g[i] < 0) sm.slot[i] = -1;
    forward(&p, &sm, L, wt, NULL);
}

static void test_full_table_and_failed_conversion(void **st) {
    (void)st;
    static qda_plan_t p;
    static char many[QDA_MAXG + 8];
    sim_t sm;
    qda_plan_init(&p);
    sim_init(&sm);
    for (int i = 0; i < QDA_MAXG; i++) {
        const void *w[1] = {&many[i]};
        assert_int_equal(call(&p, &sm, 1, w).g, i);
    }
    const void *extra[1] = {&many[QDA_MAXG]};
    assert_int_equal(call(&p, &sm, 1, extra).g, -1); /* full: converts in its own stream */
    const void *bad[4] = {&many[1], &many[2], &many[3], &many[4]};
    assert_int_equal(qda_plan_index(&p, 4, bad, 1), -1); /* more weights than a group holds */
    /* a conversion the caller could not issue: the slot is emptied and its group is not read from it */
    static qda_plan_t q;
    sim_t s2;
    qda_plan_init(&q);
    sim_init(&s2);
    const void *x[1] = {&many[0]}, *y[1] = {&many[1]};
    call(&q, &s2, 1, x);
    call(&q, &s2, 1, y);
    const qda_step_t s = qda_plan_enter(&q, 1, x, 1000); /* x → converts y */
    assert_int_equal(s.conv_g, 1);
    qda_plan_empty(&q, s.conv_slot);
    assert_int_equal(qda_plan_held(&q, 1), -1);
    assert_int_equal(qda_plan_enter(&q, 1, y, 1000).read_slot, -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeating_prefill),
        cmocka_unit_test(test_wrong_order_and_single_groups),
        cmocka_unit_test(test_read_slot_is_next_in_turn),
        cmocka_unit_test(test_forget),
        cmocka_unit_test(test_full_table_and_failed_conversion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
