/* config.h — a model's config.json (and generation_config.json) as a C struct.
 *
 * Handles the variations real checkpoints have: configs nested under "text_config" (VL
 * models, mlx-community conversions), RoPE parameters under "rope_parameters"
 * (transformers 5) or "rope_theta" + "rope_scaling" (older), eos ids as an int or a list,
 * MLX quantization under "quantization" or "quantization_config" with per-module
 * overrides where `false` means "not quantized". */
#ifndef KILN_CONFIG_H
#define KILN_CONFIG_H

#include <jansson.h>
#include "base/err.h"
#include "tensor/dtype.h"

typedef enum arch { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3_5, ARCH_GEMMA3, ARCH_GEMMA4 } arch_t;

typedef enum rope_type { ROPE_DEFAULT, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_LLAMA3, ROPE_YARN, ROPE_PROPORTIONAL } rope_type_t;

typedef struct rope_config {
    rope_type_t type;
    double theta;
    double factor;                    /* linear, dynamic, llama3, yarn */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int original_max_pos;             /* llama3, yarn, dynamic */
    double attention_factor;          /* yarn (0: derived from factor) */
    double beta_fast, beta_slow;      /* yarn */
    double mscale, mscale_all_dim;    /* yarn variants (0: unset) */
    int truncate;                     /* yarn: floor/ceil the correction range (default 1) */
    double partial_rotary_factor;     /* fraction of head_dim that is rotated (1.0) */
} rope_config_t;

#define CFG_MAX_EOS 8
#define CFG_MAX_LAYERS 512

/* What a layer's token mixer is (config.json "layer_types"). */
typedef enum layer_type { LAYER_FULL, LAYER_SLIDING, LAYER_LINEAR } layer_type_t;

typedef struct model_config {
    arch_t arch;
    char model_type[32];
    int hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    int max_pos;
    double rms_eps;
    dtype_t torch_dtype;              /* config's "dtype"/"torch_dtype" (informational)         */
    /* The dtype transformers' non-persistent buffers (RoPE inv_freq, Gemma's embedding
     * normalizer) are rounded to. from_pretrained keeps them f32 (the default); a model
     * cast in memory with .to(bfloat16) rounds them, which is how the shared fixtures'
     * reference logits were made. Set through model_opts_t.buffer_dtype. */
    dtype_t param_dtype;
    rope_config_t rope;
    int tie_embeddings, attention_bias, mlp_bias, qk_norm;
    int bos_id;                       /* -1 when none */
    int eos_ids[CFG_MAX_EOS], n_eos;  /* config.json and generation_config.json, merged */
    /* Sampling defaults from generation_config.json (NAN/-1 when absent). */
    double gen_temperature, gen_top_p, gen_min_p, gen_repetition_penalty;
    int gen_top_k;
    /* MLX quantization (bits 0 = none) and its per-module overrides (borrowed JSON). */
    int quant_bits, quant_group;
    json_t *quant;                    /* the "quantization" object itself, or NULL */
    json_t *root;                     /* the whole config.json, owned */

    /* --- hybrid and sliding-window families (qwen3_5, gemma3, gemma4) --- */
    uint8_t layer_type[CFG_MAX_LAYERS];   /* layer_type_t per layer (all LAYER_FULL by default) */
    int layer_head_dim[CFG_MAX_LAYERS];   /* per layer (gemma4 per_layer_config; else head_dim) */
    int layer_kv_heads[CFG_MAX_LAYERS];   /* per layer (else n_kv_heads)                        */
    int hidden_act;                       /* act_t: 0 silu, 1 gelu_pytorch_tanh                 */
    /* gated DeltaNet (qwen3_5 / qwen3_next "linear_attention" layers) */
    int linear_conv_kernel, linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim;
    /* sparse MoE */
    int n_experts, n_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size, norm_topk_prob;
    uint8_t layer_moe[CFG_MAX_LAYERS];    /* qwen3_5/qwen3_next: 1 where the MLP is the sparse MoE block */
    /* gemma */
    int sliding_window;                   /* tokens a sliding layer sees, itself included (0: none) */
    double query_pre_attn_scalar;         /* gemma3: attention scale = this^-0.5 (0: unset)         */
    double attn_softcap, final_softcap;   /* 0: none                                                */
    rope_config_t rope_local;             /* RoPE of sliding layers (gemma: rope_parameters.sliding_attention) */
    int hidden_per_layer_input, vocab_per_layer_input; /* gemma4 PLE (0: none) */
    int n_kv_shared_layers, attention_k_eq_v, double_wide_mlp, enable_moe_block;
} model_config_t;

/* Reads DIR/config.json and DIR/generation_config.json (optional). */
int config_load(model_config_t *c, const char *dir, err_t *e);
/* Same, from an already parsed config (takes a reference). gen may be NULL; where and gen_where
 * name the two files in errors (gen_where NULL: "generation_config.json"). */
int config_from_json(model_config_t *c, json_t *root, json_t *gen, const char *where, const char *gen_where, err_t *e);
void config_free(model_config_t *c);
/* Quantization of the module at `path` (e.g. "model.layers.0.mlp.down_proj"): bits and
 * group size, bits = 0 when the module is not quantized. */
void config_quant_for(const model_config_t *c, const char *module_path, int *bits, int *group);
const char *arch_name(arch_t a);

#endif
