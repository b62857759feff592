/* The rendezvous store: a small key-value table every rank of a job can reach, used only
 * while communicators are created. Backends: file (a shared directory), tcp (rank 0
 * serves it), mem (in-process, for ranks that are threads). get() never blocks; waiting
 * with backoff and a deadline is cl_store_wait, written once for every backend (a
 * caller's store that waits on its own does so instead). */
#ifndef CL_STORE_H
#define CL_STORE_H

#include <stddef.h>
#include <stdint.h>

#define CL_STORE_MAX_KEY 200
#define CL_STORE_MAX_VALUE 65536
/* cl_store_create's answer when the key already holds a value. */
#define CL_STORE_TAKEN 1
/* cl_store_tcp_open's (and cl_store_open's) when rank 0 cannot bind the port because
 * another socket holds it; err says so. */
#define CL_STORE_HELD 2

typedef struct cl_store cl_store;

typedef struct cl_store_ops {
    int (*set)(cl_store *s, const char *key, const void *val, size_t len);
    /* COLL_INPROGRESS when the key is not there yet. */
    int (*get)(cl_store *s, const char *key, void *buf, size_t cap, size_t *len);
    void (*close)(cl_store *s);
    /* Optional: a get that waits up to timeout_ms on its own (COLL_ETIMEDOUT), for
     * stores that can wait better than a polling loop. */
    int (*wait)(cl_store *s, const char *key, void *buf, size_t cap, size_t *len,
                int timeout_ms);
    /* Optional: set only where the key holds nothing yet, in one step for every client
     * (the first writer wins; CL_STORE_TAKEN for the others). */
    int (*create)(cl_store *s, const char *key, const void *val, size_t len);
    /* Optional: forget the key (stores whose records would outlive the job). */
    void (*remove)(cl_store *s, const char *key);
    /* Optional, with renew (a store one server serves over a connection): a value this
     * client read from that server, which renew looks for. */
    int (*pin)(cl_store *s, const char *key, const void *val, size_t len);
    /* Optional: COLL_EPEER where this client's connection has ended and no server that
     * holds the pinned value answers at the address (one dial, no retry): the server that
     * served it went away. COLL_OK otherwise (a fresh connection took the place of one the
     * server dropped), always without a pin, and where deadline_ms has passed. Returns by
     * deadline_ms. */
    int (*renew)(cl_store *s, int64_t deadline_ms);
} cl_store_ops;

struct cl_store {
    const cl_store_ops *ops;
};

/* Where a URL says to meet, and who this process is. */
typedef struct cl_rdzv {
    char scheme[8]; /* "tcp", "file", "mem" */
    char where[512]; /* host:port ("[v6]:port"), directory or name */
    int rank, size;
    /* The job's socket family: COLL_SOCKET_FAMILY's, else a tcp host's (IPv4 where it
     * has an IPv4 address, else IPv6), else AF_UNSPEC. */
    int family;
    int loopback; /* a tcp host whose every address is a loopback one: the job is here */
} cl_rdzv;

/* Parses url (env:// reads the launcher's variables) into *out; rank/size < 0 are taken
 * from the environment. A tcp host is resolved here, so one that does not resolve fails at
 * once. Writes a sentence into err on failure. */
int cl_rdzv_parse(const char *url, int rank, int size, cl_rdzv *out, char *err, size_t errlen);
/* The rendezvous of a caller's store (coll_init_store): scheme "store", the family from
 * COLL_SOCKET_FAMILY, else from MASTER_ADDR where it is set and resolves. */
int cl_rdzv_caller(int rank, int size, cl_rdzv *out, char *err, size_t errlen);

int cl_store_open(const cl_rdzv *r, int timeout_ms, cl_store **out, char *err, size_t errlen);
/* Refuses (COLL_EINVAL, the reason in err) a directory others can write, unless sticky. */
int cl_store_file_open(const char *dir, cl_store **out, char *err, size_t errlen);
int cl_store_mem_open(const char *name, cl_store **out);
/* The caller's store (coll_init_store); its context stays the caller's. */
struct coll_store_ops;
int cl_store_caller_open(const struct coll_store_ops *ops, void *ctx, cl_store **out);
/* Wraps inner (owned from now on) so every value carries an HMAC under key (the job's
 * COLL_SECRET key) and values that do not check are not there. */
int cl_store_seal(cl_store *inner, const uint8_t key[32], cl_store **out);
/* Rank 0 serves host:port (binding before anyone connects); every rank is a client that
 * retries with backoff until the deadline. family: the addresses of host to use
 * (AF_UNSPEC: any). */
int cl_store_tcp_open(const char *hostport, int family, int serve, int64_t deadline_ms,
                      cl_store **out, char *err, size_t errlen);
/* Takes rank 0's server out of its tcp store s, which no longer stops it when closed: it
 * serves on until cl_store_server_stop. NULL where s is not a tcp store that serves. */
struct cl_store_server;
struct cl_store_server *cl_store_tcp_keep_server(cl_store *s);

/* Sets key unless it holds a value already (CL_STORE_TAKEN): the store's own create, or
 * a look then a set where it has none (two writers at the same moment may both win). */
int cl_store_create(cl_store *s, const char *key, const void *val, size_t len);
/* Forgets key where the store can; nothing otherwise. */
void cl_store_remove(cl_store *s, const char *key);
/* The ops' pin and renew where the store has them; COLL_OK otherwise (a file directory,
 * a process's table or a caller's store never goes away under a rank). */
int cl_store_pin(cl_store *s, const char *key, const void *val, size_t len);
int cl_store_renew(cl_store *s, int64_t deadline_ms);

/* Milliseconds from now until deadline_ms as an int (poll(), a waiting get): 0 once it has
 * passed, INT_MAX at most. Time is reckoned in 64 bits: a timeout of INT_MAX ms doubled,
 * or added to the clock, does not fit an int. */
int cl_store_ms_left(int64_t deadline_ms);

/* get() until the key exists or the deadline passes (COLL_ETIMEDOUT). */
int cl_store_wait(cl_store *s, const char *key, void *buf, size_t cap, size_t *len,
                  int64_t deadline_ms);

#endif
