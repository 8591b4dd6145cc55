/* am_pingpong.c: every rank sends ROUNDS Short pings and ROUNDS Medium pings to the
 * next rank; the ping handlers reply (Short: the argument plus one; Medium: the payload
 * back), the pong handlers count and check. Also checks the rules at the boundary: no
 * endpoint call inside a handler, a token only inside its handler.
 *   gex-run -n 2 ./am_pingpong */
#include "check.h"
#include <string.h>

#define ROUNDS 1000
#define MEDIUM 512

struct state {
    gex_ep_t *ep;
    uint32_t pong_short, pong_medium; /* handlers run on this thread (inside gex calls) */
    uint32_t h_ping_short, h_pong_short, h_ping_medium, h_pong_medium;
    int bad;
    gex_token_t *stale;
};

static void ping_short(gex_token_t *t, const void *p, size_t len, const uint32_t *args,
                       size_t nargs, void *ud) {
    struct state *s = ud;
    uint32_t reply = args[0] + 1;
    (void)p;
    if (len != 0 || nargs != 1) s->bad = 1;
    /* Endpoint calls are refused inside a handler. */
    if (gex_ep_poll(s->ep, NULL) != GEX_ERR_IN_HANDLER) s->bad = 1;
    if (gex_am_reply_short(t, s->h_pong_short, &reply, 1) != GEX_OK) s->bad = 1;
    /* A second reply is an error. */
    if (gex_am_reply_short(t, s->h_pong_short, &reply, 1) != GEX_ERR_AM) s->bad = 1;
    s->stale = t;
}

static void pong_short(gex_token_t *t, const void *p, size_t len, const uint32_t *args,
                       size_t nargs, void *ud) {
    struct state *s = ud;
    (void)t; (void)p; (void)len;
    if (nargs != 1 || args[0] != s->pong_short + 1) s->bad = 1;
    /* No reply from a reply handler. */
    if (gex_am_reply_short(t, s->h_pong_short, NULL, 0) != GEX_ERR_AM) s->bad = 1;
    s->pong_short++;
}

static void ping_medium(gex_token_t *t, const void *p, size_t len, const uint32_t *args,
                        size_t nargs, void *ud) {
    struct state *s = ud;
    uint32_t src;
    if (gex_token_src(t, &src) != GEX_OK || nargs != 1 || args[0] != src) s->bad = 1;
    if (gex_am_reply_medium(t, s->h_pong_medium, args, 1, p, len) != GEX_OK) s->bad = 1;
}

static void pong_medium(gex_token_t *t, const void *p, size_t len, const uint32_t *args,
                        size_t nargs, void *ud) {
    struct state *s = ud;
    const unsigned char *b = p;
    (void)t; (void)args; (void)nargs;
    if (len != MEDIUM) s->bad = 1;
    for (size_t i = 0; i < len; i++)
        if (b[i] != (unsigned char)(i + s->pong_medium)) s->bad = 1;
    s->pong_medium++;
}

int main(void) {
    gex_client_t *client;
    struct state s = {0};
    uint32_t rank, size, arg;
    unsigned char buf[MEDIUM];
    size_t max_medium;
    CHECK(gex_client_init(0, &client));
    CHECK(gex_ep_open(client, 0, &s.ep));
    CHECK(gex_ep_rank(s.ep, &rank, &size));
    /* The same handlers in the same order on every rank. */
    CHECK(gex_am_register(s.ep, ping_short, &s, &s.h_ping_short));
    CHECK(gex_am_register(s.ep, pong_short, &s, &s.h_pong_short));
    CHECK(gex_am_register(s.ep, ping_medium, &s, &s.h_ping_medium));
    CHECK(gex_am_register(s.ep, pong_medium, &s, &s.h_pong_medium));
    EXPECT(GEX_ERR_NULL, gex_am_register(s.ep, NULL, NULL, &arg));
    CHECK(gex_am_max_medium(s.ep, (rank + 1) % size, &max_medium));
    if (max_medium < MEDIUM) {
        fprintf(stderr, "max medium %zu < %d\n", max_medium, MEDIUM);
        return 1;
    }
    uint32_t next = (rank + 1) % size;
    /* One at a time: each pong checks it is the answer to the latest ping. */
    for (uint32_t i = 0; i < ROUNDS; i++) {
        CHECK(gex_am_request_short(s.ep, next, s.h_ping_short, &i, 1));
        while (s.pong_short == i) CHECK(gex_ep_poll(s.ep, NULL));
    }
    for (uint32_t i = 0; i < ROUNDS; i++) {
        for (size_t k = 0; k < MEDIUM; k++) buf[k] = (unsigned char)(k + i);
        CHECK(gex_am_request_medium(s.ep, next, s.h_ping_medium, &rank, 1, buf, MEDIUM));
        while (s.pong_medium == i) CHECK(gex_ep_poll(s.ep, NULL));
    }
    /* Arguments the ABI checks. */
    EXPECT(GEX_ERR_INVALID, gex_am_request_short(s.ep, size, s.h_ping_short, NULL, 0));
    EXPECT(GEX_ERR_INVALID, gex_am_request_short(s.ep, next, 7, NULL, 0));
    EXPECT(GEX_ERR_INVALID, gex_am_request_short(s.ep, next, 250, NULL, 0));
    EXPECT(GEX_ERR_NULL, gex_am_request_short(s.ep, next, s.h_ping_short, NULL, 1));
    EXPECT(GEX_ERR_NULL, gex_ep_poll(NULL, NULL));
    /* A token kept past its handler is refused, not read. This rank may have finished
     * its own round trips before the previous rank sent it its first ping (3 ranks on
     * 2 cores): serve pings until one was kept. */
    while (s.stale == NULL) CHECK(gex_ep_poll(s.ep, NULL));
    EXPECT(GEX_ERR_INVALID, gex_am_reply_short(s.stale, s.h_pong_short, NULL, 0));
    CHECK(gex_barrier(s.ep));
    if (s.bad) {
        fprintf(stderr, "rank %u: a handler saw something wrong\n", rank);
        return 1;
    }
    printf("rank %u of %u: %d short and %d medium round trips ok\n", rank, size, ROUNDS, ROUNDS);
    fflush(stdout);
    CHECK(gex_ep_close(s.ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
