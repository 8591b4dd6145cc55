/* contexts.c: gex-shmem's contexts on their own gex endpoints (issue 27 point 2), on 2
 * PEs. Run by tests/contexts.sh (over smp, smp with GEX_RMA_PATH=am, and ofi
 * tcp;ofi_rxm); docs/shmem.md, "Contexts".
 *
 * 1. THREADS threads, each with a private context, put (putmem, long_p, putmem_nbi),
 *    quiet their context, get the data back and fetch-add a counter through it on the
 *    other PE; each checks what it got.
 * 2. Create/destroy cycles beyond gex's endpoint capacity (GEX_MAX_ENDPOINTS, 16 by
 *    default): a destroyed context's endpoint is reused by the next one.
 * 3. More contexts alive at once than the capacity: the last ones ride the PE's
 *    endpoint (index 0) and still work.
 * With EXPECT_CTX_EP=1 (the script sets it where operations go through an endpoint),
 * every context of 1 and 2 must have had an endpoint of its own (index > 0, distinct per
 * live context) that carried its operations (gexshmem_ctx_endpoint's count). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 2
#define ITERS 200
#define CYCLES 40
#define MANY 24

static int me, peer, expect_ep;
static long *words;    /* THREADS * 8 longs: thread t's put target on the peer */
static long *counters; /* THREADS longs: fetch-added by the peer's thread t */
static int ep_of[THREADS];

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("FAIL pe %d line %d: ", me, __LINE__);                    \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
            fflush(stdout);                                                  \
            shmem_global_exit(1);                                            \
        }                                                                    \
    } while (0)

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    shmem_ctx_t ctx;
    CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "ctx_create");
    long *mine = words + t * 8;
    for (long i = 0; i < ITERS; i++) {
        long v[8], back[8];
        for (int k = 0; k < 8; k++) v[k] = i * 100 + t * 10 + k;
        if (i % 3 == 0) {
            shmem_ctx_putmem(ctx, mine, v, sizeof v, peer);
        } else if (i % 3 == 1) {
            shmem_ctx_putmem_nbi(ctx, mine, v, sizeof v, peer);
        } else {
            shmem_ctx_putmem(ctx, mine, v, sizeof v - sizeof(long), peer);
            shmem_ctx_long_p(ctx, mine + 7, v[7], peer);
        }
        shmem_ctx_quiet(ctx);
        memset(back, 0, sizeof back);
        shmem_ctx_getmem(ctx, back, mine, sizeof back, peer);
        CHECK(memcmp(back, v, sizeof v) == 0, "thread %d iteration %ld: got %ld, put %ld", t, i, back[0], v[0]);
        long old = shmem_ctx_long_atomic_fetch_add(ctx, counters + t, 1, peer);
        CHECK(old == i, "thread %d: fetch_add returned %ld, expected %ld", t, old, i);
    }
    uint64_t ops = 0;
    ep_of[t] = gexshmem_ctx_endpoint(ctx, &ops);
    if (expect_ep) CHECK(ep_of[t] > 0 && ops >= 2 * ITERS, "thread %d: endpoint %d carried %lu operations", t, ep_of[t], (unsigned long)ops);
    shmem_ctx_destroy(ctx);
    return NULL;
}

int main(void) {
    int provided = -1;
    CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0 && provided == SHMEM_THREAD_MULTIPLE, "init_thread");
    me = shmem_my_pe();
    if (shmem_n_pes() != 2) {
        if (me == 0) printf("contexts: needs 2 PEs\n");
        shmem_global_exit(2);
    }
    peer = 1 - me;
    const char *e = getenv("EXPECT_CTX_EP");
    expect_ep = e && *e == '1';
    words = shmem_calloc(THREADS * 8, sizeof(long));
    counters = shmem_calloc(THREADS, sizeof(long));

    /* 1. Threads with private contexts. */
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    if (expect_ep) CHECK(ep_of[0] != ep_of[1], "both threads' contexts on endpoint %d", ep_of[0]);
    shmem_barrier_all();
    for (int t = 0; t < THREADS; t++) CHECK(counters[t] == ITERS, "counter %d holds %ld", t, counters[t]);

    /* 2. Create/destroy cycles beyond the endpoint capacity. */
    int first = -1;
    for (int c = 0; c < CYCLES; c++) {
        shmem_ctx_t ctx;
        CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "cycle %d: ctx_create", c);
        long v = 1000 + c, back = 0;
        shmem_ctx_long_p(ctx, words, v, peer);
        shmem_ctx_quiet(ctx);
        back = shmem_ctx_long_g(ctx, words, peer);
        CHECK(back == v, "cycle %d: got %ld", c, back);
        uint64_t ops = 0;
        int ep = gexshmem_ctx_endpoint(ctx, &ops);
        if (expect_ep) CHECK(ep > 0 && ops >= 2, "cycle %d: endpoint %d, %lu operations", c, ep, (unsigned long)ops);
        if (c == 0) first = ep;
        else CHECK(ep == first, "cycle %d: endpoint %d, not the reused %d", c, ep, first);
        shmem_ctx_destroy(ctx);
    }
    shmem_barrier_all();

    /* 3. More contexts at once than the capacity: the rest share the PE's endpoint. */
    shmem_ctx_t many[MANY];
    int own = 0, shared = 0;
    for (int c = 0; c < MANY; c++) {
        CHECK(shmem_ctx_create(0, &many[c]) == 0, "ctx %d of %d: ctx_create", c, MANY);
        int ep = gexshmem_ctx_endpoint(many[c], NULL);
        for (int d = 0; d < c && ep > 0; d++) CHECK(gexshmem_ctx_endpoint(many[d], NULL) != ep, "contexts %d and %d share endpoint %d", d, c, ep);
        if (ep > 0) own++; else shared++;
    }
    for (int c = 0; c < MANY; c++) {
        long v = 5000 + c;
        shmem_ctx_long_p(many[c], words + 1, v, peer);
        shmem_ctx_quiet(many[c]);
        CHECK(shmem_ctx_long_g(many[c], words + 1, peer) == v, "ctx %d: get", c);
        (void)shmem_ctx_long_atomic_fetch_inc(many[c], counters, peer);
    }
    for (int c = 0; c < MANY; c++) shmem_ctx_destroy(many[c]);
    if (expect_ep) CHECK(own > 0 && shared > 0, "%d contexts with their own endpoint, %d on the PE's", own, shared);
    shmem_barrier_all();
    CHECK(counters[0] == ITERS + MANY, "counter 0 holds %ld", counters[0]);
    if (me == 0) printf("contexts: ok (%d with their own endpoint, %d on the PE's)\n", own, shared);
    shmem_finalize();
    return 0;
}
