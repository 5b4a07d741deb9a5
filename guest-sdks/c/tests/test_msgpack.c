/* Native unit tests of the SDK's MessagePack reader and writer.
 *
 *   test_msgpack <cases-file>
 *
 * The cases file is produced by tests/sdks/test_c_sdk.py from
 * abi/vectors/msgpack.json and hostile.json (so the vectors stay the single
 * source of truth), one case per line, tab-separated: KIND, NAME, HEX, and
 * for some kinds ARG.
 *   C  canonical value: decodes, re-encodes to the same bytes; every
 *      strict prefix is refused
 *   D  decode-only value: decodes, re-encodes to ARG (canonical hex)
 *   H  hostile bytes: refused by wasmext_validate_utf8
 *   I  integer ARG (decimal) written as HEX
 *   S/B/A/M  str/bin/array/map of length ARG starts with header HEX
 * Built-in cases cover what the vectors cannot: typed-read errors, depth
 * limits, huge declared lengths, UTF-8 edge cases, mutation fuzzing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wasmext.h"

static int g_failures, g_checks;

#define CHECK(cond, ...)                                             \
    do {                                                             \
        g_checks++;                                                  \
        if (!(cond)) {                                               \
            g_failures++;                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                            \
            fputc('\n', stderr);                                     \
        }                                                            \
    } while (0)

/* ---- helpers ------------------------------------------------------------ */

static size_t unhex(const char *hex, uint8_t *out) {
    size_t n = 0;
    for (const char *p = hex; p[0] && p[1]; p += 2) {
        unsigned byte;
        if (sscanf(p, "%2x", &byte) != 1) break;
        out[n++] = (uint8_t)byte;
    }
    return n;
}

/* Decode `in` fully and re-encode it; returns the re-encoded bytes in w. */
static int roundtrip(const uint8_t *in, size_t n, wasmext_writer *w) {
    wasmext_reader r;
    wasmext_reader_init(&r, in, n);
    wasmext_writer_reset(w);
    int rc = wasmext_copy_value(&r, w);
    if (rc == WASMEXT_OK && !wasmext_reader_at_end(&r)) rc = WASMEXT_ERR_MALFORMED;
    return rc;
}

static bool bytes_eq(const wasmext_writer *w, const uint8_t *want, size_t n) {
    return wasmext_writer_error(w) == WASMEXT_OK && w->len == n && memcmp(w->buf, want, n) == 0;
}

/* ---- file-driven cases -------------------------------------------------- */

static void run_case(char kind, const char *name, const char *hex, const char *arg,
                     wasmext_writer *w) {
    size_t hexlen = strlen(hex);
    uint8_t *in = malloc(hexlen / 2 + 1), *want = malloc(strlen(arg) / 2 + 1);
    size_t n = unhex(hex, in);
    if (kind == 'C') {
        CHECK(wasmext_validate_utf8(in, n) == WASMEXT_OK, "%s: canonical bytes refused", name);
        CHECK(roundtrip(in, n, w) == WASMEXT_OK && bytes_eq(w, in, n), "%s: not re-encoded identically", name);
        wasmext_reader r;
        wasmext_reader_init(&r, in, n);
        CHECK(wasmext_skip(&r) == WASMEXT_OK && r.pos == n, "%s: skip", name);
        for (size_t cut = 0; cut < n; cut++) { /* every truncation is an error */
            CHECK(wasmext_validate(in, cut) != WASMEXT_OK, "%s: prefix %zu accepted", name, cut);
            CHECK(roundtrip(in, cut, w) != WASMEXT_OK, "%s: prefix %zu decoded", name, cut);
        }
    } else if (kind == 'D') {
        size_t wn = unhex(arg, want);
        CHECK(wasmext_validate_utf8(in, n) == WASMEXT_OK, "%s: refused", name);
        CHECK(roundtrip(in, n, w) == WASMEXT_OK && bytes_eq(w, want, wn), "%s: wrong re-encoding", name);
    } else if (kind == 'H') {
        CHECK(wasmext_validate_utf8(in, n) != WASMEXT_OK, "%s: hostile bytes accepted", name);
    } else if (kind == 'I') {
        wasmext_writer_reset(w);
        if (arg[0] == '-') wasmext_write_int(w, strtoll(arg, NULL, 10));
        else wasmext_write_uint(w, strtoull(arg, NULL, 10));
        CHECK(bytes_eq(w, in, n), "%s: integer %s encoded wrongly", name, arg);
        int64_t i;
        uint64_t u;
        wasmext_reader r;
        wasmext_reader_init(&r, in, n);
        if (arg[0] == '-') CHECK(wasmext_read_int(&r, &i) == WASMEXT_OK && i == strtoll(arg, NULL, 10), "%s: read_int", name);
        else CHECK(wasmext_read_uint(&r, &u) == WASMEXT_OK && u == strtoull(arg, NULL, 10), "%s: read_uint", name);
    } else if (strchr("SBAM", kind)) {
        size_t len = (size_t)strtoull(arg, NULL, 10);
        uint8_t *payload = calloc(len ? len : 1, 1);
        wasmext_writer_reset(w);
        if (kind == 'S') wasmext_write_str(w, (const char *)payload, len);
        if (kind == 'B') wasmext_write_bin(w, payload, len);
        if (kind == 'A') wasmext_write_array(w, (uint32_t)len);
        if (kind == 'M') wasmext_write_map(w, (uint32_t)len);
        CHECK(wasmext_writer_error(w) == WASMEXT_OK && w->len >= n && memcmp(w->buf, in, n) == 0,
              "%s: header of length %zu", name, len);
        free(payload);
    } else {
        CHECK(0, "unknown case kind %c", kind);
    }
    free(in);
    free(want);
}

/* A line of any length (the str32 vector is 140k hex digits). */
static char *read_line(FILE *f) {
    size_t cap = 256, n = 0;
    char *line = malloc(cap);
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 >= cap) line = realloc(line, cap *= 2);
        line[n++] = (char)c;
    }
    if (c == EOF && n == 0) { free(line); return NULL; }
    line[n] = '\0';
    return line;
}

static int run_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno)); return -1; }
    wasmext_writer w = WASMEXT_WRITER_INIT;
    int cases = 0;
    char *line;
    while ((line = read_line(f)) != NULL) {
        char *fields[4] = {line, "", "", ""};
        for (int k = 1; k < 4; k++) {
            char *tab = strchr(fields[k - 1], '\t');
            if (!tab) break;
            *tab = '\0';
            fields[k] = tab + 1;
        }
        if (fields[0][0]) { run_case(fields[0][0], fields[1], fields[2], fields[3], &w); cases++; }
        free(line);
    }
    fclose(f);
    wasmext_writer_free(&w);
    return cases;
}

/* ---- built-in cases ----------------------------------------------------- */

static void test_typed_reads(void) {
    static const uint8_t doc[] = {0x83, 0xa1, 'a', 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 5,
                                  0xa1, 'b', 0xff, 0xa1, 'c', 0xca, 0x3f, 0xc0, 0, 0};
    wasmext_reader r, v;
    int64_t i;
    uint64_t u;
    double d;
    const char *s;
    uint32_t len;
    wasmext_reader_init(&r, doc, sizeof doc);
    CHECK(wasmext_map_find(&r, "a", &v) == WASMEXT_OK, "find a");
    CHECK(wasmext_read_int(&v, &i) == WASMEXT_ERR_RANGE, "uint64 above INT64_MAX into int64");
    CHECK(wasmext_read_str(&v, &s, &len) == WASMEXT_ERR_TYPE, "type mismatch");
    CHECK(wasmext_read_uint(&v, &u) == WASMEXT_OK && u == 0x8000000000000005u, "uint64");
    CHECK(wasmext_map_find(&r, "b", &v) == WASMEXT_OK && wasmext_read_uint(&v, &u) == WASMEXT_ERR_RANGE,
          "negative into uint");
    CHECK(wasmext_read_int(&v, &i) == WASMEXT_OK && i == -1, "negfixint");
    CHECK(wasmext_map_find(&r, "c", &v) == WASMEXT_OK && wasmext_read_double(&v, &d) == WASMEXT_OK &&
          d == 1.5, "float32");
    CHECK(wasmext_map_find(&r, "zz", &v) == WASMEXT_ERR_NOT_FOUND, "absent key");
    CHECK(r.pos == 0, "map_find moved the reader");
    CHECK(wasmext_map_find(&r, "b", &v) == WASMEXT_OK && wasmext_map_find(&v, "a", &v) == WASMEXT_ERR_TYPE,
          "map_find on a non-map");
    static const uint8_t ints[] = {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xd0, 0x80, 0xd1, 0xff, 0xfe};
    wasmext_reader_init(&r, ints, sizeof ints);
    CHECK(wasmext_read_int(&r, &i) == WASMEXT_OK && i == INT64_MIN, "int64 min");
    CHECK(wasmext_read_int(&r, &i) == WASMEXT_OK && i == -128, "int8 min");
    CHECK(wasmext_read_int(&r, &i) == WASMEXT_OK && i == -2, "int16 -2");
    CHECK(wasmext_reader_at_end(&r) && wasmext_read_nil(&r) == WASMEXT_ERR_TRUNCATED, "read at end");
}

static void test_hostile(void) {
    static const struct { const char *name; const char *hex; int want; } cases[] = {
        {"str32 4 GiB", "dbffffffff41", WASMEXT_ERR_TRUNCATED},
        {"bin32 4 GiB", "c6ffffffff00", WASMEXT_ERR_TRUNCATED},
        {"array32 4G items", "ddffffffff", WASMEXT_ERR_TRUNCATED},
        {"map32 4G pairs", "dfffffffff", WASMEXT_ERR_TRUNCATED},
        {"map needs 2 bytes per pair", "82a161", WASMEXT_ERR_TRUNCATED},
        {"uint64 cut", "cf0000", WASMEXT_ERR_TRUNCATED},
        {"float64 cut", "cb3ff8", WASMEXT_ERR_TRUNCATED},
        {"ext8", "c70100", WASMEXT_ERR_MALFORMED},
        {"fixext1", "d40101", WASMEXT_ERR_MALFORMED},
        {"0xc1", "c1", WASMEXT_ERR_MALFORMED},
        {"int key", "810102", WASMEXT_ERR_MALFORMED},
        {"trailing", "80c0", WASMEXT_ERR_MALFORMED},
        {"empty", "", WASMEXT_ERR_TRUNCATED},
    };
    uint8_t buf[16];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = unhex(cases[k].hex, buf);
        int rc = wasmext_validate(buf, n);
        CHECK(rc == cases[k].want, "%s: got %d want %d", cases[k].name, rc, cases[k].want);
    }
    /* skip does not insist on string keys; validate does */
    wasmext_reader r;
    wasmext_reader_init(&r, (const uint8_t *)"\x81\x01\x02", 3);
    CHECK(wasmext_skip(&r) == WASMEXT_OK && r.pos == 3, "skip over int-keyed map");
}

static void test_depth(void) {
    uint8_t buf[WASMEXT_MAX_DEPTH + 3];
    for (int nest = WASMEXT_MAX_DEPTH; nest <= WASMEXT_MAX_DEPTH + 1; nest++) {
        memset(buf, 0x91, (size_t)nest);
        buf[nest] = 0xc0;
        int want = nest <= WASMEXT_MAX_DEPTH ? WASMEXT_OK : WASMEXT_ERR_DEPTH;
        wasmext_reader r;
        wasmext_reader_init(&r, buf, (size_t)nest + 1);
        CHECK(wasmext_validate(buf, (size_t)nest + 1) == want, "%d nested arrays", nest);
        CHECK(wasmext_skip(&r) == want && r.pos == (want ? 0u : (size_t)nest + 1), "skip %d", nest);
    }
    memset(buf, 0x80, sizeof buf); /* empty maps count as a level too */
    buf[0] = 0x81; buf[1] = 0xa0;
    CHECK(wasmext_validate(buf, 3) == WASMEXT_OK, "map holding an empty map");
}

static void test_utf8(void) {
    static const struct { const char *hex; bool ok; } cases[] = {
        {"", true}, {"41", true}, {"c3a9", true}, {"e282ac", true}, {"f09f9880", true},
        {"f48fbfbf", true}, {"efbfbf", true}, {"41414141414141c3a9", true},
        {"80", false}, {"c080", false}, {"c1bf", false}, {"e08080", false}, {"eda080", false},
        {"f4908080", false}, {"f5808080", false}, {"e282", false}, {"c3", false},
        {"4141414141414141ff", false}, {"f0808080", false}, {"c341", false},
    };
    uint8_t buf[32];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = unhex(cases[k].hex, buf);
        CHECK(wasmext_utf8_valid(buf, n) == cases[k].ok, "utf8 %s", cases[k].hex);
    }
}

static void test_writer(void) {
    wasmext_writer w = WASMEXT_WRITER_INIT;
    if (sizeof(size_t) > 4) {
        /* A length beyond u32 is refused before a byte of payload is read. */
        wasmext_write_str(&w, "", (size_t)UINT32_MAX + 1);
        CHECK(wasmext_writer_error(&w) == WASMEXT_ERR_RANGE, "oversized str");
        wasmext_write_nil(&w);
        CHECK(w.len == 0, "errors are sticky");
    }
    wasmext_writer_reset(&w);
    wasmext_write_map(&w, 1);
    wasmext_write_cstr(&w, "k");
    wasmext_write_double(&w, -0.25);
    static const uint8_t want[] = {0x81, 0xa1, 'k', 0xcb, 0xbf, 0xd0, 0, 0, 0, 0, 0, 0};
    CHECK(bytes_eq(&w, want, sizeof want), "map with a double");
    wasmext_writer_free(&w);
    CHECK(w.buf == NULL && w.len == 0, "free");
}

/* Mutated vectors must never crash, read out of bounds or hang. */
static void test_fuzz(void) {
    static const char *seeds[] = {"82a4686f6f6bad6f6e5f706c61696e5f74657874a46461746182a4746578",
                                  "dc0014000102030405060708090a0b0c0d0e0f10111213",
                                  "93c3cb3ff8000000000000c4030001ff", "9191919191c0"};
    uint32_t state = 0x2545f491u;
    wasmext_writer w = WASMEXT_WRITER_INIT;
    for (int it = 0; it < 20000; it++) {
        uint8_t buf[64];
        size_t n = unhex(seeds[it % 4], buf);
        for (int m = 0; m < 3; m++) {
            state ^= state << 13; state ^= state >> 17; state ^= state << 5;
            buf[state % n] = (uint8_t)(state >> 8);
        }
        size_t cut = n - (state >> 24) % 4;
        uint8_t *exact = malloc(cut ? cut : 1); /* exact size, so overreads show */
        memcpy(exact, buf, cut);
        int rc = wasmext_validate_utf8(exact, cut);
        int rc2 = roundtrip(exact, cut, &w);
        CHECK(rc != WASMEXT_OK || rc2 == WASMEXT_OK, "valid input did not round-trip (it %d)", it);
        free(exact);
    }
    wasmext_writer_free(&w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <cases-file>\n", argv[0]);
        return 2;
    }
    int cases = run_file(argv[1]);
    if (cases < 0) return 2;
    test_typed_reads();
    test_hostile();
    test_depth();
    test_utf8();
    test_writer();
    test_fuzz();
    printf("%d file cases, %d checks, %d failures\n", cases, g_checks, g_failures);
    return g_failures ? 1 : 0;
}
