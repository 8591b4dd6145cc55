// The MPI side of gex-perf's msg_anysource_rate (issue 25, point 4): every rank but 0
// sends 8-byte messages to rank 0 with MPI_Send, rank 0 receives them with
// MPI_Recv(MPI_ANY_SOURCE, tag). As gex-perf does, rank 0 tells the senders how many
// to send with one command message per sender and batch; a batch lasts about 50 ms
// (sized by a warm-up), the value is the median of 7 batches (messages / s on rank
// 0's clock), min and max the extreme batches.
//
//   mpicc.mpich -O2 -o anysource anysource.c && mpirun.mpich -n 8 ./anysource
//   mpicc.openmpi -O2 -o anysource anysource.c &&
//     mpirun.openmpi --allow-run-as-root --oversubscribe -n 8 ./anysource
// Compare with `gex-perf -n 8 msg --sizes 8` (msg_anysource_rate) in the same session.
// Output:  RESULT anysource_rate 8 <msg/s> msg/s min <min> max <max> nprocs <n>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define TAG_CMD 7
#define TAG_DATA 1
#define BATCHES 7

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// One batch: k messages from every sender; returns seconds on rank 0 (0 elsewhere),
// or -1 for the stop command.
static double batch(int me, int n, long k) {
  char buf[8] = {0};
  if (me == 0) {
    double t0 = MPI_Wtime();
    for (int r = 1; r < n; r++) MPI_Send(&k, 1, MPI_LONG, r, TAG_CMD, MPI_COMM_WORLD);
    for (long i = 0; i < k * (n - 1); i++) {
      MPI_Status st;
      MPI_Recv(buf, 8, MPI_BYTE, MPI_ANY_SOURCE, TAG_DATA, MPI_COMM_WORLD, &st);
      int len;
      MPI_Get_count(&st, MPI_BYTE, &len);
      if (len != 8) { fprintf(stderr, "anysource: %d bytes from %d\n", len, st.MPI_SOURCE); MPI_Abort(MPI_COMM_WORLD, 1); }
    }
    return MPI_Wtime() - t0;
  }
  long got;
  MPI_Recv(&got, 1, MPI_LONG, 0, TAG_CMD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (got < 0) return -1;
  for (long i = 0; i < got; i++) MPI_Send(buf, 8, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 3) {
    if (me == 0) fprintf(stderr, "anysource needs at least 3 ranks\n");
    MPI_Finalize();
    return 1;
  }
  if (me != 0) {
    while (batch(me, n, 0) >= 0) {}
  } else {
    // Warm-up, which sizes the batches to about 50 ms.
    long k = 1000;
    double t = batch(0, n, k);
    t = batch(0, n, k);
    k = (long)(k * 0.05 / (t > 1e-6 ? t : 1e-6));
    if (k < 10) k = 10;
    double v[BATCHES];
    for (int b = 0; b < BATCHES; b++) v[b] = (double)(k * (n - 1)) / batch(0, n, k);
    long stop = -1;
    for (int r = 1; r < n; r++) MPI_Send(&stop, 1, MPI_LONG, r, TAG_CMD, MPI_COMM_WORLD);
    qsort(v, BATCHES, sizeof v[0], cmp);
    printf("RESULT anysource_rate 8 %.0f msg/s min %.0f max %.0f nprocs %d\n", v[BATCHES / 2], v[0],
           v[BATCHES - 1], n);
  }
  MPI_Finalize();
  return 0;
}
