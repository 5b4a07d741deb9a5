/* pii-mask: replaces e-mail addresses, phone numbers and payment card
 * numbers in text with [EMAIL], [PHONE] and [CARD].
 *
 * One left-to-right pass visits only "anchor" bytes: '@' (e-mail), and
 * digits, '+' and '(' (cards, phones). Everything else is skipped eight bytes
 * at a time, which is what keeps a megabyte of prose inside the host's fuel
 * budget. At an anchor the e-mail is tried first (a local part may hold
 * digits that would otherwise look like a phone), then the card, then the
 * phone (so a grouped card is never taken for a phone). Every matcher looks a
 * bounded distance only, so the pass is linear in the text.
 *
 * UTF-8 safety: matchers step over ASCII bytes and whole two-byte
 * characters only, so a match always begins and ends on a character
 * boundary; all other bytes are copied through untouched. */
#include <string.h>

#include <wasmext.h>

#define EMAIL_LOCAL_MAX 64   /* RFC 5321 */
#define EMAIL_DOMAIN_MAX 253 /* RFC 1035; in bytes here, as is the label limit */
#define EMAIL_LABEL_MAX 63
#define CARD_MIN 13
#define CARD_MAX 19
#define PHONE_MIN 7
#define PHONE_MAX 15 /* E.164 */
#define NATIONAL_MAX 12
#define PHONE_GROUPS 16

typedef struct {
    bool email, phone, card;
} mask_opts;

/* Character classes by table: the matchers test bytes in tight loops and a
 * lookup is far cheaper in fuel than a chain of comparisons. */
enum { C_DIGIT = 1, C_ALPHA = 2, C_WORD = 4, C_LOCAL = 8, C_LABEL = 16 };
static uint8_t g_class[256];

static void init_classes(void) {
    for (int c = 0; c < 256; c++) {
        uint8_t k = 0;
        if (c >= '0' && c <= '9') k |= C_DIGIT | C_WORD | C_LOCAL;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k |= C_ALPHA | C_WORD | C_LOCAL;
        if (c == '_') k |= C_WORD | C_LOCAL;
        if (c == '.' || c == '%' || c == '+' || c == '-') k |= C_LOCAL;
        if ((k & (C_DIGIT | C_ALPHA)) || c == '-') k |= C_LABEL;
        g_class[c] = k;
    }
}

static bool is_digit(uint8_t c) { return g_class[c] & C_DIGIT; }
static bool is_alpha(uint8_t c) { return g_class[c] & C_ALPHA; }
static bool is_word(uint8_t c) { return g_class[c] & C_WORD; }
static bool is_local(uint8_t c) { return g_class[c] & C_LOCAL; }

/* The next byte at or after i in '(' .. '@' (0x28-0x40: digits, '+', '(',
 * '@' and some punctuation), or n. Eight bytes per step: for bytes below
 * 0x80, adding 0x80-0x28 sets the top bit iff the byte is >= 0x28 and adding
 * 0x7f-0x40 sets it iff the byte is > 0x40; no sum carries into the next
 * byte, so the lowest flagged byte is exact. */
static size_t next_anchor(const uint8_t *s, size_t n, size_t i) {
    const uint64_t ones = UINT64_C(0x0101010101010101), high = ones * 0x80;
    while (n - i >= 8) {
        uint64_t x, low;
        memcpy(&x, s + i, 8); /* wasm is little-endian: byte 0 is the low byte */
        low = x & ~high;
        uint64_t hit = (low + ones * (0x80 - 0x28)) & ~(low + ones * (0x7f - 0x40)) & ~x & high;
        if (hit) return i + (size_t)(__builtin_ctzll(hit) / 8);
        i += 8;
    }
    while (i < n && (s[i] < 0x28 || s[i] > 0x40)) i++;
    return i;
}

/* ---- e-mail ------------------------------------------------------------ */

/* Addresses may hold non-ASCII letters ("zoë@exämple.de"). Two-byte UTF-8
 * characters (U+0080-U+07FF: Latin, Greek, Cyrillic, Hebrew, Arabic...)
 * count as letters; three- and four-byte ones (CJK, emoji) end an address,
 * since text in scripts written without spaces would otherwise be swallowed
 * into it. The steps below move by whole characters, so a match still
 * starts and ends on a character boundary. */

/* Bytes of the character at s[k] if it is of ASCII class `cls` (1) or a
 * two-byte letter (2); 0 otherwise. */
static size_t char_at(const uint8_t *s, size_t n, size_t k, uint8_t cls) {
    if (g_class[s[k]] & cls) return 1;
    return s[k] >= 0xc2 && s[k] <= 0xdf && k + 1 < n && (s[k + 1] & 0xc0) == 0x80 ? 2 : 0;
}

/* The same for the character ending at s[k], not reaching before `lo`. A
 * continuation byte preceded by C2..DF can only be a two-byte character. */
static size_t char_before(const uint8_t *s, size_t lo, size_t k, uint8_t cls) {
    if (k > lo && (g_class[s[k - 1]] & cls)) return 1;
    return k >= lo + 2 && (s[k - 1] & 0xc0) == 0x80 && s[k - 2] >= 0xc2 && s[k - 2] <= 0xdf ? 2 : 0;
}

/* Length of the longest well-formed domain at s[0..n): labels of letters,
 * digits and inner hyphens, at least two, ending in an alphabetic TLD.
 * A sentence-final dot is thereby left out. */
static size_t domain_len(const uint8_t *s, size_t n) {
    size_t best = 0, k = 0, step;
    int labels = 0;
    while (k < n && s[k] != '-' && char_at(s, n, k, C_LABEL)) {
        size_t start = k;
        while (k < n && k - start <= EMAIL_LABEL_MAX && (step = char_at(s, n, k, C_LABEL))) k += step;
        size_t end = k;
        while (s[end - 1] == '-') end--; /* "x.com-" ends before the dash */
        if (end - start > EMAIL_LABEL_MAX || end > EMAIL_DOMAIN_MAX) break;
        bool tld = end - start >= 2;
        for (size_t j = start; j < end; j++) tld = tld && (is_alpha(s[j]) || s[j] >= 0x80);
        labels++;
        if (labels >= 2 && tld) best = end;
        if (end != k || k + 1 >= n || s[k] != '.') break;
        k++;
    }
    return best;
}

/* The e-mail whose '@' is at s[at]: its local part runs back from the '@'
 * over at most EMAIL_LOCAL_MAX bytes, not into text before `lo` (already
 * replaced). Returns the start, with the length in *len (0: no e-mail). */
static size_t match_email(const uint8_t *s, size_t n, size_t at, size_t lo, size_t *len) {
    size_t start = at, step;
    *len = 0;
    while ((step = char_before(s, lo, start, C_LOCAL)) && at - start + step <= EMAIL_LOCAL_MAX)
        start -= step;
    if (step || (start == lo && char_before(s, 0, lo, C_LOCAL))) return 0; /* too long, or glued */
    while (start < at && s[start] == '.') start++; /* ".bob@" starts at b */
    if (start == at || s[at - 1] == '.') return 0;
    size_t d = domain_len(s + at + 1, n - at - 1);
    *len = d ? at + 1 + d - start : 0;
    return start;
}

/* If the local characters from s[i] lead to an '@', the '@' position. */
static size_t email_ahead(const uint8_t *s, size_t n, size_t i) {
    size_t k = i, step;
    while (k < n && k - i < EMAIL_LOCAL_MAX && (step = char_at(s, n, k, C_LOCAL))) k += step;
    return k < n && s[k] == '@' ? k : 0;
}

/* ---- cards and phones: shared boundaries -------------------------------- */

/* A number may not be glued to a word ("A4", "x_9"), nor start inside a
 * dotted or dashed number ("15.01.2024" holds no "2024 ..." phone). */
static bool number_starts(const uint8_t *s, size_t i) {
    if (i == 0) return true;
    uint8_t prev = s[i - 1];
    if (is_word(prev) || prev == '+') return false;
    return !((prev == '.' || prev == '-') && i >= 2 && is_digit(s[i - 2]));
}

static bool number_ends(const uint8_t *s, size_t n, size_t end) {
    return end >= n || !is_word(s[end]);
}

/* ---- cards ------------------------------------------------------------ */

/* 13-19 digits, either in one piece or in groups of 4-6 joined by single
 * spaces or dashes (4-4-4-4, Amex 4-6-5); the last group may be shorter
 * (4-4-4-1). The card may end at any group end, since a CVV or more text can
 * follow, and the longest Luhn-valid candidate wins.
 *
 * Luhn doubles every second digit counting from the right, which depends on
 * where the candidate ends; keeping both parities' sums while scanning makes
 * each candidate an O(1) test. */
static size_t match_card(const uint8_t *s, size_t n, size_t i) {
    static const uint8_t doubled[10] = {0, 2, 4, 6, 8, 1, 3, 5, 7, 9};
    if (!number_starts(s, i)) return 0;
    unsigned count = 0, group = 0;
    unsigned sum[2] = {0, 0}; /* sum[p]: Luhn sum when digits at index parity p are doubled */
    size_t k = i, best = 0;
    while (k < n) {
        unsigned d = (unsigned)s[k] - '0';
        if (d <= 9) {
            sum[count & 1] += doubled[d];
            sum[~count & 1] += d;
            count++;
            group++;
            k++;
            /* The rightmost digit (index count-1) is not doubled, so the
             * doubled ones are those with index parity count & 1. */
            if (count >= CARD_MIN && (k >= n || !is_digit(s[k])) &&
                (group == count || group <= 6) && number_ends(s, n, k) &&
                sum[count & 1] % 10 == 0)
                best = k;
            if (count == CARD_MAX) break;
        } else if ((s[k] == ' ' || s[k] == '-') && group >= 4 && group <= 6 && k + 1 < n &&
                   is_digit(s[k + 1])) {
            group = 0;
            k++;
        } else {
            break;
        }
    }
    return best ? best - i : 0;
}

/* ---- phones ------------------------------------------------------------ */

typedef struct {
    bool intl;                  /* starts with '+' */
    uint8_t style;              /* the one separator between groups, 0 = none yet */
    int count, digits;
    int len[PHONE_GROUPS];      /* digits per group */
    const uint8_t *first;       /* the first group's digits */
} phone_shape;

static bool starts_like_year(const uint8_t *s) {
    return (s[0] == '1' && s[1] == '9') || (s[0] == '2' && s[1] == '0');
}

/* Could the shape still become a phone if more groups followed? Only the
 * newest group and the one before it changed, so this is O(1), which keeps
 * a long run such as "1 1 1 1 ..." from costing more than a few groups. */
static bool phone_alive(const phone_shape *p) {
    int g = p->count;
    if (p->intl) return true;
    if (p->len[0] > 5) return false;
    return g < 3 || (p->len[g - 2] >= 2 && p->len[g - 2] <= 4); /* middle groups */
}

/* Does the complete shape read as a phone number rather than a date, a year
 * range, an amount or an address? phone_alive() already holds. */
static bool phone_ok(const phone_shape *p) {
    int g = p->count;
    const int *len = p->len;
    if (p->digits < PHONE_MIN || len[g - 1] < 2) return false;
    if (p->intl) return true; /* the '+' makes the rest unambiguous enough */
    if (g < 2 || len[g - 1] > 8) return false;
    if (p->style == '.' && g < 3) return false; /* 3.14159265 */
    if (g == 4 && p->style == '.' && len[0] <= 3 && len[1] <= 3 && len[2] <= 3 && len[3] <= 3)
        return false; /* 10.20.30.40 */
    if (g == 3 && (p->style == '-' || p->style == '.') &&
        ((len[0] == 4 && len[1] <= 2 && len[2] <= 2) || (len[0] <= 2 && len[1] <= 2 && len[2] == 4)))
        return false; /* 2024-01-15, 15.01.2024 */
    if (g == 2 && p->style == '-' && len[0] == 4 && len[1] == 4 && starts_like_year(p->first))
        return false; /* 2019-2024 */
    if (len[0] <= 2 && (p->style == '.' || p->style == ' ') && g >= 3) {
        bool thousands = true;
        for (int k = 1; k < g; k++) thousands = thousands && len[k] == 3;
        if (thousands) return false; /* 1.234.567, 12 345 678 */
    }
    return true;
}

/* Groups of digits separated by one of " -.", one group optionally in
 * parentheses, optionally led by '+'. The longest prefix that reads as a
 * phone wins, so trailing numbers ("... 4567 2 times") are left alone. A run
 * with more digits than a phone can have is no phone at all: that is how a
 * grouped 16-digit number that failed the card check stays unmasked. */
static size_t match_phone(const uint8_t *s, size_t n, size_t i, size_t *blocked_until) {
    if (is_digit(s[i]) ? !number_starts(s, i) : (s[i] != '+' && s[i] != '(')) return 0;
    if (i > 0 && is_word(s[i - 1])) return 0;
    phone_shape p;
    memset(&p, 0, sizeof p);
    size_t k = i, best = 0;
    uint8_t sep = 0;
    bool used_paren = false, after_paren = false;
    if (s[k] == '+') { p.intl = true; k++; }
    while (p.count < PHONE_GROUPS) {
        size_t t = k;
        bool paren = !used_paren && t < n && s[t] == '(';
        if (paren) t++;
        size_t g = t;
        while (t < n && is_digit(s[t]) && t - g <= PHONE_MAX) t++;
        if (t == g || (paren && (t >= n || s[t] != ')'))) break;
        /* One separator style, except right after a "(...)" group or, in
         * "+CC rest", after the country code: "+1 (555) 123-4567". */
        if (sep && !after_paren && !(p.intl && p.count == 1)) {
            if (p.style && p.style != sep) break;
            p.style = sep;
        }
        if (!p.first) p.first = s + g;
        p.len[p.count++] = (int)(t - g);
        p.digits += (int)(t - g);
        if (p.digits > (p.intl ? PHONE_MAX : NATIONAL_MAX)) {
            /* Its tail ("1111 1111 1112" of a failed card) is no phone either. */
            *blocked_until = t;
            return 0;
        }
        if (!phone_alive(&p)) break;
        if (paren) { t++; used_paren = true; }
        after_paren = paren;
        if (number_ends(s, n, t) && phone_ok(&p)) best = t;
        /* What joins this group to the next: one separator, or nothing
         * when a parenthesis is involved ("(555)123", "+44(0)20"). */
        sep = 0;
        if (t < n && (s[t] == ' ' || s[t] == '-' || s[t] == '.')) sep = s[t++];
        else if (!(t < n && (s[t] == '(' || (paren && is_digit(s[t]))))) break;
        k = t;
    }
    return best ? best - i : 0;
}

/* ---- the pass ---------------------------------------------------------- */

/* Append the masked text to `w`; returns how many spans were replaced. */
static size_t mask_text(const uint8_t *s, size_t n, mask_opts o, wasmext_writer *w) {
    size_t done = 0, masked = 0, no_phone_before = 0;
    size_t i = next_anchor(s, n, 0);
    while (i < n) {
        uint8_t c = s[i];
        size_t start = i, len = 0, at = c == '@' ? i : 0;
        const char *tag = NULL;
        bool number = is_digit(c) || c == '+' || c == '(';
        if (number && i > 0 && is_word(s[i - 1])) number = false; /* "A4", "x(1)" */
        /* A number that runs on into "...@" is an address's local part. */
        if (number && o.email && is_local(c)) at = email_ahead(s, n, i);
        if (at && o.email) {
            start = match_email(s, n, at, done, &len);
            if (len) tag = "[EMAIL]";
        }
        if (!tag && number) {
            start = i;
            if (o.card && is_digit(c) && (len = match_card(s, n, i))) tag = "[CARD]";
            else if (o.phone && i >= no_phone_before &&
                     (len = match_phone(s, n, i, &no_phone_before)))
                tag = "[PHONE]";
        }
        if (!tag) {
            i++;
            if (is_word(c)) /* the rest of a digit run cannot start a match */
                while (i < n && is_word(s[i])) i++;
            i = next_anchor(s, n, i);
            continue;
        }
        wasmext_write_raw(w, s + done, start - done);
        wasmext_write_raw(w, tag, strlen(tag));
        masked++;
        done = start + len;
        i = next_anchor(s, n, done);
    }
    if (masked) wasmext_write_raw(w, s + done, n - done);
    return masked;
}

/* ---- settings and the hook ---------------------------------------------- */

/* Settings may arrive as bools, ints or (from the environment) strings; only
 * an explicit "off" disables masking, so a typo fails safe. */
static bool setting_on(const wasmext_reader *all, const char *name) {
    static const char *const off[] = {"false", "0", "no", "off"};
    wasmext_reader r;
    wasmext_value v;
    if (wasmext_map_find(all, name, &r) != WASMEXT_OK || wasmext_read(&r, &v) != WASMEXT_OK)
        return true;
    if (v.type == WASMEXT_TYPE_BOOL) return v.as.b;
    if (v.type == WASMEXT_TYPE_INT) return v.as.i != 0;
    if (v.type != WASMEXT_TYPE_STR || v.as.str.len > 5) return true;
    char lower[6] = {0};
    for (uint32_t k = 0; k < v.as.str.len; k++) {
        char c = v.as.str.ptr[k];
        lower[k] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    for (size_t k = 0; k < sizeof off / sizeof off[0]; k++)
        if (wasmext_str_eq(lower, v.as.str.len, off[k])) return false;
    return true;
}

static mask_opts read_opts(void) {
    mask_opts o = {true, true, true};
    wasmext_answer all;
    if (wasmext_config_get(NULL, &all) == WASMEXT_OK) {
        o.email = setting_on(&all.value, "mask_email");
        o.phone = setting_on(&all.value, "mask_phone");
        o.card = setting_on(&all.value, "mask_card");
    } else {
        wasmext_log(WASMEXT_LOG_WARN, "pii-mask: config.get failed; masking everything");
    }
    wasmext_answer_free(&all);
    return o;
}

static wasmext_verdict mask_hook(wasmext_call *call) {
    const char *text;
    uint32_t len;
    if (wasmext_data_str(call, &text, &len) != WASMEXT_OK)
        return wasmext_fail(call, WASMEXT_E_INVALID, "pii-mask expects string data");
    mask_opts o = read_opts();
    static bool classes_ready;
    if (!classes_ready) { init_classes(); classes_ready = true; }
    if (!o.email && !o.phone && !o.card) return WASMEXT_UNCHANGED;
    wasmext_writer masked = WASMEXT_WRITER_INIT;
    wasmext_verdict verdict = WASMEXT_UNCHANGED;
    if (mask_text((const uint8_t *)text, len, o, &masked) > 0) {
        if (wasmext_writer_error(&masked) == WASMEXT_OK)
            verdict = wasmext_return_str(call, (const char *)masked.buf, masked.len);
        else /* never pass unmasked text on because memory ran out */
            verdict = wasmext_fail(call, WASMEXT_E_LIMIT, "pii-mask: out of memory");
    }
    wasmext_writer_free(&masked);
    return verdict;
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("on_plain_text", mask_hook), /* priority: the manifest's */
    WASMEXT_HOOK("on_llm_output", mask_hook),
};

WASMEXT_PLUGIN("pii-mask", "0.1.0", hooks);
