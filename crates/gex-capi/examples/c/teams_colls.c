/* teams_colls.c: teams (world, split by color and key, a team of one, a team from a
 * list of ranks, translation of team ranks); collectives on teams (barrier,
 * split-phase barrier, broadcast, scatter, gather, gather_all, exchange, reduce,
 * allreduce, reduce_scatter, scan, exscan of several types and operators, blocking
 * and nonblocking); implicit-event (NBI) puts and gets with their syncs; and one event
 * type: a nonblocking allreduce waited with gex_event_wait_any together with a
 * nonblocking get.
 *   gex-run -n 4 ./teams_colls */
#include "check.h"
#include <string.h>

#define NBI_LEN 256  /* bytes each rank puts into the next rank's segment, in 4 NBI puts */
#define NBI_OFF 4096 /* where they land: NBI_OFF + rank * NBI_LEN */

int main(void) {
    gex_client_t *client;
    gex_ep_t *ep;
    gex_team_t *world, *half, *solo;
    uint32_t rank, size, r, n, j;
    unsigned char *seg;
    size_t seg_len;
    CHECK(gex_client_init(1 << 20, &client));
    CHECK(gex_ep_open(client, 0, &ep));
    CHECK(gex_ep_rank(ep, &rank, &size));
    CHECK(gex_ep_segment(ep, (void **)&seg, &seg_len));
    if (seg_len < NBI_OFF + (size_t)size * NBI_LEN) FAIL("segment too small");

    /* The world team: team rank = job rank. */
    CHECK(gex_team_world(ep, &world));
    CHECK(gex_team_rank(world, &r, &n));
    if (r != rank || n != size) FAIL("world team rank %u of %u", r, n);
    CHECK(gex_team_translate(world, size - 1, &j));
    if (j != size - 1) FAIL("world translate gave %u", j);
    EXPECT(GEX_ERR_INVALID, gex_team_translate(world, size, &j));

    /* Split by parity, ordered by descending rank (key = size - rank). */
    uint32_t color = rank % 2;
    CHECK(gex_team_split(ep, world, color, size - rank, &half));
    if (half == NULL) FAIL("no half team");
    uint32_t hsize = (size - color + 1) / 2;
    uint32_t hrank = hsize - 1 - rank / 2;
    CHECK(gex_team_rank(half, &r, &n));
    if (r != hrank || n != hsize) FAIL("half team rank %u of %u, expected %u of %u", r, n, hrank, hsize);
    uint32_t top = color + 2 * (hsize - 1); /* the highest rank of my parity: team rank 0 */
    CHECK(gex_team_translate(half, 0, &j));
    if (j != top) FAIL("half team rank 0 is %u, expected %u", j, top);

    /* A team of rank 0 alone; every other rank joins none. */
    CHECK(gex_team_split(ep, world, rank == 0 ? 7 : GEX_COLOR_NONE, 0, &solo));
    if ((rank == 0) != (solo != NULL)) FAIL("solo team is %p", (void *)solo);
    if (solo) {
        CHECK(gex_team_barrier(ep, solo));
        CHECK(gex_team_rank(solo, &r, &n));
        if (r != 0 || n != 1) FAIL("solo team rank %u of %u", r, n);
    }
    CHECK(gex_team_barrier(ep, half));

    /* A team of the last rank and rank 0, in that order: only they call (rank 0 alone
     * in a job of one). */
    gex_team_t *ends = NULL;
    uint32_t list[2] = {size - 1, 0}, nends = size > 1 ? 2 : 1;
    if (rank == 0 || rank == size - 1) {
        CHECK(gex_team_create(ep, world, list, nends, &ends));
        CHECK(gex_team_rank(ends, &r, &n));
        if (n != nends || r != (rank == 0 ? nends - 1 : 0u)) FAIL("ends team rank %u of %u", r, n);
        CHECK(gex_team_translate(ends, nends - 1, &j));
        if (j != 0) FAIL("ends team rank %u is %u", nends - 1, j);
        uint64_t mine64 = rank, both;
        CHECK(gex_allreduce(ep, ends, &mine64, &both, 1, GEX_DT_U64, GEX_OP_SUM));
        if (both != size - 1) FAIL("ends allreduce %llu", (unsigned long long)both);
        CHECK(gex_team_free(ep, ends));
    }

    /* Broadcast in the half team from its team rank 0 (job rank `top`). */
    int64_t b[5];
    for (int i = 0; i < 5; i++) b[i] = rank == top ? (int64_t)top * 100 + i : -1;
    CHECK(gex_broadcast(ep, half, 0, b, 5, GEX_DT_I64));
    for (int i = 0; i < 5; i++)
        if (b[i] != (int64_t)top * 100 + i) FAIL("broadcast b[%d] = %lld", i, (long long)b[i]);

    /* Allreduce of several types and operators, on both teams. */
    uint32_t me32 = rank, sum32;
    CHECK(gex_allreduce(ep, half, &me32, &sum32, 1, GEX_DT_U32, GEX_OP_SUM));
    uint32_t want32 = 0;
    for (uint32_t k = color; k < size; k += 2) want32 += k;
    if (sum32 != want32) FAIL("half sum %u, expected %u", sum32, want32);
    double d[2] = {0.5 * rank, -1.0 * rank}, dmin[2], dmax[2];
    CHECK(gex_allreduce(ep, world, d, dmin, 2, GEX_DT_F64, GEX_OP_MIN));
    CHECK(gex_allreduce(ep, world, d, dmax, 2, GEX_DT_F64, GEX_OP_MAX));
    if (dmin[0] != 0.0 || dmin[1] != -1.0 * (size - 1) || dmax[0] != 0.5 * (size - 1) || dmax[1] != 0.0)
        FAIL("double min/max: %g %g %g %g", dmin[0], dmin[1], dmax[0], dmax[1]);
    int32_t bits = 1 << rank, bor, band, bxor;
    CHECK(gex_allreduce(ep, world, &bits, &bor, 1, GEX_DT_I32, GEX_OP_BOR));
    CHECK(gex_allreduce(ep, world, &bits, &band, 1, GEX_DT_I32, GEX_OP_BAND));
    int32_t x = 3, xx;
    CHECK(gex_allreduce(ep, world, &x, &xx, 1, GEX_DT_I32, GEX_OP_BXOR));
    bxor = (size % 2) ? 3 : 0;
    if (bor != (1 << size) - 1 || band != (size == 1 ? 1 : 0) || xx != bxor)
        FAIL("bitwise: or %d and %d xor %d", bor, band, xx);
    float f = (float)rank + 0.25f, fsum;
    CHECK(gex_allreduce(ep, world, &f, &fsum, 1, GEX_DT_F32, GEX_OP_SUM));
    if (fsum != (float)(size * (size - 1) / 2) + 0.25f * size) FAIL("float sum %g", fsum);
    uint64_t two = 2, prod;
    CHECK(gex_allreduce(ep, world, &two, &prod, 1, GEX_DT_U64, GEX_OP_PROD));
    if (prod != 1ull << size) FAIL("product %llu", (unsigned long long)prod);
    unsigned char flag = rank == size - 1, any;
    CHECK(gex_allreduce(ep, world, &flag, &any, 1, GEX_DT_U8, GEX_OP_LOR));
    if (any != 1) FAIL("logical or %u", any);

    /* Gather to the last rank, gather_all and reduce to rank 0 on the world team. */
    uint32_t all[64], got[64];
    if (size > 64) FAIL("too many ranks for this example");
    memset(got, 0xff, sizeof got);
    CHECK(gex_gather(ep, world, size - 1, &me32, rank == size - 1 ? got : NULL, 1, GEX_DT_U32));
    CHECK(gex_gather_all(ep, world, &me32, all, 1, GEX_DT_U32));
    for (uint32_t k = 0; k < size; k++) {
        if (all[k] != k) FAIL("gather_all[%u] = %u", k, all[k]);
        if (rank == size - 1 && got[k] != k) FAIL("gather[%u] = %u", k, got[k]);
    }
    int64_t mine = -(int64_t)rank, lo = 1;
    CHECK(gex_reduce(ep, world, 0, &mine, &lo, 1, GEX_DT_I64, GEX_OP_MIN));
    if (rank == 0 && lo != -(int64_t)(size - 1)) FAIL("reduce min %lld", (long long)lo);
    if (rank != 0 && lo != 1) FAIL("reduce wrote a non-root's dst");

    /* NBI: my pattern into the next rank's segment in four puts, then one sync. */
    uint32_t next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char src[NBI_LEN], back[NBI_LEN];
    for (int i = 0; i < NBI_LEN; i++) src[i] = (unsigned char)(rank * 7 + i);
    for (int k = 0; k < 4; k++)
        CHECK(gex_put_nbi(ep, next, NBI_OFF + (size_t)rank * NBI_LEN + k * (NBI_LEN / 4),
                          src + k * (NBI_LEN / 4), NBI_LEN / 4));
    memset(src, 0, sizeof src); /* the sources may be reused at once */
    CHECK(gex_nbi_sync(ep, GEX_NBI_PUTS));
    CHECK(gex_team_barrier(ep, world));
    for (int i = 0; i < NBI_LEN; i++)
        if (seg[NBI_OFF + (size_t)prev * NBI_LEN + i] != (unsigned char)(prev * 7 + i))
            FAIL("NBI put byte %d from rank %u is wrong", i, prev);
    memset(back, 0, sizeof back);
    CHECK(gex_get_nbi(ep, back, next, NBI_OFF + (size_t)rank * NBI_LEN, NBI_LEN / 2));
    CHECK(gex_get_nbi(ep, back + NBI_LEN / 2, next, NBI_OFF + (size_t)rank * NBI_LEN + NBI_LEN / 2, NBI_LEN / 2));
    int rc;
    while ((rc = gex_nbi_test(ep, GEX_NBI_ALL)) == GEX_PENDING) {}
    CHECK(rc);
    for (int i = 0; i < NBI_LEN; i++)
        if (back[i] != (unsigned char)(rank * 7 + i)) FAIL("NBI get byte %d is wrong", i);
    EXPECT(GEX_ERR_INVALID, gex_nbi_sync(ep, 8));
    CHECK(gex_nbi_sync(ep, GEX_NBI_ALL)); /* nothing left: returns at once */

    /* One event type: a nonblocking allreduce and a nonblocking get, waited with
     * wait_any until both are done; then a nonblocking broadcast and barrier with
     * wait_all. */
    gex_event_t *evs[2];
    uint64_t v = rank + 1, vsum = 0;
    memset(back, 0, sizeof back);
    CHECK(gex_allreduce_nb(ep, world, &v, &vsum, 1, GEX_DT_U64, GEX_OP_SUM, &evs[0]));
    CHECK(gex_get_nb(ep, back, next, NBI_OFF + (size_t)rank * NBI_LEN, NBI_LEN, &evs[1]));
    v = 1000; /* the source was copied */
    size_t idx;
    int seen = 0;
    for (int k = 0; k < 2; k++) {
        CHECK(gex_event_wait_any(ep, evs, 2, &idx));
        if (idx > 1 || evs[idx] != NULL) FAIL("wait_any gave %zu", idx);
        seen |= 1 << idx;
    }
    if (seen != 3) FAIL("wait_any completed %d", seen);
    if (vsum != (uint64_t)size * (size + 1) / 2) FAIL("nb allreduce %llu", (unsigned long long)vsum);
    for (int i = 0; i < NBI_LEN; i++)
        if (back[i] != (unsigned char)(rank * 7 + i)) FAIL("nb get byte %d is wrong", i);
    uint32_t bb[3] = {0, 0, 0};
    if (hrank == 0) bb[0] = 11, bb[1] = 22, bb[2] = 33;
    CHECK(gex_broadcast_nb(ep, half, 0, bb, 3, GEX_DT_U32, &evs[0]));
    CHECK(gex_team_barrier_nb(ep, world, &evs[1]));
    CHECK(gex_event_wait_all(ep, evs, 2));
    if (bb[0] != 11 || bb[1] != 22 || bb[2] != 33) FAIL("nb broadcast %u %u %u", bb[0], bb[1], bb[2]);
    uint32_t g2[64];
    CHECK(gex_gather_all_nb(ep, half, &me32, g2, 1, GEX_DT_U32, &evs[0]));
    CHECK(gex_event_wait(ep, &evs[0]));
    for (uint32_t k = 0; k < hsize; k++)
        if (g2[k] != top - 2 * k) FAIL("half gather_all[%u] = %u", k, g2[k]);
    int64_t hmax = 0;
    CHECK(gex_reduce_nb(ep, half, hsize - 1, &mine, &hmax, 1, GEX_DT_I64, GEX_OP_MAX, &evs[0]));
    CHECK(gex_event_wait(ep, &evs[0]));
    if (hrank == hsize - 1 && hmax != -(int64_t)color) FAIL("half reduce max %lld", (long long)hmax);

    /* Scatter from rank 0, exchange, reduce_scatter, scan and exscan on the world team. */
    uint32_t blocks[2 * 64], two_out[2 * 64], one_out[2];
    for (uint32_t k = 0; k < 2 * size; k++) blocks[k] = rank * 1000 + k;
    CHECK(gex_scatter(ep, world, 0, rank == 0 ? blocks : NULL, one_out, 2, GEX_DT_U32));
    if (one_out[0] != 2 * rank || one_out[1] != 2 * rank + 1) FAIL("scatter %u %u", one_out[0], one_out[1]);
    CHECK(gex_exchange(ep, world, blocks, two_out, 2, GEX_DT_U32));
    for (uint32_t k = 0; k < size; k++) /* block k came from rank k: its block `rank` */
        if (two_out[2 * k] != k * 1000 + 2 * rank || two_out[2 * k + 1] != k * 1000 + 2 * rank + 1)
            FAIL("exchange block %u: %u %u", k, two_out[2 * k], two_out[2 * k + 1]);
    CHECK(gex_reduce_scatter(ep, world, blocks, one_out, 2, GEX_DT_U32, GEX_OP_MAX));
    if (one_out[0] != (size - 1) * 1000 + 2 * rank) FAIL("reduce_scatter %u", one_out[0]);
    int64_t one = 1, upto = 0, before = -7;
    CHECK(gex_scan(ep, world, &one, &upto, 1, GEX_DT_I64, GEX_OP_SUM));
    if (upto != (int64_t)rank + 1) FAIL("scan %lld", (long long)upto);
    CHECK(gex_exscan_nb(ep, world, &one, &before, 1, GEX_DT_I64, GEX_OP_SUM, &evs[0]));
    CHECK(gex_event_wait(ep, &evs[0]));
    if (before != (rank == 0 ? -7 : (int64_t)rank)) FAIL("exscan %lld", (long long)before);

    /* The split-phase barrier: named on even ranks, anonymous on odd ones (which
     * matches any name), with a collective in between; then a name mismatch, an
     * error on every member. */
    uint32_t bflags = rank % 2 ? GEX_BARRIER_ANONYMOUS : 0;
    CHECK(gex_team_barrier_notify(ep, world, 42, bflags));
    EXPECT(GEX_ERR_COLL, gex_team_barrier_notify(ep, world, 42, bflags)); /* notified already */
    CHECK(gex_allreduce(ep, world, &v, &vsum, 1, GEX_DT_U64, GEX_OP_MAX));
    while ((rc = gex_team_barrier_try(ep, world, 42, bflags)) == GEX_PENDING) {}
    CHECK(rc);
    if (size > 1) {
        CHECK(gex_team_barrier_notify(ep, world, 100 + rank, 0));
        EXPECT(GEX_ERR_COLL, gex_team_barrier_wait(ep, world, 100 + rank, 0));
    }
    CHECK(gex_team_barrier(ep, world)); /* the team goes on */

    /* Errors the ABI reports. */
    EXPECT(GEX_ERR_INVALID, gex_allreduce(ep, world, d, dmin, 1, GEX_DT_F64, GEX_OP_BXOR));
    EXPECT(GEX_ERR_INVALID, gex_allreduce(ep, world, d, dmin, 1, 42, GEX_OP_SUM));
    EXPECT(GEX_ERR_INVALID, gex_allreduce(ep, world, all, all, 1, GEX_DT_U32, GEX_OP_SUM));
    EXPECT(GEX_ERR_INVALID, gex_gather(ep, world, size, &me32, got, 1, GEX_DT_U32));
    EXPECT(GEX_ERR_NULL, gex_broadcast_nb(ep, world, 0, bb, 3, GEX_DT_U32, NULL));
    EXPECT(GEX_ERR_NULL, gex_team_barrier(ep, NULL));

    CHECK(gex_team_barrier(ep, world));
    CHECK(gex_team_free(ep, solo)); /* NULL on every rank but 0: ignored */
    CHECK(gex_team_free(ep, half));
    CHECK(gex_team_free(ep, world));
    CHECK(gex_barrier(ep));
    printf("rank %u of %u: teams/collectives/nbi/events ok\n", rank, size);
    fflush(stdout);
    CHECK(gex_ep_close(ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
