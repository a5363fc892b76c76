/* config.c — see config.h. Missing optional fields take transformers' defaults; missing
 * required ones (sizes, layer and head counts, vocab) are errors naming the field. */
#include "load/config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/file.h"

const char *arch_name(arch_t a) {
    switch (a) {
    case ARCH_LLAMA: return "llama";
    case ARCH_MISTRAL: return "mistral";
    case ARCH_QWEN2: return "qwen2";
    case ARCH_QWEN3: return "qwen3";
    case ARCH_QWEN3_5: return "qwen3_5";
    case ARCH_GEMMA3: return "gemma3";
    case ARCH_GEMMA4: return "gemma4";
    }
    return "?";
}

static int get_int(json_t *o, const char *k, int *out, int required, const char *where, err_t *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        if (required) return err_set(e, "%s: missing required field \"%s\"", where, k);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return err_set(e, "%s: field \"%s\" must be a non-negative integer", where, k);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *k, double *out, const char *where, err_t *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return err_set(e, "%s: field \"%s\" must be a number", where, k);
    *out = json_number_value(v);
    return 0;
}

static void add_eos(model_config_t *c, json_t *v) {
    if (json_is_integer(v)) {
        int id = (int)json_integer_value(v);
        for (int i = 0; i < c->n_eos; i++) if (c->eos_ids[i] == id) return;
        if (c->n_eos < CFG_MAX_EOS) c->eos_ids[c->n_eos++] = id;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) add_eos(c, x);
    }
}

static int parse_rope_params(rope_config_t *r, json_t *rp, const char *where, err_t *e);

static void rope_defaults(model_config_t *c, rope_config_t *r) {
    memset(r, 0, sizeof *r);
    r->type = ROPE_DEFAULT;
    r->theta = 10000.0;
    r->factor = 1.0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->truncate = 1;
    r->partial_rotary_factor = 1.0;
    r->original_max_pos = c->max_pos;
}

static int parse_rope(model_config_t *c, json_t *tc, const char *where, err_t *e) {
    rope_config_t *r = &c->rope;
    /* per-layer-type RoPE (gemma3/4 in transformers 5): {"full_attention": {...}, "sliding_attention": {...}} */
    json_t *rpl = json_object_get(tc, "rope_parameters");
    if (json_is_object(rpl) && (json_is_object(json_object_get(rpl, "full_attention")) ||
                                json_is_object(json_object_get(rpl, "sliding_attention")))) {
        rope_defaults(c, r);
        rope_defaults(c, &c->rope_local);
        json_t *f = json_object_get(rpl, "full_attention"), *sl = json_object_get(rpl, "sliding_attention");
        if (json_is_object(f) && parse_rope_params(r, f, where, e)) return -1;
        if (json_is_object(sl) && parse_rope_params(&c->rope_local, sl, where, e)) return -1;
        if (!json_is_object(sl)) c->rope_local = *r;
        return 0;
    }
    r->type = ROPE_DEFAULT;
    r->theta = 10000.0;
    r->factor = 1.0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->truncate = 1;
    r->partial_rotary_factor = 1.0;
    r->original_max_pos = c->max_pos;
    if (get_num(tc, "rope_theta", &r->theta, where, e)) return -1;
    if (get_num(tc, "partial_rotary_factor", &r->partial_rotary_factor, where, e)) return -1;
    json_t *rp = json_object_get(tc, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(tc, "rope_scaling");
    if (!json_is_object(rp)) return r->theta > 0 ? 0 : err_set(e, "%s: rope_theta %g must be positive", where, r->theta);
    return parse_rope_params(r, rp, where, e);
}

static int parse_rope_params(rope_config_t *r, json_t *rp, const char *where, err_t *e) {
    if (get_num(rp, "rope_theta", &r->theta, where, e)) return -1;
    if (get_num(rp, "partial_rotary_factor", &r->partial_rotary_factor, where, e)) return -1;
    json_t *t = json_object_get(rp, "rope_type");
    if (!json_is_string(t)) t = json_object_get(rp, "type");
    const char *ts = json_is_string(t) ? json_string_value(t) : "default";
    if (!strcmp(ts, "default")) r->type = ROPE_DEFAULT;
    else if (!strcmp(ts, "linear")) r->type = ROPE_LINEAR;
    else if (!strcmp(ts, "dynamic")) r->type = ROPE_DYNAMIC;
    else if (!strcmp(ts, "llama3")) r->type = ROPE_LLAMA3;
    else if (!strcmp(ts, "yarn")) r->type = ROPE_YARN;
    else if (!strcmp(ts, "proportional")) r->type = ROPE_PROPORTIONAL;
    else return err_set(e, "%s: rope type \"%s\" is not supported (default, linear, dynamic, llama3, yarn, proportional)", where, ts);
    if (get_num(rp, "factor", &r->factor, where, e) || get_num(rp, "low_freq_factor", &r->low_freq_factor, where, e) ||
        get_num(rp, "high_freq_factor", &r->high_freq_factor, where, e) ||
        get_num(rp, "attention_factor", &r->attention_factor, where, e) ||
        get_num(rp, "beta_fast", &r->beta_fast, where, e) || get_num(rp, "beta_slow", &r->beta_slow, where, e) ||
        get_num(rp, "mscale", &r->mscale, where, e) || get_num(rp, "mscale_all_dim", &r->mscale_all_dim, where, e))
        return -1;
    if (get_int(rp, "original_max_position_embeddings", &r->original_max_pos, 0, where, e)) return -1;
    json_t *tr = json_object_get(rp, "truncate");
    if (json_is_boolean(tr)) r->truncate = json_is_true(tr);
    if (r->type != ROPE_DEFAULT && !(r->factor > 0)) return err_set(e, "%s: rope factor must be positive", where);
    /* (llama3's smoothing divides by high − low: equal factors gave NaN angles, not an error) */
    if (r->type == ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return err_set(e, "%s: llama3 rope needs high_freq_factor (%g) > low_freq_factor (%g)", where, r->high_freq_factor, r->low_freq_factor);
    if (!(r->theta > 0)) return err_set(e, "%s: rope_theta %g must be positive", where, r->theta);
    if (!(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1))
        return err_set(e, "%s: partial_rotary_factor must be in (0, 1]", where);
    return 0;
}

static int parse_quant(model_config_t *c, json_t *root, const char *where, err_t *e) {
    json_t *q = json_object_get(root, "quantization");
    if (!json_is_object(q)) q = json_object_get(root, "quantization_config");
    json_t *tc = json_object_get(root, "text_config"); /* some VL conversions nest it */
    if (!json_is_object(q) && json_is_object(tc)) q = json_object_get(tc, "quantization");
    if (!json_is_object(q) && json_is_object(tc)) q = json_object_get(tc, "quantization_config");
    if (!json_is_object(q)) return 0;
    json_t *bits = json_object_get(q, "bits"), *gs = json_object_get(q, "group_size");
    if (!bits && !gs) return 0; /* some other quantization_config (e.g. a torch one) */
    if (!json_is_integer(bits) || !json_is_integer(gs))
        return err_set(e, "%s: quantization needs integer \"bits\" and \"group_size\"", where);
    c->quant_bits = (int)json_integer_value(bits);
    c->quant_group = (int)json_integer_value(gs);
    if (c->quant_bits < 2 || c->quant_bits > 8 || c->quant_bits == 7)
        return err_set(e, "%s: quantization bits %d unsupported (2, 3, 4, 5, 6, 8)", where, c->quant_bits);
    if (c->quant_group != 32 && c->quant_group != 64 && c->quant_group != 128)
        return err_set(e, "%s: quantization group_size %d unsupported (32, 64, 128)", where, c->quant_group);
    /* per-module overrides ({"bits": B, "group_size": G}, either may be left out; false: not
     * quantized) take the same values: a group_size of 0 divided a weight's columns, and widths
     * or groups the kernels do not handle read past a row */
    const char *key;
    json_t *o;
    json_object_foreach(q, key, o) {
        if (!json_is_object(o)) continue;
        json_t *ob = json_object_get(o, "bits"), *og = json_object_get(o, "group_size");
        if ((ob && !json_is_integer(ob)) || (og && !json_is_integer(og)))
            return err_set(e, "%s: quantization override '%s' needs integer \"bits\" and \"group_size\"", where, key);
        json_int_t b = ob ? json_integer_value(ob) : c->quant_bits, g = og ? json_integer_value(og) : c->quant_group;
        if (b < 2 || b > 8 || b == 7)
            return err_set(e, "%s: quantization override '%s': bits %lld unsupported (2, 3, 4, 5, 6, 8)", where, key, (long long)b);
        if (g != 32 && g != 64 && g != 128)
            return err_set(e, "%s: quantization override '%s': group_size %lld unsupported (32, 64, 128)", where, key, (long long)g);
    }
    c->quant = q;
    return 0;
}

void config_quant_for(const model_config_t *c, const char *module_path, int *bits, int *group) {
    *bits = c->quant_bits;
    *group = c->quant_group;
    if (!c->quant) return;
    json_t *o = json_object_get(c->quant, module_path);
    /* overrides may be keyed with or without a VL wrapper's prefix */
    static const char *wraps[] = {"language_model.", "model.language_model."};
    char alt[512];
    for (size_t i = 0; !o && i < sizeof wraps / sizeof wraps[0]; i++) {
        size_t wl = strlen(wraps[i]);
        if (!strncmp(module_path, wraps[i], wl)) {
            /* language_model.model.x -> model.x ; model.language_model.x -> model.x */
            snprintf(alt, sizeof alt, "%s%s", i == 1 ? "model." : "", module_path + wl);
            o = json_object_get(c->quant, alt);
        } else {
            snprintf(alt, sizeof alt, "%s%s", wraps[i], module_path);
            o = json_object_get(c->quant, alt);
        }
    }
    if (!o) return;
    if (json_is_false(o)) { *bits = 0; return; }
    if (json_is_object(o)) {
        json_t *b = json_object_get(o, "bits"), *g = json_object_get(o, "group_size");
        if (json_is_integer(b)) *bits = (int)json_integer_value(b);
        if (json_is_integer(g)) *group = (int)json_integer_value(g);
    }
}

static int get_bool(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && json_is_true(v);
}

/* Fields of the hybrid and sliding-window families: layer kinds, DeltaNet and MoE sizes,
 * gemma's window, scalars, soft-caps, PLE and per-layer attention shapes. Defaults are
 * transformers' config defaults for the family. */
static int parse_hybrid(model_config_t *c, json_t *tc, const char *where, err_t *e) {
    if (c->n_layers > CFG_MAX_LAYERS) return err_set(e, "%s: num_hidden_layers %d exceeds %d", where, c->n_layers, CFG_MAX_LAYERS);
    for (int i = 0; i < c->n_layers; i++) {
        c->layer_type[i] = LAYER_FULL;
        c->layer_head_dim[i] = c->head_dim;
        c->layer_kv_heads[i] = c->n_kv_heads;
    }
    json_t *act = json_object_get(tc, "hidden_activation");
    if (!json_is_string(act)) act = json_object_get(tc, "hidden_act");
    if (json_is_string(act)) {
        const char *a = json_string_value(act);
        if (!strcmp(a, "silu") || !strcmp(a, "swish")) c->hidden_act = 0;
        else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_tanh")) c->hidden_act = 1;
        else if (c->arch >= ARCH_QWEN3_5) return err_set(e, "%s: hidden activation \"%s\" is not supported (silu, gelu_pytorch_tanh)", where, a);
    }
    if (c->arch < ARCH_QWEN3_5) return 0;
    /* layer_types, or the family's default pattern */
    json_t *lt = json_object_get(tc, "layer_types");
    if (json_is_array(lt)) {
        if ((int)json_array_size(lt) != c->n_layers)
            return err_set(e, "%s: layer_types has %zu entries but num_hidden_layers is %d", where, json_array_size(lt), c->n_layers);
        for (int i = 0; i < c->n_layers; i++) {
            json_t *x = json_array_get(lt, i);
            const char *s = json_is_string(x) ? json_string_value(x) : "";
            if (!strcmp(s, "full_attention")) c->layer_type[i] = LAYER_FULL;
            else if (!strcmp(s, "sliding_attention")) c->layer_type[i] = LAYER_SLIDING;
            else if (!strcmp(s, "linear_attention")) c->layer_type[i] = LAYER_LINEAR;
            else return err_set(e, "%s: layer_types[%d] \"%s\" is not a known layer type (full_attention, sliding_attention, linear_attention)", where, i, s);
        }
    } else if (c->arch == ARCH_QWEN3_5) {
        int every = 4;
        if (get_int(tc, "full_attention_interval", &every, 0, where, e)) return -1;
        for (int i = 0; i < c->n_layers; i++) c->layer_type[i] = every > 0 && (i + 1) % every == 0 ? LAYER_FULL : LAYER_LINEAR;
    } else {
        int every = 6;
        if (get_int(tc, "sliding_window_pattern", &every, 0, where, e)) return -1;
        if (get_int(tc, "_sliding_window_pattern", &every, 0, where, e)) return -1;
        for (int i = 0; i < c->n_layers; i++) c->layer_type[i] = every > 0 && (i + 1) % every == 0 ? LAYER_FULL : LAYER_SLIDING;
    }
    if (c->arch == ARCH_QWEN3_5) {
        c->linear_conv_kernel = 4;
        c->linear_k_heads = 16; c->linear_v_heads = 32; c->linear_k_dim = 128; c->linear_v_dim = 128;
        if (get_int(tc, "linear_conv_kernel_dim", &c->linear_conv_kernel, 0, where, e) ||
            get_int(tc, "linear_num_key_heads", &c->linear_k_heads, 0, where, e) ||
            get_int(tc, "linear_num_value_heads", &c->linear_v_heads, 0, where, e) ||
            get_int(tc, "linear_key_head_dim", &c->linear_k_dim, 0, where, e) ||
            get_int(tc, "linear_value_head_dim", &c->linear_v_dim, 0, where, e))
            return -1;
        if (c->linear_conv_kernel < 1 || !c->linear_k_heads || !c->linear_v_heads || !c->linear_k_dim || !c->linear_v_dim)
            return err_set(e, "%s: linear_* sizes must be positive", where);
        if (c->linear_v_heads % c->linear_k_heads)
            return err_set(e, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", where, c->linear_v_heads, c->linear_k_heads);
        /* Qwen3.5 MoE always renormalizes the top-k weights; Qwen3-Next says so in its
         * config (norm_topk_prob, true unless given) */
        c->norm_topk_prob = 1;
        json_t *nt = json_object_get(tc, "norm_topk_prob");
        if (!strcmp(c->model_type, "qwen3_next") && nt) {
            if (!json_is_boolean(nt)) return err_set(e, "%s: \"norm_topk_prob\" must be true or false", where);
            c->norm_topk_prob = json_is_true(nt);
        }
    }
    if (c->arch == ARCH_GEMMA3 || c->arch == ARCH_GEMMA4) {
        c->sliding_window = 4096;
        if (get_int(tc, "sliding_window", &c->sliding_window, 0, where, e)) return -1;
        if (c->arch == ARCH_GEMMA3) c->query_pre_attn_scalar = 256;
        if (get_num(tc, "query_pre_attn_scalar", &c->query_pre_attn_scalar, where, e) ||
            get_num(tc, "attn_logit_softcapping", &c->attn_softcap, where, e) ||
            get_num(tc, "final_logit_softcapping", &c->final_softcap, where, e))
            return -1;
        /* (given and not positive: 1/sqrt of it, or a cap that silently turned off — NaN or wrong logits) */
        if (json_is_number(json_object_get(tc, "query_pre_attn_scalar")) && !(c->query_pre_attn_scalar > 0))
            return err_set(e, "%s: query_pre_attn_scalar %g must be positive", where, c->query_pre_attn_scalar);
        if (json_is_number(json_object_get(tc, "attn_logit_softcapping")) && !(c->attn_softcap > 0))
            return err_set(e, "%s: attn_logit_softcapping %g must be positive (null: none)", where, c->attn_softcap);
        if (json_is_number(json_object_get(tc, "final_logit_softcapping")) && !(c->final_softcap > 0))
            return err_set(e, "%s: final_logit_softcapping %g must be positive (null: none)", where, c->final_softcap);
        if (c->arch == ARCH_GEMMA3 && !json_is_object(json_object_get(json_object_get(tc, "rope_parameters"), "sliding_attention"))) {
            /* older configs: rope_local_base_freq for the sliding layers, rope_theta/rope_scaling for global */
            c->rope_local = c->rope;
            c->rope_local.type = ROPE_DEFAULT;
            c->rope_local.factor = 1.0;
            c->rope_local.theta = 10000.0;
            if (get_num(tc, "rope_local_base_freq", &c->rope_local.theta, where, e)) return -1;
        }
        if (c->sliding_window < 0) return err_set(e, "%s: sliding_window must be positive", where);
    }
    if (c->arch == ARCH_GEMMA4) {
        if (get_int(tc, "hidden_size_per_layer_input", &c->hidden_per_layer_input, 0, where, e) ||
            get_int(tc, "vocab_size_per_layer_input", &c->vocab_per_layer_input, 0, where, e) ||
            get_int(tc, "num_kv_shared_layers", &c->n_kv_shared_layers, 0, where, e))
            return -1;
        if (c->hidden_per_layer_input && !c->vocab_per_layer_input) c->vocab_per_layer_input = c->vocab_size;
        if (c->n_kv_shared_layers >= c->n_layers) return err_set(e, "%s: num_kv_shared_layers must be below num_hidden_layers", where);
        c->attention_k_eq_v = get_bool(tc, "attention_k_eq_v");
        c->double_wide_mlp = get_bool(tc, "use_double_wide_mlp");
        c->enable_moe_block = get_bool(tc, "enable_moe_block");
        if (get_int(tc, "top_k_experts", &c->n_experts_per_tok, 0, where, e)) return -1;
        c->norm_topk_prob = 1;
        /* global layers' shapes: flat (global_head_dim, num_global_key_value_heads) or
         * per_layer_config {"<layer>": {"head_dim", "num_key_value_heads"}} */
        int ghd = 0, gkv = 0;
        if (get_int(tc, "global_head_dim", &ghd, 0, where, e) || get_int(tc, "num_global_key_value_heads", &gkv, 0, where, e)) return -1;
        for (int i = 0; i < c->n_layers; i++)
            if (c->layer_type[i] == LAYER_FULL) {
                if (ghd) c->layer_head_dim[i] = ghd;
                if (gkv && c->attention_k_eq_v) c->layer_kv_heads[i] = gkv;
            }
        json_t *plc = json_object_get(tc, "per_layer_config");
        if (json_is_object(plc)) {
            const char *k;
            json_t *v;
            json_object_foreach(plc, k, v) {
                char *end;
                long li = strtol(k, &end, 10);
                if (*end || li < 0 || li >= c->n_layers) return err_set(e, "%s: per_layer_config key \"%s\" is not a layer index", where, k);
                if (!json_is_object(v)) return err_set(e, "%s: per_layer_config[\"%s\"] must be an object", where, k);
                if (get_int(v, "head_dim", &c->layer_head_dim[li], 0, where, e) ||
                    get_int(v, "num_key_value_heads", &c->layer_kv_heads[li], 0, where, e))
                    return -1;
            }
        }
        for (int i = 0; i < c->n_layers; i++)
            if (c->layer_head_dim[i] <= 0 || c->layer_head_dim[i] % 2 || c->layer_kv_heads[i] <= 0 || c->n_heads % c->layer_kv_heads[i])
                return err_set(e, "%s: layer %d: head_dim %d / num_key_value_heads %d invalid", where, i, c->layer_head_dim[i], c->layer_kv_heads[i]);
    }
    /* MoE sizes (qwen3_5_moe: num_experts, num_experts_per_tok; gemma4: num_experts, top_k_experts) */
    if (get_int(tc, "num_experts", &c->n_experts, 0, where, e) ||
        get_int(tc, "num_experts_per_tok", &c->n_experts_per_tok, 0, where, e) ||
        get_int(tc, "moe_intermediate_size", &c->moe_intermediate_size, 0, where, e) ||
        get_int(tc, "shared_expert_intermediate_size", &c->shared_expert_intermediate_size, 0, where, e))
        return -1;
    if (c->n_experts && (c->n_experts_per_tok <= 0 || c->n_experts_per_tok > c->n_experts || c->moe_intermediate_size <= 0))
        return err_set(e, "%s: MoE needs 0 < experts per token (%d) <= num_experts (%d) and moe_intermediate_size", where,
                       c->n_experts_per_tok, c->n_experts);
    if (c->arch == ARCH_QWEN3_5 && c->n_experts) {
        /* which layers are sparse (transformers' Qwen3-Next rule; Qwen3.5 MoE configs carry
         * neither key, so every layer is): not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 */
        int step = 1;
        if (get_int(tc, "decoder_sparse_step", &step, 0, where, e)) return -1;
        if (step < 1) return err_set(e, "%s: decoder_sparse_step must be >= 1 (got %d)", where, step);
        for (int i = 0; i < c->n_layers; i++) c->layer_moe[i] = (i + 1) % step == 0;
        json_t *only = json_object_get(tc, "mlp_only_layers");
        if (only && !json_is_null(only)) {
            if (!json_is_array(only)) return err_set(e, "%s: \"mlp_only_layers\" must be a list of layer indices", where);
            for (size_t j = 0; j < json_array_size(only); j++) {
                json_t *x = json_array_get(only, j);
                if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= c->n_layers)
                    return err_set(e, "%s: mlp_only_layers[%zu] is not a layer index below %d", where, j, c->n_layers);
                c->layer_moe[json_integer_value(x)] = 0;
            }
        }
    }
    return 0;
}

int config_from_json(model_config_t *c, json_t *root, json_t *gen, const char *where, const char *gen_where, err_t *e) {
    memset(c, 0, sizeof *c);
    c->root = json_incref(root);
    c->bos_id = -1;
    c->gen_temperature = c->gen_top_p = c->gen_min_p = c->gen_repetition_penalty = NAN;
    c->gen_top_k = -1;
    if (!json_is_object(root)) return err_set(e, "%s: not a JSON object", where);
    json_t *tc = json_object_get(root, "text_config");
    if (!json_is_object(tc)) tc = root;
    json_t *mt = json_object_get(tc, "model_type");
    if (!json_is_string(mt)) mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) return err_set(e, "%s: missing \"model_type\"", where);
    snprintf(c->model_type, sizeof c->model_type, "%s", json_string_value(mt));
    const char *t = c->model_type;
    if (!strcmp(t, "llama")) c->arch = ARCH_LLAMA;
    else if (!strcmp(t, "mistral")) c->arch = ARCH_MISTRAL;
    else if (!strcmp(t, "qwen2")) c->arch = ARCH_QWEN2;
    else if (!strcmp(t, "qwen3")) c->arch = ARCH_QWEN3;
    else if (!strcmp(t, "qwen3_5_text") || !strcmp(t, "qwen3_5") || !strcmp(t, "qwen3_5_moe_text") || !strcmp(t, "qwen3_5_moe") ||
             !strcmp(t, "qwen3_next")) /* same layer kinds; fused DeltaNet projections (qwen35.c) */
        c->arch = ARCH_QWEN3_5;
    else if (!strcmp(t, "gemma3_text") || !strcmp(t, "gemma3")) c->arch = ARCH_GEMMA3;
    else if (!strcmp(t, "gemma4_text") || !strcmp(t, "gemma4")) c->arch = ARCH_GEMMA4;
    else return err_set(e, "%s: architecture \"%s\" is not supported (llama, mistral, qwen2, qwen3, qwen3_5[_moe][_text], qwen3_next, gemma3[_text], gemma4[_text])", where, t);

    c->max_pos = 4096;
    c->rms_eps = 1e-6;
    if (get_int(tc, "hidden_size", &c->hidden_size, 1, where, e) ||
        /* MoE-only models (qwen3_5_moe) have no dense intermediate_size */
        get_int(tc, "intermediate_size", &c->intermediate_size, !json_is_integer(json_object_get(tc, "num_experts")), where, e) ||
        get_int(tc, "num_hidden_layers", &c->n_layers, 1, where, e) ||
        get_int(tc, "num_attention_heads", &c->n_heads, 1, where, e) ||
        get_int(tc, "vocab_size", &c->vocab_size, 1, where, e) ||
        get_int(tc, "max_position_embeddings", &c->max_pos, 0, where, e) ||
        get_num(tc, "rms_norm_eps", &c->rms_eps, where, e))
        return -1;
    c->n_kv_heads = c->n_heads;
    if (get_int(tc, "num_key_value_heads", &c->n_kv_heads, 0, where, e)) return -1;
    if (c->hidden_size == 0 || c->n_heads == 0 || c->n_layers == 0 || c->vocab_size == 0 || c->n_kv_heads == 0)
        return err_set(e, "%s: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads and vocab_size must be positive", where);
    c->head_dim = c->hidden_size / c->n_heads;
    if (get_int(tc, "head_dim", &c->head_dim, 0, where, e)) return -1;
    if (c->head_dim <= 0 || c->head_dim % 2) return err_set(e, "%s: head_dim %d must be positive and even", where, c->head_dim);
    if (!(c->rms_eps >= 0 && c->rms_eps < 1)) return err_set(e, "%s: rms_norm_eps %g must be in [0, 1)", where, c->rms_eps);
    if (c->n_heads % c->n_kv_heads)
        return err_set(e, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where, c->n_heads, c->n_kv_heads);
    json_t *tie = json_object_get(tc, "tie_word_embeddings");
    if (!tie) tie = json_object_get(root, "tie_word_embeddings");
    /* absent: transformers' per-family default (Gemma configs tie, llama/qwen ones do not) */
    c->tie_embeddings = tie ? json_is_true(tie) : (c->arch == ARCH_GEMMA3 || c->arch == ARCH_GEMMA4);
    json_t *ab = json_object_get(tc, "attention_bias");
    c->attention_bias = c->arch == ARCH_QWEN2 ? 1 : (ab && json_is_true(ab));
    json_t *mb = json_object_get(tc, "mlp_bias");
    c->mlp_bias = mb && json_is_true(mb);
    c->qk_norm = c->arch == ARCH_QWEN3;
    if (parse_rope(c, tc, where, e)) return -1;
    /* transformers' runtime buffers stay f32 when a checkpoint is loaded with
     * from_pretrained; model_load may override this (model_opts_t.buffer_dtype). */
    c->param_dtype = DT_F32;
    c->torch_dtype = DT_F32;
    json_t *pd = json_object_get(tc, "dtype");
    if (!json_is_string(pd)) pd = json_object_get(tc, "torch_dtype");
    if (!json_is_string(pd)) pd = json_object_get(root, "torch_dtype");
    if (json_is_string(pd)) dtype_from_name(json_string_value(pd), &c->torch_dtype);
    json_t *bos = json_object_get(tc, "bos_token_id");
    if (json_is_integer(bos)) c->bos_id = (int)json_integer_value(bos);
    add_eos(c, json_object_get(tc, "eos_token_id"));
    if (tc != root) add_eos(c, json_object_get(root, "eos_token_id"));
    if (parse_quant(c, root, where, e)) return -1;
    if (parse_hybrid(c, tc, where, e)) return -1;
    if (gen) {
        add_eos(c, json_object_get(gen, "eos_token_id"));
        json_t *gb = json_object_get(gen, "bos_token_id");
        if (c->bos_id < 0 && json_is_integer(gb)) c->bos_id = (int)json_integer_value(gb);
        /* the sampling defaults: checked here, with the sampler's ranges (sampler.c), so that a bad
         * one names this file at load instead of failing every request that leaves it out with a
         * message about a value the client never sent */
        const char *gwhere = gen_where ? gen_where : "generation_config.json";
        if (get_num(gen, "temperature", &c->gen_temperature, gwhere, e) || get_num(gen, "top_p", &c->gen_top_p, gwhere, e) ||
            get_num(gen, "min_p", &c->gen_min_p, gwhere, e) ||
            get_num(gen, "repetition_penalty", &c->gen_repetition_penalty, gwhere, e))
            return -1;
        const char *fix = "(a default for requests that leave it out: fix the value or remove the field)";
        if (!isnan(c->gen_temperature) && !(c->gen_temperature >= 0 && c->gen_temperature <= 100))
            return err_set(e, "%s: temperature %g must be in [0, 100] %s", gwhere, c->gen_temperature, fix);
        if (!isnan(c->gen_top_p) && !(c->gen_top_p > 0 && c->gen_top_p <= 1))
            return err_set(e, "%s: top_p %g must be in (0, 1] %s", gwhere, c->gen_top_p, fix);
        if (!isnan(c->gen_min_p) && !(c->gen_min_p >= 0 && c->gen_min_p <= 1))
            return err_set(e, "%s: min_p %g must be in [0, 1] %s", gwhere, c->gen_min_p, fix);
        if (!isnan(c->gen_repetition_penalty) && !(c->gen_repetition_penalty > 0 && c->gen_repetition_penalty <= 10))
            return err_set(e, "%s: repetition_penalty %g must be in (0, 10] %s", gwhere, c->gen_repetition_penalty, fix);
        json_t *tk = json_object_get(gen, "top_k");
        if (tk && !json_is_null(tk) && !json_is_integer(tk)) return err_set(e, "%s: field \"top_k\" must be an integer", gwhere);
        if (json_is_integer(tk)) c->gen_top_k = (int)json_integer_value(tk); /* (<= 0: off, as transformers' 0) */
        json_t *ds = json_object_get(gen, "do_sample");
        if (json_is_false(ds)) c->gen_temperature = 0.0; /* greedy by default */
    }
    return 0;
}

int config_load(model_config_t *c, const char *dir, err_t *e) {
    char *path = str_printf("%s/config.json", dir), *gpath = str_printf("%s/generation_config.json", dir);
    json_error_t je;
    json_t *root = NULL, *gen = NULL;
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (!file_exists(path)) { err_set(e, "%s: not found (is '%s' a model directory?)", path, dir); goto out; }
    root = json_load_file(path, 0, &je);
    if (!root) { err_set(e, "%s: not valid JSON (%s, line %d)", path, je.text, je.line); goto out; }
    if (file_exists(gpath)) {
        gen = json_load_file(gpath, 0, &je);
        if (!gen) { err_set(e, "%s: not valid JSON (%s, line %d)", gpath, je.text, je.line); goto out; }
    }
    rc = config_from_json(c, root, gen, path, gpath, e);
out:
    json_decref(root);
    json_decref(gen);
    free(path);
    free(gpath);
    return rc;
}

void config_free(model_config_t *c) {
    json_decref(c->root);
    memset(c, 0, sizeof *c);
}
