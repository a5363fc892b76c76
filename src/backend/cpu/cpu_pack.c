/* cpu_pack.c — the in-place packers of cpu_pack.h. Each tile is gathered into a scratch of
 * one tile and copied back: a load-time cost of about two passes over the weight. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <immintrin.h>
#include "backend/cpu/cpu_pack.h"

int pack_tile_rows(int layout) {
    switch (layout) {
    case WL_Q_RIL16: return 16;
    case WL_DENSE_T4: return 4;
    default: return 0;
    }
}

size_t pack_row_bytes(const weight_t *w) {
    if (weight_is_quantized(w)) return (size_t)w->cols * w->bits / 8;
    return (size_t)w->cols * dtype_size(w->dtype);
}

int pack_fits(const weight_t *w, int layout) {
    switch (layout) {
    case WL_Q_RIL16:
        return weight_is_quantized(w) && w->rows >= 16 && w->group > 0 && w->cols % w->group == 0 &&
               (w->bits == 4 || w->bits == 8 || ((w->bits == 2 || w->bits == 3 || w->bits == 5 || w->bits == 6) && w->cols % 32 == 0));
    case WL_DENSE_T4:
        return (w->dtype == DT_F32 || w->dtype == DT_F16 || w->dtype == DT_BF16) && w->rows >= 4 && w->cols > 0 && w->cols % 16 == 0;
    default: return 0;
    }
}

/* Elements of esz bytes, rows of n per row: tile t's 16 rows [16][n] <-> [n][16]. */
static void ril16_tile(char *base, size_t n, size_t esz, char *tmp, int pack) {
    for (size_t r = 0; r < 16; r++)
        for (size_t i = 0; i < n; i++) {
            size_t rowmaj = (r * n + i) * esz, lanes = (i * 16 + r) * esz;
            if (pack) memcpy(tmp + lanes, base + rowmaj, esz);
            else memcpy(tmp + rowmaj, base + lanes, esz);
        }
    memcpy(base, tmp, 16 * n * esz);
}

/* The bits of a B-bit field's part over 8 consecutive fields (8·B bits): n bits from bit lo. */
static uint64_t field_mask(int B, int lo, int n) {
    uint64_t m = 0;
    for (int i = 0; i < 8; i++) m |= ((1ull << n) - 1) << (i * B + lo);
    return m;
}

/* planes_row with BMI2, a 32-column chunk (B words) at a time in place: the 8 codes of each
 * 8-column word are B bytes of the stream from byte B·w, so one pext per part gathers them —
 * the low 4 bits are then already the nibble layout's word, and one pdep spreads a 2-bit or
 * 1-bit part's pairs to their bytes (weight.h); unpacking runs the same steps backwards. ~3 ns a
 * code for the bit loops below, ~0.1 here: a 3-bit 8B model would spend ~25 s of its load. */
__attribute__((target("bmi2"))) static void planes_row_bmi2(uint32_t *row, size_t K, int B, int pack) {
    const uint64_t m4 = field_mask(B, 0, 4), m2 = field_mask(B, B == 6 ? 4 : 0, 2), m1 = field_mask(B, B - 1, 1);
    const int p2 = B == 6 ? 4 : 0, p1 = B - 1;
    for (size_t c = 0; c < K / 32; c++) {
        uint32_t *ch = row + c * (size_t)B, pl[6] = {0};
        uint8_t st[32] = {0}; /* the chunk's stream, zero past its 4·B bytes (8-byte reads at B·w) */
        if (pack) {
            memcpy(st, ch, 4 * (size_t)B);
            for (int w = 0; w < 4; w++) {
                uint64_t x;
                memcpy(&x, st + B * w, 8);
                x &= (1ull << (8 * B)) - 1;
                if (B >= 5) pl[w] = (uint32_t)_pext_u64(x, m4);
                if (B != 5) pl[p2 + (w >> 1)] |= (uint32_t)_pdep_u64(_pext_u64(x, m2), (w & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu);
                if (B == 3 || B == 5) pl[p1] |= (uint32_t)_pdep_u64(_pext_u64(x, m1), 0x03030303u << (2 * w));
            }
            memcpy(ch, pl, 4 * (size_t)B);
        } else {
            memcpy(pl, ch, 4 * (size_t)B);
            for (int w = 0; w < 4; w++) {
                uint64_t x = 0;
                if (B >= 5) x |= _pdep_u64(pl[w], m4);
                if (B != 5) x |= _pdep_u64(_pext_u64(pl[p2 + (w >> 1)], (w & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu), m2);
                if (B == 3 || B == 5) x |= _pdep_u64(_pext_u64(pl[p1], 0x03030303u << (2 * w)), m1);
                memcpy(st + B * w, &x, (size_t)B); /* (little-endian: the word's B bytes) */
            }
            memcpy(ch, st, 4 * (size_t)B);
        }
    }
}

/* One row of B-bit codes (B in 2, 3, 5, 6; K % 32 == 0) between the stored bit stream and
 * WL_Q_RIL16's planes (weight.h), in place through tmp (the row's nw words); the bit-by-bit
 * form where the CPU has no BMI2 (every AVX-512 CPU has it; test_pack runs both). */
static int planes_bmi2 = -1; /* KILN_PACK_BMI2=0: the bit loops (test_pack's second pass) */
static void planes_row(uint32_t *row, size_t K, int B, uint32_t *tmp, int pack) {
    if (planes_bmi2 < 0) {
        const char *e = getenv("KILN_PACK_BMI2");
        __builtin_cpu_init();
        planes_bmi2 = __builtin_cpu_supports("bmi2") && !(e && *e == '0');
    }
    if (planes_bmi2) {
        planes_row_bmi2(row, K, B, pack);
        return;
    }
    size_t nw = K * (size_t)B / 32;
    memset(tmp, 0, nw * 4);
    if (!pack) { /* planes -> stream */
        for (size_t j = 0; j < K; j++) {
            uint64_t v = weight_qril_code(row, 1, B, (int)j), bit = j * (size_t)B;
            tmp[bit >> 5] |= (uint32_t)(v << (bit & 31));
            if ((bit & 31) + (size_t)B > 32) tmp[(bit >> 5) + 1] |= (uint32_t)(v >> (32 - (bit & 31)));
        }
        memcpy(row, tmp, nw * 4);
        return;
    }
    int p2 = B == 6 ? 4 : 0, p1 = B - 1;
    for (size_t j = 0; j < K; j++) {
        uint32_t code = weight_code(row, B, (int)j), *c = tmp + (j >> 5) * (size_t)B;
        int w = (int)(j & 31) >> 3, k = (int)(j & 7) >> 1, odd = (int)(j & 1);
        uint32_t lo4 = B >= 5 ? code & 15 : 0, two = B == 6 ? code >> 4 : code & 3, one = B == 3 ? code >> 2 : code >> 4;
        if (B >= 5) c[w] |= lo4 << (8 * k + 4 * odd);
        if (B != 5) c[p2 + (w >> 1)] |= two << (8 * k + 4 * (w & 1) + 2 * odd);
        if (B == 3 || B == 5) c[p1] |= (one & 1) << (8 * k + 2 * w + odd);
    }
    memcpy(row, tmp, nw * 4);
}

static int ril16(weight_t *w, int pack) {
    size_t nw = (size_t)w->cols * w->bits / 32, ng = (size_t)(w->cols / w->group), sbs = dtype_size(w->sb_dtype);
    size_t nt = (size_t)w->rows / 16, big = 16 * (nw * 4 > ng * sbs ? nw * 4 : ng * sbs);
    char *tmp = malloc(big);
    if (!tmp) return -1;
    uint32_t *rowtmp = weight_qril_planes(w) ? malloc(nw * 4) : NULL;
    if (weight_qril_planes(w) && !rowtmp) {
        free(tmp);
        return -1;
    }
    for (size_t t = 0; t < nt; t++) {
        uint32_t *tw = (uint32_t *)w->data + t * 16 * nw;
        if (rowtmp && pack)
            for (size_t r = 0; r < 16; r++) planes_row(tw + r * nw, (size_t)w->cols, w->bits, rowtmp, 1);
        ril16_tile((char *)tw, nw, 4, tmp, pack);
        if (rowtmp && !pack)
            for (size_t r = 0; r < 16; r++) planes_row(tw + r * nw, (size_t)w->cols, w->bits, rowtmp, 0);
        ril16_tile((char *)w->scales + t * 16 * ng * sbs, ng, sbs, tmp, pack);
        ril16_tile((char *)w->biases + t * 16 * ng * sbs, ng, sbs, tmp, pack);
    }
    free(tmp);
    free(rowtmp);
    w->layout = pack ? WL_Q_RIL16 : WL_ROWS;
    return 0;
}

/* WL_DENSE_T4: tile t's 4 rows [4][K] <-> [K/16][4][16] (16 elements = one kernel load). */
static int dense_t4(weight_t *w, int pack) {
    size_t esz = dtype_size(w->dtype), K = (size_t)w->cols, nc = K / 16, tb = 4 * K * esz, cb = 16 * esz;
    char *tmp = malloc(tb);
    if (!tmp) return -1;
    for (size_t t = 0; t < (size_t)w->rows / 4; t++) {
        char *base = (char *)w->data + t * tb;
        for (size_t r = 0; r < 4; r++)
            for (size_t c = 0; c < nc; c++) {
                size_t rowmaj = (r * K + c * 16) * esz, tiled = (c * 4 + r) * cb;
                if (pack) memcpy(tmp + tiled, base + rowmaj, cb);
                else memcpy(tmp + rowmaj, base + tiled, cb);
            }
        memcpy(base, tmp, tb);
    }
    free(tmp);
    w->layout = pack ? WL_DENSE_T4 : WL_ROWS;
    return 0;
}

int pack_weight(weight_t *w, int layout) {
    if (w->layout != WL_ROWS || !pack_fits(w, layout)) return -1;
    switch (layout) {
    case WL_Q_RIL16: return ril16(w, 1);
    case WL_DENSE_T4: return dense_t4(w, 1);
    default: return -1;
    }
}

int unpack_weight(weight_t *w) {
    switch (w->layout) {
    case WL_ROWS: return 0;
    case WL_Q_RIL16: return ril16(w, 0);
    case WL_DENSE_T4: return dense_t4(w, 0);
    default: return -1;
    }
}

/* --- the registry --- */

/* Makes [p, p + n) writable: the checkpoint is a private anonymous copy or a MAP_PRIVATE
 * file map, so this costs nothing until a page is written (then it is private). */
static int make_writable(const void *p, size_t n) {
    if (!n) return 0;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
    return mprotect((void *)a, b - a, PROT_READ | PROT_WRITE);
}

/* w lies inside r's packed weight on whole tiles, with the same shape per row: then w is
 * that layout too (a tile holds exactly its rows' bytes). */
static int view_ok(const pack_region_t *r, const weight_t *w) {
    const weight_t *p = &r->w;
    if (w->cols != p->cols || w->dtype != p->dtype || w->bits != p->bits || w->group != p->group || w->sb_dtype != p->sb_dtype) return 0;
    size_t rb = pack_row_bytes(p), tr = (size_t)pack_tile_rows(p->layout);
    const char *lo = w->data, *hi = lo + (size_t)w->rows * rb;
    if (!tr || lo < r->lo || hi > r->hi || (size_t)(lo - r->lo) % rb) return 0;
    size_t r0 = (size_t)(lo - r->lo) / rb, r1 = r0 + (size_t)w->rows;
    if (r0 % tr || (r1 % tr && r1 != (size_t)p->rows)) return 0;
    if (weight_is_quantized(p)) {
        size_t sb = (size_t)(p->cols / p->group) * dtype_size(p->sb_dtype);
        if ((const char *)w->scales != (const char *)p->scales + r0 * sb || (const char *)w->biases != (const char *)p->biases + r0 * sb) return 0;
    }
    return 1;
}

static void note(pack_registry_t *reg, const weight_t *w, const char *lo, const char *hi) {
    if (reg->n == reg->cap) {
        int cap = reg->cap ? 2 * reg->cap : 64;
        pack_region_t *r = realloc(reg->r, sizeof *r * (size_t)cap);
        if (!r) return; /* forgetting costs only the check of a later view */
        reg->r = r;
        reg->cap = cap;
    }
    reg->r[reg->n++] = (pack_region_t){*w, lo, hi};
    if (hi > reg->max_hi) reg->max_hi = hi;
}

void pack_prepare(pack_registry_t *reg, weight_t *w, int (*want)(const weight_t *w)) {
    if (!w->data || w->rows <= 0 || w->cols <= 0) return;
    const char *lo = w->data, *hi = lo + (size_t)w->rows * pack_row_bytes(w);
    for (int i = lo < reg->max_hi ? reg->n - 1 : -1; i >= 0; i--) {
        pack_region_t *r = &reg->r[i];
        if (hi <= r->lo || lo >= r->hi) continue;
        if (r->w.layout != WL_ROWS && view_ok(r, w)) {
            w->layout = r->w.layout;
            return;
        }
        if (r->w.layout != WL_ROWS && unpack_weight(&r->w)) abort(); /* out of memory for one tile: the region would be neither */
        w->layout = WL_ROWS;
        return;
    }
    if (w->layout != WL_ROWS) return; /* a copy of a weight packed by another backend */
    int layout = want ? want(w) : WL_ROWS;
    if (layout != WL_ROWS && pack_fits(w, layout)) {
        size_t sb = weight_is_quantized(w) ? (size_t)w->rows * (size_t)(w->cols / w->group) * dtype_size(w->sb_dtype) : 0;
        if (make_writable(lo, (size_t)(hi - lo)) || (sb && (make_writable(w->scales, sb) || make_writable(w->biases, sb)))) return;
        if (pack_weight(w, layout)) return;
    }
    note(reg, w, lo, hi);
}

void pack_release(pack_registry_t *reg, const weight_t *w) {
    for (int i = 0; i < reg->n; i++)
        if (reg->r[i].lo == (const char *)w->data && reg->r[i].w.rows == w->rows) {
            reg->r[i] = reg->r[--reg->n];
            return;
        }
}

void pack_registry_free(pack_registry_t *reg) {
    free(reg->r);
    *reg = (pack_registry_t){0};
}
