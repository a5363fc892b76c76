/* file.h — whole-file helpers: read a small file into memory, map a big one read-only. */
#ifndef KILN_FILE_H
#define KILN_FILE_H

#include <stddef.h>
#include "base/err.h"

typedef struct mapped_file {
    void *data;
    size_t size;
    char *path;
    size_t anon_size; /* > 0: data is an anonymous copy in a mapping of that many bytes (file_copy_anon) */
    size_t anon_shift; /* the copy's data starts that many bytes into its mapping */
} mapped_file_t;

/* Maps path read-only (MAP_PRIVATE). An empty file maps to data=NULL, size=0. */
int file_map(mapped_file_t *mf, const char *path, err_t *e);
void file_unmap(mapped_file_t *mf);
/* Replaces a mapping with a writable private anonymous copy, madvised MADV_HUGEPAGE
 * (transparent huge pages; a file map gets 4 KB pages), in a 2 MB-aligned mapping where file
 * byte align_at lands on a 64-byte boundary (a checkpoint's data region: whole-line loads for
 * the kernels). The old addresses are invalid afterwards; *old_base gets where data was. 0 on
 * success; on failure mf is unchanged. progress (may be NULL) is called with the bytes copied
 * so far, every 64 MB and at the end. */
typedef void (*file_progress_fn)(size_t done, void *ctx);
int file_copy_anon(mapped_file_t *mf, size_t align_at, const void **old_base, file_progress_fn progress, void *ctx);
/* How much of [p, p + n) the kernel maps with 2 MB pages: *huge gets the AnonHugePages and
 * *rss the Rss of /proc/self/smaps, summed over the mappings that overlap the range (each
 * mapping's figure clamped to its overlap). -1 when smaps cannot be read (not Linux). */
int mem_huge_bytes(const void *p, size_t n, size_t *huge, size_t *rss);
/* The huge-page coverage of a file_copy_anon copy (its whole mapping), measured now; 0 for a
 * file map. */
size_t file_anon_huge_bytes(const mapped_file_t *mf);
/* Reads the whole file, NUL-terminated; refuses files over max_bytes. Caller frees. */
char *file_read(const char *path, size_t max_bytes, size_t *len_out, err_t *e);
int file_exists(const char *path);
int dir_exists(const char *path);
/* Writes atomically: temp file in the same folder, fsync, rename. */
int file_write_atomic(const char *path, const void *data, size_t len, err_t *e);
/* snprintf into a fresh malloc'd buffer. */
char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
