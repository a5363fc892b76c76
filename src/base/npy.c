/* npy.c — see npy.h. Format: magic "\x93NUMPY", version 1.0, a little-endian u16 header
 * length, a Python dict literal padded with spaces to a 64-byte boundary ending in '\n'. */
#include "base/npy.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/file.h"

int npy_write_f32(const char *path, const float *data, size_t rows, size_t cols, err_t *e) {
    char dict[128];
    int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", rows, cols);
    size_t hlen = 10 + (size_t)dl + 1;
    size_t pad = (64 - hlen % 64) % 64;
    size_t header = hlen + pad;
    size_t total = header + rows * cols * 4;
    char *buf = malloc(total);
    if (!buf) return err_set(e, "%s: out of memory (%zu bytes)", path, total);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    uint16_t hl = (uint16_t)(header - 10);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', pad);
    buf[header - 1] = '\n';
    memcpy(buf + header, data, rows * cols * 4);
    int rc = file_write_atomic(path, buf, total, e);
    free(buf);
    return rc;
}

int npy_read_f32(const char *path, float **data, size_t *rows, size_t *cols, err_t *e) {
    size_t len;
    *data = NULL;
    char *buf = file_read(path, (size_t)1 << 34, &len, e);
    if (!buf) return -1;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) { free(buf); return err_set(e, "%s: not a .npy file", path); }
    size_t hl, off;
    if (buf[6] == 1) { hl = (uint8_t)buf[8] | ((size_t)(uint8_t)buf[9] << 8); off = 10; }
    else { hl = (uint8_t)buf[8] | ((size_t)(uint8_t)buf[9] << 8) | ((size_t)(uint8_t)buf[10] << 16) | ((size_t)(uint8_t)buf[11] << 24); off = 12; }
    if (off + hl > len) { free(buf); return err_set(e, "%s: truncated header", path); }
    char *h = strndup(buf + off, hl);
    int ok = strstr(h, "'<f4'") && strstr(h, "'fortran_order': False");
    char *sp = strstr(h, "'shape': (");
    size_t r = 0, c = 1;
    if (ok && sp) {
        int n = sscanf(sp, "'shape': (%zu, %zu)", &r, &c);
        if (n == 1) { c = r; r = 1; }
        ok = n >= 1;
    } else ok = 0;
    free(h);
    if (!ok) { free(buf); return err_set(e, "%s: expected a C-order float32 array", path); }
    if (off + hl + r * c * 4 != len) { free(buf); return err_set(e, "%s: data size does not match shape", path); }
    *data = malloc(r * c * 4 + 1);
    memcpy(*data, buf + off + hl, r * c * 4);
    *rows = r;
    *cols = c;
    free(buf);
    return 0;
}
