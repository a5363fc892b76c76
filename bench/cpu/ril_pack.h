/* ril_pack.h — the rows-in-lanes weight layout the prototypes q4_ril_proto.c and
 * q8_ril_proto.c share: tiles of 16 W rows, per 4-byte code word the 16 rows side by side
 * (codes [tile][word][16 rows][4 B], in 2 MB pages), scales/biases [tile][group][16 rows]
 * bf16. Included inside each prototype's avx512vnni target region. */
typedef struct { uint8_t *codes; uint16_t *sc, *bi; int N, K, ng; } ril_t;
static void ril_pack_bits(ril_t *r, const weight_t *w, int bits) {
    int N = w->rows, K = w->cols, ng = K / w->group, nwd = K * bits / 32;
    r->N = N; r->K = K; r->ng = ng;
    size_t H = 2u << 20, cb = (size_t)N * K * bits / 8, sb = (size_t)N * ng * 2;
    r->codes = aligned_alloc(H, (cb + H - 1) & ~(H - 1)); madvise(r->codes, (cb + H - 1) & ~(H - 1), MADV_HUGEPAGE);
    r->sc = aligned_alloc(64, sb + 64); r->bi = aligned_alloc(64, sb + 64);
    const uint32_t *src = w->data;
    for (int t = 0; t < N / 16; t++)
        for (int wd = 0; wd < nwd; wd++)
            for (int rr = 0; rr < 16; rr++)
                ((uint32_t *)r->codes)[((size_t)t * nwd + wd) * 16 + rr] = src[(size_t)(t * 16 + rr) * nwd + wd];
    for (int t = 0; t < N / 16; t++)
        for (int g = 0; g < ng; g++)
            for (int rr = 0; rr < 16; rr++) {
                r->sc[((size_t)t * ng + g) * 16 + rr] = ((const uint16_t *)w->scales)[(size_t)(t * 16 + rr) * ng + g];
                r->bi[((size_t)t * ng + g) * 16 + rr] = ((const uint16_t *)w->biases)[(size_t)(t * 16 + rr) * ng + g];
            }
}
