/* test_cpu_scratch.c — the per-thread scratch the 4/8-bit kernels prepare x in (cpu_scratch.h):
 *   1. alignment (64 B; 2 MB from 2 MB) and the whole length writable;
 *   2. reuse: a request no larger than the buffer returns the same buffer (no new pages per
 *      call: the point of it), a larger one a new, larger buffer;
 *   3. each thread its own buffer (two threads filling theirs at once do not see each other's
 *      bytes), and a thread's buffers freed at its exit (under ASan's leak check, a missed
 *      free fails the run);
 *   4. cpu_scratch_free_all and a bad slot;
 *   5. the slots apart: a GEMM holds its prepared x (XPREP) and its unpacked weight panel (WPANEL) at
 *      once, so growing one must neither move nor overwrite the other. */
#include <pthread.h>
#include <stdint.h>
#include "../common/test_util.h"
#include "backend/cpu/cpu_scratch.h"

static void test_align_reuse(void **st) {
    (void)st;
    unsigned char *a = cpu_scratch(CPU_SCRATCH_XPREP, 1000);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 64, 0);
    memset(a, 0x5a, 1000);
    unsigned char *b = cpu_scratch(CPU_SCRATCH_XPREP, 500);
    assert_ptr_equal(a, b); /* smaller: the same buffer */
    assert_int_equal(b[999], 0x5a);
    size_t big = (size_t)5 << 20;
    unsigned char *c = cpu_scratch(CPU_SCRATCH_XPREP, big);
    assert_non_null(c);
    assert_int_equal((uintptr_t)c % ((size_t)2 << 20), 0);
    memset(c, 1, big); /* the whole length is ours */
    assert_ptr_equal(cpu_scratch(CPU_SCRATCH_XPREP, big - 4096), c);
    assert_ptr_equal(cpu_scratch(CPU_SCRATCH_XPREP, 64), c);
    cpu_scratch_free_all();
    unsigned char *d = cpu_scratch(CPU_SCRATCH_XPREP, 64);
    assert_non_null(d);
    d[63] = 7;
    assert_null(cpu_scratch(CPU_SCRATCH_SLOTS, 64));
    assert_null(cpu_scratch(-1, 64));
    cpu_scratch_free_all();
}

typedef struct { unsigned char fill; unsigned char *p; int ok; pthread_barrier_t *bar; } fill_t;

static void *fill_own(void *arg) {
    fill_t *f = arg;
    const size_t n = (size_t)3 << 20;
    f->p = cpu_scratch(CPU_SCRATCH_XPREP, n);
    if (!f->p) return NULL;
    memset(f->p, f->fill, n);
    pthread_barrier_wait(f->bar); /* both filled before either checks */
    f->ok = 1;
    for (size_t i = 0; i < n; i += 4093) f->ok &= f->p[i] == f->fill;
    pthread_barrier_wait(f->bar); /* both checked before either exits (and frees) */
    return NULL;                   /* the key's destructor frees this thread's buffer */
}

static void test_per_thread(void **st) {
    (void)st;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    fill_t f[2] = {{0x11, NULL, 0, &bar}, {0xee, NULL, 0, &bar}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, fill_own, &f[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    assert_non_null(f[0].p);
    assert_non_null(f[1].p);
    assert_true(f[0].p != f[1].p);
    assert_true(f[0].ok);
    assert_true(f[1].ok);
    /* this thread's buffer is its own too */
    unsigned char *mine = cpu_scratch(CPU_SCRATCH_XPREP, 64);
    assert_non_null(mine);
    cpu_scratch_free_all();
}

static void test_slots_apart(void **st) {
    (void)st;
    unsigned char *x = cpu_scratch(CPU_SCRATCH_XPREP, 4096);
    assert_non_null(x);
    memset(x, 0x11, 4096);
    unsigned char *w = cpu_scratch(CPU_SCRATCH_WPANEL, 4096);
    assert_non_null(w);
    assert_true(w + 4096 <= x || x + 4096 <= w); /* disjoint */
    memset(w, 0x22, 4096);
    unsigned char *w2 = cpu_scratch(CPU_SCRATCH_WPANEL, (size_t)3 << 20); /* grows: a new buffer */
    assert_non_null(w2);
    memset(w2, 0x33, (size_t)3 << 20);
    assert_ptr_equal(cpu_scratch(CPU_SCRATCH_XPREP, 4096), x); /* XPREP stays where it was */
    for (int i = 0; i < 4096; i++) assert_int_equal(x[i], 0x11);
    cpu_scratch_free_all();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_align_reuse),
        cmocka_unit_test(test_per_thread),
        cmocka_unit_test(test_slots_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
