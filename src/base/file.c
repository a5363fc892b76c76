/* file.c — see file.h. */
#include "base/file.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_map(mapped_file_t *mf, const char *path, err_t *e) {
    memset(mf, 0, sizeof *mf);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err_set(e, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, "%s: not a regular file", path);
    }
    mf->size = (size_t)st.st_size;
    if (mf->size > 0) {
        mf->data = mmap(NULL, mf->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mf->data == MAP_FAILED) {
            mf->data = NULL;
            err_set(e, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    close(fd);
    mf->path = strdup(path);
    return 0;
}

void file_unmap(mapped_file_t *mf) {
    if (mf->data) munmap((char *)mf->data - mf->anon_shift, mf->anon_size ? mf->anon_size : mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

int file_copy_anon(mapped_file_t *mf, size_t align_at, const void **old_base, file_progress_fn progress, void *ctx) {
    const size_t H = (size_t)2 << 20, shift = (64 - align_at % 64) % 64;
    if (!mf->data || mf->anon_size) return -1;
    size_t n = (mf->size + shift + H - 1) & ~(H - 1);
    unsigned char *raw = mmap(NULL, n + H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return -1;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + H - 1) & ~(uintptr_t)(H - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw)); /* keep [p, p + n) */
    if (raw + n + H > p + n) munmap(p + n, (size_t)(raw + n + H - (p + n)));
    madvise(p, n, MADV_HUGEPAGE);
    unsigned char *base = p;
    p += shift;
    /* pread from the page cache: no page-table entries for the file map to fault in */
    int fd = mf->path ? open(mf->path, O_RDONLY | O_CLOEXEC) : -1;
    size_t off = 0;
    const size_t chunk = (size_t)64 << 20; /* a progress report per 64 MB */
    while (fd >= 0 && off < mf->size) {
        size_t want = mf->size - off < chunk ? mf->size - off : chunk;
        ssize_t r = pread(fd, p + off, want, (off_t)off);
        if (r <= 0) break;
        off += (size_t)r;
        if (progress) progress(off, ctx);
    }
    if (fd >= 0) close(fd);
    if (off < mf->size) memcpy(p + off, (const unsigned char *)mf->data + off, mf->size - off);
    if (progress) progress(mf->size, ctx);
    /* MADV_HUGEPAGE asks for 2 MB pages at fault time, but a fault that finds no free 2 MB
     * block (fragmented memory, page cache filling it) falls back to 4 KB pages for good, and
     * 4 KB pages cost decode's stream 15-25 % (bench/cpu/RESULTS.md, session 7). So check what
     * the copy got and, where it fell short, MADV_COLLAPSE (Linux 6.1) the range: a
     * synchronous collapse that compacts memory for it, whatever THP's defrag setting says.
     * KILN_THP_COLLAPSE=0: no collapse (the A/B switch). */
    const char *cv = getenv("KILN_THP_COLLAPSE");
    size_t huge = 0, rss = 0;
    if (!(cv && *cv == '0') && mem_huge_bytes(base, n, &huge, &rss) == 0 && huge < n) {
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
        madvise(base, n, MADV_COLLAPSE); /* EINVAL before 6.1, EAGAIN/ENOMEM when memory is short: best effort */
    }
    /* left writable: the CPU backend rewrites weights in place into its kernels' order
     * (backend/cpu/cpu_pack.h), and an mprotect of part of a transparent huge page splits
     * it into 4 KB pages (qwen3-0.6b packed per weight: 1165 -> 760 MB AnonHugePages, decode
     * 10-35 % slower); an mprotect to the protection a range already has changes nothing */
    munmap(mf->data, mf->size);
    *old_base = mf->data;
    mf->data = p;
    mf->anon_size = n;
    mf->anon_shift = (size_t)(p - base);
    return 0;
}

int mem_huge_bytes(const void *p, size_t n, size_t *huge, size_t *rss) {
    *huge = *rss = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    uintptr_t lo = (uintptr_t)p, hi = lo + n, a, b;
    size_t ov = 0, kb;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) { /* a mapping's header */
            ov = a < hi && b > lo ? (b < hi ? b : hi) - (a > lo ? a : lo) : 0;
            continue;
        }
        if (!ov) continue;
        if (sscanf(line, "Rss: %zu kB", &kb) == 1) *rss += kb * 1024 < ov ? kb * 1024 : ov;
        else if (sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) *huge += kb * 1024 < ov ? kb * 1024 : ov;
    }
    fclose(f);
    return 0;
}

size_t file_anon_huge_bytes(const mapped_file_t *mf) {
    size_t huge = 0, rss = 0;
    if (!mf->anon_size || mem_huge_bytes((const char *)mf->data - mf->anon_shift, mf->anon_size, &huge, &rss)) return 0;
    return huge;
}

char *file_read(const char *path, size_t max_bytes, size_t *len_out, err_t *e) {
    FILE *f = fopen(path, "rb");
    if (!f) { err_set(e, "%s: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 65536 * 2;
            char *nb = realloc(buf, cap);
            if (!nb) { err_set(e, "%s: out of memory", path); goto err; }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (len > max_bytes) { err_set(e, "%s: larger than %zu bytes", path, max_bytes); goto err; }
        if (n == 0) break;
    }
    if (ferror(f)) { err_set(e, "%s: read error", path); goto err; }
    fclose(f);
    buf[len] = 0;
    if (len_out) *len_out = len;
    return buf;
err:
    free(buf);
    fclose(f);
    return NULL;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int file_write_atomic(const char *path, const void *data, size_t len, err_t *e) {
    char *tmp = str_printf("%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { err_set(e, "%s: %s", tmp, strerror(errno)); free(tmp); return -1; }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            err_set(e, "%s: write: %s", tmp, strerror(errno));
            goto err;
        }
        p += w; left -= (size_t)w;
    }
    if (fsync(fd) != 0) { err_set(e, "%s: fsync: %s", tmp, strerror(errno)); goto err; }
    close(fd);
    if (rename(tmp, path) != 0) {
        err_set(e, "%s: rename: %s", path, strerror(errno));
        unlink(tmp); free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
err:
    close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
}

char *str_printf(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = malloc((size_t)n + 1);
    if (s) vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}
