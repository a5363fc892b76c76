/* cli_args.c — parsing helpers shared by the subcommands (see cli.h). */
#include "cli/cli.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "kiln %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, flag, lo, hi,
                s ? s : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "kiln %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi,
                s ? s : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_kv_gb(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    *out = 0; /* 'auto': engine/kv_budget.c */
    if (s && !strcmp(s, "auto")) return 0;
    if (cli_parse_float(cmd, flag, s, lo, hi, out) == 0) return 0;
    fprintf(stderr, "kiln %s: %s also takes 'auto' (the default: sized from the device's or host's memory)\n", cmd, flag);
    return -1;
}

int cli_parse_ids(const char *cmd, const char *flag, const char *s, int **ids, int *n) {
    *ids = NULL; *n = 0;
    if (!s || !*s) {
        fprintf(stderr, "kiln %s: %s expects a comma-separated list of token ids\n", cmd, flag);
        return -1;
    }
    int cap = 16, cnt = 0;
    int *v = malloc(sizeof(int) * cap);
    const char *p = s;
    while (1) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT_MAX || (*end && *end != ',')) {
            fprintf(stderr, "kiln %s: %s: bad token id at character %d of '%s'\n", cmd, flag, (int)(p - s) + 1, s);
            free(v);
            return -1;
        }
        if (cnt == cap) { cap *= 2; v = realloc(v, sizeof(int) * cap); }
        v[cnt++] = (int)x;
        if (!*end) break;
        p = end + 1;
    }
    *ids = v; *n = cnt;
    return 0;
}

const char *cli_default_model(void) {
    static char buf[4096];
    const char *env = getenv("KILN_MODEL");
    if (env && *env) return env;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *cands[] = {"%s/models/kiln-tiny", "%s/../models/kiln-tiny", "%s/../share/kiln/models/kiln-tiny"};
        for (int i = 0; i < 3; i++) {
            snprintf(buf, sizeof buf, cands[i], exe);
            char probe[4200];
            snprintf(probe, sizeof probe, "%s/config.json", buf);
            if (access(probe, R_OK) == 0) return buf;
        }
    }
    return "models/kiln-tiny";
}
