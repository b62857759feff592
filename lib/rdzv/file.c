/* File store: one file per key in a shared directory, written to a temporary name and
 * renamed, so a reader sees a whole value or none. The directory is checked once (no one
 * else may write it, unless it is sticky) and held open: every name is resolved in it,
 * never through a link, and only regular files are read. Nothing here may block or follow
 * what someone else planted: a FIFO, a device or a link under a key name is not a value. */
#include "rdzv/store.h"

#include "base/log.h"
#include "base/util.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* A key's file name, and the temporary name beside it (".tmp." and 16 hex digits). */
enum { NAME_MAX_LEN = CL_STORE_MAX_KEY + 1, TMP_MAX_LEN = NAME_MAX_LEN + 24 };

typedef struct {
    cl_store base;
    int dfd; /* the directory, opened once and checked */
    int warned;
    char dir[512];
} file_store;

static void name_of(const char *key, char *out)
{
    size_t n = 0;
    for (const char *k = key; *k && n + 1 < NAME_MAX_LEN; k++)
        out[n++] = *k == '/' ? '_' : *k;
    out[n] = 0;
}

/* A temporary file of our own: a fresh, unguessable name created exclusively, so nothing
 * planted (a link to a victim file, a FIFO) is ever opened for writing. */
static int open_temp(file_store *f, const char *name, char *tmp)
{
    for (int tries = 0; tries < 16; tries++) {
        uint64_t r;
        void *where = &r;
        if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
            r = cl_hash(&where, sizeof(where), (uint64_t)cl_now_us() ^ (uint64_t)getpid());
        snprintf(tmp, TMP_MAX_LEN, "%s.tmp.%016llx", name, (unsigned long long)r);
        int fd = openat(f->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

static int write_all(int fd, const void *val, size_t len)
{
    const char *p = val;
    while (len) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Writes a temporary file, then renames it over the key (set: whatever the name held, a
 * planted link included, is replaced, not followed) or links it to the key, which fails
 * where the key exists (create). */
static int put(cl_store *s, const char *key, const void *val, size_t len, int create)
{
    file_store *f = (file_store *)s;
    char name[NAME_MAX_LEN], tmp[TMP_MAX_LEN];
    name_of(key, name);
    int fd = open_temp(f, name, tmp);
    if (fd < 0)
        return COLL_ESYS;
    int ok = write_all(fd, val, len) == 0;
    ok &= close(fd) == 0;
    int rc = !ok ? -1 : create ? linkat(f->dfd, tmp, f->dfd, name, 0)
                               : renameat(f->dfd, tmp, f->dfd, name);
    int taken = rc != 0 && create && errno == EEXIST;
    if (rc != 0 || create)
        unlinkat(f->dfd, tmp, 0);
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
    char name[NAME_MAX_LEN];
    name_of(key, name);
    unlinkat(((file_store *)s)->dfd, name, 0);
}

/* Something that is not a regular file under a key name was put there by someone else
 * (a rank writes only regular files): it is not a value, and the rightful one, renamed
 * over it, is waited for. Said once. */
static int planted(file_store *f, const char *name)
{
    if (!f->warned++)
        cl_log(COLL_LOG_WARN, "rendezvous: %s/%s is not a regular file (a link, FIFO or "
                              "device someone else put there): ignored",
               f->dir, name);
    return COLL_INPROGRESS;
}

static int read_all(int fd, void *buf, size_t cap, size_t *len)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t k = read(fd, (char *)buf + got, cap - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return COLL_ESYS;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    *len = got;
    return COLL_OK;
}

/* Opened without following a link and without blocking (a FIFO's open waits for a
 * writer), then read only if it is a regular file. */
static int file_get(cl_store *s, const char *key, void *buf, size_t cap, size_t *len)
{
    file_store *f = (file_store *)s;
    char name[NAME_MAX_LEN];
    name_of(key, name);
    int fd = openat(f->dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? COLL_INPROGRESS
               : errno == ELOOP || errno == ENXIO ? planted(f, name)
                                                   : COLL_ESYS;
    struct stat st;
    int rc = fstat(fd, &st) != 0          ? COLL_ESYS
             : !S_ISREG(st.st_mode)       ? planted(f, name)
                                          : read_all(fd, buf, cap, len);
    close(fd);
    return rc;
}

static void file_close(cl_store *s)
{
    file_store *f = (file_store *)s;
    if (f->dfd >= 0)
        close(f->dfd);
    free(f);
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

/* Whoever may write the directory may plant names in it: only this user or root may,
 * unless the sticky bit keeps others from replacing or removing what a rank wrote (what
 * they plant under a name not yet written is then only ignored). Its owner can always
 * write it, whatever the mode. 0, or -1 with the reason in why. */
static int dir_unsafe(const struct stat *st, char *why, size_t len)
{
    uid_t me = geteuid();
    if (st->st_uid != me && st->st_uid != 0)
        snprintf(why, len, "it belongs to uid %u, not to this user (uid %u) or root, and its "
                 "owner can put files in it", (unsigned)st->st_uid, (unsigned)me);
    else if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        snprintf(why, len, "others can write it (mode %04o) and it is not sticky: use a "
                 "directory only you can write, or chmod +t", (unsigned)(st->st_mode & 07777));
    else
        return 0;
    return -1;
}

/* The directory, made where missing (0700), opened and checked. */
static int open_dir(file_store *f, char *err, size_t errlen)
{
    struct stat st;
    char why[200];
    if (mkdirs(f->dir) != 0 || (f->dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        fstat(f->dfd, &st) != 0) {
        snprintf(err, errlen, "rendezvous: cannot use directory %s: %s", f->dir, strerror(errno));
        return COLL_ESYS;
    }
    if (dir_unsafe(&st, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "rendezvous: refused directory %s: %s", f->dir, why);
        return COLL_EINVAL;
    }
    return COLL_OK;
}

int cl_store_file_open(const char *dir, cl_store **out, char *err, size_t errlen)
{
    file_store *f = calloc(1, sizeof(*f));
    if (!f)
        return COLL_ENOMEM;
    f->base.ops = &ops;
    f->dfd = -1;
    snprintf(f->dir, sizeof(f->dir), "%s", dir);
    int rc = open_dir(f, err, errlen);
    if (rc != COLL_OK) {
        file_close(&f->base);
        return rc;
    }
    *out = &f->base;
    return COLL_OK;
}
