/* npy.h — NumPy .npy files of float32 (write [rows, cols]; read any 1-D/2-D '<f4'). */
#ifndef KILN_NPY_H
#define KILN_NPY_H

#include <stddef.h>
#include "base/err.h"

/* Writes atomically (temp file + rename): no partial file on failure. */
int npy_write_f32(const char *path, const float *data, size_t rows, size_t cols, err_t *e);
/* Reads a little-endian float32 array; shape as [rows, cols] (1-D: rows = 1). */
int npy_read_f32(const char *path, float **data, size_t *rows, size_t *cols, err_t *e);

#endif
