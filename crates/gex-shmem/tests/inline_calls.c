/*
 * shmem.h's inline calls (docs/shmem.md, "Inline calls"), run on 2 or more PEs by
 * tests/inline_calls.sh: every family of get (getmem, sized, typed, g, the generic
 * names, the _nbi forms) returns the peer's data and every family of put (putmem,
 * sized, typed, p, the generic names, the _nbi forms) lands in the peer's heap,
 * ordered by fence and quiet; the direct copy
 * is taken exactly when it may be (a mapped peer's heap, EXPECT_INLINE=1) and declined
 * otherwise (a get of this PE, static data, a null local buffer, a PE out of range, a
 * range below or beyond the mapped heap, a network or AM-path peer), and the library's
 * calls behind a declined copy carry the same data; the published view is null before
 * shmem_init and after shmem_finalize. Built a second time with -DGEXSHMEM_NO_INLINE,
 * it checks the data through the library's calls alone. Prints "inline_calls: ok ..."
 * and exits 0 when everything holds.
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64
static long stat_data[N];
static int failures;
static int my_pe = -1; /* for messages, also outside shmem_init .. shmem_finalize */

#define CHECK(cond, ...)                                            \
    do {                                                            \
        if (!(cond)) {                                              \
            fprintf(stderr, "inline_calls: PE %d: ", my_pe);     \
            fprintf(stderr, __VA_ARGS__);                           \
            fprintf(stderr, " (line %d)\n", __LINE__);              \
            failures++;                                             \
        }                                                           \
    } while (0)

static long value(int pe, int i) { return (long)pe * 100000 + i * 7 + 1; }

int main(void) {
#ifdef GEXSHMEM_INLINE_CALLS
    CHECK(gexshmem_view_v1 == NULL, "the view is published before shmem_init");
#endif
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    my_pe = me;
    int peer = (me + 1) % npes;
    const char *e = getenv("EXPECT_INLINE");
    int expect_inline = e != NULL && strcmp(e, "1") == 0;
    long *heap = shmem_malloc(N * sizeof(long));
    for (int i = 0; i < N; i++) heap[i] = value(me, i), stat_data[i] = -value(me, i);
    shmem_barrier_all();

    long buf[N];
    /* Every family, through its name (inline when GEXSHMEM_INLINE_CALLS). */
    memset(buf, 0, sizeof buf);
    shmem_getmem(buf, heap, N * sizeof(long), peer);
    for (int i = 0; i < N; i++) CHECK(buf[i] == value(peer, i), "getmem[%d] = %ld", i, buf[i]);
    memset(buf, 0, sizeof buf);
    shmem_long_get(buf, heap + 3, 5, peer);
    for (int i = 0; i < 5; i++) CHECK(buf[i] == value(peer, 3 + i), "long_get[%d] = %ld", i, buf[i]);
    memset(buf, 0, sizeof buf);
    shmem_get64(buf, heap + 10, 2, peer);
    CHECK(buf[0] == value(peer, 10) && buf[1] == value(peer, 11), "get64");
    memset(buf, 0, sizeof buf);
    shmem_get32(buf, heap + 12, 2, peer); /* 2 x 4 bytes: one long */
    CHECK(buf[0] == value(peer, 12) && buf[1] == 0, "get32 copied %ld %ld", buf[0], buf[1]);
    CHECK(shmem_long_g(heap + 20, peer) == value(peer, 20), "long_g");
    CHECK(shmem_int_g((int *)(heap + 21), peer) == (int)value(peer, 21), "int_g");
    {
        double d, want;
        long bits = value(peer, 22);
        memcpy(&want, &bits, sizeof want);
        d = shmem_double_g((double *)(heap + 22), peer);
        CHECK(memcmp(&d, &want, sizeof d) == 0, "double_g");
    }
    {
        long double ld = 1.5L * me;
        long double *lds = shmem_malloc(sizeof(long double));
        *lds = ld;
        shmem_barrier_all();
        CHECK(shmem_longdouble_g(lds, peer) == 1.5L * peer, "longdouble_g");
        shmem_barrier_all();
        shmem_free(lds);
    }
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    CHECK(shmem_g(heap + 23, peer) == value(peer, 23), "generic g");
    CHECK(shmem_g((const long *)(heap + 24), peer) == value(peer, 24), "generic g, const");
    memset(buf, 0, sizeof buf);
    shmem_get(buf, heap + 25, 2, peer);
    CHECK(buf[0] == value(peer, 25) && buf[1] == value(peer, 26), "generic get");
    memset(buf, 0, sizeof buf);
    shmem_get(SHMEM_CTX_DEFAULT, buf, heap + 27, 1, peer);
    CHECK(buf[0] == value(peer, 27), "generic get, context form");
#endif
    /* The library's own function, by address. */
    void (*getmem)(void *, const void *, size_t, int) = &shmem_getmem;
    memset(buf, 0, sizeof buf);
    getmem(buf, heap + 30, 8, peer);
    CHECK(buf[0] == value(peer, 30), "getmem by address");
    /* Paths the inline copy declines: this PE, static data, another context. */
    CHECK(shmem_long_g(heap + 31, me) == value(me, 31), "long_g of this PE");
    CHECK(shmem_long_g(stat_data + 5, peer) == -value(peer, 5), "long_g of static data");
    memset(buf, 0, sizeof buf);
    shmem_getmem(buf, stat_data + 6, 16, peer);
    CHECK(buf[0] == -value(peer, 6) && buf[1] == -value(peer, 7), "getmem of static data");
    memset(buf, 0, sizeof buf);
    shmem_ctx_getmem(SHMEM_CTX_DEFAULT, buf, heap + 32, 8, peer);
    CHECK(buf[0] == value(peer, 32), "ctx_getmem");

    /* Puts of every family into the peer's heap[48 ..] and static data, then a
     * quiet and a barrier; the peer checks what landed in its own. */
    long *in = heap + 48; /* heap[48 .. 62]: no cell read elsewhere */
    shmem_barrier_all();
    long src[8];
    for (int i = 0; i < 8; i++) src[i] = value(me, 1000 + i);
    shmem_putmem(in, src, 2 * sizeof(long), peer);               /* in[0..2] */
    shmem_long_put(in + 2, src + 2, 2, peer);                      /* in[2..4] */
    shmem_put64(in + 4, src + 4, 1, peer);                         /* in[4] */
    shmem_long_p(in + 5, src[5], peer);                            /* in[5] */
    shmem_fence();
    shmem_int_p((int *)(in + 6), (int)src[6], peer);               /* in[6], low int */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    shmem_p(in + 7, src[7], peer);                                 /* in[7] */
    shmem_put(in + 8, src, 1, peer);                               /* in[8] */
#else
    shmem_long_p(in + 7, src[7], peer);
    shmem_long_put(in + 8, src, 1, peer);
#endif
    shmem_long_p(stat_data + 9, src[1], peer);                     /* static data */
    shmem_putmem(stat_data + 10, src + 2, sizeof(long), peer);
    shmem_ctx_putmem(SHMEM_CTX_DEFAULT, in + 9, src + 3, sizeof(long), peer);
    shmem_putmem_nbi(in + 10, src + 4, sizeof(long), peer);       /* in[10] */
    shmem_long_put_nbi(in + 11, src + 5, 1, peer);                 /* in[11] */
    shmem_put64_nbi(in + 12, src + 6, 1, peer);                    /* in[12] */
    shmem_quiet();
    shmem_barrier_all();
    int from = (me + npes - 1) % npes;
    for (int i = 0; i < 6; i++) CHECK(in[i] == value(from, 1000 + i), "put in[%d] = %ld", i, in[i]);
    CHECK(*(int *)(in + 6) == (int)value(from, 1006), "int_p");
    CHECK(in[7] == value(from, 1007) && in[8] == value(from, 1000), "generic p and put");
    CHECK(in[9] == value(from, 1003), "ctx_putmem");
    CHECK(in[10] == value(from, 1004) && in[11] == value(from, 1005) && in[12] == value(from, 1006),
          "nbi puts %ld %ld %ld", in[10], in[11], in[12]);
    memset(buf, 0, sizeof buf);
    shmem_getmem_nbi(buf, heap + 1, sizeof(long), peer);
    shmem_long_get_nbi(buf + 1, heap + 2, 1, peer);
    shmem_get32_nbi(buf + 2, heap + 3, 2, peer);
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    shmem_get_nbi(buf + 3, heap + 4, 1, peer);
    shmem_put_nbi(in + 13, src + 7, 1, peer);
#else
    shmem_long_get_nbi(buf + 3, heap + 4, 1, peer);
    shmem_long_put_nbi(in + 13, src + 7, 1, peer);
#endif
    shmem_quiet();
    for (int i = 0; i < 4; i++) CHECK(buf[i] == value(peer, 1 + i), "nbi get %d = %ld", i, buf[i]);
    shmem_barrier_all();
    CHECK(in[13] == value(from, 1007), "generic put_nbi");
    CHECK(stat_data[9] == value(from, 1001) && stat_data[10] == value(from, 1002), "puts to static data");
    shmem_barrier_all();

    /* Overlapping source and destination, as memmove: within this PE's heap (put
     * and get), and into the peer's heap through the mapping shmem_ptr gives. */
    {
        enum { L = 300 };
        unsigned char *r = shmem_malloc(2 * L);
        for (int i = 0; i < 2 * L; i++) r[i] = (unsigned char)(i * 3 + me);
        shmem_putmem(r + 5, r, L, me);
        int bad = 0;
        for (int i = 0; i < L; i++) bad += r[5 + i] != (unsigned char)(i * 3 + me);
        CHECK(bad == 0, "overlapping put on this PE: %d bytes wrong", bad);
        for (int i = 0; i < 2 * L; i++) r[i] = (unsigned char)(i * 5 + me);
        shmem_getmem(r, r + 7, L, me);
        bad = 0;
        for (int i = 0; i < L; i++) bad += r[i] != (unsigned char)((i + 7) * 5 + me);
        CHECK(bad == 0, "overlapping get on this PE: %d bytes wrong", bad);
        for (int i = 0; i < 2 * L; i++) r[i] = (unsigned char)(i * 7 + me);
        shmem_barrier_all();
        unsigned char *pr = shmem_ptr(r, peer);
        if (pr != NULL) {
            /* Peer's r[0 .. L) moved to its r[3 ..] by a get from it into its own
             * mapping, then its r[1 ..] moved back to r[0 ..] by a put from it. */
            shmem_getmem(pr + 3, r, L, peer);
            shmem_putmem(r, pr + 1, L, peer);
        }
        shmem_barrier_all();
        if (pr != NULL) {
            /* Mine, done by the PE before me (both PEs map each other or neither). */
            bad = 0;
            for (int i = 0; i < L; i++) {
                int was = i + 1 < 3 ? i + 1 : i + 1 - 3; /* r[i + 1] after the get */
                bad += r[i] != (unsigned char)(was * 7 + me);
            }
            CHECK(bad == 0, "overlapping get and put through shmem_ptr: %d bytes wrong", bad);
        }
        shmem_barrier_all();
        shmem_free(r);
    }

    int inline_on = 0;
#ifdef GEXSHMEM_INLINE_CALLS
    inline_on = 1;
    const gexshmem_view_t *v = gexshmem_view_v1;
    CHECK(v != NULL, "no view after shmem_init");
    if (v != NULL) {
        CHECK(v->npes == (uint32_t)npes && v->me == (uint32_t)me, "view npes %u me %u", v->npes, v->me);
        CHECK((uintptr_t)heap >= v->heap_base, "the heap below the view's base");
        uintptr_t lim = v->peers[peer].lim;
        CHECK((lim != 0) == expect_inline, "peer %d mapped: %d, expected %d", peer, lim != 0, expect_inline);
        long one = 0;
        /* Taken: a mapped peer's heap. */
        CHECK(gexshmem_direct_get(&one, heap + 40, 8, peer) == expect_inline, "direct get of the peer's heap");
        if (expect_inline) CHECK(one == value(peer, 40), "direct get copied %ld", one);
        /* Declined: this PE, static data, a null destination, an out-of-range PE. */
        CHECK(!gexshmem_direct_get(&one, heap, 8, me), "direct get of this PE");
        CHECK(!gexshmem_direct_get(&one, stat_data, 8, peer), "direct get of static data");
        CHECK(!gexshmem_direct_get(NULL, heap, 8, peer), "direct get into NULL");
        CHECK(!gexshmem_direct_get(&one, heap, 8, npes), "direct get of PE npes");
        CHECK(!gexshmem_direct_get(&one, heap, 8, -1), "direct get of PE -1");
        /* Puts: taken for a mapped peer's heap (this PE's too), declined otherwise. */
        long word = 42;
        CHECK(gexshmem_direct_put(heap + 41, &word, 8, peer) == expect_inline, "direct put to the peer's heap");
        int own_mapped = v->peers[me].lim != 0; /* smp and ofi: yes; the AM path: no */
        CHECK(gexshmem_direct_put(heap + 41, &word, 8, me) == own_mapped, "direct put to this PE");
        if (own_mapped) CHECK(heap[41] == 42, "direct put to this PE: %ld", heap[41]);
        CHECK(!gexshmem_direct_put(stat_data, &word, 8, peer), "direct put to static data");
        CHECK(!gexshmem_direct_put(heap, NULL, 8, peer), "direct put from NULL");
        CHECK(!gexshmem_direct_put(heap, &word, 8, npes), "direct put to PE npes");
        /* Quiet: nothing went through the network since the last quiet. */
        CHECK(gexshmem_direct_quiet(), "direct quiet after a quiet");
        if (lim != 0) {
            const char *base = (const char *)v->heap_base;
            /* The last 8 bytes of the reach are taken, one more byte is not, nor is a
             * length that wraps the address space; nothing at the end is taken. */
            CHECK(gexshmem_direct_get(&one, base + lim - 8, 8, peer), "the last word");
            CHECK(!gexshmem_direct_get(&one, base + lim - 8, 9, peer), "past the end");
            CHECK(!gexshmem_direct_get(&one, base + lim + 8, 0, peer), "beyond the end, empty");
            CHECK(gexshmem_direct_get(&one, base + lim, 0, peer), "at the end, empty");
            CHECK(!gexshmem_direct_get(&one, base + 8, SIZE_MAX, peer), "a wrapping length");
            CHECK(!gexshmem_direct_get(&one, base - 8, 8, peer), "below the heap");
            CHECK(!gexshmem_direct_put((char *)base + lim - 8, &one, 9, peer), "a put past the end");
        }
    }
#endif
    shmem_barrier_all();
    shmem_free(heap);
    shmem_finalize();
#ifdef GEXSHMEM_INLINE_CALLS
    CHECK(gexshmem_view_v1 == NULL, "the view is still published after shmem_finalize");
#endif
    if (failures != 0) {
        fprintf(stderr, "inline_calls: PE %d: %d failures\n", me, failures);
        return 1;
    }
    if (me == 0) printf("inline_calls: ok (%d PEs, inline %s, expected direct %d)\n", npes, inline_on ? "on" : "off", expect_inline);
    return 0;
}
