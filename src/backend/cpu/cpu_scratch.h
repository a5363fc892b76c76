/* cpu_scratch.h — a grow-only buffer per thread and slot for the matmul kernels' prepared x.
 *
 * The 4/8-bit kernels turn x into digits and group sums before each matmul (q4ril_prepare,
 * q8r_prepare): for a 512-token prefill that is a few MB per call, per thread. Allocated and
 * freed per call, glibc handed those bytes back to the kernel and took them again, so every
 * call re-faulted them page by page (~10k page faults in a 512-token qwen3-0.6b q4 prefill,
 * each ~5-15 us on a paravirtualized VM; bench/cpu/RESULTS.md, sessions 32-33). Here each
 * thread keeps its largest buffer and reuses it; buffers of 2 MB or more are madvised
 * MADV_HUGEPAGE (THP "madvise" mode), so a new one faults once per 2 MB.
 *
 * Trade-off: a thread holds the largest prepared x it has needed (for a 2048-token step of an
 * 8B model's down projection ~90 MB) until it exits: a pool thread's buffers are freed when
 * it ends (a pthread key's destructor), the calling thread's when the process ends or when it
 * calls cpu_scratch_free_all.
 *
 * A slot's contents are undefined after the next cpu_scratch call for the same slot on the
 * same thread: a kernel takes its buffer, fills and reads it, and is done before its thread
 * asks for that slot again. */
#ifndef KILN_CPU_SCRATCH_H
#define KILN_CPU_SCRATCH_H

#include <stddef.h>

/* XPREP: a kernel's prepared x; WPANEL: a GEMM's unpacked weight codes (matmul_qi_avx2.c), held
 * while XPREP is too */
enum { CPU_SCRATCH_XPREP = 0, CPU_SCRATCH_WPANEL = 1, CPU_SCRATCH_SLOTS = 2 };

/* 64-byte aligned (2 MB aligned from 2 MB), at least bytes long; NULL when out of memory. */
void *cpu_scratch(int slot, size_t bytes);
/* Frees the calling thread's buffers (safe to call again; the next cpu_scratch allocates anew). */
void cpu_scratch_free_all(void);

#endif
