/* dtype.c — names and sizes of the element types (see dtype.h). */
#include "tensor/dtype.h"

static const struct { const char *st, *name; size_t size; } table[DT_COUNT] = {
    [DT_F32] = {"F32", "f32", 4},   [DT_F16] = {"F16", "f16", 2}, [DT_BF16] = {"BF16", "bf16", 2},
    [DT_F64] = {"F64", "f64", 8},   [DT_I64] = {"I64", "i64", 8}, [DT_I32] = {"I32", "i32", 4},
    [DT_I16] = {"I16", "i16", 2},   [DT_I8] = {"I8", "i8", 1},    [DT_U32] = {"U32", "u32", 4},
    [DT_U16] = {"U16", "u16", 2},   [DT_U8] = {"U8", "u8", 1},    [DT_BOOL] = {"BOOL", "bool", 1},
};

size_t dtype_size(dtype_t t) { return t < DT_COUNT ? table[t].size : 0; }
const char *dtype_name(dtype_t t) { return t < DT_COUNT ? table[t].name : "?"; }

int dtype_from_safetensors(const char *s, dtype_t *out) {
    for (int i = 0; i < DT_COUNT; i++)
        if (!strcmp(s, table[i].st)) { *out = (dtype_t)i; return 0; }
    return -1;
}

int dtype_from_name(const char *s, dtype_t *out) {
    if (!strcmp(s, "f32") || !strcmp(s, "float32")) { *out = DT_F32; return 0; }
    if (!strcmp(s, "f16") || !strcmp(s, "float16")) { *out = DT_F16; return 0; }
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) { *out = DT_BF16; return 0; }
    return -1;
}

int kv_dtype_from_name(const char *s, dtype_t *out) {
    if (!strcmp(s, "q8")) { *out = DT_I8; return 0; }
    return dtype_from_name(s, out);
}

const char *kv_dtype_name(dtype_t t) {
    switch (t) {
    case DT_F32: return "f32";
    case DT_F16: return "f16";
    case DT_BF16: return "bf16";
    case DT_I8: return "q8";
    default: return dtype_name(t);
    }
}
