/* The terms of a job: what every rank must agree on before anything else is exchanged
 * (world size, library and wire versions, transport, socket family, codec, segment, forced
 * algorithm, a secret or none). Rank 0 writes its own under "terms", in the clear, so a rank
 * without the secret reads it too; every other rank compares and, where one differs,
 * leaves a note ("abort") that ends every rank's wait at once with the same sentence.
 * A rank of another job (another job name) leaves no note: it must not end that job.
 * The store before the seal is open to whoever reaches it, so a note holds no text: it
 * says who differs and both sides' terms, and each reader writes the sentence itself.
 * A rank whose own init fails leaves a note of another kind in the same place, beside
 * rank 0's terms: its rank, its error code and its words. Those words are shown only
 * where a tag under the job's COLL_SECRET vouches for them, or the job has no secret
 * (anyone who reaches its store may then join it anyway); either note ends the job as
 * easily as the other. Rank 0's terms carry a fresh nonce, and a note counts only while
 * the terms beside it carry the nonce it names: a note written after rank 0 cleaned up
 * (a file directory keeps it) or copied from another job ends no later job. */
#include "core/terms.h"

#include "base/addr.h"
#include "base/auth.h"
#include "base/interrupt.h"
#include "base/util.h"
#include "kernels/codec.h"
#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#define TERMS_MAGIC "collterm"
#define ABORT_KEY "abort"
#define FORMED_KEY "formed"
#define NOTE_MAGIC "collnote"
#define FORMED_MAGIC "collformed"
#define FAIL_MAGIC "collfail"
#define FAIL_DOMAIN "coll fail note v1"

/* Fixed-width fields only: the record is read by other processes as it is. */
typedef struct {
    char magic[8];
    uint32_t proto, lib;
    int32_t size, keyed, codec, family; /* family: AF_INET or AF_INET6, its lifeline's */
    uint64_t segment;
    char transport[16];
    char algo[32];
    char job[CL_JOB_NAME];
    uint8_t nonce[16]; /* rank 0's, fresh per job: a note counts beside these terms only */
} terms;

typedef struct {
    char magic[8];
    int32_t rank, pad; /* the rank that found its terms differ from rank 0's */
    terms r0, theirs;
} note;

/* A rank's own failure at init. */
typedef struct {
    char magic[8];
    int32_t rank, code;        /* code: its COLL_E* */
    uint8_t nonce[16];         /* of the terms it saw, under the tag with the rest */
    char words[320];           /* its error, as it says it */
    uint8_t tag[CL_TAG_BYTES]; /* with COLL_SECRET: over all before it; else zeros */
} fail_note;

_Static_assert(sizeof(note) != sizeof(fail_note), "a note's kind shows in its size");

/* Whatever the note's place holds: a note of either kind. */
typedef union {
    note differ;
    fail_note fail;
} any_note;

/* s (cap bytes, from the store: anyone's) ended and made of printable characters only,
 * the others '?': words shown in every rank's error must not drive its terminal. */
static void printable(char *s, size_t cap)
{
    s[cap - 1] = 0;
    for (; *s; s++)
        *s = *s >= ' ' && *s < 127 ? *s : '?';
}

static void terminate(terms *t)
{
    printable(t->transport, sizeof(t->transport));
    printable(t->algo, sizeof(t->algo));
    printable(t->job, sizeof(t->job));
}

static void fill(terms *t, const cl_config *cfg, int size, int family)
{
    memset(t, 0, sizeof(*t));
    memcpy(t->magic, TERMS_MAGIC, sizeof(t->magic));
    t->proto = CL_PROTO_VERSION;
    t->lib = COLL_VERSION_MAJOR << 16 | COLL_VERSION_MINOR << 8 | COLL_VERSION_PATCH;
    t->size = size;
    t->keyed = cfg->keyed;
    t->codec = (int32_t)cfg->codec;
    t->family = family;
    t->segment = cfg->segment_bytes;
    snprintf(t->transport, sizeof(t->transport), "%s", cfg->transport->name);
    snprintf(t->algo, sizeof(t->algo), "%s", cfg->algo ? cfg->algo : "(the library's choice)");
    snprintf(t->job, sizeof(t->job), "%s", cfg->job);
}

static const char *secret_word(int keyed)
{
    return keyed ? "one" : "none";
}

static const char *lib_word(uint32_t v, char *buf, size_t len)
{
    snprintf(buf, len, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
    return buf;
}

/* The first setting in which theirs (rank 0's) and mine differ, as a sentence into why.
 * 0: they agree. */
static int differ(const terms *r0, const terms *me, int rank, char *why, size_t len)
{
    char a[32], b[32];
    const char *what = NULL, *x = NULL, *y = NULL;
    if (r0->proto != me->proto || r0->lib != me->lib)
        what = "library version", x = lib_word(r0->lib, a, sizeof(a)),
        y = lib_word(me->lib, b, sizeof(b));
    else if (r0->size != me->size)
        what = "world size (WORLD_SIZE)", snprintf(a, sizeof(a), "%d", r0->size),
        snprintf(b, sizeof(b), "%d", me->size), x = a, y = b;
    else if (r0->keyed != me->keyed)
        what = "secret (COLL_SECRET)", x = secret_word(r0->keyed), y = secret_word(me->keyed);
    else if (strcmp(r0->transport, me->transport) != 0)
        what = "transport (COLL_TRANSPORT)", x = r0->transport, y = me->transport;
    else if (r0->family != me->family) /* dual-stack hosts would carry it; others hang */
        what = "socket family (COLL_SOCKET_FAMILY, else the rendezvous host's)",
        x = cl_family_name(r0->family), y = cl_family_name(me->family);
    else if (r0->codec != me->codec)
        what = "codec (COLL_CODEC)", x = cl_codec_name(r0->codec), y = cl_codec_name(me->codec);
    else if (r0->segment != me->segment)
        what = "segment bytes (COLL_SEGMENT_BYTES)",
        snprintf(a, sizeof(a), "%llu", (unsigned long long)r0->segment),
        snprintf(b, sizeof(b), "%llu", (unsigned long long)me->segment), x = a, y = b;
    else if (strcmp(r0->algo, me->algo) != 0)
        what = "algorithm (COLL_ALGO)", x = r0->algo, y = me->algo;
    if (!what)
        return 0;
    snprintf(why, len, "the ranks disagree on the %s: rank 0 has %s, rank %d has %s", what, x,
             rank, y);
    return 1;
}

static void fail_tag(const uint8_t *key, const fail_note *f, uint8_t tag[CL_TAG_BYTES])
{
    cl_auth_tag(key, tag, 2, FAIL_DOMAIN, sizeof(FAIL_DOMAIN) - 1, f,
                offsetof(fail_note, tag));
}

/* A failed rank's note as a sentence in why: 1, or 0 where it is no such note. key: the
 * job's (NULL without COLL_SECRET). Its words are printable characters only, and shown
 * only where the tag vouches for them. */
static int read_failure(fail_note *f, size_t got, int size, const uint8_t *key, char *why,
                        size_t len)
{
    uint8_t want[CL_TAG_BYTES];
    if (got != sizeof(*f) || memcmp(f->magic, FAIL_MAGIC, sizeof(f->magic)) != 0 ||
        f->rank < 0 || f->rank >= size)
        return 0;
    if (key)
        fail_tag(key, f, want); /* over the bytes as written */
    printable(f->words, sizeof(f->words));
    if (key && !cl_auth_equal(want, f->tag, CL_TAG_BYTES))
        snprintf(why, len,
                 "rank %d failed at init (%s), says a note this job's COLL_SECRET does not "
                 "seal (its words are not shown): a rank with another secret, or someone "
                 "without it, wrote it",
                 f->rank, coll_strerror(f->code));
    else
        snprintf(why, len, "rank %d failed at init (%s), so the job cannot form: %s", f->rank,
                 coll_strerror(f->code), f->words);
    return 1;
}

/* Whether nonce is that of the terms in the store now: a note written beside earlier
 * terms (a file directory keeps what a rank wrote after rank 0 cleaned up; a note copied
 * from another job) is no note of this job's. */
static int current(cl_store *plain, const uint8_t nonce[16], int *size)
{
    terms now;
    size_t got = 0;
    *size = 0;
    if (plain->ops->get(plain, "terms", &now, sizeof(now), &got) != COLL_OK ||
        got != sizeof(now) || memcmp(now.nonce, nonce, sizeof(now.nonce)) != 0)
        return 0;
    *size = now.size; /* the job's: a note names a rank of it */
    return 1;
}

/* COLL_OK: no note; else the note's answer (cl_terms_wait), its sentence in why. */
static int read_notes(cl_store *plain, const uint8_t *key, char *why, size_t len)
{
    any_note a;
    note *n = &a.differ;
    char formed[sizeof(FORMED_MAGIC)];
    size_t got = 0;
    int size = 0, there = plain->ops->get(plain, ABORT_KEY, &a, sizeof(a), &got) == COLL_OK &&
                (got == sizeof(a.differ) || got == sizeof(a.fail)) &&
                current(plain, got == sizeof(a.differ) ? a.differ.r0.nonce : a.fail.nonce,
                        &size);
    if (there && got == sizeof(*n) && memcmp(n->magic, NOTE_MAGIC, sizeof(n->magic)) == 0 &&
        n->rank > 0 && n->rank < CL_MAX(n->r0.size, n->theirs.size)) {
        terminate(&n->r0);
        terminate(&n->theirs);
        if (differ(&n->r0, &n->theirs, n->rank, why, len))
            return COLL_EMISMATCH;
    }
    if (there && read_failure(&a.fail, got, size, key, why, len))
        return CL_TERMS_FAILED;
    if (plain->ops->get(plain, FORMED_KEY, formed, sizeof(formed), &got) == COLL_OK &&
        got == sizeof(formed) && memcmp(formed, FORMED_MAGIC, sizeof(formed)) == 0) {
        snprintf(why, len,
                 "the job at this rendezvous formed without this rank: it came late, was "
                 "started twice, or is of another job started at the same port (give each "
                 "job its own port or COLL_JOB_ID; coll_run sets one)");
        return CL_TERMS_LATE;
    }
    return COLL_OK;
}

static const uint8_t *key_of(const cl_config *cfg)
{
    return cfg->keyed ? cfg->key : NULL;
}

/* Rank 0's terms r0 (n bytes read) are this library's and of this rank's job. */
static int check_job(terms *r0, size_t n, const cl_config *cfg, char *why, size_t len)
{
    terminate(r0);
    if (n != sizeof(*r0) || memcmp(r0->magic, TERMS_MAGIC, sizeof(r0->magic)) != 0) {
        snprintf(why, len, "the store holds terms this library cannot read (another version?)");
        return COLL_EMISMATCH;
    }
    if (strcmp(r0->job, cfg->job) != 0) {
        snprintf(why, len, "it serves job '%s' and this rank is of job '%s'%s%s", r0->job,
                 cfg->job, cfg->job_from ? " from " : "", cfg->job_from ? cfg->job_from : "");
        return CL_TERMS_CLASH;
    }
    return COLL_OK;
}

int cl_terms_agree(cl_store *s, const cl_config *cfg, int rank, int size, int family,
                   int64_t deadline, char *why, size_t len)
{
    terms mine, r0;
    size_t n = 0;
    fill(&mine, cfg, size, family);
    if (rank == 0) {
        if (cl_auth_nonce(mine.nonce, sizeof(mine.nonce)) != 0) {
            snprintf(why, len, "no random bytes for the job's terms");
            return COLL_ESYS;
        }
        int rc = cl_store_create(s, "terms", &mine, sizeof(mine));
        if (rc == CL_STORE_TAKEN)
            snprintf(why, len, "a job's terms are there already");
        return rc == CL_STORE_TAKEN ? CL_TERMS_CLASH : rc;
    }
    int rc = cl_terms_wait(s, s, key_of(cfg), "terms", &r0, sizeof(r0), &n, deadline, why, len);
    /* rank 0's store served this rank: where its connection ends before init does, the
     * store's renew asks whether a server with these very terms (their nonce) answers
     * there still, or rank 0 went away (init.c, connect.c) */
    if (rc == COLL_OK)
        rc = cl_store_pin(s, "terms", &r0, n);
    if (rc != COLL_OK || (rc = check_job(&r0, n, cfg, why, len)) != COLL_OK)
        return rc;
    /* the terms of a job that formed already, or that a note ends: the tcp store keeps
     * them, so the wait above did not look at the notes */
    if ((rc = read_notes(s, key_of(cfg), why, len)) != COLL_OK)
        return rc;
    if (!differ(&r0, &mine, rank, why, len))
        return COLL_OK;
    note it = {.magic = NOTE_MAGIC, .rank = rank, .r0 = r0, .theirs = mine};
    s->ops->set(s, ABORT_KEY, &it, sizeof(it));
    return COLL_EMISMATCH;
}

/* Looks at the note between short waits: every rank fails within a moment of it. */
enum { LOOK_MS = 200 };

int cl_terms_wait(cl_store *s, cl_store *plain, const uint8_t *job_key, const char *key,
                  void *buf, size_t cap, size_t *len, int64_t deadline, char *why, size_t whylen)
{
    for (;;) {
        if (cl_interrupted())
            return COLL_EABORTED;
        int rc = cl_store_wait(s, key, buf, cap, len, CL_MIN(deadline, cl_now_ms() + LOOK_MS));
        if (rc != COLL_ETIMEDOUT || (rc = read_notes(plain, job_key, why, whylen)) != COLL_OK)
            return rc;
        if (cl_now_ms() >= deadline)
            return COLL_ETIMEDOUT;
    }
}

int cl_terms_fail(cl_store *s, const cl_config *cfg, int rank, int code, const char *words,
                  int64_t deadline)
{
    terms r0;
    size_t n = 0;
    char why[400];
    int rc = cl_store_wait(s, "terms", &r0, sizeof(r0), &n, deadline);
    /* another job's store, or a note there already (the first cause stays), or a job
     * that formed without this rank: nothing to say */
    if (rc != COLL_OK || (rc = check_job(&r0, n, cfg, why, sizeof(why))) != COLL_OK ||
        (rc = read_notes(s, key_of(cfg), why, sizeof(why))) != COLL_OK)
        return rc;
    fail_note f = {.magic = FAIL_MAGIC, .rank = rank, .code = code};
    memcpy(f.nonce, r0.nonce, sizeof(f.nonce));
    snprintf(f.words, sizeof(f.words), "%s", words);
    if (cfg->keyed)
        fail_tag(cfg->key, &f, f.tag);
    return s->ops->set(s, ABORT_KEY, &f, sizeof(f));
}

int cl_terms_formed(cl_store *s)
{
    return s->ops->set(s, FORMED_KEY, FORMED_MAGIC, sizeof(FORMED_MAGIC));
}

void cl_terms_remove(cl_store *s)
{
    cl_store_remove(s, "terms");
    cl_store_remove(s, ABORT_KEY);
}
