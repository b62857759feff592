/* libcollective: all-reduce (ring, recursive doubling, Rabenseifner, or hierarchical
 * across hosts, chosen per size by a cost model that knows which ranks share a host),
 * reduce-scatter, all-gather, broadcast, barrier, reduce, gather, scatter, all-to-all and
 * the uneven forms, tagged point-to-point, and shrinking past a failed rank, over
 * pluggable transports: shared memory (shm) between ranks of one host, RDMA (ibverbs),
 * tcp on libuv, `auto` (the best of those per peer, the default), and in-process loop
 * and fake-verbs transports for tests; optional fp16, bf16 and int8 wire codecs.
 *
 * Every function returns COLL_OK (0) or a negative COLL_E* code unless shown otherwise.
 * The first failure on a communicator sticks: later calls return COLL_ESTATE and only
 * coll_abort / coll_destroy remain valid. coll_last_error() explains the failure.
 * Threads: any thread may call any function on a communicator, and operations run in the
 * order they were issued on it. That order must be the same on every rank (as NCCL asks):
 * two threads that issue collectives on one communicator at once issue them in an order
 * nobody chose, which may pair differently on two ranks; same-shaped operations then
 * reduce the wrong buffers with no error (different shapes give COLL_EMISMATCH). Issue
 * from one thread per communicator, or order the threads yourself; coll_split gives each
 * thread a communicator of its own. A collective issued while another thread is inside a
 * blocking collective on the same communicator is always such a race and is refused
 * (COLL_EINVAL, the communicator stays usable); other interleavings go undetected.
 * Point-to-point is ordered per peer and direction and may come from any thread. The library never changes the process's signal
 * dispositions: its socket writes use MSG_NOSIGNAL, so a dead peer is COLL_EPEER, not a
 * SIGPIPE. */
#ifndef COLLECTIVE_H
#define COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COLL_API __attribute__((visibility("default")))
#else
#define COLL_API
#endif

#define COLL_VERSION_MAJOR 0
#define COLL_VERSION_MINOR 1
#define COLL_VERSION_PATCH 0

typedef struct coll_comm coll_comm; /* opaque communicator */
typedef struct coll_req coll_req;   /* opaque non-blocking request */

enum {
    COLL_OK = 0,
    COLL_INPROGRESS = 1,
    COLL_EINVAL = -1,     /* bad argument */
    COLL_ENOMEM = -2,
    COLL_ENOTSUP = -3,    /* dtype/op/codec/transport not supported here */
    COLL_ESYS = -4,       /* an OS or library call failed */
    COLL_ETIMEDOUT = -5,
    COLL_EPEER = -6,      /* a peer closed, reset or could not be reached */
    COLL_EMISMATCH = -7,  /* ranks disagree on op, count, dtype, codec, tag or sequence */
    COLL_EABORTED = -8,
    COLL_ESTATE = -9,     /* communicator already failed: only abort/destroy are valid */
    COLL_EPROTO = -10,    /* bad magic, version or secret on the wire */
};

typedef enum { COLL_F32, COLL_F64, COLL_F16, COLL_BF16,
               COLL_I8, COLL_U8, COLL_I32, COLL_I64 } coll_dtype;
/* COLL_BAND, COLL_BOR and COLL_BXOR are bitwise AND, OR and XOR, for the integer dtypes
 * only (int8, uint8, int32, int64; a bool is a uint8 of 0 or 1): with a float dtype (f32,
 * f64, f16, bf16) every call that reduces is COLL_EINVAL, with a message, on every rank
 * that passes it, as any bad argument (coll_allreduce_ef: COLL_ENOTSUP, as for any op but
 * sum and avg). They never go through a codec. Appended: the values above them are the
 * ABI. */
typedef enum { COLL_SUM, COLL_PROD, COLL_MIN, COLL_MAX, COLL_AVG,
               COLL_BAND, COLL_BOR, COLL_BXOR } coll_op;
typedef enum { COLL_CODEC_NONE, COLL_CODEC_FP16, COLL_CODEC_BF16,
               COLL_CODEC_INT8 } coll_codec;

typedef struct coll_config {
    size_t size;           /* sizeof(coll_config): keeps the ABI extensible */
    const char *transport; /* "auto", "shm", "tcp", "ibverbs", "ibverbs-fake", "loop";
                            * NULL: $COLL_TRANSPORT or "auto" */
    const char *device;    /* interface; NULL: $COLL_SOCKET_IFNAME or auto */
    int timeout_ms;        /* every wait on a peer that does not answer: rendezvous,
                            * connecting, destroy, shrink, and a tcp link whose peer's host
                            * stops acknowledging (keepalive); 0: $COLL_TIMEOUT_MS or 30000 */
    coll_codec codec;      /* default wire codec for f32 sum/avg */
    size_t segment_bytes;  /* ring segment; 0: library default (512 KiB) */
    /* An operation (collective, send, receive) that makes no progress for this long fails
     * with COLL_ETIMEDOUT, though its peers are alive: one may be evaluating or writing a
     * checkpoint. 0: $COLL_OP_TIMEOUT_MS, else timeout_ms when the caller set that (field
     * or $COLL_TIMEOUT_MS), else 1800000 (30 minutes, torch's default). A peer that is
     * gone or stopped is found sooner: its process's exit closes its links at once, its
     * host's loss or a stop within about timeout_ms (an idle tcp link's keepalive; while a
     * collective waits, or a send or receive waits for that peer, the heartbeat). */
    int op_timeout_ms;
    /* 1: coll_split's communicators (and their splits) use this communicator's links
     * instead of opening their own, as NCCL's splitShare: their collectives then run in
     * issue order, which every rank must keep, and one's failure or abort fails them all.
     * 0: $COLL_SPLIT_SHARE, else 0 (independent splits). */
    int split_share;
    /* Collectives the flight recorder keeps per communicator (coll_recorder_read): 0:
     * $COLL_RECORDER_OPS, else 64; negative: none (the recorder is off). */
    int recorder_ops;
} coll_config;
#define COLL_CONFIG_INIT { sizeof(coll_config), NULL, NULL, 0, COLL_CODEC_NONE, 0, 0, 0, 0 }

/* A short English description of a status code; never NULL. */
COLL_API const char *coll_strerror(int status);

/* The sentence describing the communicator's first failure (rank, peer, operation and
 * sequence number, or the call and the argument: "rank 1 coll_allgather: sendbuf is
 * NULL with count 4"); while it has not failed, the last refusal that leaves it usable
 * (a collective issued from a second thread); "" when there was neither. Never NULL;
 * comm may be NULL, then it describes the last coll_init failure of the calling thread.
 * A bad argument to a collective or point-to-point call (COLL_EINVAL), or memory this
 * rank cannot get for it (COLL_ENOMEM), is found on the calling rank before anything of
 * that call is sent, and fails the communicator: the other ranks are told at once and
 * return COLL_EPEER naming this rank and its cause, instead of waiting for it until
 * their timeout. */
COLL_API const char *coll_last_error(const coll_comm *comm);

/* Creates a communicator of `size` ranks; collective over all of them.
 * url: "env://"           RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, else
 *                         OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else
 *                         SLURM_PROCID/SLURM_NTASKS (with MASTER_ADDR/MASTER_PORT)
 *      "tcp://host:port"  rank 0 binds it and serves the rendezvous store; the others
 *                         retry with backoff until the timeout. A rank it served that
 *                         finds it gone before init ends (its connection closed, and
 *                         nothing with the terms it read answers there) fails at once:
 *                         COLL_EPEER, rank 0 failed or ended
 *      "file:///dir"      a directory every rank can reach (use a fresh one per job)
 *      "mem://name"       in-process store, for ranks that are threads of one process
 * rank, size < 0: taken from the environment. cfg may be NULL (all defaults).
 * A rendezvous timeout says how many ranks joined and which are missing. */
COLL_API int coll_init(coll_comm **out, const char *url, int rank, int size,
                       const coll_config *cfg);

/* Any thread, or a signal handler (it only counts the call): every coll_init,
 * coll_init_store, coll_init_grow and coll_grow in progress in this process returns
 * COLL_EABORTED within about 200 ms ("init interrupted"), whatever its meeting waits for
 * (ranks that have not come, rank 0's store, the first messages; coll_grow's broadcast of
 * the id on its communicator is not cut short). Ranks it met (it read rank 0's terms)
 * learn it: their rendezvous fails at once naming this rank, as for any failed init
 * (rank 0 keeps its store up 0.5 s more for them to read it, so its own returns then); where they were connecting
 * already, they fail when their links to it close or at their timeout. An init that
 * begins after the call is not affected. Returns COLL_OK. The Python package calls it on
 * Ctrl-C. */
COLL_API int coll_init_interrupt(void);

/* Collective over comm: ranks passing the same color form a new communicator ordered by
 * (key, old rank). color < 0 joins none and sets *out = NULL. It costs comm one
 * all-gather; the new communicator connects to its peers as it first uses them. */
COLL_API int coll_split(coll_comm *comm, int color, int key, coll_comm **out);

/* Any thread: pending and later operations fail with COLL_EABORTED and every link of the
 * communicator is closed, so peers fail promptly too. */
COLL_API int coll_abort(coll_comm *comm);

/* Releases the communicator; bounded by the timeout. NULL is a no-op. Unfinished
 * operations are aborted (the peers learn it as from coll_abort). A thread inside a
 * blocking call on comm returns COLL_EABORTED and is waited for; if one stays inside
 * past the timeout, comm is not freed and COLL_ETIMEDOUT is returned. Requests of comm
 * not yet collected stay valid: coll_test/coll_wait then report them done, with their
 * status (COLL_EABORTED where they had not finished), and coll_wait frees them. A call
 * that begins on comm after destroy began is a use after free, as with any handle. */
COLL_API int coll_destroy(coll_comm *comm);

/* This rank's index in comm, or COLL_EINVAL for NULL. */
COLL_API int coll_rank(const coll_comm *comm);

/* The number of ranks in comm, or COLL_EINVAL for NULL. */
COLL_API int coll_size(const coll_comm *comm);

/* Collective: sets the wire codec for later operations on this communicator. It applies
 * to f32 all-reduce and reduce-scatter with COLL_SUM or COLL_AVG (gradient reductions);
 * every other dtype, op and collective moves uncompressed (an all-gather never is: what
 * it moves must come back exact). Each rank's contribution is encoded once
 * and summed in f32 by its chunk's owner, which encodes the result once: results are
 * bit-identical on every rank, and the error does not grow with the number of ranks.
 * All ranks must pass the same codec: otherwise COLL_EMISMATCH on every rank, and the
 * codec stays as it was. Also set by coll_config.codec or $COLL_CODEC at init. */
COLL_API int coll_set_codec(coll_comm *comm, coll_codec codec);

/* In place, exactly: each call below names the layouts in which what it reads and what
 * it writes may share memory; any other overlap is COLL_EINVAL on that rank, with a
 * message, before anything is sent. */

/* Element-wise reduction of every rank's `count` elements, result on every rank,
 * bit-identical everywhere. f16/bf16: each step adds in f32 and rounds back to 16 bits,
 * so a sum over n ranks carries up to n - 1 roundings (small addends beside a large one
 * can vanish). In place: sendbuf == recvbuf. COLL_AVG is the sum divided once by the
 * number of ranks, truncated toward zero on integer types; int8, uint8 and int32 sum in
 * 64 bits on the way (8 bytes per element on the wire), so their average is right
 * whatever the sum (int8 AVG of 100 on 4 ranks is 100); int64 sums wrap in 64 bits;
 * f16 and bf16 sum and divide in f32 (4 bytes on the wire), as numpy's mean of float16
 * does (f16 AVG of 40000 on 4 ranks is 40000). COLL_MIN/COLL_MAX on floats: a NaN on any
 * rank gives the canonical quiet NaN, and -0 is below +0 (the same bits from every
 * algorithm). */
COLL_API int coll_allreduce(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                            coll_dtype dtype, coll_op op);

/* sendbuf holds size*recvcount elements; rank r receives the reduction of block r.
 * In place: recvbuf == sendbuf + rank*recvcount (the result lands in the rank's own
 * block), or recvbuf == sendbuf (the result lands at the start). */
COLL_API int coll_reduce_scatter(coll_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t recvcount, coll_dtype dtype, coll_op op);

/* recvbuf holds size*sendcount elements; block r comes from rank r.
 * In place: sendbuf == recvbuf + rank*sendcount (the block already at its place, as
 * NCCL), or sendbuf == recvbuf (the block at the start of the buffer: the library moves
 * it to its place before anything is overwritten). */
COLL_API int coll_allgather(coll_comm *comm, const void *sendbuf, void *recvbuf,
                            size_t sendcount, coll_dtype dtype);

/* Copies root's buf to every rank's buf. */
COLL_API int coll_broadcast(coll_comm *comm, void *buf, size_t count, coll_dtype dtype,
                            int root);

/* Returns once every rank has entered the barrier. */
COLL_API int coll_barrier(coll_comm *comm);

/* The rest of the collective set. Counts are in elements, displs in elements from the
 * start of the buffer. The count and displacement arrays, like the buffers, must stay
 * valid until a non-blocking form is done. Every rank must make the same call with the
 * same root; counts that disagree between ranks are COLL_EMISMATCH on the ranks that see
 * them, and the communicator fails (as for any mismatch). */

/* Reduction of every rank's `count` elements into root's recvbuf (recvbuf is ignored and
 * may be NULL on other ranks). In place at root: sendbuf == recvbuf. */
COLL_API int coll_reduce(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                         coll_dtype dtype, coll_op op, int root);
/* root's recvbuf holds size*sendcount elements; block r comes from rank r (recvbuf is
 * ignored elsewhere). In place at root: sendbuf == recvbuf + root*sendcount, or
 * sendbuf == recvbuf (the block at the start, moved to its place first). */
COLL_API int coll_gather(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                         coll_dtype dtype, int root);
/* root's sendbuf holds size*recvcount elements; rank r receives block r (sendbuf is
 * ignored elsewhere). In place at root: recvbuf == sendbuf + root*recvcount, or
 * recvbuf == sendbuf. */
COLL_API int coll_scatter(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t recvcount,
                          coll_dtype dtype, int root);
/* Block j (count elements) of sendbuf goes to rank j; block i of recvbuf came from rank
 * i. In place: sendbuf == recvbuf. */
COLL_API int coll_alltoall(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                           coll_dtype dtype);
/* Uneven all-to-all: sendcounts[j] elements at sdispls[j] go to rank j; recvcounts[i]
 * elements from rank i land at rdispls[i]. Rank i's sendcounts[j] must equal rank j's
 * recvcounts[i], else COLL_EMISMATCH on both. In place: sendbuf == recvbuf (the library
 * copies what it sends first). */
COLL_API int coll_alltoallv(coll_comm *comm, const void *sendbuf, const size_t *sendcounts,
                            const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                            const size_t *rdispls, coll_dtype dtype);
/* Uneven all-gather: rank r contributes recvcounts[r] elements (sendcount must equal it),
 * placed at displs[r] on every rank. In place: sendbuf == recvbuf + displs[rank], or
 * sendbuf == recvbuf (moved to its place first). */
COLL_API int coll_allgatherv(coll_comm *comm, const void *sendbuf, size_t sendcount,
                             void *recvbuf, const size_t *recvcounts, const size_t *displs,
                             coll_dtype dtype);
/* Uneven reduce-scatter: sendbuf holds sum(recvcounts) elements; rank r receives the
 * reduction of the recvcounts[r] elements starting at sum(recvcounts[0..r-1]). In
 * place: recvbuf == sendbuf + that offset, or recvbuf == sendbuf. */
COLL_API int coll_reduce_scatterv(coll_comm *comm, const void *sendbuf, void *recvbuf,
                                  const size_t *recvcounts, coll_dtype dtype, coll_op op);

/* Rendezvous through a key-value store the caller already has (a framework's store,
 * etcd, Redis ...). set stores a value; get waits up to timeout_ms for the key and
 * returns 0 with a malloc'ed copy in *value (the library frees it), or a COLL_E* code
 * (COLL_ETIMEDOUT when the key did not come; any other value is taken as COLL_ESYS).
 * Both may be called from the calling thread only, and only until init returns; ctx
 * stays the caller's. The library writes keys of its own ("terms", "job", "addr/<rank>",
 * "cards/<n>", and notes such as "abort" and "clash") and, having no way to remove
 * them, leaves them there: give each communicator its own store or key prefix (as
 * torch's PrefixStore does), and a fresh one for each init. */
typedef struct coll_store_ops {
    int (*set)(void *ctx, const char *key, const void *value, size_t len);
    int (*get)(void *ctx, const char *key, void **value, size_t *len, int timeout_ms);
} coll_store_ops;
/* coll_init through ops/ctx instead of a URL: the same configuration and errors. */
COLL_API int coll_init_store(coll_comm **out, const coll_store_ops *ops, void *ctx, int rank,
                             int size, const coll_config *cfg);

/* After a failure (COLL_EPEER, COLL_ETIMEDOUT, COLL_EMISMATCH ...) on comm: every
 * surviving rank calls it; they agree on which ranks are gone (the same answer on every
 * survivor) and get a new communicator of the survivors, ranked in their old order, with
 * comm's transport, codec and settings. The old comm stays failed (only destroy is
 * valid). Not collective over the dead ranks. A rank that does not answer within the
 * timeout (COLL_TIMEOUT_MS) counts as failed, so it returns within a few timeouts. The
 * survivors meet over a socket each communicator keeps listening from init to destroy
 * (its lifeline); a healthy comm is failed first (its peers' calls end, and they shrink
 * too). Where a second rank dies while the survivors agree, shrink may fail with
 * COLL_EPEER or COLL_ETIMEDOUT on every survivor: calling it again agrees anew (every
 * survivor must call it the same number of times). */
COLL_API int coll_shrink(coll_comm *comm, coll_comm **out);
/* The ranks of comm (old numbering) known to have failed; returns how many, writes at
 * most max of them in ascending order. After coll_shrink, the agreed set; before, the
 * peer this rank's failure began at (if a peer's loss caused it), or none. */
COLL_API int coll_failed_ranks(const coll_comm *comm, int *ranks, int max);

/* Growing a communicator (a replacement after coll_shrink, or more ranks): comm's ranks
 * keep their numbers and newcomers take the ones after them, in the order they claim a
 * place. Rank 0 of comm makes an id with coll_grow_id and hands it out of band to each
 * newcomer (a launcher's environment, a file); then every rank of comm calls coll_grow
 * and every newcomer coll_init_grow with that id. The grown communicator is new in
 * every way (its own links, topology, algorithm choice and split families) and meets as
 * coll_init's ranks do: with COLL_SECRET every newcomer proves it, and a newcomer whose
 * settings that must agree differ (transport, codec, segment bytes, COLL_ALGO, a secret
 * or none) fails the grow on every rank, naming the setting. comm stays as it was (after
 * a grow that fails too): destroy it when done with it. */
#define COLL_GROW_ID_BYTES 160
/* Rank 0 of comm only: serves the meeting where comm grows to size ranks (more than
 * comm's), on a fresh port where its transport listens, and writes its id, a
 * NUL-terminated string, into id (len: COLL_GROW_ID_BYTES or more). A second call
 * replaces the first id (a grow that failed is retried with a fresh one). */
COLL_API int coll_grow_id(coll_comm *comm, int size, char *id, size_t len);
/* Every rank of comm, at the same point of its program (a collective over comm): rank 0
 * hands its id to the others over comm, then all meet the newcomers; *out is the grown
 * communicator. Errors: rank 0 made no id (COLL_EINVAL, every rank); a newcomer that did
 * not come within comm's timeout (COLL_ETIMEDOUT naming the missing ranks) or that died
 * meanwhile, a rank of comm that did not call coll_grow, a setting that differs: every
 * rank fails within the timeout with coll_last_error(NULL) saying why. */
COLL_API int coll_grow(coll_comm *comm, coll_comm **out);
/* A newcomer: joins the grow id names (made by coll_grow_id, handed out of band), waiting
 * up to its timeout (cfg's timeout_ms, else COLL_TIMEOUT_MS) for comm's ranks to call
 * coll_grow; *out is the grown communicator and coll_rank says its place. cfg as
 * coll_init's (NULL: the environment's). Errors: an id that is no grow's (COLL_EINVAL);
 * every place taken (COLL_EMISMATCH); an id whose grow is over, or a rendezvous that
 * does not answer (COLL_ETIMEDOUT, or the error the meeting reported). */
COLL_API int coll_init_grow(coll_comm **out, const char *id, const coll_config *cfg);

/* Tagged point-to-point. Messages between two ranks match in the order they were posted
 * (FIFO per peer); the tag, count and dtype of a matched pair must agree, or both sides
 * get COLL_EMISMATCH. A send never waits for sends to other peers.
 *
 * When coll_send blocks (as MPI_Send may): it returns once the transport holds the whole
 * message, in its buffers or the peer's receive. A message larger than what the link
 * buffers (shm: the pair's ring, 4 MiB; tcp: the kernel's socket buffers, a few MiB;
 * ibverbs: the registered slots) waits for the peer to post its receive, so two ranks
 * that both send a large message first wait for each other until the operation timeout. Use
 * coll_sendrecv, or coll_isend then the receive, for exchanges. */
COLL_API int coll_send(coll_comm *comm, const void *buf, size_t count, coll_dtype dtype,
                       int peer, uint32_t tag);
COLL_API int coll_recv(coll_comm *comm, void *buf, size_t count, coll_dtype dtype, int peer,
                       uint32_t tag);
/* Sends sendcount elements of sendbuf to rank dst and receives recvcount elements from
 * rank src into recvbuf, both with tag, as MPI_Sendrecv: the receive is posted before
 * the send, so it never deadlocks whatever order the peers use (dst == src allowed).
 * dst == src == own rank copies sendbuf to recvbuf (counts must agree: COLL_EMISMATCH).
 * Same matching and errors as coll_send/coll_recv; the send's error wins when both fail. */
COLL_API int coll_sendrecv(coll_comm *comm, const void *sendbuf, size_t sendcount, int dst,
                           void *recvbuf, size_t recvcount, int src, coll_dtype dtype,
                           uint32_t tag);

/* All-reduce of f32 (COLL_SUM or COLL_AVG) through `codec` with error feedback:
 * residual holds `count` floats owned by the caller, zeroed before the first call and
 * passed unchanged to every later call on the same buffer; each call adds it before
 * encoding and stores what the codec lost, so the error of repeated all-reduces averages
 * out instead of accumulating. Other dtypes or ops: COLL_ENOTSUP. */
COLL_API int coll_allreduce_ef(coll_comm *comm, const float *sendbuf, float *recvbuf,
                               size_t count, coll_op op, coll_codec codec, float *residual);
COLL_API int coll_iallreduce_ef(coll_comm *comm, const float *sendbuf, float *recvbuf,
                                size_t count, coll_op op, coll_codec codec, float *residual,
                                coll_req **req);

/* Non-blocking forms: the same arguments, then coll_req **req. They make progress
 * without any call to test or wait; buffers must stay valid until the request is done. */
COLL_API int coll_iallreduce(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                             coll_dtype dtype, coll_op op, coll_req **req);
COLL_API int coll_ireduce_scatter(coll_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t recvcount, coll_dtype dtype, coll_op op,
                                  coll_req **req);
COLL_API int coll_iallgather(coll_comm *comm, const void *sendbuf, void *recvbuf,
                             size_t sendcount, coll_dtype dtype, coll_req **req);
COLL_API int coll_ibroadcast(coll_comm *comm, void *buf, size_t count, coll_dtype dtype,
                             int root, coll_req **req);
COLL_API int coll_ireduce(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                          coll_dtype dtype, coll_op op, int root, coll_req **req);
COLL_API int coll_igather(coll_comm *comm, const void *sendbuf, void *recvbuf,
                          size_t sendcount, coll_dtype dtype, int root, coll_req **req);
COLL_API int coll_iscatter(coll_comm *comm, const void *sendbuf, void *recvbuf,
                           size_t recvcount, coll_dtype dtype, int root, coll_req **req);
COLL_API int coll_ialltoall(coll_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                            coll_dtype dtype, coll_req **req);
COLL_API int coll_ialltoallv(coll_comm *comm, const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                             const size_t *rdispls, coll_dtype dtype, coll_req **req);
COLL_API int coll_iallgatherv(coll_comm *comm, const void *sendbuf, size_t sendcount,
                              void *recvbuf, const size_t *recvcounts, const size_t *displs,
                              coll_dtype dtype, coll_req **req);
COLL_API int coll_ireduce_scatterv(coll_comm *comm, const void *sendbuf, void *recvbuf,
                                   const size_t *recvcounts, coll_dtype dtype, coll_op op,
                                   coll_req **req);
COLL_API int coll_isend(coll_comm *comm, const void *buf, size_t count, coll_dtype dtype,
                        int peer, uint32_t tag, coll_req **req);
COLL_API int coll_irecv(coll_comm *comm, void *buf, size_t count, coll_dtype dtype, int peer,
                        uint32_t tag, coll_req **req);
/* The barrier's non-blocking form: the request is done once every rank has entered the
 * barrier, by this call or by coll_barrier (the two meet). */
COLL_API int coll_ibarrier(coll_comm *comm, coll_req **req);

/* Never blocks: *done = 1 once the request finished (its status is then returned and
 * coll_wait must still be called to free it), else 0 and COLL_INPROGRESS. */
COLL_API int coll_test(coll_req *req, int *done);

/* Waits for the request, bounded by the timeout; frees req; returns the op's status. */
COLL_API int coll_wait(coll_req *req);

typedef struct coll_stats {
    uint64_t ops;      /* operations completed */
    uint64_t bytes_in; /* logical bytes handed to the library */
    uint64_t wire_tx;  /* bytes this rank put on the wire, payload plus headers */
    uint64_t wire_rx;  /* bytes this rank took off the wire */
    uint64_t errors;
} coll_stats;

/* Copies the communicator's counters into *out. */
COLL_API int coll_get_stats(const coll_comm *comm, coll_stats *out);

/* Sets every counter to zero. Call it between operations: one running meanwhile may go
 * on counting from before the reset. */
COLL_API void coll_reset_stats(coll_comm *comm);

/* The payload bytes this rank sends for one uncompressed all-reduce of `count` elements
 * of `dt` on comm, by the algorithm the library picks for that size: the ring, 2(n-1)/n
 * of the buffer; recursive doubling (up to 64 KiB on 2, 4, 8... ranks), log2(n) times
 * the buffer; hierarchical (H hosts, L lanes on each), 2(L-1)/L of it inside the host
 * plus 2(H-1)/H of this rank's 1/L shard across hosts, and the buffer once more for each
 * rank past the lanes it stands in for (such a rank: the buffer once). For byte
 * accounting next to coll_get_stats' wire_tx (which adds 32-byte headers). 0 for a NULL
 * communicator or an invalid dtype. */
COLL_API size_t coll_allreduce_wire_bytes(const coll_comm *comm, size_t count, coll_dtype dt);

/* The flight recorder: each communicator keeps its last few collectives (coll_config.
 * recorder_ops, $COLL_RECORDER_OPS; default 64, 0 turns it off), cheap enough to leave
 * on. Where $COLL_RECORDER_DIR names a directory (made if missing), each rank writes them
 * there as JSON, coll-recorder-<job>-<communicator>-<rank>.json, when a collective, send
 * or receive fails or times out (once per communicator), and on the signal $COLL_RECORDER_SIGNAL names
 * (USR1, USR2 or a number: the one case where the library installs a signal handler;
 * the handler only wakes a library thread, which writes every communicator's file).
 * A file that cannot be written is a warning in the log, never a failed collective.
 * tools/coll_analyze.py merges the ranks' files and names the rank that differs.
 * Sends and receives are recorded too, in a ring of their own of the same size. */
typedef enum { COLL_REC_QUEUED, COLL_REC_RUNNING, COLL_REC_DONE,
               COLL_REC_FAILED } coll_rec_state;
typedef struct coll_record {
    uint32_t seq;          /* the collective's number on comm, 1, 2 ... in issue order; a
                            * send's or receive's number with its peer */
    const char *kind;      /* "allreduce", "broadcast", "send", "recv" ... (the library's
                            * own strings) */
    size_t count;          /* elements as the call gave them (0 for the uneven forms) */
    coll_dtype dtype;
    coll_op op;            /* the reduction (COLL_SUM where the collective has none) */
    int root;              /* broadcast, reduce, gather, scatter; send, recv: the peer;
                            * -1 for the others */
    uint32_t tag;          /* send, recv */
    coll_codec codec;      /* on the wire */
    const char *algo;      /* the algorithm that ran it ("ring", "tree" ...); "" until then */
    coll_rec_state state;
    int status;            /* COLL_OK, or what it failed with */
    /* CLOCK_MONOTONIC in microseconds; 0: not yet. */
    int64_t issued_us, started_us, ended_us;
    uint64_t bytes;        /* this rank's bytes on the wire for it so far, both ways, headers
                            * included */
    int64_t progress_us;   /* when it last moved a byte, to within the library's spin
                            * (about 100 us): its end once done; 0: not started, or a
                            * send or receive still running */
} coll_record;
/* Copies the newest min(max, kept) records of comm into out, collectives and sends and
 * receives by the time they were issued, oldest first; returns how many (0 when the
 * recorder is off), or COLL_EINVAL (or COLL_ENOMEM). Any thread, while operations run. */
COLL_API int coll_recorder_read(const coll_comm *comm, coll_record *out, int max);
/* Writes comm's records as JSON to path (NULL: its file in $COLL_RECORDER_DIR, else in
 * the current directory). COLL_ENOTSUP when the recorder is off, COLL_ESYS (and a
 * warning) when the file cannot be written; comm stays as it was either way. */
COLL_API int coll_recorder_dump(coll_comm *comm, const char *path);

/* Names comm for coll_status (tools/coll_status.c), which lists every live communicator
 * of each process it asks: label (cut to 31 bytes; "" clears it), and global_rank, this
 * rank's number in the job as the caller counts it (-1: none), shown beside comm's own
 * rank. collective.torch labels each process group's communicator with torch's group
 * name and the global rank. Any thread; COLL_EINVAL for a NULL comm or label or a
 * global_rank below -1. */
COLL_API int coll_comm_set_label(coll_comm *comm, const char *label, int global_rank);

typedef enum { COLL_LOG_ERROR = 1, COLL_LOG_WARN, COLL_LOG_INFO, COLL_LOG_DEBUG,
               COLL_LOG_TRACE } coll_log_level;
typedef void (*coll_log_fn)(coll_log_level level, const char *msg, void *arg);

/* Routes the library's log lines at `level` and above in importance to fn (NULL: stderr).
 * Default: stderr, level from $COLL_DEBUG (error|warn|info|debug|trace; default warn).
 * info: set-up and each algorithm choice; debug: every link, collective (with its time)
 * and send/recv; trace: every segment. */
COLL_API void coll_set_log(coll_log_fn fn, void *arg, coll_log_level level);

#ifdef __cplusplus
}
#endif
#endif
