/* The terms every rank of a job must agree on at init, compared at once through the
 * store, and the note that ends every rank's wait when they do not. */
#ifndef CL_TERMS_H
#define CL_TERMS_H

#include "core/config.h"
#include "rdzv/store.h"

#include <stddef.h>
#include <stdint.h>

/* cl_terms_agree's answer when the store serves another job (why says how). */
#define CL_TERMS_CLASH 2
/* After a note, rank 0 keeps its store this long, so every rank waiting reads it. */
#define CL_TERMS_LINGER_MS 500

/* Rank 0 writes its terms into the plain store s; every other rank reads them and
 * compares its own. family: the sockets' this rank took (its lifeline's: the config's
 * may be AF_UNSPEC, the interfaces' choice). COLL_EMISMATCH: a setting differs (why names
 * it, rank 0's value and this rank's; every rank is told through the note);
 * CL_TERMS_CLASH: the store serves another job; CL_TERMS_LATE: the job formed without this
 * rank; COLL_ETIMEDOUT: rank 0's terms did not come. */
int cl_terms_agree(cl_store *s, const cl_config *cfg, int rank, int size, int family,
                   int64_t deadline, char *why, size_t len);
/* cl_terms_wait's answer to a rank that came after the job formed (why says so). */
#define CL_TERMS_LATE 3

/* cl_terms_wait's answer where a rank left a note that its own init failed
 * (cl_terms_fail). */
#define CL_TERMS_FAILED 4

/* cl_store_wait on s for key, ended early by a note in plain (the store before any
 * seal), its sentence copied into why: COLL_EMISMATCH where a rank left it because the
 * terms differ, CL_TERMS_FAILED where a rank's own init failed, CL_TERMS_LATE where rank 0
 * left it because the job formed (cl_terms_formed). job_key: the job's COLL_SECRET key,
 * which must vouch for a failed rank's words (NULL: none). */
int cl_terms_wait(cl_store *s, cl_store *plain, const uint8_t *job_key, const char *key,
                  void *buf, size_t cap, size_t *len, int64_t deadline, char *why,
                  size_t whylen);
/* A rank whose own init failed (code, its error in words) says so in the plain store s,
 * for every other rank's wait to end with it: once rank 0's terms of this job are there
 * (waiting for them until deadline), unless a note is there already. COLL_OK once
 * written. */
int cl_terms_fail(cl_store *s, const cl_config *cfg, int rank, int code, const char *words,
                  int64_t deadline);
/* Rank 0's note, once the job formed, for a rank that comes later. */
int cl_terms_formed(cl_store *s);
/* Forgets the terms and the note (stores whose records outlive the job). */
void cl_terms_remove(cl_store *s);

#endif
