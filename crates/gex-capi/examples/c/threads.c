/* threads.c: a threaded runtime's shape. Every rank makes one endpoint per worker
 * thread at run time (gex_ep_create: not collective; ranks that make them in the same
 * order get the same indices), and each worker drives its own endpoint alone: it puts
 * a pattern into the segment of the next rank's endpoint of the same index, then sends
 * it a Short AM saying so, and polls its own endpoint until the previous rank's AM has
 * come, then checks what that rank put. No worker touches another's endpoint.
 *   gex-run -n 2 ./threads */
#include "check.h"
#include <pthread.h>

#define WORKERS 2
#define LEN 4096

struct worker {
    gex_ep_t *ep;
    uint16_t index;
    uint32_t rank, next, prev, h_done;
    uint32_t got; /* written by the handler, which runs on this worker's thread */
    int bad;
};

static unsigned char pattern(uint32_t rank, uint16_t index, size_t i) {
    return (unsigned char)(rank * 31 + index * 7 + i);
}

static void on_done(gex_token_t *t, const void *p, size_t len, const uint32_t *args,
                    size_t nargs, void *ud) {
    struct worker *w = ud;
    uint32_t src;
    (void)p; (void)len;
    if (gex_token_src(t, &src) != GEX_OK || src != w->prev || nargs != 1 || args[0] != w->index)
        w->bad = 1;
    w->got++;
}

static void *work(void *arg) {
    struct worker *w = arg;
    unsigned char src[LEN], *seg;
    size_t seg_len;
    uint32_t a = w->index;
    for (size_t i = 0; i < LEN; i++) src[i] = pattern(w->rank, w->index, i);
    CHECK(gex_put(w->ep, w->next, 0, src, LEN)); /* complete at the target on return */
    CHECK(gex_am_request_short(w->ep, w->next, w->h_done, &a, 1));
    while (w->got == 0) CHECK(gex_ep_poll(w->ep, NULL));
    CHECK(gex_ep_segment(w->ep, (void **)&seg, &seg_len));
    for (size_t i = 0; i < LEN; i++)
        if (seg[i] != pattern(w->prev, w->index, i)) w->bad = 1;
    return NULL;
}

int main(void) {
    gex_client_t *client;
    gex_ep_t *ep0;
    uint32_t rank, size;
    struct worker w[WORKERS];
    pthread_t th[WORKERS];
    CHECK(gex_client_init(1 << 16, &client));
    CHECK(gex_ep_open(client, 0, &ep0));
    CHECK(gex_ep_rank(ep0, &rank, &size));
    for (int k = 0; k < WORKERS; k++) {
        w[k] = (struct worker){.rank = rank, .next = (rank + 1) % size, .prev = (rank + size - 1) % size};
        CHECK(gex_ep_create(client, &w[k].ep, &w[k].index));
        if (w[k].index != 1 + k) { fprintf(stderr, "index %u, expected %d\n", w[k].index, 1 + k); return 1; }
        CHECK(gex_am_register(w[k].ep, on_done, &w[k], &w[k].h_done));
    }
    /* Every rank's handlers are registered before any worker sends. */
    CHECK(gex_barrier(ep0));
    for (int k = 0; k < WORKERS; k++)
        if (pthread_create(&th[k], NULL, work, &w[k]) != 0) { fprintf(stderr, "pthread_create\n"); return 1; }
    for (int k = 0; k < WORKERS; k++) pthread_join(th[k], NULL);
    /* Nobody's endpoints close while a message to them may be in flight. */
    CHECK(gex_barrier(ep0));
    for (int k = 0; k < WORKERS; k++) {
        if (w[k].bad || w[k].got != 1) { fprintf(stderr, "rank %u: worker %d failed\n", rank, k); return 1; }
        CHECK(gex_ep_close(w[k].ep));
    }
    CHECK(gex_ep_close(ep0));
    CHECK(gex_client_finalize(client));
    printf("rank %u of %u: %d endpoints made at run time, one per thread, ok\n", rank, size, WORKERS);
    return 0;
}
