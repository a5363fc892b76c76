/* weight.c — reference access to weights (see weight.h). */
#include "tensor/weight.h"

size_t weight_bytes(const weight_t *w) {
    if (!weight_is_quantized(w)) return (size_t)w->rows * w->cols * dtype_size(w->dtype);
    size_t codes = (size_t)w->rows * w->cols * w->bits / 8;
    size_t sb = 2 * (size_t)w->rows * (w->cols / w->group) * dtype_size(w->sb_dtype);
    return codes + sb;
}

void weight_row_f32(const weight_t *w, int r, float *out) {
    if (!weight_is_quantized(w)) {
        if (w->layout == WL_DENSE_T4 && r < (w->rows & ~3)) { /* 16 columns of the row every 64 elements */
            const char *tile = (const char *)w->data + ((size_t)(r >> 2) * 4 * w->cols + (size_t)(r & 3) * 16) * dtype_size(w->dtype);
            for (int j = 0; j < w->cols; j++) out[j] = load_as_f32(tile, w->dtype, (size_t)(j >> 4) * 64 + (j & 15));
            return;
        }
        const char *base = (const char *)w->data + (size_t)r * w->cols * dtype_size(w->dtype);
        for (int j = 0; j < w->cols; j++) out[j] = load_as_f32(base, w->dtype, j);
        return;
    }
    size_t nw = (size_t)w->cols * w->bits / 32, ng = (size_t)(w->cols / w->group);
    if (w->layout == WL_Q_RIL16 && r < (w->rows & ~15)) {
        /* the row's words are 16 apart; bits 4 and 8 divide 32, so no code straddles two; the
         * other widths are in planes (weight_qril_code) */
        const uint32_t *tile = (const uint32_t *)w->data + (size_t)(r >> 4) * nw * 16 + (r & 15);
        size_t sb0 = (size_t)(r >> 4) * ng * 16 + (r & 15);
        uint32_t mask = (1u << w->bits) - 1;
        int planes = weight_qril_planes(w);
        for (size_t g = 0; g < ng; g++) {
            float s = load_as_f32(w->scales, w->sb_dtype, sb0 + g * 16);
            float b = load_as_f32(w->biases, w->sb_dtype, sb0 + g * 16);
            for (int j = (int)g * w->group; j < ((int)g + 1) * w->group; j++) {
                size_t bit = (size_t)j * w->bits;
                uint32_t code = planes ? weight_qril_code(tile, 16, w->bits, j) : (tile[(bit >> 5) * 16] >> (bit & 31)) & mask;
                out[j] = s * (float)code + b;
            }
        }
        return;
    }
    const uint32_t *row = (const uint32_t *)w->data + (size_t)r * nw;
    for (size_t g = 0; g < ng; g++) {
        float s = load_as_f32(w->scales, w->sb_dtype, (size_t)r * ng + g);
        float b = load_as_f32(w->biases, w->sb_dtype, (size_t)r * ng + g);
        for (int j = (int)g * w->group; j < ((int)g + 1) * w->group; j++) out[j] = s * (float)weight_code(row, w->bits, j) + b;
    }
}
