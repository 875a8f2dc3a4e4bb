/* How deeply a JSON text nests (jsonscan.h). */
#include "jsonscan.h"

#include <string.h>

int ccov_json_scan_feed(ccov_json_scan *s, const char *buf, size_t n) {
    const char *p = buf, *end = buf + n;
    while (p < end) {
        if (s->in_string) { /* skip to the closing quote, minding escapes */
            if (s->escaped) {
                s->escaped = 0;
                ++p;
                continue;
            }
            const char *q = p;
            while (q < end && *q != '"' && *q != '\\') ++q;
            if (q == end) break;
            if (*q == '\\') s->escaped = 1;
            else s->in_string = 0;
            p = q + 1;
            continue;
        }
        switch (*p++) {
        case '"': s->in_string = 1; break;
        case '[': case '{':
            if (++s->depth > s->deepest) s->deepest = s->depth;
            break;
        case ']': case '}':
            if (s->depth > 0) --s->depth;
            break;
        default: break;
        }
    }
    return s->deepest;
}
