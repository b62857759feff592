/* Multi-rank test harness: ranks are real processes (fork) meeting through a real
 * rendezvous URL, or threads on the loop transport. A rank body returns 0 on success and
 * prints what it expected and what came on failure. */
#ifndef CL_TEST_HARNESS_H
#define CL_TEST_HARNESS_H

#include "collective.h"

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

typedef int (*rank_fn)(coll_comm *c, void *arg);

typedef enum { RDZV_FILE, RDZV_TCP, RDZV_ENV, RDZV_MEM } rdzv_kind;

typedef struct {
    int nranks;
    rdzv_kind rdzv;
    const char *transport; /* NULL: tcp */
    int timeout_ms;        /* library timeout; 0: 10000 */
    int op_timeout_ms;     /* operations' own; 0: the library's rule (timeout_ms) */
    int deadline_s;        /* the whole run; ranks still alive then are killed */
    /* Called in each rank (with fn's arg) before coll_init: environment, log routing. */
    void (*setup)(int rank, void *arg);
    int fn_destroys; /* the rank function destroys its communicator itself */
    int split_share; /* coll_config.split_share */
    const char *host; /* RDZV_TCP's host and RDZV_ENV's MASTER_ADDR, as given; NULL: 127.0.0.1 */
} run_opts;

/* Runs fn on every rank; returns how many ranks failed (exit code != 0 or killed). */
int run_ranks(const run_opts *o, rank_fn fn, void *arg);

/* The rank exit codes of the last run_ranks (index = rank); -1 for a killed rank. */
extern int last_exit[64];

/* Waits for the n children in pids; returns how many did not exit with status 0. */
int reap_all(const pid_t *pids, int n);

/* A fresh directory /tmp/STEM.XXXXXX in dir (64 bytes) and its file:// URL: 0, or -1
 * (dir empty) when it cannot be made. */
int dir_url(char *dir, const char *stem, char *url, size_t len);
/* Removes dir with what it holds: 0, or -1 saying so on stderr. */
int remove_dir(const char *dir);

/* A port nobody listens on right now, for tcp:// and env:// rendezvous. */
int free_port(void);

/* Fails the calling rank (return 1) with a message when cond holds. */
#define FAIL_IF(cond, ...)                                                     \
    do {                                                                       \
        if (cond) {                                                            \
            fprintf(stderr, "rank %d: ", coll_rank(c));                        \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, " [%s]\n", coll_last_error(c));                    \
            return 1;                                                          \
        }                                                                      \
    } while (0)

/* 1 when `bytes` at buf hash as they do on rank 0 (a broadcast of its hash): a rank whose
 * bytes differ gets 0. */
int identical_everywhere(coll_comm *c, const void *buf, size_t bytes);

/* 0 when the int32 sum all-reduce of `mine` over c is want; else 1, saying what came. */
int sum_is(coll_comm *c, int mine, int want);

/* Fails the calling rank with a message if rc is not want. */
#define EXPECT_RC(rc, want)                                                                  \
    do {                                                                                     \
        int rc_ = (rc);                                                                      \
        if (rc_ != (want)) {                                                                 \
            fprintf(stderr, "%s:%d: expected %s, got %s (%s)\n", __FILE__, __LINE__,         \
                    coll_strerror(want), coll_strerror(rc_), coll_last_error(c));            \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

/* Misuse number k of a test's list, on communicator s. */
typedef int (*misuse_fn)(coll_comm *s, int k, void *arg);
/* Runs misuse k on a split of c of its own (a bad argument fails the communicator it is
 * passed to; c stays good): 0 when it returned COLL_EINVAL, coll_last_error named
 * `what`, and the split then refused a collective with COLL_ESTATE. Collective over c. */
int einval_on_split(coll_comm *c, misuse_fn fn, int k, void *arg, const char *what);

#endif
