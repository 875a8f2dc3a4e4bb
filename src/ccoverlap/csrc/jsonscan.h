/* How deeply a JSON text nests, read in chunks as it streams by: for Python's trace reader, which must refuse
 * a pathological file before its parser spends memory on it (ijson keeps a path per level: its memory grows
 * with the square of the depth). */
#ifndef CCOVERLAP_JSONSCAN_H
#define CCOVERLAP_JSONSCAN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int depth;     /* arrays and objects open now */
    int deepest;   /* the most open at once so far */
    int in_string; /* inside a string (brackets there do not count) */
    int escaped;   /* the byte before was a backslash in a string */
} ccov_json_scan;

/* Read `n` more bytes; returns the deepest nesting so far. Start from a zeroed state. */
int ccov_json_scan_feed(ccov_json_scan *s, const char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
