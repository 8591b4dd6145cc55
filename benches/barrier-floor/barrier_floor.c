// The floor under a process-based barrier when ranks outnumber cores.
//
//   gcc -O2 -Wall -o barrier_floor barrier_floor.c
//   ./barrier_floor [procs=8] [seconds=2]
//
// Forks `procs` processes pinned round-robin to the allowed cores (as gex-perf pins its
// ranks) and prints two figures, medians of 5 timed rounds:
//   yield_switch_us  every process only calls sched_yield in a loop: the cost of one
//                    switch between processes of one core (switches per core / time);
//   barrier_us       a sense-reversing counter barrier in shared memory (one atomic
//                    add per arrival, the last arrival flips the sense), waiters call
//                    sched_yield after every failed check: the least a barrier costs
//                    when each rank of a core must run once per barrier.
// Nothing else: no library, no AMs, no futex. gex's barrier (gex-perf barrier) is
// compared with barrier_us measured in the same session (docs/performance.md).
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
  _Alignas(64) atomic_long count;
  _Alignas(64) atomic_int sense;
  _Alignas(64) atomic_long switches;
  _Alignas(64) atomic_int go;
  _Alignas(64) atomic_int stop;
  _Alignas(64) atomic_int decision;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void barrier(struct shared *s, int n, int *local_sense) {
  *local_sense = !*local_sense;
  if (atomic_fetch_add(&s->count, 1) == n - 1) {
    atomic_store(&s->count, 0);
    atomic_store(&s->sense, *local_sense);
  } else {
    while (atomic_load(&s->sense) != *local_sense) sched_yield();
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  double secs = argc > 2 ? atof(argv[2]) : 2.0;
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  int cores[CPU_SETSIZE], ncores = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed)) cores[ncores++] = c;
  struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) return 1;
  double yield_us[5], bar_us[5];
  for (int round = 0; round < 5; round++) {
    // Part 1: yield loop. Part 2: barrier loop. Rank 0 times both.
    for (int part = 0; part < 2; part++) {
      atomic_store(&s->count, 0);
      atomic_store(&s->sense, 0);
      atomic_store(&s->switches, 0);
      atomic_store(&s->go, 0);
      atomic_store(&s->stop, 0);
      atomic_store(&s->decision, 0);
      for (int r = 0; r < n; r++) {
        if (fork() == 0) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(cores[r % ncores], &one);
          sched_setaffinity(0, sizeof one, &one);
          int ls = 0;
          long k = 0;
          atomic_fetch_add(&s->go, 1);
          while (atomic_load(&s->go) < n) sched_yield();
          if (part == 0) {
            while (!atomic_load(&s->stop)) { sched_yield(); k++; }
            atomic_fetch_add(&s->switches, k);
          } else {
            // Every rank runs the same number of barriers: rank 0 copies the stop flag
            // into `decision` before a barrier, all read it after that barrier, and the
            // next barrier keeps rank 0 from changing it before everyone has read it.
            for (;;) {
              if (r == 0) atomic_store(&s->decision, atomic_load(&s->stop));
              barrier(s, n, &ls);
              int st = atomic_load(&s->decision);
              barrier(s, n, &ls);
              k += 2;
              if (st) break;
            }
            atomic_fetch_add(&s->switches, k);  // barriers done (same on every rank)
          }
          _exit(0);
        }
      }
      while (atomic_load(&s->go) < n) usleep(1000);
      double t0 = now();
      usleep((useconds_t)(secs * 1e6));
      atomic_store(&s->stop, 1);
      double t = now() - t0;
      for (int r = 0; r < n; r++) wait(NULL);
      long total = atomic_load(&s->switches);
      if (part == 0) {
        // total yields over all processes; per core: total / ncores switches in t.
        yield_us[round] = t / ((double)total / ncores) * 1e6;
      } else {
        bar_us[round] = t / ((double)total / n) * 1e6;
      }
    }
  }
  qsort(yield_us, 5, sizeof(double), cmp);
  qsort(bar_us, 5, sizeof(double), cmp);
  printf("FLOOR procs %d cores %d yield_switch_us %.3f barrier_us %.3f\n", n, ncores, yield_us[2], bar_us[2]);
  return 0;
}
