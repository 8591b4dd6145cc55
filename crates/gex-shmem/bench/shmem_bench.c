/* shmem_bench: one OpenSHMEM C program, built against gex-shmem (its oshcc) and against
 * Open MPI's oshmem (Debian's oshcc), for issue 27 point 4. crates/gex-shmem/bench/run
 * builds and runs it; docs/shmem.md ("Measuring against Open MPI's oshmem").
 *
 * Point-to-point cells run between PE 0 and PE 1 (the other PEs wait in
 * shmem_barrier_all); collective cells run on every PE. Each cell's batch length is
 * calibrated to a time budget, as gex-perf's timing loop (gex-tune's measure.rs) does:
 * a trial batch doubles until it lasts a quarter of BENCH_BATCH_MS (on the slowest PE,
 * for the collectives: every PE runs the same count), and the timed batches are four
 * times that. Then one warm-up batch and BENCH_BATCHES timed batches, each collective
 * batch started by a barrier; PE 0 prints the median batch, one line per cell:
 *
 *     BENCH <name> <size in bytes> <value> <unit>
 *
 * then `BENCH_DONE`, and only then calls shmem_finalize (so a library that fails inside
 * shmem_finalize has printed every figure before). Environment:
 *     BENCH_BATCH_MS time budget of one batch, in ms (default 40, gex-perf's)
 *     BENCH_ITERS    fixed operations per latency batch instead of the budget (collectives
 *                    and bandwidth windows scale down from it: a tenth, a hundredth);
 *                    for quick checks
 *     BENCH_BATCHES  timed batches per cell (default 9)
 *     BENCH_WINDOW   puts per bandwidth window before shmem_quiet (default 16)
 * A fixed count made a batch of 8-byte broadcasts on 2 PEs last 60 us, and at 8 PEs on
 * 2 cores left a batch to the scheduler's timing of the PEs' exits from the barrier
 * before it: docs/performance.md, "Batches sized by time".
 * Built with -DBENCH_CALL_FLOOR (and linked with call_floor.c's shared object), it also
 * times the call floor of the 8-byte put + quiet, get and p + quiet: the same calls
 * into a shared object that does nothing but the copy (floor_*_lat cells; where
 * shmem_ptr maps PE 1's word here).
 * Every cell's effect is checked (the data put, got, incremented, broadcast, reduced);
 * a wrong value prints `BENCH_ERROR ...` and ends the job with shmem_global_exit(1).
 *
 * The collectives are OpenSHMEM 1.5's team forms (shmem_broadcastmem, shmem_long_sum_reduce
 * on SHMEM_TEAM_WORLD). A library whose shmem.h says version < 1.5 (Open MPI 4.1's oshmem
 * is OpenSHMEM 1.4) gets the 1.4 active-set forms over all PEs instead
 * (shmem_broadcast64 of one 8-byte element, shmem_long_sum_to_all), and the INFO line
 * says so. */
#define _POSIX_C_SOURCE 200809L
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if (SHMEM_MAJOR_VERSION * 100 + SHMEM_MINOR_VERSION) >= 105
#define BENCH_TEAMS 1
#else
#define BENCH_TEAMS 0
#endif

#define BW_MAX (1L << 20)
#define RED_MAX (65536L / (long)sizeof(long))

static int me, npes;
static long iters, batches, window, batch_ms;
static long *calib_long; /* npes flags: which PEs found the trial batch long enough */

/* Symmetric objects (heap). */
static char *bw_dst;     /* BW_MAX bytes, target of puts and source of gets */
static long *lat_word;   /* target of the 8-byte put, get, p */
static long *counter;    /* target of fetch_inc */
static long *bc_src, *bc_dst;
static long *red_src, *red_dst;
#if !BENCH_TEAMS
static long *psync[2];   /* alternating pSync arrays of the 1.4 collectives */
static long *pwrk;
static int psync_next;
#endif

static char *local_buf; /* private: source of puts, destination of gets */
static long fetch_incs; /* fetch_inc operations PE 0 issued */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long env_long(const char *name, long dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    long v = strtol(s, NULL, 10);
    return v > 0 ? v : dflt;
}

static void fail(const char *what, long got, long want) {
    printf("BENCH_ERROR pe %d: %s: got %ld, expected %ld\n", me, what, got, want);
    fflush(stdout);
    shmem_global_exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The calls per timed batch of op: `fixed` when BENCH_ITERS is set; otherwise a trial
 * batch doubles until it lasts a quarter of the budget, then four times that. pair: PE 0
 * alone decides (the others wait in the barrier); otherwise every PE times the trial and
 * they agree on the slowest (each PE's verdict put to every PE, then a barrier). */
static long calibrate(void (*op)(long), long fixed, int pair) {
    if (iters > 0) return fixed;
    double quarter = 0.25e-3 * (double)batch_ms;
    for (long k = 1;; k *= 2) {
        long mine = 0, any = 0;
        if (pair && me != 0) return 0; /* only PE 0 runs a pair cell */
        if (!pair) shmem_barrier_all();
        double t0 = now();
        op(k);
        mine = now() - t0 >= quarter || k >= (1L << 30);
        if (pair) {
            if (mine) return 4 * k;
            continue;
        }
        for (int pe = 0; pe < npes; pe++) shmem_long_p(&calib_long[me], mine, pe);
        shmem_barrier_all();
        for (int pe = 0; pe < npes; pe++) any |= calib_long[pe];
        shmem_barrier_all(); /* nobody overwrites a flag before every PE has read them */
        if (any) return 4 * k;
    }
}

/* Calibrates the batch (calibrate: `fixed` calls with BENCH_ITERS), runs one warm-up
 * batch, then `batches` timed ones; returns PE 0's median seconds per call (0 on other
 * PEs) and stores the calls per batch, known to every PE, in *used. pair: only PE 0 runs
 * it (the others wait in the barrier); otherwise every PE runs every batch, each batch
 * started by a barrier. */
static double measure(void (*op)(long), long fixed, int pair, long *used) {
    double t[64], med = 0;
    long b, nb = batches > 64 ? 64 : batches;
    shmem_barrier_all();
    long n = calibrate(op, fixed, pair);
    if (pair) {
        if (me == 0) {
            op(n);
            for (b = 0; b < nb; b++) {
                double t0 = now();
                op(n);
                t[b] = now() - t0;
            }
            for (int pe = 1; pe < npes; pe++) shmem_long_p(&calib_long[0], n, pe);
        }
        shmem_barrier_all();
        if (me != 0) n = calib_long[0];
    } else {
        op(n);
        for (b = 0; b < nb; b++) {
            shmem_barrier_all();
            double t0 = now();
            op(n);
            t[b] = now() - t0;
        }
    }
    shmem_barrier_all();
    if (me == 0) {
        qsort(t, (size_t)nb, sizeof t[0], cmp_double);
        med = nb % 2 ? t[nb / 2] : 0.5 * (t[nb / 2 - 1] + t[nb / 2]);
    }
    *used = n;
    return med / (double)n;
}

static void report(const char *name, long size, double value, const char *unit) {
    if (me == 0) {
        printf("BENCH %s %ld %.4f %s\n", name, size, value, unit);
        fflush(stdout);
    }
}

/* ---- the operations, n times each ---- */

/* The 8-byte put + quiet, get and p + quiet loops over the functions named: the
 * library's, and (BENCH_CALL_FLOOR) the call floor's, written once so that both are
 * the same loop around a different callee. */
#define LAT_OPS(sfx, put, get, p, quiet, word)                                      \
    static void op_put8##sfx(long n) {                                              \
        for (long i = 0; i < n; i++) {                                              \
            memcpy(local_buf, &i, sizeof i);                                        \
            put(word, local_buf, 8, 1);                                             \
            quiet();                                                                \
        }                                                                           \
    }                                                                               \
    static void op_get8##sfx(long n) {                                              \
        for (long i = 0; i < n; i++) get(local_buf, word, 8, 1);                    \
    }                                                                               \
    static void op_p##sfx(long n) {                                                 \
        for (long i = 0; i < n; i++) {                                              \
            p(word, i, 1);                                                          \
            quiet();                                                                \
        }                                                                           \
    }

LAT_OPS(, shmem_putmem, shmem_getmem, shmem_long_p, shmem_quiet, lat_word)

#ifdef BENCH_CALL_FLOOR
/* The call floor (call_floor.c, a shared object of its own): the same three
 * operations with nothing but the call and the copy, into the peer's word at the
 * address shmem_ptr gave (floor_word). */
void call_floor_putmem(void *dest, const void *source, size_t nelems, int pe);
void call_floor_getmem(void *dest, const void *source, size_t nelems, int pe);
void call_floor_long_p(long *dest, long value, int pe);
void call_floor_quiet(void);
static long *floor_word;
LAT_OPS(_floor, call_floor_putmem, call_floor_getmem, call_floor_long_p, call_floor_quiet, floor_word)
#endif

static long bw_size;
static void op_put_bw(long n) {
    for (long i = 0; i < n; i++) {
        for (long w = 0; w < window; w++) shmem_putmem(bw_dst, local_buf, (size_t)bw_size, 1);
        shmem_quiet();
    }
}

static void op_finc(long n) {
    for (long i = 0; i < n; i++) (void)shmem_long_atomic_fetch_inc(counter, 1);
    fetch_incs += n;
}

static void op_barrier(long n) {
    for (long i = 0; i < n; i++) shmem_barrier_all();
}

static void op_bcast8(long n) {
    for (long i = 0; i < n; i++) {
#if BENCH_TEAMS
        shmem_broadcastmem(SHMEM_TEAM_WORLD, bc_dst, bc_src, 8, 0);
#else
        shmem_broadcast64(bc_dst, bc_src, 1, 0, 0, 0, npes, psync[psync_next]);
        psync_next ^= 1;
#endif
    }
}

static long red_n;
static void op_reduce(long n) {
    for (long i = 0; i < n; i++) {
#if BENCH_TEAMS
        shmem_long_sum_reduce(SHMEM_TEAM_WORLD, red_dst, red_src, (size_t)red_n);
#else
        shmem_long_sum_to_all(red_dst, red_src, (int)red_n, 0, 0, npes, pwrk, psync[psync_next]);
        psync_next ^= 1;
#endif
    }
}

/* An 8-byte get cell (`op`: the library's or the call floor's loop): PE 1's word
 * set, timed, reported as `name`, the value checked; local_buf refilled after. */
static void get8_cell(void (*op)(long), const char *name) {
    long n;
    if (me == 1) *lat_word = 0x600d;
    shmem_barrier_all();
    memset(local_buf, 0, 8);
    double t = measure(op, iters, 1, &n);
    report(name, 8, 1e6 * t, "us");
    if (me == 0) {
        long v;
        memcpy(&v, local_buf, sizeof v);
        if (v != 0x600d) fail(name, v, 0x600d);
    }
    for (long i = 0; i < BW_MAX; i++) local_buf[i] = (char)(i * 7 + 1);
}

int main(void) {
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    iters = env_long("BENCH_ITERS", 0);
    batch_ms = env_long("BENCH_BATCH_MS", 40);
    batches = env_long("BENCH_BATCHES", 9);
    window = env_long("BENCH_WINDOW", 16);
    if (npes < 2) {
        if (me == 0) printf("BENCH_ERROR shmem_bench needs at least 2 PEs\n");
        shmem_global_exit(2);
    }
    long coll_iters = iters / 10 > 0 ? iters / 10 : 1;
    long big_iters = iters / 100 > 0 ? iters / 100 : 1;
    long n; /* calls per batch of the last cell */

    bw_dst = shmem_malloc(BW_MAX);
    lat_word = shmem_malloc(sizeof(long));
    counter = shmem_malloc(sizeof(long));
    bc_src = shmem_malloc(sizeof(long));
    bc_dst = shmem_malloc(sizeof(long));
    red_src = shmem_malloc(RED_MAX * sizeof(long));
    red_dst = shmem_malloc(RED_MAX * sizeof(long));
    calib_long = shmem_calloc((size_t)npes, sizeof(long));
#if !BENCH_TEAMS
    long psync_len = SHMEM_REDUCE_SYNC_SIZE > SHMEM_BCAST_SYNC_SIZE ? SHMEM_REDUCE_SYNC_SIZE
                                                                   : SHMEM_BCAST_SYNC_SIZE;
    long wrk_len = RED_MAX / 2 + 1 > SHMEM_REDUCE_MIN_WRKDATA_SIZE ? RED_MAX / 2 + 1
                                                                  : SHMEM_REDUCE_MIN_WRKDATA_SIZE;
    for (int k = 0; k < 2; k++) {
        psync[k] = shmem_malloc((size_t)psync_len * sizeof(long));
        for (long i = 0; i < psync_len; i++) psync[k][i] = SHMEM_SYNC_VALUE;
    }
    pwrk = shmem_malloc((size_t)wrk_len * sizeof(long));
#endif
    local_buf = malloc(BW_MAX);
    if (!bw_dst || !lat_word || !counter || !bc_src || !bc_dst || !red_src || !red_dst ||
        !calib_long || !local_buf)
        fail("allocation", 0, 1);
    memset(bw_dst, 0, BW_MAX);
    for (long i = 0; i < BW_MAX; i++) local_buf[i] = (char)(i * 7 + 1);
    *lat_word = -1;
    *counter = 0;
    *bc_src = me == 0 ? 0x5eed : -1;
    *bc_dst = -1;
    for (long i = 0; i < RED_MAX; i++) red_src[i] = me + 1 + i;
    shmem_barrier_all();

    if (me == 0) {
        char name[SHMEM_MAX_NAME_LEN + 1] = {0};
        int major = 0, minor = 0;
        shmem_info_get_name(name);
        shmem_info_get_version(&major, &minor);
        printf("BENCH_INFO library \"%s\" version %d.%d pes %d batch %s %ld batches %ld window %ld "
               "collectives %s\n",
               name, major, minor, npes, iters > 0 ? "iters" : "ms", iters > 0 ? iters : batch_ms,
               batches, window,
               BENCH_TEAMS ? "team(1.5)" : "active-set(1.4)");
        fflush(stdout);
    }

    double t;
    /* putmem 8 B: put + quiet, one-way. */
    t = measure(op_put8, iters, 1, &n);
    report("putmem_lat", 8, 1e6 * t, "us");
    if (me == 1) {
        long v;
        memcpy(&v, lat_word, sizeof v);
        if (v != n - 1) fail("putmem 8 B: the last value", v, n - 1);
    }

    /* putmem bandwidth: windows of puts, then quiet. */
    long bw_sizes[2] = {65536, BW_MAX};
    for (int k = 0; k < 2; k++) {
        bw_size = bw_sizes[k];
        long fixed = k == 0 ? big_iters : (big_iters / 4 > 0 ? big_iters / 4 : 1);
        memset(bw_dst, 0, BW_MAX);
        for (long i = 0; i < BW_MAX; i++) local_buf[i] = (char)(i * 7 + 1);
        t = measure(op_put_bw, fixed, 1, &n);
        report("putmem_bw", bw_size, (double)bw_size * (double)window / t / 1e6, "MB/s");
        if (me == 1) {
            for (long i = 0; i < bw_size; i += 4093)
                if (bw_dst[i] != (char)(i * 7 + 1)) fail("putmem bandwidth: a byte", bw_dst[i], (char)(i * 7 + 1));
        }
        shmem_barrier_all();
    }

    /* getmem 8 B. */
    get8_cell(op_get8, "getmem_lat");

    /* shmem_p (long) + quiet. */
    t = measure(op_p, iters, 1, &n);
    report("p_lat", 8, 1e6 * t, "us");
    if (me == 1 && *lat_word != n - 1) fail("shmem_p: the last value", *lat_word, n - 1);

#ifdef BENCH_CALL_FLOOR
    /* The call floor of the three cells above, where PE 1's word is mapped here (PE 0
     * decides, every PE follows: measure is collective). */
    if (me == 0) {
        floor_word = npes > 1 ? shmem_ptr(lat_word, 1) : NULL;
        for (int pe = 1; pe < npes; pe++) shmem_long_p(&calib_long[0], floor_word != NULL, pe);
    }
    shmem_barrier_all();
    if (me != 0 ? calib_long[0] : floor_word != NULL) {
        t = measure(op_put8_floor, iters, 1, &n);
        report("floor_putmem_lat", 8, 1e6 * t, "us");
        shmem_barrier_all();
        if (me == 1 && *lat_word != n - 1) fail("call floor put: the last value", *lat_word, n - 1);
        get8_cell(op_get8_floor, "floor_getmem_lat");
        t = measure(op_p_floor, iters, 1, &n);
        report("floor_p_lat", 8, 1e6 * t, "us");
        if (me == 1 && *lat_word != n - 1) fail("call floor p: the last value", *lat_word, n - 1);
    }
    shmem_barrier_all();
#endif

    /* atomic_fetch_inc to PE 1. */
    t = measure(op_finc, iters, 1, &n);
    report("atomic_fetch_inc_lat", 8, 1e6 * t, "us");
    shmem_barrier_all();
    if (me == 0) {
        long v = shmem_long_atomic_fetch(counter, 1);
        if (v != fetch_incs) fail("atomic_fetch_inc: the counter", v, fetch_incs);
    }

    /* barrier_all, every PE. */
    t = measure(op_barrier, coll_iters, 0, &n);
    report("barrier_all_lat", 0, 1e6 * t, "us");

    /* broadcast 8 B from PE 0, every PE. */
    t = measure(op_bcast8, coll_iters, 0, &n);
    report("broadcastmem_lat", 8, 1e6 * t, "us");
    shmem_barrier_all();
    if (me != 0 && *bc_dst != 0x5eed) fail("broadcast 8 B: the value", *bc_dst, 0x5eed);

    /* sum_reduce (long), 8 B and 64 KiB, every PE. */
    long red_sizes[2] = {1, RED_MAX};
    for (int k = 0; k < 2; k++) {
        red_n = red_sizes[k];
        long fixed = k == 0 ? coll_iters : big_iters;
        for (long i = 0; i < RED_MAX; i++) red_dst[i] = -1;
        t = measure(op_reduce, fixed, 0, &n);
        report("sum_reduce_lat", red_n * (long)sizeof(long), 1e6 * t, "us");
        shmem_barrier_all();
        long base = (long)npes * (npes + 1) / 2;
        for (long i = 0; i < red_n; i += (red_n > 1 ? 1021 : 1))
            if (red_dst[i] != base + (long)npes * i) fail("sum_reduce: an element", red_dst[i], base + (long)npes * i);
    }

    shmem_barrier_all();
    if (me == 0) {
        printf("BENCH_DONE\n");
        fflush(stdout);
    }
    free(local_buf);
#if !BENCH_TEAMS
    shmem_free(pwrk);
    shmem_free(psync[1]);
    shmem_free(psync[0]);
#endif
    shmem_free(calib_long);
    shmem_free(red_dst);
    shmem_free(red_src);
    shmem_free(bc_dst);
    shmem_free(bc_src);
    shmem_free(counter);
    shmem_free(lat_word);
    shmem_free(bw_dst);
    shmem_finalize();
    return 0;
}
