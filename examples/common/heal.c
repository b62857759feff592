/* --heal's hand-over (heal.h). The id file is written whole (a rename) and removed once
 * the grow is over, so a replacement never takes half an id; one that takes the id of a
 * grow that failed, or is over, fails to join it and looks again. */
#include "heal.h"

#include "batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void id_path(char *path, size_t len)
{
    const char *dir = getenv("TMPDIR"), *job = getenv("COLL_JOB_ID"),
               *port = getenv("MASTER_PORT");
    snprintf(path, len, "%s/coll-heal-%s", dir && *dir ? dir : "/tmp",
             job && *job ? job : port ? port : "job");
}

int ex_heal_is_replacement(void)
{
    const char *n = getenv("COLL_RESTART");
    return n && atoi(n) > 0;
}

static int leave_id(const char *id)
{
    char path[512], tmp[520];
    id_path(path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(id, f) >= 0;
    if (f)
        ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "heal: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int ex_heal_offer(coll_comm *c, int size, coll_comm **out)
{
    char id[COLL_GROW_ID_BYTES], path[512];
    int me = coll_rank(c);
    /* Without an id coll_grow fails every rank at once; without the file, the grow waits
     * for a replacement that never comes, and fails in its timeout. */
    if (me == 0 && coll_grow_id(c, size, id, sizeof(id)) != COLL_OK)
        fprintf(stderr, "heal: rank 0: %s\n", coll_last_error(NULL));
    else if (me == 0)
        leave_id(id);
    int rc = coll_grow(c, out);
    if (rc != COLL_OK)
        fprintf(stderr, "heal: rank %d: coll_grow: %s\n", me, coll_last_error(NULL));
    id_path(path, sizeof(path));
    if (me == 0)
        unlink(path);
    return rc;
}

int ex_heal_join(const coll_config *cfg, int wait_ms, coll_comm **out)
{
    char path[512], id[COLL_GROW_ID_BYTES], tried[COLL_GROW_ID_BYTES] = "";
    id_path(path, sizeof(path));
    double end = ex_now_s() + wait_ms / 1e3;
    while (ex_now_s() < end) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(id, 1, sizeof(id) - 1, f) : 0;
        if (f)
            fclose(f);
        id[n] = 0;
        if (n == 0 || strcmp(id, tried) == 0) { /* none yet, or the one that failed */
            usleep(20 * 1000);
            continue;
        }
        if (coll_init_grow(out, id, cfg) == COLL_OK)
            return COLL_OK;
        fprintf(stderr, "heal: joining: %s\n", coll_last_error(NULL));
        snprintf(tried, sizeof(tried), "%s", id);
    }
    fprintf(stderr, "heal: no grow to join within %d ms (%s)\n", wait_ms, path);
    return COLL_ETIMEDOUT;
}

int ex_heal_state(coll_comm *c, int64_t *pos, int n, float *const *bufs, const size_t *lens,
                  int nbufs)
{
    int rc = coll_broadcast(c, pos, (size_t)n, COLL_I64, 0);
    for (int i = 0; rc == COLL_OK && i < nbufs; i++)
        rc = coll_broadcast(c, bufs[i], lens[i], COLL_F32, 0);
    return rc;
}

void ex_heal_report(const ex_heal_clock *k, int rank, int first, int size)
{
    printf("heal: rank %d phases: seen %.6f shrunk %.6f grown %.6f done %.6f\n", rank, k->seen,
           k->shrunk, k->grown, k->done);
    if (!first)
        return;
    printf("heal: back at %d ranks %.0f ms after the loss was seen (shrink %.0f ms, grow %.0f "
           "ms, state %.0f ms for %zu bytes; seen at %.6f, full size at %.6f)\n", size,
           (k->done - k->seen) * 1e3, (k->shrunk - k->seen) * 1e3, (k->grown - k->shrunk) * 1e3,
           (k->done - k->grown) * 1e3, k->bytes, k->seen, k->done);
    fflush(stdout);
}

void ex_heal_joined(int rank, int epoch, size_t step, double started, double joined,
                    double done)
{
    printf("heal: rank %d joined at epoch %d, step %zu (process started at %.6f, in the grow "
           "at %.6f, state at %.6f)\n", rank, epoch, step, started, joined, done);
    fflush(stdout);
}
