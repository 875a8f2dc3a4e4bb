/* The launch interposer's policy: field table, policy file, validation, normalized JSON. */
#define _GNU_SOURCE
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const mode_choices[] = {"off", "pad", "blocks", "auto", NULL};     /* CCOV_MODE_* */
static const char *const gate_choices[] = {"comm", "always", NULL};                   /* CCOV_GATE_* */

const char *const ccov_policy_file_env = "CCOVERLAP_POLICY";

/* nccl: NCCL's kernels (ncclKernel_*, ncclDevKernel_*, ncclSymkDevKernel_*; C++-mangled names too, as the
 * driver reports them); rccl: RCCL's; comm_proxy and comm_paced: ccoverlap's own stand-ins for a collective
 * (the lab's reduce-copy, the bench's emulation). */
const char *const ccov_comm_kernels = "nccl|rccl|^comm_(proxy|paced)$";

const ccov_field ccov_fields[CCOV_NFIELDS] = {
    [CCOV_F_MODE] = {"mode", "CCOVERLAP_MODE", "--mode", "MODE", CCOV_KIND_ENUM, 0, 0, mode_choices, NULL, NULL,
                     "what to pad; default pad if --pad-bytes is given, blocks if --blocks is, else off"},
    [CCOV_F_PAD_BYTES] = {"pad_bytes", "CCOVERLAP_PAD_BYTES", "--pad-bytes", "N", CCOV_KIND_INT, 1, CCOV_PAD_MAX,
                          NULL, NULL, "pad", "pad: bytes added to every compute launch"},
    [CCOV_F_BLOCKS] = {"blocks", "CCOVERLAP_BLOCKS", "--blocks", "N", CCOV_KIND_INT, 1, CCOV_BLOCKS_MAX, NULL, NULL,
                       "blocks", "blocks: pad each compute launch to at most N blocks per SM"},
    [CCOV_F_COMM_PER_SM] = {"comm_per_sm", "CCOVERLAP_COMM_PER_SM", "--per-sm", "K", CCOV_KIND_INT, 1, 64, NULL, "1",
                            NULL, "auto: communication CTAs that must fit beside compute on each SM"},
    [CCOV_F_DRAIN] = {"drain", "CCOVERLAP_DRAIN", "--drain", "N|auto", CCOV_KIND_INT_AUTO, 0, 64, NULL, "auto", NULL,
                      "auto: compute blocks per SM that may retire before the comm CTAs fit; auto: 1 for grids of "
                      "two waves or more, else 0"},
    [CCOV_F_GATE] = {"gate", "CCOVERLAP_GATE", "--gate", "GATE", CCOV_KIND_ENUM, 0, 0, gate_choices, NULL, NULL,
                     "comm: pad only while a communication kernel is in flight, the default in auto; always: pad "
                     "every launch, the default in pad and blocks"},
    [CCOV_F_KEEP] = {"keep", "CCOVERLAP_KEEP", "--keep", "N", CCOV_KIND_INT, 0, 100, NULL, "50", NULL,
                     "auto: skip a pad that leaves fewer than N% of a kernel's unpadded blocks per SM; 0: no cap"},
    [CCOV_F_CARVEOUT] = {"carveout", "CCOVERLAP_CARVEOUT", "--carveout", "PERCENT", CCOV_KIND_INT, 0, 100, NULL, NULL,
                         NULL, "CUDA: compute kernels prefer this % of the maximum shared memory per SM (a carveout hint set "
                         "once per kernel, in every mode), so comm CTAs find theirs; unset: untouched"},
    [CCOV_F_COMM_CARVEOUT] = {"comm_carveout", "CCOVERLAP_COMM_CARVEOUT", "--comm-carveout", "PERCENT", CCOV_KIND_INT, 0,
                              100, NULL, NULL, NULL, "CUDA: communication kernels prefer this % of the maximum shared "
                              "memory per SM (a carveout hint set once per kernel, in every mode), so an SM that takes "
                              "a comm CTA first keeps room for compute's blocks; unset: untouched"},
    [CCOV_F_INCLUDE] = {"include", "CCOVERLAP_INCLUDE", "--include", "REGEX", CCOV_KIND_REGEX, 0, 0, NULL, NULL, NULL,
                        "pad or hint only kernels whose name matches"},
    [CCOV_F_EXCLUDE] = {"exclude", "CCOVERLAP_EXCLUDE", "--exclude", "REGEX", CCOV_KIND_REGEX, 0, 0, NULL, NULL, NULL,
                        "never pad or hint kernels whose name matches"},
    [CCOV_F_COMM] = {"comm", "CCOVERLAP_COMM", "--comm", "REGEX", CCOV_KIND_REGEX, 0, 0, NULL, NULL, NULL,
                     "more communication kernels, never padded or hinted, besides NCCL's, RCCL's and ccoverlap's "
                     "proxies (names matching nccl|rccl|^comm_(proxy|paced)$ in any case)"},
    [CCOV_F_STATS] = {"stats", "CCOVERLAP_STATS", "--stats", "PATH", CCOV_KIND_PATH, 0, 0, NULL, NULL, NULL,
                      "write launch stats JSON here at exit; %p becomes the pid"},
};

#define POLICY_FILE_MAX 65535

static int fail(ccov_policy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ccov_policy *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* "a, b, c" of a NULL-terminated list, or of the table's keys when `list` is NULL. */
static const char *joined(const char *const *list, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; list ? list[i] != NULL : i < CCOV_NFIELDS; ++i)
        n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%s", i ? ", " : "", list ? list[i] : ccov_fields[i].key);
    return out;
}

/* ---------- one field from text ---------- */

/* A whole number: optional '-' and digits, nothing else. 0, or -1 (not one) or -2 (too large). */
static int whole(const char *s, long *out) {
    if (!(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1])))) return -1;
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    if (*end) return -1;
    return errno == ERANGE ? -2 : 0;
}

static int choice(const ccov_field *f, const char *s) {
    for (int c = 0; f->choices[c]; ++c)
        if (strcmp(s, f->choices[c]) == 0) return c;
    return -1;
}

static int set_field(ccov_policy *p, int k, const char *s) {
    const ccov_field *f = &ccov_fields[k];
    char valid[128];
    switch (f->kind) {
    case CCOV_KIND_ENUM:
        if (choice(f, s) >= 0) return p->value[k] = choice(f, s), 0;
        return fail(p, "%s=%s is not a %s: valid %s", f->env, s, f->key, joined(f->choices, valid, sizeof valid));
    case CCOV_KIND_INT:
    case CCOV_KIND_INT_AUTO: {
        int autos = f->kind == CCOV_KIND_INT_AUTO;
        if (autos && strcmp(s, "auto") == 0) return p->value[k] = CCOV_NONE, 0;
        long v;
        int rc = whole(s, &v);
        const char *either = autos ? "auto or " : "";
        if (rc == -1)
            return autos ? fail(p, "%s=%s is not auto or a whole number: valid auto or %d..%d", f->env, s, f->lo, f->hi)
                         : fail(p, "%s=%s is not a whole number", f->env, s);
        if (rc == -2) return fail(p, "%s=%s is out of range: valid %s%d..%d", f->env, s, either, f->lo, f->hi);
        if (v < f->lo || v > f->hi) return fail(p, "%s=%ld is out of range: valid %s%d..%d", f->env, v, either, f->lo, f->hi);
        return p->value[k] = (int)v, 0;
    }
    default: /* REGEX, PATH: compiled once every source has been read */
        free(p->text[k]);
        if (!(p->text[k] = strdup(s))) return fail(p, "out of memory");
        return 0;
    }
}

/* Back to the value the field has when not given. */
static int reset_field(ccov_policy *p, int k) {
    p->given[k] = 0;
    p->value[k] = CCOV_NONE;
    free(p->text[k]);
    p->text[k] = NULL;
    return ccov_fields[k].dflt ? set_field(p, k, ccov_fields[k].dflt) : 0;
}

/* ---------- the policy file: one flat JSON object ---------- */

typedef struct { char *s; size_t i; } cursor;

static void skip_ws(cursor *c) { while (isspace((unsigned char)c->s[c->i])) c->i++; }

/* Decode a JSON string in place (it only shrinks); *out points at it. 0, -1 malformed, -2 a \u escape. */
static int json_string(cursor *c, char **out) {
    if (c->s[c->i] != '"') return -1;
    char *w = *out = c->s + ++c->i;
    for (; c->s[c->i] != '"'; c->i++) {
        char ch = c->s[c->i];
        if (ch == '\0' || (unsigned char)ch < 0x20) return -1;
        if (ch == '\\') {
            ch = c->s[++c->i];
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *k = ch ? strchr(from, ch) : NULL;
            if (ch == 'u') return -2; /* not needed for regexes and paths */
            if (!k) return -1;
            ch = to[k - from];
        }
        *w++ = ch;
    }
    c->i++;
    *w = '\0';
    return 0;
}

/* What a file that is not regular is, in util/inputs.py's words. */
static const char *not_regular(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

/* Only a regular file is read: a FIFO would block every process that loads the library until a writer came, a
 * device is no policy (stat first, so that it is never opened; fstat again, for one swapped in between). */
static int read_file(ccov_policy *p, const char *path, char **text) {
    struct stat st;
    if (stat(path, &st) != 0) return fail(p, "%s=%s: cannot read it (%m)", ccov_policy_file_env, path);
    if (!S_ISREG(st.st_mode))
        return fail(p, "%s=%s: %s, not a policy file", ccov_policy_file_env, path, not_regular(st.st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(p, "%s=%s: cannot read it (%m)", ccov_policy_file_env, path);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(p, "%s=%s: %s, not a policy file", ccov_policy_file_env, path, not_regular(st.st_mode));
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return fail(p, "%s=%s: cannot read it (%m)", ccov_policy_file_env, path);
    }
    *text = malloc(POLICY_FILE_MAX + 2);
    size_t len = *text ? fread(*text, 1, POLICY_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!*text) return fail(p, "out of memory");
    if (len > POLICY_FILE_MAX) return fail(p, "%s=%s: larger than 64 KiB", ccov_policy_file_env, path);
    (*text)[len] = '\0';
    return 0;
}

/* One value at the cursor for field k; null leaves the field as if absent. */
static int file_value(ccov_policy *p, const char *where, cursor *c, int k) {
    const ccov_field *f = &ccov_fields[k];
    const char *want = f->kind == CCOV_KIND_INT ? "a whole number"
                       : f->kind == CCOV_KIND_INT_AUTO ? "a whole number or \"auto\"" : "a string";
    if (strncmp(c->s + c->i, "null", 4) == 0) {
        c->i += 4;
        return reset_field(p, k);
    }
    if (f->kind == CCOV_KIND_INT || (f->kind == CCOV_KIND_INT_AUTO && c->s[c->i] != '"')) {
        size_t start = c->i;
        if (c->s[c->i] == '-') c->i++;
        while (isdigit((unsigned char)c->s[c->i])) c->i++;
        char after = c->s[c->i];
        if (c->i == start || c->i - start > 12 || after == '.' || after == 'e' || after == 'E')
            return fail(p, "%s: \"%s\" must be %s", where, f->key, want);
        char number[16];
        memcpy(number, c->s + start, c->i - start);
        number[c->i - start] = '\0';
        p->given[k] = 1;
        return set_field(p, k, number);
    }
    char *s;
    int rc = json_string(c, &s);
    if (rc == -2) return fail(p, "%s: \\u escapes are not supported", where);
    if (rc != 0) return fail(p, "%s: \"%s\" must be %s", where, f->key, want);
    p->given[k] = 1;
    return set_field(p, k, s);
}

static int parse_object(ccov_policy *p, const char *where, char *text) {
    cursor c = {text, 0};
    char valid[256];
    skip_ws(&c);
    if (text[c.i++] != '{') return fail(p, "%s: not a JSON object", where);
    skip_ws(&c);
    if (text[c.i] == '}') c.i++;
    else for (;;) {
        char *key;
        skip_ws(&c);
        int rc = json_string(&c, &key);
        if (rc == -2) return fail(p, "%s: \\u escapes are not supported", where);
        if (rc != 0) return fail(p, "%s: malformed JSON at byte %zu", where, c.i);
        int k = 0;
        while (k < CCOV_NFIELDS && strcmp(ccov_fields[k].key, key) != 0) k++;
        if (k == CCOV_NFIELDS)
            return fail(p, "%s: unknown key \"%s\": valid %s", where, key, joined(NULL, valid, sizeof valid));
        skip_ws(&c);
        if (text[c.i++] != ':') return fail(p, "%s: malformed JSON at byte %zu", where, c.i);
        skip_ws(&c);
        if (file_value(p, where, &c, k) != 0) return -1;
        skip_ws(&c);
        if (text[c.i] == ',') { c.i++; continue; }
        if (text[c.i++] == '}') break;
        return fail(p, "%s: malformed JSON at byte %zu", where, c.i - 1);
    }
    skip_ws(&c);
    if (text[c.i]) return fail(p, "%s: malformed JSON: trailing text at byte %zu", where, c.i);
    return 0;
}

static int load_file(ccov_policy *p, const char *path) {
    char where[4200], *text = NULL;
    snprintf(where, sizeof where, "%s=%s", ccov_policy_file_env, path);
    int rc = read_file(p, path, &text) || parse_object(p, where, text) ? -1 : 0;
    free(text);
    return rc;
}

/* ---------- the whole policy ---------- */

/* Without a mode, the one given field that is some mode's value selects it, else off;
 * a mode needs its value. */
static int resolve_mode(ccov_policy *p) {
    const ccov_field *mode = &ccov_fields[CCOV_F_MODE];
    if (!p->given[CCOV_F_MODE]) {
        int by = -1;
        for (int k = 0; k < CCOV_NFIELDS; ++k) {
            if (!ccov_fields[k].sets_mode || !p->given[k]) continue;
            if (by >= 0)
                return fail(p, "%s and %s are both set: choose one, or set %s", ccov_fields[by].env,
                            ccov_fields[k].env, mode->env);
            by = k;
        }
        if (by >= 0) p->value[CCOV_F_MODE] = choice(mode, ccov_fields[by].sets_mode);
    }
    for (int k = 0; k < CCOV_NFIELDS; ++k) {
        const char *m = ccov_fields[k].sets_mode;
        if (m && !p->given[k] && choice(mode, m) == p->value[CCOV_F_MODE])
            return fail(p, "%s=%s needs %s", mode->env, m, ccov_fields[k].env);
    }
    return 0;
}

/* ---------- communication kernels ---------- */

struct ccov_comm {
    regex_t builtin, user;
    int has_user;
};

/* `re` compiled, or regerror's words in `err`. */
static int compile(regex_t *re, const char *text, int flags, char *err, size_t cap) {
    int rc = regcomp(re, text, REG_EXTENDED | REG_NOSUB | flags);
    if (rc != 0) {
        regerror(rc, re, err, cap);
    }
    return rc;
}

ccov_comm *ccov_comm_new(const char *user, char *err, size_t cap) {
    ccov_comm *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, cap, "out of memory"), NULL;
    if (compile(&c->builtin, ccov_comm_kernels, REG_ICASE, err, cap) != 0) return free(c), NULL;
    if (user && compile(&c->user, user, 0, err, cap) != 0) {
        regfree(&c->builtin);
        return free(c), NULL;
    }
    c->has_user = user != NULL;
    return c;
}

int ccov_comm_is(const ccov_comm *c, const char *name) {
    return c && (regexec(&c->builtin, name, 0, NULL, 0) == 0 || (c->has_user && regexec(&c->user, name, 0, NULL, 0) == 0));
}

void ccov_comm_free(ccov_comm *c) {
    if (!c) return;
    regfree(&c->builtin);
    if (c->has_user) regfree(&c->user);
    free(c);
}

static int compile_regexes(ccov_policy *p) {
    char why[128];
    for (int k = 0; k < CCOV_NFIELDS; ++k) {
        if (ccov_fields[k].kind != CCOV_KIND_REGEX || !p->text[k] || k == CCOV_F_COMM) continue;
        if (compile(&p->re[k], p->text[k], 0, why, sizeof why) != 0)
            return fail(p, "%s=%s is not a valid POSIX extended regex: %s", ccov_fields[k].env, p->text[k], why);
        p->compiled |= 1u << k;
    }
    if (!(p->comm = ccov_comm_new(p->text[CCOV_F_COMM], why, sizeof why)))
        return fail(p, "%s=%s is not a valid POSIX extended regex: %s", ccov_fields[CCOV_F_COMM].env,
                    p->text[CCOV_F_COMM] ? p->text[CCOV_F_COMM] : "", why);
    return 0;
}

int ccov_policy_load(ccov_policy *p, ccov_getenv_fn getenv_fn, void *ctx) {
    memset(p, 0, sizeof *p);
    for (int k = 0; k < CCOV_NFIELDS; ++k)
        if (reset_field(p, k) != 0) return -1;
    p->value[CCOV_F_MODE] = CCOV_MODE_OFF; /* until resolve_mode */
    const char *file = getenv_fn(ccov_policy_file_env, ctx);
    if (file && *file && load_file(p, file) != 0) return -1;
    for (int k = 0; k < CCOV_NFIELDS; ++k) {
        const char *v = getenv_fn(ccov_fields[k].env, ctx);
        if (!v || !*v) continue;
        p->given[k] = 1;
        if (set_field(p, k, v) != 0) return -1;
    }
    return resolve_mode(p) || compile_regexes(p) ? -1 : 0;
}

void ccov_policy_free(ccov_policy *p) {
    ccov_comm_free(p->comm);
    p->comm = NULL;
    for (int k = 0; k < CCOV_NFIELDS; ++k) {
        if (p->compiled & 1u << k) regfree(&p->re[k]);
        free(p->text[k]);
        p->text[k] = NULL;
    }
}

/* ---------- JSON out, and the entry points for Python ---------- */

void ccov_json_str(FILE *f, const char *s, int ascii) {
    fputc('"', f);
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f || (ascii && c > 0x7f)) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Every field, null where it has none: itself a valid policy file. */
static void write_policy(FILE *f, const ccov_policy *p) {
    fputc('{', f);
    for (int k = 0; k < CCOV_NFIELDS; ++k) {
        const ccov_field *fd = &ccov_fields[k];
        int v = p->value[k];
        fprintf(f, "%s\"%s\": ", k ? ", " : "", fd->key);
        if (fd->kind == CCOV_KIND_ENUM && v != CCOV_NONE) ccov_json_str(f, fd->choices[v], 0);
        else if ((fd->kind == CCOV_KIND_INT || fd->kind == CCOV_KIND_INT_AUTO) && v != CCOV_NONE) fprintf(f, "%d", v);
        else if (p->text[k]) ccov_json_str(f, p->text[k], 0);
        else fputs("null", f);
    }
    fputc('}', f);
}

/* getenv over a NULL-terminated list of "KEY=VALUE" strings: the first match, as getenv. */
static const char *from_list(const char *name, void *ctx) {
    size_t n = strlen(name);
    for (const char *const *e = ctx; *e; ++e)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

int ccov_policy_parse(const char *const *env, char *out, size_t cap) {
    ccov_policy *p = malloc(sizeof *p);
    char *text = NULL;
    size_t len = 0;
    FILE *f = p ? open_memstream(&text, &len) : NULL;
    int ok = 0;
    if (f) {
        ok = ccov_policy_load(p, from_list, (void *)env) == 0;
        if (ok) write_policy(f, p);
        else fputs(p->error, f);
        ccov_policy_free(p);
        if (fclose(f) != 0) len = 0;
    }
    free(p);
    int rc = !text || !len ? (snprintf(out, cap, "out of memory"), -1) : len >= cap ? (int)len + 1 : ok ? 0 : -1;
    if (text && len && len < cap) memcpy(out, text, len + 1);
    free(text);
    return rc;
}

int ccov_policy_nfields(void) { return CCOV_NFIELDS; }

const ccov_field *ccov_policy_field(int i) { return i >= 0 && i < CCOV_NFIELDS ? &ccov_fields[i] : NULL; }
