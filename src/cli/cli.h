/* cli.h — the subcommands of the kiln binary. Each lives in its own cmd_*.c file, takes
 * (argc, argv) with argv[0] = the subcommand name, prints --help, and returns the process
 * exit status (0 ok, 1 runtime error, 2 usage error). cli/ is the only layer that exits. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

typedef struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_command_t;

int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_chat(int argc, char **argv);

/* Shared argument helpers (cli_args.c). They print "kiln CMD: ..." and return -1 on bad
 * values so every command reports bad flags the same way. */
int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* --kv-cache-gb: a number in [lo, hi], or 'auto' (stored as 0: the engine sizes the cache) */
int cli_parse_kv_gb(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* "1,2,3" -> malloc'd int array; rejects empty items, junk and out-of-range values. */
int cli_parse_ids(const char *cmd, const char *flag, const char *s, int **ids, int *n);
/* The model directory to use: the argument if given, else $KILN_MODEL, else
 * models/kiln-tiny next to the executable (../models/kiln-tiny from build/). */
const char *cli_default_model(void);
/* "0.1.0 (commit 0123456789ab)": the version and the commit this binary was built from (main.c) */
const char *cli_version(void);

#endif
