/* st_writer.h — a streaming safetensors writer.
 *
 * A safetensors file is an 8-byte little-endian header length, a JSON header that names
 * every tensor with its dtype, shape and [begin, end) byte range in the data region, then
 * the data. Because every tensor's size follows from its dtype and shape, the whole header
 * can be written before a single byte of data exists; the data then streams in, tensor by
 * tensor, through one buffer. Nothing the size of a tensor is ever held in memory, which
 * is what lets `kiln synth` write a 16 GB checkpoint on a machine with less RAM than that.
 *
 *   stw_tensor_t t[] = {{"a.weight", DT_BF16, 2, {4096, 4096}}, ...};
 *   stw_sort_canonical(t, n);            // optional: the order the safetensors library uses
 *   stw_open(&w, "dir/model.safetensors", t, n, "pt", &e);
 *   while (...) stw_write(w, chunk, len, &e);   // bytes of t[0], then t[1], ...
 *   stw_finish(w, &e);                   // checks the byte count, fsyncs, renames into place
 *
 * The file is written under a temporary name next to the target (PATH.partial.PID) and
 * renamed only by stw_finish, so a reader never sees a half-written checkpoint. On any
 * error, or when the caller gives up, stw_abort removes the temporary file.
 *
 * The header follows what the Python/Rust safetensors library writes: compact JSON,
 * "__metadata__" first, tensors in data order, padded with spaces so the data region
 * starts at a multiple of 8 bytes. */
#ifndef KILN_ST_WRITER_H
#define KILN_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "tensor/dtype.h"

#define STW_MAX_DIMS 8

typedef struct stw_tensor {
    const char *name; /* copied by stw_open; the caller keeps ownership */
    dtype_t dtype;
    int ndim;
    int64_t shape[STW_MAX_DIMS];
} stw_tensor_t;

typedef struct stw_writer stw_writer_t;

/* Bytes of one tensor's data (product of the shape times the element size). */
uint64_t stw_tensor_bytes(const stw_tensor_t *t);
/* The safetensors dtype string: "BF16", "F32", "U32", ... */
const char *stw_dtype_str(dtype_t t);
/* Sorts the way the safetensors library lays out a file: dtypes with larger alignment first
 * (so U32 codes come before BF16 scales, as in MLX files), then by name in byte order. */
void stw_sort_canonical(stw_tensor_t *t, int n);

/* Builds the header exactly as stw_open will write it (8-byte length + padded JSON).
 * *out is malloc'd; *out_len includes the 8 length bytes. Used to know a file's size
 * before writing it. format is the "__metadata__" "format" value ("pt", "mlx"). */
int stw_header(const stw_tensor_t *t, int n, const char *format, char **out, size_t *out_len, err_t *e);

/* Creates PATH.partial.PID and writes the header. Names must be unique and non-empty,
 * shapes non-negative. */
int stw_open(stw_writer_t **out, const char *path, const stw_tensor_t *t, int n, const char *format,
             err_t *e);
/* Appends data bytes. A call may cover the end of one tensor and the start of the next;
 * writing more than the tensors' total is an error. */
int stw_write(stw_writer_t *w, const void *data, size_t len, err_t *e);
/* The tensor the next byte belongs to (NULL when complete), and bytes written so far. */
const char *stw_current(const stw_writer_t *w);
uint64_t stw_written(const stw_writer_t *w);
uint64_t stw_data_size(const stw_writer_t *w);
/* Checks that every tensor is complete, flushes, fsyncs and renames to PATH. Frees w,
 * also on error (then the temporary file is removed). */
int stw_finish(stw_writer_t *w, err_t *e);
/* Removes the temporary file and frees w. NULL is fine. */
void stw_abort(stw_writer_t *w);

#endif
