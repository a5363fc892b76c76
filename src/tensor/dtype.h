/* dtype.h — element types of stored tensors and the scalar conversions between them.
 *
 * Checkpoints store F32, F16 or BF16 (and U32 words for MLX-quantized codes). Activations
 * are always f32 on the CPU. The conversions here are the reference ones: bf16 rounds to
 * nearest-even, f16 handles subnormals, inf and NaN. SIMD code converts the same way. */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum dtype {
    DT_F32, DT_F16, DT_BF16, DT_F64, DT_I64, DT_I32, DT_I16, DT_I8, DT_U32, DT_U16, DT_U8, DT_BOOL,
    DT_COUNT
} dtype_t;

size_t dtype_size(dtype_t t);
const char *dtype_name(dtype_t t);
/* Parses a safetensors dtype string ("BF16", "U32", ...); -1 when unknown. */
int dtype_from_safetensors(const char *s, dtype_t *out);
/* "f32" | "f16" | "bf16" (the KV cache and activations' choices). */
int dtype_from_name(const char *s, dtype_t *out);
/* The KV cache's choices: those, and "q8" (DT_I8: int8 codes with a scale per row, see
 * backend.h kv_view_t). kv_dtype_name gives the name back ("q8", "f16", ...). */
int kv_dtype_from_name(const char *s, dtype_t *out);
const char *kv_dtype_name(dtype_t t);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                           /* nearest-even */
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: renormalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - exp;
        uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rest > half || (rest == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

/* Reads element i of a F32/F16/BF16 array as f32. */
static inline float load_as_f32(const void *p, dtype_t t, size_t i) {
    switch (t) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.f;
    }
}

static inline void store_from_f32(void *p, dtype_t t, size_t i, float v) {
    switch (t) {
    case DT_F32: ((float *)p)[i] = v; break;
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: break;
    }
}

#endif
