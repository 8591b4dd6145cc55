// The MPI side of gex-perf's msg_bi_lat and msg_bibw (seed 002's OSU-style
// bidirectional benchmark, issue 25 point 4), between ranks 0 and 1:
// - bi_lat: both ranks post one MPI_Irecv and one MPI_Isend of `size` bytes to each
//   other and MPI_Waitall both; microseconds per exchange;
// - bibw: the same with a window of 64 receives and 64 sends (distinct buffers per
//   slot), MB/s = 1e6 B/s counting both directions.
// As gex-perf does: a warm-up sizes batches of about 50 ms; the value is the median of
// 7 batches, min and max the extreme batches.
//
//   mpicc.mpich -O2 -o bibw bibw.c && mpirun.mpich -n 2 ./bibw
//   mpicc.openmpi -O2 -o bibw bibw.c &&
//     mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 ./bibw
// Compare with `gex-perf -n 2 msg --sizes 16K,64K,1M` in the same session.
// Output:  RESULT bi_lat <size> <us> us min <min> max <max>
//          RESULT bibw <size> <MB/s> MB/s min <min> max <max>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define BATCHES 7

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// k rounds of `win` simultaneous exchanges of `size` bytes with `peer`; seconds.
static double rounds(int peer, char *sb, char *rb, size_t size, int win, long k) {
  MPI_Request rq[2 * WINDOW];
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  for (long i = 0; i < k; i++) {
    for (int j = 0; j < win; j++)
      MPI_Irecv(rb + (size_t)j * size, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq[j]);
    for (int j = 0; j < win; j++)
      MPI_Isend(sb + (size_t)j * size, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                &rq[win + j]);
    MPI_Waitall(2 * win, rq, MPI_STATUSES_IGNORE);
  }
  return MPI_Wtime() - t;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (me == 0) fprintf(stderr, "bibw: run with 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t sizes[] = {16384, 65536, 1 << 20};
  for (int s = 0; s < 3; s++) {
    size_t size = sizes[s];
    char *sb = malloc(size * WINDOW), *rb = malloc(size * WINDOW);
    memset(sb, 1, size * WINDOW);
    memset(rb, 0, size * WINDOW);
    for (int w = 0; w < 2; w++) {
      int win = w ? WINDOW : 1;
      // Warm-up, then k so that a batch lasts about 50 ms (rank 0 decides).
      double t = rounds(1 - me, sb, rb, size, win, 10);
      long k = (long)(0.05 / (t / 10 > 1e-9 ? t / 10 : 1e-9));
      if (k < 1) k = 1;
      MPI_Bcast(&k, 1, MPI_LONG, 0, MPI_COMM_WORLD);
      double v[BATCHES];
      for (int b = 0; b < BATCHES; b++) {
        double secs = rounds(1 - me, sb, rb, size, win, k);
        v[b] = w ? 2.0 * (double)size * win * k / secs / 1e6 : secs / k * 1e6;
      }
      qsort(v, BATCHES, sizeof v[0], cmp);
      if (me == 0)
        printf("RESULT %s %zu %.3f %s min %.3f max %.3f\n", w ? "bibw" : "bi_lat", size,
               v[BATCHES / 2], w ? "MB/s" : "us", v[0], v[BATCHES - 1]);
    }
    free(sb);
    free(rb);
  }
  MPI_Finalize();
  return 0;
}
