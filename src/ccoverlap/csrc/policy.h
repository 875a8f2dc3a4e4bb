/* The launch interposer's policy: the one field table and the one parser.
 *
 * Compiled into the interposer (which reads its policy once at load) and into
 * the ctypes library Python loads (ccoverlap.control.interposer), so `ccoverlap run`
 * refuses exactly what the library would, builds its options and their help
 * from the same table, and Python never re-implements a rule. A new field is
 * one row of ccov_fields, one enum value below, plus its use.
 *
 * Re-entrant: no globals written; each parse owns its memory (ccov_policy_free). */
#ifndef CCOVERLAP_POLICY_H
#define CCOVERLAP_POLICY_H

#include <regex.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Index of each field in ccov_fields (the table's order). */
enum {
    CCOV_F_MODE, CCOV_F_PAD_BYTES, CCOV_F_BLOCKS, CCOV_F_COMM_PER_SM, CCOV_F_DRAIN, CCOV_F_GATE, CCOV_F_KEEP,
    CCOV_F_CARVEOUT, CCOV_F_COMM_CARVEOUT, CCOV_F_INCLUDE, CCOV_F_EXCLUDE, CCOV_F_COMM, CCOV_F_STATS, CCOV_NFIELDS
};

/* Values of the enum fields: index into their choices. */
enum { CCOV_MODE_OFF, CCOV_MODE_PAD, CCOV_MODE_BLOCKS, CCOV_MODE_AUTO };
enum { CCOV_GATE_COMM, CCOV_GATE_ALWAYS };

/* What a field holds. JSON type in the policy file: a string, except INT (a whole
 * number) and INT_AUTO (a whole number or "auto"). */
enum {
    CCOV_KIND_ENUM,     /* one of `choices`; value: its index */
    CCOV_KIND_INT,      /* whole number lo..hi */
    CCOV_KIND_INT_AUTO, /* "auto" (value CCOV_NONE) or a whole number lo..hi */
    CCOV_KIND_REGEX,    /* POSIX extended regex, matched anywhere in a kernel name */
    CCOV_KIND_PATH      /* a file path (relative to the program's working directory) */
};

/* The value of a field without one (unset, "auto", gate by mode); ranges are >= 0. */
#define CCOV_NONE (-1)

/* Bounds the live policy word of the interposer packs (pad 20 bits, blocks 12). */
#define CCOV_PAD_MAX 1048575
#define CCOV_BLOCKS_MAX 2048

typedef struct {
    const char *key;     /* JSON key, Python attribute of Policy */
    const char *env;     /* environment variable */
    const char *option;  /* `ccoverlap run` option */
    const char *metavar; /* its argument in --help */
    int kind;            /* CCOV_KIND_* */
    int lo, hi;          /* INT, INT_AUTO: valid range */
    const char *const *choices; /* ENUM: NULL-terminated */
    const char *dflt;    /* value when not given, as text; NULL: none */
    const char *sets_mode; /* the mode whose value this field is: that mode needs it, and it alone selects it */
    const char *help;    /* one line for --help (the valid values, default and variable are added) */
} ccov_field;

extern const ccov_field ccov_fields[CCOV_NFIELDS];
/* The variable naming the JSON policy file, read before the variables of the fields. */
extern const char *const ccov_policy_file_env;

/* What a communication kernel is, the one definition: a kernel whose name matches ccov_comm_kernels (a POSIX
 * extended regex, in any case, anywhere in the name) or the policy's comm regex (case as written). The
 * interposer never pads one; Python (the doctor's analysis, the bench's and the lab's proxies) asks
 * ccov_comm_is through ctypes, so both answer with the same regcomp and regexec. */
extern const char *const ccov_comm_kernels;
typedef struct ccov_comm ccov_comm;
/* The built-in pattern and `user` (NULL: none) compiled; NULL with regerror's words in `err` where `user`
 * is not a POSIX extended regex. */
ccov_comm *ccov_comm_new(const char *user, char *err, size_t cap);
int ccov_comm_is(const ccov_comm *c, const char *name); /* 1: communication, 0: not (or c NULL) */
void ccov_comm_free(ccov_comm *c);

/* A parsed policy: every field's value, or the first problem found. */
typedef struct {
    int given[CCOV_NFIELDS]; /* set by the file or a set, non-empty variable */
    int value[CCOV_NFIELDS]; /* ENUM: choice index; INT, INT_AUTO: the number; CCOV_NONE: none */
    char *text[CCOV_NFIELDS];  /* REGEX, PATH: the string (owned); NULL when not given */
    regex_t re[CCOV_NFIELDS];  /* REGEX fields with text, but comm: compiled (bit k of `compiled`) */
    unsigned compiled;
    ccov_comm *comm;           /* the communication kernels, the comm field's included (NULL: invalid) */
    char error[512];         /* non-empty: invalid, the values are partial */
} ccov_policy;

/* Look up a variable; NULL when unset. */
typedef const char *(*ccov_getenv_fn)(const char *name, void *ctx);

/* Read the policy file named by ccov_policy_file_env, then each set, non-empty
 * variable of the table, and validate. 0, or -1 with p->error set. Call
 * ccov_policy_free afterwards either way. */
int ccov_policy_load(ccov_policy *p, ccov_getenv_fn getenv_fn, void *ctx);
void ccov_policy_free(ccov_policy *p);

/* Write `s` as a JSON string. ascii: escape bytes >= 0x7f (as \u00XX); otherwise
 * they go out as they are (UTF-8 stays UTF-8). */
void ccov_json_str(FILE *f, const char *s, int ascii);

/* For Python (ctypes). env: NULL-terminated "KEY=VALUE" strings, as environ.
 * Returns 0 with the normalized policy in `out` (a JSON object of every field,
 * null where it has no value; itself a valid policy file), -1 with the one-line
 * error in `out`, or the size `out` needs when `cap` is too small. */
int ccov_policy_parse(const char *const *env, char *out, size_t cap);
/* The field table: its length, and its i-th row. */
int ccov_policy_nfields(void);
const ccov_field *ccov_policy_field(int i);

#ifdef __cplusplus
}
#endif

#endif
