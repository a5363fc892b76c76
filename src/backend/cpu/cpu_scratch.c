/* cpu_scratch.c — per-thread grow-only scratch (see cpu_scratch.h). The buffers sit in a
 * _Thread_local table (the sanitizers' leak check sees them there); a pthread key whose
 * destructor frees them makes a pool thread's exit give them back. */
#include "backend/cpu/cpu_scratch.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define SCRATCH_HUGE ((size_t)2 << 20)

typedef struct { void *p; size_t n; } scratch_buf_t;

static _Thread_local scratch_buf_t bufs[CPU_SCRATCH_SLOTS];
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void on_thread_exit(void *unused) {
    (void)unused;
    cpu_scratch_free_all();
}
static void make_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

void cpu_scratch_free_all(void) {
    for (int i = 0; i < CPU_SCRATCH_SLOTS; i++) {
        free(bufs[i].p);
        bufs[i].p = NULL;
        bufs[i].n = 0;
    }
}

void *cpu_scratch(int slot, size_t bytes) {
    if (slot < 0 || slot >= CPU_SCRATCH_SLOTS) return NULL;
    scratch_buf_t *b = &bufs[slot];
    if (bytes <= b->n) return b->p;
    pthread_once(&exit_once, make_key);
    pthread_setspecific(exit_key, (void *)1); /* non-NULL: the destructor runs at this thread's exit */
    free(b->p);
    b->p = NULL;
    b->n = 0;
    /* a quarter of headroom so a slowly growing step does not reallocate every time */
    size_t n = bytes + bytes / 4, align = 64;
    if (n >= SCRATCH_HUGE) {
        n = (n + SCRATCH_HUGE - 1) & ~(SCRATCH_HUGE - 1);
        align = SCRATCH_HUGE;
    } else n = (n + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, align, n)) return NULL;
    if (align == SCRATCH_HUGE) madvise(p, n, MADV_HUGEPAGE);
    b->p = p;
    b->n = n;
    return p;
}
