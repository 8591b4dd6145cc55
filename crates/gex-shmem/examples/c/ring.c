/*
 * A first OpenSHMEM program on gex-shmem: every PE puts its number to the next PE,
 * adds one to a counter on PE 0, and the PEs agree on a sum and a broadcast value.
 * It checks every result itself and exits non-zero on a wrong one.
 *
 *   oshcc ring.c -o ring                  # or: cc ring.c $(pkg-config --cflags --libs gexshmem)
 *   oshrun -n 4 ./ring                    # or mpiexec, mpirun, srun (docs/shmem.md)
 *
 * Prints "PE i of n: put, atomic, reduce and broadcast ok" on every PE.
 */
#include <shmem.h>
#include <stdio.h>

static int check(int me, const char *what, long got, long want) {
    if (got == want) return 0;
    fprintf(stderr, "PE %d: %s is %ld, expected %ld\n", me, what, got, want);
    return 1;
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), n = shmem_n_pes();
    long *from_left = shmem_malloc(sizeof(long));
    long *counter = shmem_calloc(1, sizeof(long));
    long *mine = shmem_malloc(sizeof(long));
    long *sum = shmem_malloc(sizeof(long));
    long *word = shmem_malloc(sizeof(long));
    long *got = shmem_malloc(sizeof(long));
    if (!from_left || !counter || !mine || !sum || !word || !got) {
        fprintf(stderr, "PE %d: shmem_malloc failed\n", me);
        shmem_global_exit(1);
    }
    *from_left = -1;
    *mine = me;
    *word = me == 0 ? 0x5eed : -1;
    *got = -1;
    shmem_barrier_all(); /* every PE's buffers are ready before anyone writes them */

    shmem_long_p(from_left, me, (me + 1) % n);
    shmem_long_atomic_inc(counter, 0);
    shmem_barrier_all(); /* completes the puts and the atomics */

    int bad = check(me, "the left neighbour's number", *from_left, (me + n - 1) % n);
    if (me == 0) bad |= check(me, "the counter", shmem_long_atomic_fetch(counter, 0), n);
    shmem_long_sum_reduce(SHMEM_TEAM_WORLD, sum, mine, 1);
    bad |= check(me, "the sum of the PE numbers", *sum, (long)n * (n - 1) / 2);
    shmem_broadcastmem(SHMEM_TEAM_WORLD, got, word, sizeof(long), 0);
    bad |= check(me, "the broadcast word", *got, 0x5eed);

    shmem_free(got);
    shmem_free(word);
    shmem_free(sum);
    shmem_free(mine);
    shmem_free(counter);
    shmem_free(from_left);
    if (!bad) printf("PE %d of %d: put, atomic, reduce and broadcast ok\n", me, n);
    shmem_finalize();
    return bad;
}
