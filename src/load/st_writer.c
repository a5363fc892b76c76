/* st_writer.c — see st_writer.h.
 *
 * One write buffer (4 MiB) sits between the caller and the file; a caller handing over
 * bigger chunks bypasses it. Every 64 MiB the writer asks the kernel to start writeback of
 * what came before (sync_file_range, non-blocking), so dirty pages do not pile up into one
 * long stall at fsync and the page cache of a small machine is not flooded for minutes. */
#include "load/st_writer.h"
#include "base/file.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STW_BUF (4u << 20)
#define STW_KICK (64ull << 20)

struct stw_writer {
    char *path, *tmp;
    int fd;
    stw_tensor_t *t; /* names owned */
    int n;
    uint64_t *end;   /* end offset of tensor i in the data region */
    uint64_t total, written;
    int cur;         /* tensor that byte `written` belongs to */
    unsigned char *buf;
    size_t fill;
    uint64_t file_off, kicked; /* bytes handed to the kernel; start of the un-kicked range */
};

static const struct { dtype_t t; const char *s; } dtypes[] = {
    {DT_I64, "I64"}, {DT_F64, "F64"}, {DT_F32, "F32"}, {DT_U32, "U32"},
    {DT_I32, "I32"}, {DT_BF16, "BF16"}, {DT_F16, "F16"}, {DT_U16, "U16"},
    {DT_I16, "I16"}, {DT_I8, "I8"},     {DT_U8, "U8"},   {DT_BOOL, "BOOL"},
};

static int dtype_index(dtype_t t) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].t == t) return (int)i;
    return -1;
}

const char *stw_dtype_str(dtype_t t) {
    int i = dtype_index(t);
    return i < 0 ? NULL : dtypes[i].s;
}

uint64_t stw_tensor_bytes(const stw_tensor_t *t) {
    uint64_t n = dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* The safetensors library sorts by its Dtype enum, descending, then by name; the enum runs
 * BOOL < U8 < I8 < I16 < U16 < F16 < BF16 < I32 < U32 < F32 < F64 < I64, and the table
 * above lists dtypes in that descending order, so the table index is the sort key. */
static int cmp_canonical(const void *a, const void *b) {
    const stw_tensor_t *x = a, *y = b;
    int dx = dtype_index(x->dtype), dy = dtype_index(y->dtype);
    if (dx != dy) return dx < dy ? -1 : 1;
    return strcmp(x->name, y->name);
}

void stw_sort_canonical(stw_tensor_t *t, int n) { qsort(t, (size_t)n, sizeof *t, cmp_canonical); }

int stw_header(const stw_tensor_t *t, int n, const char *format, char **out, size_t *out_len, err_t *e) {
    *out = NULL;
    json_t *root = json_object(), *meta = json_object();
    char *js = NULL;
    json_object_set_new(meta, "format", json_string(format ? format : "pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__")) {
            err_set(e, "safetensors writer: tensor %d has an empty or reserved name", i);
            goto err;
        }
        if (!stw_dtype_str(t[i].dtype)) {
            err_set(e, "safetensors writer: tensor %s: unsupported dtype", t[i].name);
            goto err;
        }
        if (t[i].ndim < 0 || t[i].ndim > STW_MAX_DIMS) {
            err_set(e, "safetensors writer: tensor %s: %d dimensions", t[i].name, t[i].ndim);
            goto err;
        }
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0) {
                json_decref(shape);
                err_set(e, "safetensors writer: tensor %s: negative dimension", t[i].name);
                goto err;
            }
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        }
        uint64_t nb = stw_tensor_bytes(&t[i]);
        json_t *rec = json_object();
        json_object_set_new(rec, "dtype", json_string(stw_dtype_str(t[i].dtype)));
        json_object_set_new(rec, "shape", shape);
        json_object_set_new(rec, "data_offsets",
                            json_pack("[II]", (json_int_t)off, (json_int_t)(off + nb)));
        if (json_object_get(root, t[i].name)) {
            json_decref(rec);
            err_set(e, "safetensors writer: tensor %s appears twice", t[i].name);
            goto err;
        }
        json_object_set_new(root, t[i].name, rec);
        off += nb;
    }
    /* jansson >= 2.8 keeps insertion order, which is the data order here. */
    js = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!js) { err_set(e, "safetensors writer: cannot serialize the header"); goto err; }
    size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
    char *buf = malloc(8 + padded);
    if (!buf) { err_set(e, "safetensors writer: out of memory"); goto err; }
    for (int b = 0; b < 8; b++) buf[b] = (char)(((uint64_t)padded >> (8 * b)) & 0xff);
    memcpy(buf + 8, js, jl);
    memset(buf + 8 + jl, ' ', padded - jl);
    *out = buf;
    *out_len = 8 + padded;
    free(js);
    json_decref(root);
    return 0;
err:
    free(js);
    json_decref(root);
    return -1;
}

static int write_all(stw_writer_t *w, const void *p, size_t len, err_t *e) {
    const char *c = p;
    while (len) {
        ssize_t k = write(w->fd, c, len);
        if (k < 0) {
            if (errno == EINTR) continue;
            return err_set(e, "%s: write: %s", w->tmp, strerror(errno));
        }
        c += k;
        len -= (size_t)k;
        w->file_off += (uint64_t)k;
    }
    if (w->file_off - w->kicked >= STW_KICK) {
        /* Start writeback of the finished range; advisory, so failure is harmless. */
        (void)sync_file_range(w->fd, (off_t)w->kicked, (off_t)(w->file_off - w->kicked),
                              SYNC_FILE_RANGE_WRITE);
        w->kicked = w->file_off;
    }
    return 0;
}

static int flush(stw_writer_t *w, err_t *e) {
    if (!w->fill) return 0;
    int rc = write_all(w, w->buf, w->fill, e);
    w->fill = 0;
    return rc;
}

static void free_writer(stw_writer_t *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    for (int i = 0; i < w->n; i++) free((char *)w->t[i].name);
    free(w->t);
    free(w->end);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

int stw_open(stw_writer_t **out, const char *path, const stw_tensor_t *t, int n, const char *format,
             err_t *e) {
    *out = NULL;
    char *hdr = NULL;
    size_t hdr_len = 0;
    if (stw_header(t, n, format, &hdr, &hdr_len, e)) return err_prefix(e, "%s", path);
    stw_writer_t *w = calloc(1, sizeof *w);
    if (!w) { free(hdr); return err_set(e, "%s: out of memory", path); }
    w->fd = -1;
    w->path = strdup(path);
    w->tmp = str_printf("%s.partial.%d", path, (int)getpid());
    w->t = calloc((size_t)(n ? n : 1), sizeof *w->t);
    w->end = calloc((size_t)(n ? n : 1), sizeof *w->end);
    w->buf = malloc(STW_BUF);
    if (!w->path || !w->tmp || !w->t || !w->end || !w->buf) { err_set(e, "%s: out of memory", path); goto err; }
    for (int i = 0; i < n; i++) {
        w->t[i] = t[i];
        w->t[i].name = strdup(t[i].name);
        w->n = i + 1;
        if (!w->t[i].name) { err_set(e, "%s: out of memory", path); goto err; }
        w->total += stw_tensor_bytes(&t[i]);
        w->end[i] = w->total;
    }
    while (w->cur < w->n && w->end[w->cur] == 0) w->cur++; /* leading empty tensors */
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) { err_set(e, "%s: %s", w->tmp, strerror(errno)); goto err; }
    if (write_all(w, hdr, hdr_len, e)) goto err_unlink;
    free(hdr);
    *out = w;
    return 0;
err_unlink:
    unlink(w->tmp);
err:
    free(hdr);
    free_writer(w);
    return -1;
}

int stw_write(stw_writer_t *w, const void *data, size_t len, err_t *e) {
    if (len > w->total - w->written)
        return err_set(e, "%s: %zu bytes written past the end of the last tensor", w->path,
                       (size_t)(len - (w->total - w->written)));
    w->written += len;
    while (w->cur < w->n && w->end[w->cur] <= w->written) w->cur++;
    if (len >= STW_BUF) {
        if (flush(w, e)) return -1;
        return write_all(w, data, len, e);
    }
    const unsigned char *p = data;
    while (len) {
        size_t k = STW_BUF - w->fill;
        if (k > len) k = len;
        memcpy(w->buf + w->fill, p, k);
        w->fill += k;
        p += k;
        len -= k;
        if (w->fill == STW_BUF && flush(w, e)) return -1;
    }
    return 0;
}

const char *stw_current(const stw_writer_t *w) { return w->cur < w->n ? w->t[w->cur].name : NULL; }
uint64_t stw_written(const stw_writer_t *w) { return w->written; }
uint64_t stw_data_size(const stw_writer_t *w) { return w->total; }

int stw_finish(stw_writer_t *w, err_t *e) {
    if (w->written != w->total) {
        err_set(e, "%s: tensor %s is incomplete (%llu of %llu data bytes written)", w->path,
                stw_current(w) ? stw_current(w) : "?", (unsigned long long)w->written,
                (unsigned long long)w->total);
        goto err;
    }
    if (flush(w, e)) goto err;
    if (fsync(w->fd) != 0) { err_set(e, "%s: fsync: %s", w->tmp, strerror(errno)); goto err; }
    if (close(w->fd) != 0) {
        w->fd = -1;
        err_set(e, "%s: close: %s", w->tmp, strerror(errno));
        goto err;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) { err_set(e, "%s: rename: %s", w->path, strerror(errno)); goto err; }
    free_writer(w);
    return 0;
err:
    stw_abort(w);
    return -1;
}

void stw_abort(stw_writer_t *w) {
    if (!w) return;
    if (w->fd >= 0) { close(w->fd); w->fd = -1; }
    unlink(w->tmp);
    free_writer(w);
}
