/* JSON string text as json.encoder.encode_basestring writes it (what base.to_json uses, with
 * ensure_ascii off): '"' and '\\' escaped, \b \f \n \r \t, any other byte below 0x20 as \u00XX
 * (lower-case hex), every other byte (UTF-8 of non-ASCII text, 0x7f) as it is.
 * Used by protocols/_details.c (to_json's writer) and tubemq/_rpc.c (its frames' details).
 * Static inline: each module gets its own copy. */
#ifndef BROKERSCOPE_JSONTEXT_H
#define BROKERSCOPE_JSONTEXT_H

#include "arrowbuf.h" /* Buf */

/* `"` + the n UTF-8 bytes at u escaped + `"`: 0, or -1 (no memory). */
static inline int json_put_str(Buf *b, const char *u, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (buf_reserve(b, 6 * n + 2)) return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

#endif
