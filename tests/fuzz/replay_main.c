/* replay_main.c — runs a libFuzzer target's LLVMFuzzerTestOneInput once on each given file
 * (or each file of a given folder), without fuzzing: the corpora in tests/fuzz/corpus/ — seeds
 * and every input a fuzzer once failed on — become regression tests of the ordinary and the
 * ASan/UBSan builds (gcc; ctest's fuzz_corpus_*). A target reports a failure by aborting. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) { fprintf(stderr, "replay: cannot read %s\n", path); fclose(f); free(buf); return -1; }
    fclose(f);
    fprintf(stderr, "replay: %s (%ld bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) { fprintf(stderr, "replay: %s does not exist\n", argv[i]); return 1; }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i])) return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) { fprintf(stderr, "replay: cannot list %s\n", argv[i]); return 1; }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, sizeof *names * (n + 1));
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp); /* the same order every run */
        for (size_t k = 0; k < n; k++) {
            if (run_file(names[k])) return 1;
            files++;
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %d inputs, no failure\n", files);
    return files > 0 ? 0 : 1; /* an empty corpus is a setup mistake */
}
