/* safetensors.h — memory-mapped safetensors checkpoints, single file or sharded.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data region. Offsets are relative to the data region. Everything the header
 * claims is checked against the file before any tensor is used: dtype known, shape
 * non-negative and its byte size equal to the offsets' span, spans inside the file.
 * Tensors are never copied: st_tensor_t.data points into the mapping. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include <stdint.h>
#include "base/err.h"
#include "base/file.h"
#include "tensor/dtype.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) /* a real header is a few MB at most */

typedef struct st_tensor {
    char *name;
    dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
    int file; /* index into st_archive_t.files */
} st_tensor_t;

typedef struct st_archive {
    mapped_file_t *files;
    int n_files;
    st_tensor_t *tensors; /* sorted by name */
    int n_tensors;
} st_archive_t;

/* Opens a model directory (model.safetensors, or model.safetensors.index.json with its
 * shards) or a single .safetensors file. */
int st_open(st_archive_t *ar, const char *path, err_t *e);
void st_close(st_archive_t *ar);
/* Moves every file of at least min_bytes into anonymous huge-page memory (file_copy_anon)
 * and points its tensors there: for backends that read the weights in place, where 4 KB
 * pages cost page walks on every streamed 4 KB. Files are taken in order while the bytes
 * copied stay within max_bytes (the rest stay mapped: a copy cannot be paged out the way a
 * file map can). progress gets the bytes copied so far over all files. Returns the bytes
 * copied. */
size_t st_copy_to_anon(st_archive_t *ar, size_t min_bytes, size_t max_bytes, file_progress_fn progress, void *ctx);
const st_tensor_t *st_find(const st_archive_t *ar, const char *name);
int64_t st_numel(const st_tensor_t *t);

#endif
