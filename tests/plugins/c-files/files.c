/* c-files: file work through wasi-libc on a granted folder (tests/sandbox/test_fs_grants.py).
 * Every hook takes a string: "read" a path, "write" and "append" "path\ntext", "list" a
 * folder (names joined by newlines), "mkdir", "remove" and "rename" ("old\nnew").
 * A failure answers code "failed" with strerror(errno). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wasmext.h>

static char buf[65536];
static char arg[4096];

static const char *take(wasmext_call *call, char **second) {
    const char *s;
    uint32_t n;
    if (wasmext_data_str(call, &s, &n) != WASMEXT_OK || n >= sizeof(arg)) return NULL;
    memcpy(arg, s, n);
    arg[n] = 0;
    if (second) {
        char *nl = strchr(arg, '\n');
        if (!nl) return NULL;
        *nl = 0;
        *second = nl + 1;
    }
    return arg;
}

static wasmext_verdict failed(wasmext_call *call) {
    return wasmext_fail(call, "failed", strerror(errno));
}

static wasmext_verdict do_read(wasmext_call *call) {
    const char *path = take(call, NULL);
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "a path");
    FILE *f = fopen(path, "rb");
    if (!f) return failed(call);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return wasmext_return_str(call, buf, n);
}

static wasmext_verdict put(wasmext_call *call, const char *mode) {
    char *text;
    const char *path = take(call, &text);
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "path\\ntext");
    FILE *f = fopen(path, mode);
    if (!f) return failed(call);
    size_t len = strlen(text);
    size_t n = fwrite(text, 1, len, f);
    int closed = fclose(f);
    if (n != len || closed != 0) return failed(call);
    return wasmext_return_str(call, "ok", 2);
}

static wasmext_verdict do_write(wasmext_call *call) { return put(call, "wb"); }
static wasmext_verdict do_append(wasmext_call *call) { return put(call, "ab"); }

static wasmext_verdict do_list(wasmext_call *call) {
    const char *path = take(call, NULL);
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "a path");
    DIR *d = opendir(path);
    if (!d) return failed(call);
    size_t used = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (used + n + 1 >= sizeof(buf)) break;
        if (used) buf[used++] = '\n';
        memcpy(buf + used, e->d_name, n);
        used += n;
    }
    closedir(d);
    return wasmext_return_str(call, buf, used);
}

static wasmext_verdict do_mkdir(wasmext_call *call) {
    const char *path = take(call, NULL);
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "a path");
    if (mkdir(path, 0755) != 0) return failed(call);
    return wasmext_return_str(call, "ok", 2);
}

static wasmext_verdict do_remove(wasmext_call *call) {
    const char *path = take(call, NULL);
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "a path");
    if (remove(path) != 0) return failed(call);
    return wasmext_return_str(call, "ok", 2);
}

static wasmext_verdict do_rename(wasmext_call *call) {
    char *to;
    const char *from = take(call, &to);
    if (!from) return wasmext_fail(call, WASMEXT_E_INVALID, "old\\nnew");
    if (rename(from, to) != 0) return failed(call);
    return wasmext_return_str(call, "ok", 2);
}

static wasmext_verdict do_size(wasmext_call *call) {
    const char *path = take(call, NULL);
    struct stat st;
    if (!path) return wasmext_fail(call, WASMEXT_E_INVALID, "a path");
    if (stat(path, &st) != 0) return failed(call);
    int n = snprintf(buf, sizeof(buf), "%lld", (long long)st.st_size);
    return wasmext_return_str(call, buf, (size_t)n);
}

static const wasmext_hook hooks[] = {
    WASMEXT_HOOK("read", do_read),     WASMEXT_HOOK("write", do_write),
    WASMEXT_HOOK("append", do_append), WASMEXT_HOOK("list", do_list),
    WASMEXT_HOOK("mkdir", do_mkdir),   WASMEXT_HOOK("remove", do_remove),
    WASMEXT_HOOK("rename", do_rename), WASMEXT_HOOK("size", do_size),
};

WASMEXT_PLUGIN("c-files", "0.1.0", hooks);
