/* main.c — `kiln SUBCOMMAND ...`: dispatches to the subcommands listed in cli.h. */
#include "cli/cli.h"
#include "backend/backend.h"
#include "build_info.h" /* KILN_GIT_REV, written into the build directory at every build */
#include <stdio.h>
#include <string.h>

static const cli_command_t commands[] = {
    {"info", cmd_info, "describe a checkpoint: architecture, layers, parameters, dtypes, bytes"},
    {"logits", cmd_logits, "one forward over token ids; write [T, vocab] float32 logits as .npy"},
    {"generate", cmd_generate, "generate tokens from a prompt"},
    {"bench", cmd_bench, "prefill and decode throughput"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (windows of N tokens)"},
    {"chat", cmd_chat, "interactive chat in the terminal, streaming the reply"},
    {"serve", cmd_serve, "serve the OpenAI and Anthropic HTTP APIs (streaming, tools, reasoning)"},
    {"synth", cmd_synth, "write a random-weight checkpoint with a real model's shapes (HF / MLX layout)"},
    {"tokenize", cmd_tokenize, "encode text with a model's tokenizer.json (ids, tokens)"},
    {"detokenize", cmd_detokenize, "decode token ids to text with a model's tokenizer.json"},
    {"template", cmd_template, "render a model's chat template for a JSON conversation (as transformers does)"},
};

const char *cli_version(void) { return KILN_VERSION " (commit " KILN_GIT_REV ")"; }

/* `kiln --version`: what a bug report needs — version, commit, the backends this binary has and
 * the CPU kernels it picks on this machine. */
static int version(void) {
    err_t e = {0};
    backend_t *be = backend_create("cpu", 1, &e);
    printf("kiln %s\nbackends: cpu (%s kernels here), cpu-ref%s\n", cli_version(),
           be ? backend_simd_name(be) : "?",
#ifdef KILN_HAVE_CUDA
           ", cuda, cuda-f32"
#else
           "; no cuda (make cuda builds it)"
#endif
    );
    backend_destroy(be);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: kiln COMMAND [ARGS]   (kiln COMMAND --help for details; kiln --version)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) return version();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s' (kiln --help lists them)\n", argv[1]);
    return 2;
}
