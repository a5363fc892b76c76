/* cmd_synth.c — `kiln synth`: write a random-weight checkpoint with a real model's shapes.
 *
 * Benchmarks need real sizes (a 150k vocabulary, 28 layers of 3072-wide MLPs), not real
 * knowledge, and downloading 16 GB to measure tokens/s is wasteful. This command parses
 * flags, resolves the preset and hands everything to synth_write (load/synth_presets.c),
 * which streams the files. On a terminal it shows one progress line (bytes, MB/s, ETA);
 * otherwise it is silent until the one-line summary on stdout. Ctrl-C stops cleanly: the
 * temporary folder is removed and the target is left as it was. */
#include "cli/cli.h"
#include "base/err.h"
#include "load/synth_presets.h"
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { (void)sig; interrupted = 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct progress_line {
    double start, last;
    int shown;
} progress_line_t;

static void show_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_line_t *pl = ctx;
    double t = now_s();
    if (done < total && t - pl->last < 0.2) return;
    pl->last = t;
    double el = t - pl->start, rate = el > 0 ? done / el : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    fprintf(stderr, "\r  %8.2f / %.2f GB  %3.0f%%  %6.0f MB/s  ETA %3d:%02d ", done / 1e9, total / 1e9,
            total ? 100.0 * done / total : 100.0, rate / 1e6, (int)eta / 60, (int)eta % 60);
    pl->shown = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln synth --preset NAME --dtype DTYPE --out DIR [options]\n"
            "\n"
            "Writes a random-weight checkpoint with the shapes of a real model, in the Hugging Face\n"
            "layout (config.json, generation_config.json, model.safetensors or shards + index).\n"
            "Quantized dtypes use MLX's affine layout (U32 codes + bf16 scales/biases).\n"
            "\n"
            "  --arch A               llama | qwen3 | qwen3_5 | gemma3: model family (needed for\n"
            "                         --preset tiny; checked otherwise)\n"
            "  --preset NAME          qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b llama-3.2-1b llama-3-8b\n"
            "                         qwen3.5-0.8b qwen3.5-2b qwen3.5-moe-35b gemma3-1b tiny\n"
            "  --dtype DTYPE          bf16 | f16 | f32 | q8 | q6 | q5 | q4 | q3 | q2\n"
            "  --bits B               bits of a quantized dtype (2, 3, 4, 5, 6, 8); must agree with qN\n"
            "  --group-size G         32 | 64 | 128 weights per scale/bias (quantized; default 64)\n"
            "  --seed S               generator seed (default 0); same seed, same bytes\n"
            "  --layers N             override num_hidden_layers (quick tests)\n"
            "  --shard-gb X           shard above X GB (10^9 bytes, default 5 as save_pretrained)\n"
            "  --out DIR              directory to create (must not exist or be empty)\n"
            "  --force                replace DIR even if it is not empty\n"
            "  --list                 print the presets with their shapes and exit\n");
}

static void list_presets(void) {
    printf("%-13s %-7s %6s %6s %5s %3s %4s %6s %7s %4s  %s\n", "preset", "arch", "hidden", "inter", "heads", "kv",
           "hdim", "layers", "vocab", "tied", "shapes from");
    for (int i = 0; i < synth_preset_count(); i++) {
        const synth_preset_t *p = synth_preset_at(i);
        printf("%-13s %-7s %6d %6d %5d %3d %4d %6d %7d %4s  %s\n", p->name, synth_arch_name(p->arch), p->hidden,
               p->intermediate, p->n_heads, p->n_kv_heads, p->head_dim, p->n_layers, p->vocab,
               p->tie ? "yes" : "no", p->hf_repo);
    }
}

static int bad(const char *msg, const char *flag, const char *val) {
    fprintf(stderr, "kiln synth: %s %s, got '%s'\n", flag, msg, val ? val : "(nothing)");
    return 2;
}

/* Non-empty directory at path? (checked up front so the refusal is a usage error) */
static int nonempty_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) { n = 1; break; }
    closedir(d);
    return n;
}

int cmd_synth(int argc, char **argv) {
    const char *arch = NULL, *preset = NULL, *dtype = NULL, *out = NULL;
    long bits = 0, group = 0, layers = 0;
    double shard_gb = 0;
    unsigned long long seed = 0;
    int force = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--force")) { force = 1; continue; }
        if (!strcmp(a, "--list")) { list = 1; continue; }
        /* Every other flag takes a value: --flag VALUE or --flag=VALUE. */
        const char *val = NULL;
        char flag[64];
        const char *eq = strchr(a, '=');
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
            if (i + 1 < argc) val = argv[++i];
        }
        if (!strcmp(flag, "--arch")) arch = val;
        else if (!strcmp(flag, "--preset")) preset = val;
        else if (!strcmp(flag, "--dtype")) dtype = val;
        else if (!strcmp(flag, "--out")) out = val;
        else if (!strcmp(flag, "--bits")) { if (cli_parse_int("synth", "--bits", val, 1, 64, &bits)) return 2; }
        else if (!strcmp(flag, "--group-size")) {
            if (cli_parse_int("synth", "--group-size", val, 1, 1 << 20, &group)) return 2;
        } else if (!strcmp(flag, "--layers")) {
            if (cli_parse_int("synth", "--layers", val, 1, 4096, &layers)) return 2;
        } else if (!strcmp(flag, "--shard-gb")) {
            if (cli_parse_float("synth", "--shard-gb", val, 1e-9, 1e6, &shard_gb)) return 2;
        } else if (!strcmp(flag, "--seed")) {
            char *end;
            errno = 0;
            seed = val ? strtoull(val, &end, 10) : 0;
            if (!val || !*val || *end || errno || val[0] == '-')
                return bad("expects an unsigned 64-bit integer", "--seed", val);
        } else {
            fprintf(stderr, "kiln synth: unknown flag '%s' (kiln synth --help)\n", a);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "kiln synth: %s needs a value\n", flag);
            return 2;
        }
    }
    if (list) { list_presets(); return 0; }

    synth_opts_t o = {0};
    synth_arch_t a;
    if (arch && synth_arch_parse(arch, &a)) return bad("must be llama, qwen3, qwen3_5 or gemma3", "--arch", arch);
    if (!preset) { fprintf(stderr, "kiln synth: --preset is required (kiln synth --list)\n"); return 2; }
    if (!strcmp(preset, "tiny") && !arch) {
        fprintf(stderr, "kiln synth: --preset tiny needs --arch llama|qwen3|qwen3_5|gemma3\n");
        return 2;
    }
    o.preset = synth_preset_find(preset, arch);
    if (!o.preset) return bad("is not a known preset (kiln synth --list)", "--preset", preset);
    if (arch && o.preset->arch != a) {
        fprintf(stderr, "kiln synth: --arch %s does not match --preset %s (a %s model)\n", arch, preset,
                synth_arch_name(o.preset->arch));
        return 2;
    }
    if (!dtype) { fprintf(stderr, "kiln synth: --dtype is required (bf16, f16, f32, q8, q4, ...)\n"); return 2; }
    if (!strcmp(dtype, "bf16")) o.dtype = DT_BF16;
    else if (!strcmp(dtype, "f16")) o.dtype = DT_F16;
    else if (!strcmp(dtype, "f32")) o.dtype = DT_F32;
    else if (dtype[0] == 'q' && dtype[1] >= '2' && dtype[1] <= '8' && dtype[1] != '7' && !dtype[2]) {
        o.dtype = DT_BF16;
        o.bits = dtype[1] - '0';
    } else return bad("must be bf16, f16, f32, q8, q6, q5, q4, q3 or q2", "--dtype", dtype);
    if (bits) {
        if (bits < 2 || bits > 8 || bits == 7) {
            char v[32];
            snprintf(v, sizeof v, "%ld", bits);
            return bad("must be 2, 3, 4, 5, 6 or 8 (MLX affine quantization)", "--bits", v);
        }
        if (!o.bits) {
            fprintf(stderr, "kiln synth: --bits needs a quantized --dtype (q8, q4, ...), got --dtype %s\n", dtype);
            return 2;
        }
        if (bits != o.bits) {
            fprintf(stderr, "kiln synth: --bits %ld contradicts --dtype %s\n", bits, dtype);
            return 2;
        }
    }
    if (group) {
        if (!o.bits) {
            fprintf(stderr, "kiln synth: --group-size only applies to quantized dtypes, got --dtype %s\n", dtype);
            return 2;
        }
        if (group != 32 && group != 64 && group != 128) {
            char v[32];
            snprintf(v, sizeof v, "%ld", group);
            return bad("must be 32, 64 or 128", "--group-size", v);
        }
    }
    if (!out || !*out) { fprintf(stderr, "kiln synth: --out DIR is required\n"); return 2; }
    o.group_size = (int)group;
    o.layers = (int)layers;
    o.seed = seed;
    o.shard_bytes = shard_gb * 1e9;
    o.out = out;
    o.force = force;
    err_t e;
    err_clear(&e);
    if (synth_check(&o, &e)) { fprintf(stderr, "kiln synth: %s\n", e.msg); return 2; }
    struct stat st;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kiln synth: --out %s exists and is not a directory\n", out);
        return 2;
    }
    if (!force && nonempty_dir(out)) {
        fprintf(stderr, "kiln synth: --out %s exists and is not empty (pass --force to replace it)\n", out);
        return 2;
    }

    progress_line_t pl = {.start = now_s()};
    if (isatty(STDERR_FILENO)) {
        o.progress = show_progress;
        o.progress_ctx = &pl;
    }
    interrupted = 0;
    o.cancel = &interrupted;
    struct sigaction sa = {0}, old_int, old_term;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    synth_plan_t plan;
    int rc = synth_plan(&o, &plan, &e) ? -1 : synth_write(&o, &e);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (pl.shown) fputc('\n', stderr);
    if (rc) {
        if (plan.t) synth_plan_free(&plan);
        fprintf(stderr, "kiln synth: %s\n", e.msg);
        return 1;
    }
    double el = now_s() - pl.start;
    char dt[8];
    if (o.bits) snprintf(dt, sizeof dt, "q%d", o.bits);
    else snprintf(dt, sizeof dt, "%s", dtype);
    printf("wrote %s: %s %s (%s), %d layers, %.1fM params, %.2f GB in %d file%s, %.1f s (%.0f MB/s)\n", out,
           o.preset->name, dt, synth_arch_name(o.preset->arch), plan.layers, plan.n_params / 1e6,
           plan.total_bytes / 1e9, plan.n_shards, plan.n_shards == 1 ? "" : "s", el,
           el > 0 ? plan.total_bytes / el / 1e6 : 0.0);
    synth_plan_free(&plan);
    return 0;
}
