/* atomics_long.c: typed remote atomics (domains of uint32_t, int64_t, double and
 * uint64_t over the world team; blocking, nonblocking and NBI forms of the opcode
 * families, with acquire/release flags), Long AMs (a request whose payload lands in the next rank's segment, a
 * Long reply into the requester's), and the progress thread from C.
 *   gex-run -n 4 ./atomics_long            (handlers run inside this rank's calls)
 *   gex-run -n 4 ./atomics_long progress   (gex_client_init_ex with a progress thread) */
#include "check.h"
#include <stdatomic.h>
#include <string.h>

#define LONG_LEN 1000  /* bytes of each Long payload */
#define REQ_OFF 8192   /* where rank r's request lands in the next rank: REQ_OFF + r * 1024 */
#define REP_OFF 65536  /* where the reply lands in the requester: REP_OFF */
#define WORDS 128      /* atomic words at offsets 0..WORDS*8 of rank 0's segment */

static uint32_t rank, size;
static unsigned char *seg;
static size_t seg_len;
static uint32_t reply_index;
static atomic_int requests_ok, replies_ok, bad;

static unsigned char pattern(uint32_t r, size_t i) { return (unsigned char)(r * 13 + i); }

/* A Long request: the payload is in this rank's segment where the sender put it. */
static void on_request(gex_token_t *token, const void *payload, size_t len,
                       const uint32_t *args, size_t nargs, void *user_data) {
    (void)user_data;
    uint32_t src;
    const unsigned char *p = payload;
    if (gex_token_src(token, &src) != GEX_OK || nargs != 1 || args[0] != src || len != LONG_LEN ||
        p != seg + REQ_OFF + (size_t)src * 1024) {
        atomic_fetch_add(&bad, 1);
        return;
    }
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(src, i)) {
            atomic_fetch_add(&bad, 1);
            return;
        }
    /* Reply with the payload reversed, into the requester's segment. */
    unsigned char rev[LONG_LEN];
    for (size_t i = 0; i < len; i++) rev[i] = p[len - 1 - i];
    uint32_t me = rank;
    if (gex_am_reply_long(token, reply_index, &me, 1, rev, len, REP_OFF) != GEX_OK)
        atomic_fetch_add(&bad, 1);
    else
        atomic_fetch_add(&requests_ok, 1);
}

static void on_reply(gex_token_t *token, const void *payload, size_t len, const uint32_t *args,
                     size_t nargs, void *user_data) {
    (void)token, (void)user_data;
    const unsigned char *p = payload;
    uint32_t next = (rank + 1) % size;
    if (nargs != 1 || args[0] != next || len != LONG_LEN || p != seg + REP_OFF) {
        atomic_fetch_add(&bad, 1);
        return;
    }
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(rank, len - 1 - i)) {
            atomic_fetch_add(&bad, 1);
            return;
        }
    atomic_fetch_add(&replies_ok, 1);
}

int main(int argc, char **argv) {
    gex_client_t *client;
    gex_ep_t *ep;
    gex_team_t *world;
    int progress = argc > 1 && strcmp(argv[1], "progress") == 0;
    EXPECT(GEX_ERR_INVALID, gex_client_init_ex(0, 0x80, &client));
    CHECK(gex_client_init_ex(1 << 20, progress ? GEX_INIT_PROGRESS_THREAD : 0, &client));
    CHECK(gex_ep_open(client, 0, &ep));
    CHECK(gex_ep_rank(ep, &rank, &size));
    CHECK(gex_ep_segment(ep, (void **)&seg, &seg_len));
    if (seg_len < REP_OFF + LONG_LEN || REQ_OFF + (size_t)size * 1024 > REP_OFF)
        FAIL("segment too small");
    memset(seg, 0, seg_len);
    CHECK(gex_team_world(ep, &world));
    CHECK(gex_barrier(ep));

    /* Long AMs: one request to the next rank, one reply back. */
    uint32_t req_index;
    size_t max_long;
    CHECK(gex_am_register(ep, on_request, NULL, &req_index));
    CHECK(gex_am_register(ep, on_reply, NULL, &reply_index));
    CHECK(gex_barrier(ep)); /* every handler registered everywhere before any request */
    uint32_t next = (rank + 1) % size;
    CHECK(gex_am_max_long(ep, next, &max_long));
    if (max_long < LONG_LEN) FAIL("max Long payload %zu", max_long);
    unsigned char buf[LONG_LEN];
    for (size_t i = 0; i < LONG_LEN; i++) buf[i] = pattern(rank, i);
    CHECK(gex_am_request_long(ep, next, req_index, &rank, 1, buf, LONG_LEN, REQ_OFF + (size_t)rank * 1024));
    EXPECT(GEX_ERR_AM, gex_am_request_long(ep, next, req_index, &rank, 1, buf, LONG_LEN, seg_len - 10));
    while ((atomic_load(&replies_ok) < 1 || atomic_load(&requests_ok) < 1) && !atomic_load(&bad))
        CHECK(gex_ep_poll(ep, NULL));
    if (atomic_load(&bad)) FAIL("%d Long AMs were wrong", atomic_load(&bad));
    CHECK(gex_barrier(ep));

    /* uint32_t: every rank sets its bit in rank 0's word with fetch-or, then xor, and
     * counts itself with an NBI increment. */
    gex_atomic_domain_t *du32, *di64, *df64, *du64;
    CHECK(gex_atomic_domain_create_ex(ep, world, GEX_DT_U32, GEX_AOPS_ALL, &du32));
    CHECK(gex_atomic_domain_create_ex(ep, world, GEX_DT_I64, (1u << GEX_AOP_FADD) | (1u << GEX_AOP_GET) | (1u << GEX_AOP_SWAP), &di64));
    CHECK(gex_atomic_domain_create_ex(ep, world, GEX_DT_F64, GEX_AOPS_ARITH, &df64));
    CHECK(gex_atomic_domain_create_ex(ep, world, GEX_DT_U64, GEX_AOPS_ALL, &du64));
    uint32_t old32;
    CHECK(gex_atomic_op_u32(ep, du32, 0, 0, GEX_AOP_FOR, 1u << rank, 0, GEX_AOP_FLAG_ACQUIRE | GEX_AOP_FLAG_RELEASE, &old32));
    if (old32 & (1u << rank)) FAIL("my bit was set before me");
    CHECK(gex_atomic_op_u32(ep, du32, 0, 4, GEX_AOP_XOR, 1u << rank, 0, 0, NULL));
    CHECK(gex_atomic_op_nbi_u32(ep, du32, 0, 8, GEX_AOP_INC, 0, 0, 0));
    CHECK(gex_atomic_op_nbi_u32(ep, du32, 0, 12, GEX_AOP_ADD, rank, 0, 0));
    CHECK(gex_nbi_sync(ep, GEX_NBI_ATOMICS));

    /* int64_t: nonblocking fetch-adds of -rank, completed with one wait_all. */
    gex_event_t *evs[2];
    int64_t olds[2] = {123, 456};
    CHECK(gex_atomic_op_nb_i64(ep, di64, 0, 16, GEX_AOP_FADD, -(int64_t)rank, 0, 0, &olds[0], &evs[0]));
    CHECK(gex_atomic_op_nb_i64(ep, di64, 0, 24, GEX_AOP_FADD, 1, 0, 0, &olds[1], &evs[1]));
    CHECK(gex_event_wait_all(ep, evs, 2));
    if (olds[0] > 0 || olds[1] < 0 || olds[1] >= (int64_t)size) FAIL("i64 olds %lld %lld", (long long)olds[0], (long long)olds[1]);
    EXPECT(GEX_ERR_RMA, gex_atomic_op_i64(ep, di64, 0, 16, GEX_AOP_AND, 1, 0, 0, NULL)); /* not in the domain */

    /* double: fetch-max of rank * 1.5, and one winner of a compare-and-swap. */
    double oldf;
    CHECK(gex_atomic_op_f64(ep, df64, 0, 32, GEX_AOP_FMAX, 1.5 * rank, 0.0, 0, &oldf));
    CHECK(gex_atomic_op_f64(ep, df64, 0, 40, GEX_AOP_FCSWAP, 0.0, 2.0 + rank, 0, &oldf));
    uint64_t won = oldf == 0.0, wins;

    /* uint64_t: the named functions and the family on the same domain. */
    uint64_t o64;
    CHECK(gex_atomic_fetch_add_u64(ep, du64, 0, 48, 10, &o64));
    CHECK(gex_atomic_op_u64(ep, du64, 0, 48, GEX_AOP_FAND, ~0ull, 0, 0, &o64));
    if (o64 % 10 != 0 || o64 == 0) FAIL("u64 fetch-and saw %llu", (unsigned long long)o64);

    /* Errors: wrong type, unknown op, misaligned, bitwise on a float domain. */
    EXPECT(GEX_ERR_INVALID, gex_atomic_op_u64(ep, du32, 0, 0, GEX_AOP_GET, 0, 0, 0, &o64));
    EXPECT(GEX_ERR_INVALID, gex_atomic_op_u32(ep, du32, 0, 0, 99, 0, 0, 0, NULL));
    EXPECT(GEX_ERR_RMA, gex_atomic_op_u32(ep, du32, 0, 2, GEX_AOP_ADD, 1, 0, 0, NULL));
    EXPECT(GEX_ERR_INVALID, gex_atomic_op_nbi_u32(ep, du32, 0, 0, GEX_AOP_ADD, 1, 0, 8)); /* unknown flag */
    EXPECT(GEX_ERR_NULL, gex_atomic_op_nb_u32(ep, du32, 0, 0, GEX_AOP_ADD, 1, 0, 0, NULL, NULL));
    gex_atomic_domain_t *nope = NULL;
    EXPECT(GEX_ERR_INVALID, gex_atomic_domain_create_ex(ep, world, GEX_DT_U8, GEX_AOPS_ALL, &nope));
    if (nope != NULL) FAIL("a domain was made on error");

    CHECK(gex_allreduce(ep, world, &won, &wins, 1, GEX_DT_U64, GEX_OP_SUM));
    if (wins != 1) FAIL("%llu ranks won the swap", (unsigned long long)wins);
    CHECK(gex_barrier(ep));
    if (rank == 0) {
        uint32_t w[4];
        int64_t a, c;
        double m, s;
        CHECK(gex_atomic_op_u32(ep, du32, 0, 0, GEX_AOP_GET, 0, 0, GEX_AOP_FLAG_ACQUIRE, &w[0]));
        CHECK(gex_atomic_op_u32(ep, du32, 0, 4, GEX_AOP_GET, 0, 0, 0, &w[1]));
        CHECK(gex_atomic_op_u32(ep, du32, 0, 8, GEX_AOP_GET, 0, 0, 0, &w[2]));
        CHECK(gex_atomic_op_u32(ep, du32, 0, 12, GEX_AOP_GET, 0, 0, 0, &w[3]));
        CHECK(gex_atomic_op_i64(ep, di64, 0, 16, GEX_AOP_GET, 0, 0, 0, &a));
        CHECK(gex_atomic_op_i64(ep, di64, 0, 24, GEX_AOP_SWAP, 0, 0, 0, &c));
        CHECK(gex_atomic_op_f64(ep, df64, 0, 32, GEX_AOP_GET, 0, 0, 0, &m));
        CHECK(gex_atomic_op_f64(ep, df64, 0, 40, GEX_AOP_GET, 0, 0, 0, &s));
        uint32_t mask = size >= 32 ? ~0u : (1u << size) - 1;
        if (w[0] != mask || w[1] != mask || w[2] != size || w[3] != size * (size - 1) / 2)
            FAIL("u32 words %x %x %u %u", w[0], w[1], w[2], w[3]);
        if (a != -(int64_t)(size * (size - 1) / 2) || c != (int64_t)size)
            FAIL("i64 words %lld %lld", (long long)a, (long long)c);
        if (m != 1.5 * (size - 1) || s < 2.0 || s > 1.0 + size) FAIL("f64 words %g %g", m, s);
    }
    CHECK(gex_barrier(ep));
    CHECK(gex_atomic_domain_free(du32));
    CHECK(gex_atomic_domain_free(di64));
    CHECK(gex_atomic_domain_free(df64));
    CHECK(gex_atomic_domain_free(du64));
    CHECK(gex_team_free(ep, world));
    printf("rank %u of %u: long AMs and typed atomics ok%s\n", rank, size,
           progress ? " (progress thread)" : "");
    fflush(stdout);
    CHECK(gex_ep_close(ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
