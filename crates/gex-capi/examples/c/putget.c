/* putget.c: one-sided put, get and memset (blocking and nonblocking, one event type), remote
 * atomics and allreduce. Every rank writes a pattern into the next rank's segment,
 * reads it back in several ways, counts itself in a word of rank 0's segment with a
 * fetch-add, and the ranks add up their numbers.
 *   gex-run -n 2 ./putget */
#include "check.h"
#include <string.h>

#define LEN 4096   /* bytes each rank puts */
#define SLOT 8192  /* where rank r's bytes land in the next rank's segment: r * SLOT */
#define NGETS 4

static unsigned char pattern(uint32_t rank, size_t i) { return (unsigned char)(rank * 31 + i); }

int main(void) {
    gex_client_t *client;
    gex_ep_t *ep;
    gex_atomic_domain_t *ad;
    uint32_t rank, size;
    unsigned char *seg, src[LEN], back[LEN], parts[NGETS][LEN / NGETS];
    size_t seg_len, idx;
    gex_event_t *ev, *evs[NGETS];
    CHECK(gex_client_init(1 << 20, &client));
    CHECK(gex_ep_open(client, 0, &ep));
    CHECK(gex_ep_rank(ep, &rank, &size));
    CHECK(gex_ep_segment(ep, (void **)&seg, &seg_len));
    if (seg_len < (size_t)size * SLOT + 64 + (size_t)size * 256) {
        fprintf(stderr, "segment of %zu bytes is too small for %u ranks\n", seg_len, size);
        return 1;
    }
    uint32_t next = (rank + 1) % size, prev = (rank + size - 1) % size;
    memset(seg, 0, seg_len);
    CHECK(gex_barrier(ep));

    /* Blocking put of my pattern into the next rank's segment, at my slot. */
    for (size_t i = 0; i < LEN; i++) src[i] = pattern(rank, i);
    CHECK(gex_put(ep, next, (size_t)rank * SLOT, src, LEN));
    CHECK(gex_barrier(ep));
    /* What the previous rank put is in my segment now. */
    for (size_t i = 0; i < LEN; i++)
        if (seg[(size_t)prev * SLOT + i] != pattern(prev, i)) {
            fprintf(stderr, "rank %u: byte %zu from rank %u is wrong\n", rank, i, prev);
            return 1;
        }

    /* Blocking get back from the next rank. */
    memset(back, 0, LEN);
    CHECK(gex_get(ep, back, next, (size_t)rank * SLOT, LEN));
    if (memcmp(back, src, LEN) != 0) { fprintf(stderr, "blocking get differs\n"); return 1; }

    /* Nonblocking get, completed by test (polling) and wait. */
    memset(back, 0, LEN);
    CHECK(gex_get_nb(ep, back, next, (size_t)rank * SLOT, LEN, &ev));
    int rc;
    while ((rc = gex_event_test(ep, &ev)) == GEX_PENDING) {}
    CHECK(rc);
    if (ev != NULL || memcmp(back, src, LEN) != 0) { fprintf(stderr, "nb get differs\n"); return 1; }
    EXPECT(GEX_ERR_NULL, gex_event_test(ep, &ev)); /* consumed: the pointer is NULL */

    /* Several gets, waited together; then several puts, waited one by one with wait_any. */
    memset(parts, 0, sizeof parts);
    for (int k = 0; k < NGETS; k++)
        CHECK(gex_get_nb(ep, parts[k], next, (size_t)rank * SLOT + k * (LEN / NGETS), LEN / NGETS, &evs[k]));
    CHECK(gex_event_wait_all(ep, evs, NGETS));
    for (int k = 0; k < NGETS; k++)
        if (evs[k] != NULL || memcmp(parts[k], src + k * (LEN / NGETS), LEN / NGETS) != 0) {
            fprintf(stderr, "wait_all get %d differs\n", k);
            return 1;
        }
    for (int k = 0; k < NGETS; k++)
        CHECK(gex_put_nb(ep, next, (size_t)rank * SLOT + k * (LEN / NGETS), src + k * (LEN / NGETS), LEN / NGETS, &evs[k]));
    for (int done = 0; done < NGETS; done++) {
        CHECK(gex_event_wait_any(ep, evs, NGETS, &idx));
        if (evs[idx] != NULL) { fprintf(stderr, "wait_any left its event\n"); return 1; }
    }
    EXPECT(GEX_ERR_INVALID, gex_event_wait_any(ep, evs, NGETS, &idx)); /* all NULL */
    CHECK(gex_event_wait_all(ep, evs, NGETS));                         /* all NULL: done */

    /* An event freed before completion: its get never writes the buffer afterwards. */
    CHECK(gex_get_nb(ep, back, next, (size_t)rank * SLOT, LEN, &ev));
    CHECK(gex_event_free(ev));

    /* Errors the ABI reports. */
    EXPECT(GEX_ERR_RMA, gex_put(ep, next, seg_len - 8, src, 16));
    EXPECT(GEX_ERR_INVALID, gex_put(ep, size, 0, src, 1));
    EXPECT(GEX_ERR_NULL, gex_put(ep, next, 0, NULL, 1));
    EXPECT(GEX_ERR_NULL, gex_get_nb(ep, back, next, 0, 8, NULL));
    CHECK(gex_put(ep, next, 0, NULL, 0)); /* nothing to put */

    /* Memset in its three forms into my own range of the next rank (past the words
     * of the atomics), then read back. */
    size_t mem = (size_t)size * SLOT + 64 + (size_t)rank * 256;
    CHECK(gex_memset(ep, next, mem, 0x11, 64));
    CHECK(gex_memset_nb(ep, next, mem + 64, 0x22, 64, &ev));
    CHECK(gex_event_wait(ep, &ev));
    CHECK(gex_memset_nbi(ep, next, mem + 128, 0x33, 64));
    CHECK(gex_nbi_sync(ep, GEX_NBI_PUTS));
    CHECK(gex_get(ep, back, next, mem, 192));
    for (int i = 0; i < 192; i++)
        if (back[i] != (i < 64 ? 0x11 : i < 128 ? 0x22 : 0x33)) {
            fprintf(stderr, "memset byte %d is %u\n", i, back[i]);
            return 1;
        }
    EXPECT(GEX_ERR_RMA, gex_memset(ep, next, seg_len - 8, 0, 16));

    /* Remote atomics: every rank adds 1 to a word of rank 0, then one rank wins a
     * compare-and-swap on another. */
    size_t counter = (size_t)size * SLOT, flag = counter + 8;
    uint64_t old, value;
    CHECK(gex_atomic_domain_create(ep, &ad));
    CHECK(gex_atomic_fetch_add_u64(ep, ad, 0, counter, 1, &old));
    if (old >= 11ull * size) { fprintf(stderr, "fetch-add saw %llu\n", (unsigned long long)old); return 1; }
    CHECK(gex_atomic_fetch_add_u64_nb(ep, ad, 0, counter, 10, &old, &ev));
    CHECK(gex_event_wait(ep, &ev));
    CHECK(gex_atomic_compare_swap_u64(ep, ad, 0, flag, 0, (uint64_t)rank + 1, &old));
    int won = old == 0;
    EXPECT(GEX_ERR_RMA, gex_atomic_fetch_add_u64(ep, ad, 0, counter + 1, 1, NULL)); /* misaligned */
    CHECK(gex_barrier(ep));
    CHECK(gex_atomic_get_u64(ep, ad, 0, counter, &value));
    if (value != 11ull * size) { fprintf(stderr, "counter is %llu\n", (unsigned long long)value); return 1; }
    uint64_t wins, w = (uint64_t)won;
    CHECK(gex_allreduce_u64(ep, &w, &wins, 1, GEX_OP_SUM));
    if (wins != 1) { fprintf(stderr, "%llu ranks won the swap\n", (unsigned long long)wins); return 1; }
    CHECK(gex_barrier(ep));
    CHECK(gex_atomic_domain_free(ad));

    /* Allreduce: sum, min and max over the ranks. */
    uint64_t mine[3] = {rank, rank, rank}, sum;
    uint64_t lo, hi;
    double x = 0.5 * rank, xs;
    CHECK(gex_allreduce_u64(ep, &mine[0], &sum, 1, GEX_OP_SUM));
    CHECK(gex_allreduce_u64(ep, &mine[1], &lo, 1, GEX_OP_MIN));
    CHECK(gex_allreduce_u64(ep, &mine[2], &hi, 1, GEX_OP_MAX));
    CHECK(gex_allreduce_f64(ep, &x, &xs, 1, GEX_OP_SUM));
    EXPECT(GEX_ERR_INVALID, gex_allreduce_u64(ep, &mine[0], &sum, 1, 99));
    EXPECT(GEX_ERR_INVALID, gex_allreduce_u64(ep, mine, mine + 1, 2, GEX_OP_SUM));
    if (sum != (uint64_t)size * (size - 1) / 2 || lo != 0 || hi != size - 1 ||
        xs != 0.25 * size * (size - 1)) {
        fprintf(stderr, "allreduce: sum %llu min %llu max %llu fsum %g\n", (unsigned long long)sum,
                (unsigned long long)lo, (unsigned long long)hi, xs);
        return 1;
    }
    CHECK(gex_barrier(ep));
    printf("rank %u of %u: put/get/events/atomics ok, sum of ranks %llu\n", rank, size,
           (unsigned long long)sum);
    fflush(stdout);
    CHECK(gex_ep_close(ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
