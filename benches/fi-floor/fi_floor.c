// fi-floor: the raw libfabric floor for gex-perf over the ofi conduit (issue 5, point 9;
// fabtests is not packaged in Debian 12). Two processes on this host (the parent and a
// forked child) open the same kind of objects the ofi conduit opens -- an FI_EP_RDM
// endpoint with FI_MSG, its own domain, CQ (FI_CQ_FORMAT_DATA, no wait object) and AV --
// exchange addresses over a socketpair, and measure with gex-perf's method: a warm-up
// that sizes batches of about 50 ms, then 7 timed batches; value = median batch,
// min/max = extreme batches. Output: gex-perf's JSON line format, with
// "conduit":"raw-ofi" and the provider.
//
//   fi-floor [--provider P] [--domain D] [--size S] [--pin|--no-pin] [--multi-recv]
//            [--iters K] [--batches B] [--json] [--timeout SECONDS]
//            [--delivery-complete] [--window W]
//            [--test pingpong|send_bw|write_bw|write_lat]...
//
// Tests (default: pingpong only):
//   pingpong  round trip of one S-byte message each way (fi_inject when S <= inject_size,
//             else fi_send); µs per round trip. S defaults to 16, the wire size of a
//             gex AM Short with no arguments (the conduit's header).
//   send_bw   S-byte messages back to back (window 64), one acknowledgement; GB/s.
//   write_lat fi_writemsg(FI_COMPLETION | FI_DELIVERY_COMPLETE) of S bytes, waiting for
//             its completion before the next: the raw form of gex's blocking put (the
//             data is at the target when it completes); µs per write.
//   write_bw  fi_write of S bytes (window 64, at most 8 MiB in flight) into the peer's
//             registered buffer, then a message; GB/s. Needs FI_RMA. --window W sets the
//             most writes in flight (no byte cap); --delivery-complete posts every write
//             with fi_writemsg(FI_COMPLETION | FI_DELIVERY_COMPLETE), as gex's native put
//             does (the default completes at transmit).
// The receiver re-posts single buffers (fabtests' way) or, with --multi-recv, uses
// FI_MULTI_RECV buffers as the conduit does by default. Pinning: like gex-perf, rank i
// runs on the i-th allowed core unless --no-pin.
//
// Build: benches/fi-floor/build.sh (gcc -O2 ... $(pkg-config --cflags --libs libfabric)).
#define _GNU_SOURCE
#include <getopt.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHK(x)                                                                                   \
  do {                                                                                           \
    ssize_t _r = (ssize_t)(x);                                                                   \
    if (_r < 0) {                                                                                \
      fprintf(stderr, "fi-floor rank %d: %s -> %zd (%s)\n", rank, #x, _r, fi_strerror((int)-_r)); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

enum { T_PINGPONG, T_SEND_BW, T_WRITE_BW, T_WRITE_LAT, T_COUNT };
static const char *test_names[T_COUNT] = {"pingpong", "send_bw", "write_bw", "write_lat"};
static const char *result_names[T_COUNT] = {"fi_pingpong_rtt", "fi_send_bw", "fi_write_bw",
                                            "fi_write_lat"};

// Message types (first byte of every message).
enum { M_PING = 1, M_DATA = 2, M_END = 3, M_ACK = 4, M_EXIT = 5 };

#define WINDOW 64
#define NRECV 64
#define MULTI_BUFS 4
#define MULTI_LEN (256 << 10)

static int rank, sock;
static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_mr *mr_tx, *mr_rx, *mr_rma;
static void *desc_tx, *desc_rx, *desc_rma;
static fi_addr_t peer;
static size_t msg_max, rx_stride;
static int nrx, multi;
static char *txbuf, *rxbuf, *rmabuf;
static struct fi_context2 rxctx[NRECV], txctx[WINDOW];
static uint64_t rkey, raddr;
static size_t rma_len;

// State the completion handler updates.
static long tx_done;         // send and write completions
static long arrived[8];      // messages by type
static int tx_next;
static long tx_posted;       // sends (not injects) and writes posted

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void xfer(void *p, size_t n, int send) {
  size_t d = 0;
  while (d < n) {
    ssize_t r = send ? write(sock, (char *)p + d, n - d) : read(sock, (char *)p + d, n - d);
    if (r <= 0) {
      fprintf(stderr, "fi-floor rank %d: socketpair: peer gone\n", rank);
      exit(1);
    }
    d += r;
  }
}

// Buffers waiting to be re-posted (the provider had no room: -FI_EAGAIN or, shm, -FI_ENOMEM).
static int repost[NRECV], nrepost;

static int try_post_rx(int i) {
  struct iovec iov = {.iov_base = rxbuf + (size_t)i * rx_stride, .iov_len = rx_stride};
  struct fi_msg m = {.msg_iov = &iov, .desc = &desc_rx, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                     .context = &rxctx[i]};
  ssize_t r = fi_recvmsg(ep, &m, multi ? FI_MULTI_RECV : 0);
  if (r == -FI_EAGAIN || r == -FI_ENOMEM) return 0;
  CHK(r);
  return 1;
}

static void post_rx(int i) {
  if (!try_post_rx(i)) repost[nrepost++] = i;
}

// Reads completions; returns how many messages arrived.
static int progress(void) {
  struct fi_cq_data_entry e[16];
  while (nrepost > 0 && try_post_rx(repost[nrepost - 1])) nrepost--;
  ssize_t n = fi_cq_read(cq, e, 16);
  if (n == -FI_EAGAIN) return 0;
  if (n < 0) {
    struct fi_cq_err_entry err = {0};
    fi_cq_readerr(cq, &err, 0);
    fprintf(stderr, "fi-floor rank %d: completion error: %s\n", rank,
            fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0));
    exit(1);
  }
  int got = 0;
  for (ssize_t k = 0; k < n; k++) {
    struct fi_context2 *c = e[k].op_context;
    if (c >= rxctx && c < rxctx + NRECV) {
      int i = (int)(c - rxctx);
      if ((e[k].flags & FI_RECV) && e[k].len > 0) {
        const char *m = multi ? (const char *)e[k].buf : rxbuf + (size_t)i * rx_stride;
        arrived[(unsigned char)m[0] & 7]++;
        got++;
      }
      if (!multi || (e[k].flags & FI_MULTI_RECV)) post_rx(i);
    } else {
      tx_done++;
    }
  }
  return got;
}

// Sends one message of `len` bytes of type `type` (fi_inject when it fits).
static void send_msg(int type, size_t len) {
  ssize_t r;
  if (len <= info->tx_attr->inject_size) {
    txbuf[0] = (char)type;
    while ((r = fi_inject(ep, txbuf, len, peer)) == -FI_EAGAIN) progress();
    CHK(r);
    return;
  }
  // At most WINDOW sends in flight: their buffers are reused round robin.
  while (tx_posted - tx_done >= WINDOW) progress();
  tx_posted++;
  int s = tx_next++ % WINDOW;
  char *b = txbuf + (size_t)s * msg_max;
  b[0] = (char)type;
  while ((r = fi_send(ep, b, len, desc_tx, peer, &txctx[s])) == -FI_EAGAIN) progress();
  CHK(r);
}

static void wait_type(int type, long want) {
  while (arrived[type] < want) progress();
}

// ---- the leader's tests; each runs k iterations ----
static size_t g_size;

static void run_pingpong(long k) {
  for (long i = 0; i < k; i++) {
    long want = arrived[M_PING] + 1;
    send_msg(M_PING, g_size);
    wait_type(M_PING, want);
  }
}

static void run_send_bw(long k) {
  for (long i = 0; i < k; i++) send_msg(M_DATA, g_size);
  while (tx_posted - tx_done > 0) progress();
  long want = arrived[M_ACK] + 1;
  send_msg(M_END, 16);
  wait_type(M_ACK, want);
}

static long g_window;      // --window (0: the default rule)
static int g_delivery;     // --delivery-complete
static struct fi_context2 *wctx; // one per write in flight (g_window may exceed WINDOW)

static ssize_t post_write(long i) {
  void *ctx = &wctx[i % g_window];
  if (!g_delivery) return fi_write(ep, rmabuf, g_size, desc_rma, peer, raddr, rkey, ctx);
  struct iovec iov = {.iov_base = rmabuf, .iov_len = g_size};
  struct fi_rma_iov rma = {.addr = raddr, .len = g_size, .key = rkey};
  void *d = desc_rma;
  struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &d, .iov_count = 1, .addr = peer,
                           .rma_iov = &rma, .rma_iov_count = 1, .context = ctx, .data = 0};
  return fi_writemsg(ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
}

static void run_write_lat(long k) {
  int dc = g_delivery;
  g_delivery = 1;
  for (long i = 0; i < k; i++) {
    ssize_t r;
    while ((r = post_write(i)) == -FI_EAGAIN) progress();
    CHK(r);
    tx_posted++;
    while (tx_posted - tx_done > 0) progress();
  }
  g_delivery = dc;
}

static void run_write_bw(long k) {
  long window = g_window;
  for (long i = 0; i < k; i++) {
    ssize_t r;
    while (tx_posted - tx_done >= window) progress();
    while ((r = post_write(i)) == -FI_EAGAIN)
      progress();
    CHK(r);
    tx_posted++;
  }
  while (tx_posted - tx_done > 0) progress();
  long want = arrived[M_ACK] + 1;
  send_msg(M_END, 16);
  wait_type(M_ACK, want);
}

static void follower(void) {
  long seen_ping = 0, seen_end = 0;
  for (;;) {
    progress();
    while (seen_ping < arrived[M_PING]) {
      seen_ping++;
      send_msg(M_PING, g_size);
    }
    while (seen_end < arrived[M_END]) {
      seen_end++;
      send_msg(M_ACK, 16);
    }
    if (arrived[M_EXIT]) return;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// gex-perf's method: warm-up (doubling k until 40 ms are spent) sizes batches of ~50 ms.
static void measure(int t, long fixed_iters, int batches, int json, const char *prov) {
  void (*op)(long) = t == T_PINGPONG  ? run_pingpong
                     : t == T_SEND_BW ? run_send_bw
                     : t == T_WRITE_LAT ? run_write_lat
                                        : run_write_bw;
  long iters;
  if (fixed_iters > 0) {
    op(fixed_iters / 10 > 0 ? fixed_iters / 10 : 1);
    iters = (fixed_iters + batches - 1) / batches;
  } else {
    long k = 1;
    double spent = 0, per = 0;
    for (;;) {
      double t0 = now();
      op(k);
      double e = now() - t0;
      spent += e;
      if (spent >= 0.040 || k >= (1L << 30)) {
        per = e / k;
        break;
      }
      k *= 2;
    }
    iters = (long)(0.050 / (per > 1e-9 ? per : 1e-9));
    if (iters < 1) iters = 1;
  }
  double v[1000];
  for (int b = 0; b < batches; b++) {
    double t0 = now();
    op(iters);
    double per = (now() - t0) / iters;
    v[b] = t == T_PINGPONG || t == T_WRITE_LAT ? per * 1e6 : (double)g_size / per / 1e9;
  }
  double lo = v[0], hi = v[0];
  for (int b = 0; b < batches; b++) {
    if (v[b] < lo) lo = v[b];
    if (v[b] > hi) hi = v[b];
  }
  qsort(v, batches, sizeof v[0], cmp_double);
  double med = batches % 2 ? v[batches / 2] : (v[batches / 2 - 1] + v[batches / 2]) / 2;
  const char *unit = t == T_PINGPONG || t == T_WRITE_LAT ? "us" : "GB/s";
  if (json)
    printf("{\"name\":\"%s\",\"size\":%zu,\"ranks\":2,\"conduit\":\"raw-ofi\",\"provider\":\"%s\","
           "\"value\":%.6f,\"unit\":\"%s\",\"min\":%.6f,\"max\":%.6f}\n",
           result_names[t], g_size, prov, med, unit, lo, hi);
  else
    printf("%-20s %9zu %12.3f %-5s %12.3f %12.3f\n", result_names[t], g_size, med, unit, lo, hi);
  fflush(stdout);
}

// shm (libfabric 1.17) backs an endpoint named "fi_shm://<pid>:<uid>:<n>" with the POSIX
// shm object "/<pid>:<uid>:<n>", which the peer has opened by now: unlink it, so a killed
// run leaves nothing in /dev/shm (the ofi conduit does the same).
static void unlink_shm(const char *name) {
  if (strncmp(name, "fi_shm://", 9) || strchr(name + 9, '/')) return;
  char path[300];
  snprintf(path, sizeof path, "/%s", name + 9);
  shm_unlink(path);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "fi-floor: still running after the time limit (--timeout); giving up\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(3);
}

static int pin_nth(int n) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set)) return -1;
  int cpus[CPU_SETSIZE], c = 0;
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set)) cpus[c++] = i;
  if (!c) return -1;
  int cpu = cpus[n % c];
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) ? -1 : cpu;
}

static void usage(void) {
  fprintf(stderr,
          "usage: fi-floor [--provider P] [--domain D] [--size S] [--pin|--no-pin] [--multi-recv]\n"
          "                [--iters K] [--batches B] [--json] [--timeout SECONDS (120)]\n"
          "                [--delivery-complete] [--window W]\n"
          "                [--test pingpong|send_bw|write_bw|write_lat]...\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *prov = "tcp", *domain = NULL;
  int pin = 1, json = 0, batches = 7, tests[T_COUNT] = {0}, ntests = 0;
  long fixed_iters = 0;
  g_size = 16;
  static struct option opts[] = {
      {"provider", 1, 0, 'p'}, {"domain", 1, 0, 'd'}, {"size", 1, 0, 's'},  {"pin", 0, 0, 'P'},
      {"no-pin", 0, 0, 'N'},   {"multi-recv", 0, 0, 'm'}, {"iters", 1, 0, 'i'}, {"batches", 1, 0, 'b'},
      {"json", 0, 0, 'j'},     {"test", 1, 0, 't'},    {"timeout", 1, 0, 'T'}, {"help", 0, 0, 'h'},
      {"delivery-complete", 0, 0, 'D'}, {"window", 1, 0, 'W'},
      {0, 0, 0, 0}};
  int limit = 120;
  int o;
  while ((o = getopt_long(argc, argv, "p:d:s:i:b:t:jmh", opts, NULL)) != -1) {
    switch (o) {
    case 'p': prov = optarg; break;
    case 'd': domain = optarg; break;
    case 's': g_size = strtoull(optarg, NULL, 0); break;
    case 'P': pin = 1; break;
    case 'N': pin = 0; break;
    case 'm': multi = 1; break;
    case 'i': fixed_iters = atol(optarg); break;
    case 'b': batches = atoi(optarg); break;
    case 'j': json = 1; break;
    case 'T': limit = atoi(optarg); break;
    case 'D': g_delivery = 1; break;
    case 'W': g_window = atol(optarg); break;
    case 't': {
      int k;
      for (k = 0; k < T_COUNT && strcmp(optarg, test_names[k]); k++) {}
      if (k == T_COUNT) usage();
      tests[k] = 1;
      ntests++;
      break;
    }
    default: usage();
    }
  }
  if (!ntests) tests[T_PINGPONG] = 1;
  if (batches < 1 || batches > 1000 || g_size < 8 || g_size > (64u << 20) || g_window < 0 ||
      g_window > 4096)
    usage();
  if (!g_window) {
    g_window = WINDOW;
    while (g_window > 1 && (size_t)g_window * g_size > (8u << 20)) g_window /= 2;
  }
  wctx = calloc((size_t)g_window, sizeof *wctx);

  // Never hang: each process gives up after `limit` seconds (the child also dies with
  // its parent).
  signal(SIGALRM, on_alarm);
  if (limit > 0) alarm(limit);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); return 1; }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) { perror("fork"); return 1; }
  rank = pid == 0 ? 1 : 0;
  if (rank == 1) prctl(PR_SET_PDEATHSIG, SIGKILL);
  sock = sv[rank];
  close(sv[1 - rank]);
  int cpu = pin ? pin_nth(rank) : -1;

  struct fi_info *hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | (multi ? FI_MULTI_RECV : 0) |
                (tests[T_WRITE_BW] || tests[T_WRITE_LAT] ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(prov);
  struct fi_info *list;
  CHK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &list));
  // The conduit's choice on one host: the named domain, else "lo" if offered, else the first.
  info = NULL;
  for (struct fi_info *i = list; i; i = i->next)
    if (domain ? !strcmp(i->domain_attr->name, domain) || !strcmp(i->fabric_attr->name, domain)
               : !strcmp(i->domain_attr->name, "lo")) { info = i; break; }
  if (!info) {
    if (domain) { fprintf(stderr, "fi-floor: no domain %s\n", domain); return 1; }
    info = list;
  }
  const char *pname = info->fabric_attr->prov_name;
  if (rank == 0 && !json) {
    printf("# fi-floor: provider %s, domain %s, inject_size %zu, mr_mode 0x%x, receive %s, pinning %s\n",
           pname, info->domain_attr->name, info->tx_attr->inject_size, info->domain_attr->mr_mode,
           multi ? "FI_MULTI_RECV" : "re-posted buffers", cpu >= 0 ? "on" : "off");
    printf("%-20s %9s %12s %-5s %12s %12s\n", "name", "size", "value", "unit", "min", "max");
  }
  CHK(fi_fabric(info->fabric_attr, &fab, NULL));
  CHK(fi_domain(fab, info, &dom, NULL));
  struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_DATA, .size = 4096, .wait_obj = FI_WAIT_NONE};
  CHK(fi_cq_open(dom, &cqa, &cq, NULL));
  struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 2};
  CHK(fi_av_open(dom, &ava, &av, NULL));
  CHK(fi_endpoint(dom, info, &ep, NULL));
  CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
  CHK(fi_ep_bind(ep, &av->fid, 0));
  CHK(fi_enable(ep));

  msg_max = (g_size + 63) & ~(size_t)63;
  if (multi) {
    nrx = MULTI_BUFS;
    rx_stride = MULTI_LEN > 16 * msg_max ? MULTI_LEN : 16 * msg_max;
    CHK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &msg_max, sizeof msg_max));
  } else {
    nrx = NRECV;
    rx_stride = msg_max;
  }
  txbuf = aligned_alloc(4096, WINDOW * msg_max);
  rxbuf = aligned_alloc(4096, nrx * rx_stride);
  memset(txbuf, 0xa5, WINDOW * msg_max);
  int ep_mr = info->domain_attr->mr_mode & FI_MR_ENDPOINT;
#define REG(buf, len, acc, key, mr, desc)                                \
  do {                                                                   \
    CHK(fi_mr_reg(dom, buf, len, acc, 0, key, 0, &mr, NULL));            \
    if (ep_mr) { CHK(fi_mr_bind(mr, &ep->fid, 0)); CHK(fi_mr_enable(mr)); } \
    desc = fi_mr_desc(mr);                                               \
  } while (0)
  if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
    REG(txbuf, WINDOW * msg_max, FI_SEND, 1, mr_tx, desc_tx);
    REG(rxbuf, nrx * rx_stride, FI_RECV, 2, mr_rx, desc_rx);
  }
  if (tests[T_WRITE_BW] || tests[T_WRITE_LAT]) {
    rma_len = g_size;
    rmabuf = aligned_alloc(4096, (rma_len + 4095) & ~(size_t)4095);
    memset(rmabuf, rank + 1, rma_len);
    REG(rmabuf, rma_len, FI_WRITE | FI_REMOTE_WRITE, 3, mr_rma, desc_rma);
  }
  for (int i = 0; i < nrx; i++) post_rx(i);

  char name[256], pn[256];
  size_t nl = sizeof name, pnl;
  CHK(fi_getname(&ep->fid, name, &nl));
  uint64_t mykey = mr_rma ? fi_mr_key(mr_rma) : 0;
  uint64_t myaddr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)rmabuf : 0;
  xfer(&nl, sizeof nl, 1); xfer(name, nl, 1); xfer(&mykey, 8, 1); xfer(&myaddr, 8, 1);
  xfer(&pnl, sizeof pnl, 0);
  if (pnl > sizeof pn) { fprintf(stderr, "fi-floor: address too long\n"); return 1; }
  xfer(pn, pnl, 0); xfer(&rkey, 8, 0); xfer(&raddr, 8, 0);
  if (fi_av_insert(av, pn, 1, &peer, 0, NULL) != 1) { fprintf(stderr, "fi-floor: fi_av_insert failed\n"); return 1; }

  // Connect (ofi_rxm connects lazily) before anything is timed: one ping each way.
  if (rank == 0) {
    send_msg(M_END, 16);
    wait_type(M_ACK, 1);
    char go = 1;
    xfer(&go, 1, 1);
    unlink_shm(name);
    for (int t = 0; t < T_COUNT; t++)
      if (tests[t]) measure(t, fixed_iters, batches, json, pname);
    send_msg(M_EXIT, 16);
    // Let the exit message leave before closing.
    for (int k = 0; k < 1000; k++) progress();
    char c;
    xfer(&c, 1, 0);
  } else {
    char c;
    for (;;) { // answer the first message, then learn that it arrived
      progress();
      if (arrived[M_END]) break;
    }
    send_msg(M_ACK, 16);
    xfer(&c, 1, 0);
    arrived[M_END] = 0;
    unlink_shm(name);
    follower();
    c = 0;
    xfer(&c, 1, 1);
  }
  fi_close(&ep->fid);
  if (mr_rma) fi_close(&mr_rma->fid);
  if (mr_tx) { fi_close(&mr_tx->fid); fi_close(&mr_rx->fid); }
  fi_close(&av->fid);
  fi_close(&cq->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(list);
  fi_freeinfo(hints);
  if (rank == 0) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  return 0;
}
