/* thread_levels: the state of a PE initialised at SHMEM_THREAD_SINGLE or
 * SHMEM_THREAD_FUNNELED belongs to the thread that called shmem_init (no lock on the
 * calls that use it); at SHMEM_THREAD_SERIALIZED any thread may call, one at a time.
 * tests/thread_levels.sh runs each case; docs/shmem.md, "Threads".
 *
 *     thread_levels funneled    FUNNELED granted; the main thread's collectives, an
 *                               allocation and a barrier work; a worker's direct put
 *                               (no state) works; prints "thread_levels: ok"
 *     thread_levels serialized  a worker thread, then the main thread again, each
 *                               allocates, broadcasts and barriers; prints "... ok"
 *     thread_levels intruder    shmem_init (SINGLE), then a worker thread calls
 *                               shmem_barrier_all: refused, the job ends with
 *                               "gex-shmem: shmem_barrier_all: called from a thread
 *                               other than the one that called shmem_init ..."
 */
#include <pthread.h>
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long *word;
static int me, npes;

static void fail(const char *what) {
    printf("thread_levels: FAILED: %s\n", what);
    fflush(stdout);
    shmem_global_exit(1);
}

/* An allocation, a broadcast of 8 bytes from PE 0 and a barrier, checked. */
static void collective_round(long tag) {
    long *src = shmem_malloc(sizeof(long)), *dst = shmem_malloc(sizeof(long));
    if (!src || !dst) fail("shmem_malloc");
    *src = me == 0 ? tag : -1;
    *dst = -1;
    shmem_barrier_all();
    shmem_broadcastmem(SHMEM_TEAM_WORLD, dst, src, sizeof(long), 0);
    if (*dst != tag) fail("broadcast value");
    shmem_barrier_all();
    shmem_free(dst);
    shmem_free(src);
}

static void *worker_put(void *arg) {
    (void)arg;
    long v = 1000 + me;
    shmem_long_put(word, &v, 1, (me + 1) % npes);
    shmem_quiet();
    return NULL;
}

static void *worker_round(void *arg) {
    collective_round((long)(intptr_t)arg);
    return NULL;
}

static void *worker_intrude(void *arg) {
    (void)arg;
    shmem_barrier_all(); /* refused: ends the job */
    return NULL;
}

static void run_thread(void *(*f)(void *), void *arg) {
    pthread_t t;
    if (pthread_create(&t, NULL, f, arg) != 0) fail("pthread_create");
    pthread_join(t, NULL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "funneled";
    int provided = -1;
    if (strcmp(mode, "intruder") == 0) {
        shmem_init();
        shmem_query_thread(&provided);
        if (provided != SHMEM_THREAD_SINGLE) fail("shmem_init's level");
        run_thread(worker_intrude, NULL);
        fail("the intruding thread's call returned");
    }
    int want = strcmp(mode, "serialized") == 0 ? SHMEM_THREAD_SERIALIZED : SHMEM_THREAD_FUNNELED;
    if (shmem_init_thread(want, &provided) != 0 || provided != want) fail("shmem_init_thread");
    me = shmem_my_pe();
    npes = shmem_n_pes();
    word = shmem_calloc(1, sizeof(long));
    if (!word) fail("shmem_calloc");
    if (want == SHMEM_THREAD_FUNNELED) {
        collective_round(11);
        run_thread(worker_put, NULL); /* a direct put takes no state */
        shmem_barrier_all();
        if (*word != 1000 + (me + npes - 1) % npes) fail("the worker's put");
        collective_round(12);
    } else {
        run_thread(worker_round, (void *)(intptr_t)21);
        collective_round(22);
        run_thread(worker_round, (void *)(intptr_t)23);
    }
    shmem_barrier_all();
    if (me == 0) printf("thread_levels: ok (%s, %d PEs)\n", mode, npes);
    fflush(stdout);
    shmem_finalize();
    return 0;
}
