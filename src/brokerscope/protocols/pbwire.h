/* Protobuf wire reading shared by the compiled protocol walks (pulsar/_batch.c, tubemq/_rpc.c):
 * varints, tags and lengths, and skipping a field by its wire type. Static: each module gets its own copy. */
#ifndef BROKERSCOPE_PBWIRE_H
#define BROKERSCOPE_PBWIRE_H

#include <stdint.h>

/* A varint at *p (below end): 0 and the value, or -1 when it is cut, longer than ten bytes or
 * past 64 bits (a tenth byte above 1). */
static int varint(const unsigned char **p, const unsigned char *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        if (shift == 63 && b > 1) return -1;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* A field's tag or a length at *p: a varint of at most five bytes (protobuf's parser refuses a
 * longer one there) and 32 bits; 0 and the value, or -1. */
static int varint32(const unsigned char **p, const unsigned char *end, uint64_t *out) {
    const unsigned char *start = *p;
    if (varint(p, end, out) || *p - start > 5 || *out > 0xFFFFFFFFu) return -1;
    return 0;
}

/* Whether the varint that ended at `p` and began at `start` is as short as its value allows (a
 * protobuf writer never pads one: a last byte of 0 after others is a damaged byte's mark). */
static int minimal(const unsigned char *start, const unsigned char *p) { return p - start == 1 || p[-1] != 0; }

/* Skip a field of wire type `wt` at *p: 0 or -1 (malformed, a group, cut). */
static int skip(const unsigned char **p, const unsigned char *end, int wt) {
    uint64_t v;
    switch (wt) {
    case 0:
        return varint(p, end, &v);
    case 1:
        if (end - *p < 8) return -1;
        *p += 8;
        return 0;
    case 2:
        if (varint32(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
        *p += v;
        return 0;
    case 5:
        if (end - *p < 4) return -1;
        *p += 4;
        return 0;
    default:
        return -1;
    }
}

#endif
