/* File store: one file per key in a shared directory, written to a temporary name and
 * renamed, so a reader sees a whole value or none. */
#include "rdzv/store.h"

#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    cl_store base;
    char dir[512];
} file_store;

static void path_of(file_store *f, const char *key, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/", f->dir);
    for (const char *k = key; *k && (size_t)n + 1 < len; k++)
        out[n++] = *k == '/' ? '_' : *k;
    out[n] = 0;
}

/* Writes a temporary file, then renames it over the key (set) or links it to the key,
 * which fails where the key exists (create). */
static int put(cl_store *s, const char *key, const void *val, size_t len, int create)
{
    char path[1024], tmp[1100];
    path_of((file_store *)s, key, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp)
        return COLL_ESYS;
    int ok = fwrite(val, 1, len, fp) == len;
    ok &= fclose(fp) == 0;
    int rc = !ok ? -1 : create ? link(tmp, path) : rename(tmp, path);
    int taken = rc != 0 && create && errno == EEXIST;
    if (rc != 0 || create)
        unlink(tmp);
    return rc == 0 ? COLL_OK : taken ? CL_STORE_TAKEN : COLL_ESYS;
}

static int file_set(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, key, val, len, 0);
}

static int file_create(cl_store *s, const char *key, const void *val, size_t len)
{
    return put(s, key, val, len, 1);
}

static void file_remove(cl_store *s, const char *key)
{
    char path[1024];
    path_of((file_store *)s, key, path, sizeof(path));
    unlink(path);
}

static int file_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    char path[1024];
    path_of((file_store *)s, key, path, sizeof(path));
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return errno == ENOENT ? COLL_INPROGRESS : COLL_ESYS;
    *len = fread(buf, 1, cap, fp);
    fclose(fp);
    return COLL_OK;
}

static void file_close(cl_store *s)
{
    free(s);
}

static const cl_store_ops ops = {.set = file_set,
                                 .get = file_get,
                                 .close = file_close,
                                 .create = file_create,
                                 .remove = file_remove};

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int cl_store_file_open(const char *dir, cl_store **out)
{
    file_store *f = calloc(1, sizeof(*f));
    if (!f)
        return COLL_ENOMEM;
    f->base.ops = &ops;
    snprintf(f->dir, sizeof(f->dir), "%s", dir);
    if (mkdirs(f->dir) != 0) {
        free(f);
        return COLL_ESYS;
    }
    *out = &f->base;
    return COLL_OK;
}
