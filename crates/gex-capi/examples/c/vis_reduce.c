/* vis_reduce.c: non-contiguous RMA (VIS) and user-defined reductions.
 * Every rank puts a 3 x 3 sub-matrix of its 4 x 5 matrix, rows in reverse order
 * (a negative byte stride), into the next rank's segment with gex_put_strided, reads
 * the diagonal back with an indexed get and the whole block with a nonblocking strided
 * get into a gappy buffer, puts two pieces with a vector put; then reduces 2 x 2
 * integer matrices and affine maps with non-commutative user operators
 * (gex_allreduce_user, its _nb form, gex_scan_user, gex_exscan_user and
 * gex_reduce_scatter_user_nb) and checks the products in rank order; reads pieces
 * back with an NBI vector get.
 *   gex-run -n 3 ./vis_reduce */
#include "check.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define A_OFF 1024 /* strided blocks: A_OFF + writer * A_BLK */
#define A_BLK 64
#define B_OFF 8192 /* vector pieces: B_OFF + writer * B_BLK */
#define B_BLK 32

typedef struct { int64_t m[4]; } mat2; /* 2 x 2, row-major */

static mat2 mul(mat2 a, mat2 b) {
    mat2 c = {{a.m[0] * b.m[0] + a.m[1] * b.m[2], a.m[0] * b.m[1] + a.m[1] * b.m[3],
               a.m[2] * b.m[0] + a.m[3] * b.m[2], a.m[2] * b.m[1] + a.m[3] * b.m[3]}};
    return c;
}

/* inout[i] = inout[i] * in[i]; counts its calls in *arg. */
static void matmul(void *inout, const void *in, size_t count, void *arg) {
    mat2 *a = inout;
    const mat2 *b = in;
    for (size_t i = 0; i < count; i++) a[i] = mul(a[i], b[i]);
    ++*(size_t *)arg;
}

/* Affine maps x -> a x + b as {a, b}; inout = inout after in (apply in first). */
typedef struct { double a, b; } affine;
static void compose(void *inout, const void *in, size_t count, void *arg) {
    affine *f = inout;
    const affine *g = in;
    (void)arg;
    for (size_t i = 0; i < count; i++) {
        affine h = {f[i].a * g[i].a, f[i].a * g[i].b + f[i].b};
        f[i] = h;
    }
}

static mat2 rank_mat(uint32_t r) {
    mat2 m = {{(int64_t)r + 1, 1, 1, 0}};
    return m;
}
static mat2 rank_mat2(uint32_t r) {
    mat2 m = {{1, (int64_t)r + 2, 0, 1}};
    mat2 s = {{1, 0, (int64_t)r, 1}};
    return mul(m, s);
}
static affine rank_aff(uint32_t r) {
    affine f = {2.0, (double)r};
    return f;
}

int main(void) {
    gex_client_t *client;
    gex_ep_t *ep;
    gex_team_t *world;
    uint32_t rank, size;
    unsigned char *seg;
    size_t seg_len;
    CHECK(gex_client_init(1 << 16, &client));
    CHECK(gex_ep_open(client, 0, &ep));
    CHECK(gex_ep_rank(ep, &rank, &size));
    CHECK(gex_ep_segment(ep, (void **)&seg, &seg_len));
    CHECK(gex_team_world(ep, &world));
    if (seg_len < B_OFF + (size_t)size * B_BLK) FAIL("segment too small");
    uint32_t next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Strided put: rows 3, 2, 1 (stride -5 ints), columns 1..3 of m, to a packed
     * 3 x 3 block of int32 in the next rank's segment. */
    int32_t m[4][5];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) m[i][j] = (int32_t)(rank * 100 + i * 10 + j);
    const ptrdiff_t src_strides[2] = {sizeof(int32_t), -5 * (ptrdiff_t)sizeof(int32_t)};
    const ptrdiff_t dst_strides[2] = {sizeof(int32_t), 3 * sizeof(int32_t)};
    const size_t counts[2] = {3, 3};
    size_t a_mine = A_OFF + (size_t)rank * A_BLK;
    CHECK(gex_put_strided(ep, next, a_mine, dst_strides, &m[3][1], src_strides,
                          sizeof(int32_t), counts, 2));
    /* Too far: the last row would leave the segment; nothing moves. */
    EXPECT(GEX_ERR_RMA, gex_put_strided(ep, next, seg_len - 8, dst_strides, &m[3][1],
                                        src_strides, sizeof(int32_t), counts, 2));
    CHECK(gex_barrier(ep));
    int32_t got[9];
    memcpy(got, seg + A_OFF + (size_t)prev * A_BLK, sizeof got);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            if (got[r * 3 + c] != (int32_t)(prev * 100 + (3 - r) * 10 + 1 + c))
                FAIL("strided block [%d][%d] = %d", r, c, got[r * 3 + c]);

    /* Indexed get of the diagonal of the block this rank wrote. */
    size_t diag[3];
    for (int r = 0; r < 3; r++) diag[r] = a_mine + (size_t)(r * 3 + r) * sizeof(int32_t);
    int32_t d[3];
    CHECK(gex_get_indexed(ep, d, next, diag, 3, sizeof(int32_t)));
    for (int r = 0; r < 3; r++)
        if (d[r] != (int32_t)(rank * 100 + (3 - r) * 10 + 1 + r)) FAIL("diag[%d] = %d", r, d[r]);

    /* Nonblocking strided get of that block back into the same places of a 4 x 5
     * buffer: the gaps keep their values. */
    int32_t back[4][5];
    memset(back, 0xff, sizeof back);
    gex_event_t *ev;
    CHECK(gex_get_strided_nb(ep, &back[3][1], src_strides, next, a_mine, dst_strides,
                             sizeof(int32_t), counts, 2, &ev));
    CHECK(gex_event_wait(ep, &ev));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            int in = i >= 1 && j >= 1 && j <= 3;
            if (back[i][j] != (in ? m[i][j] : -1)) FAIL("back[%d][%d] = %d", i, j, back[i][j]);
        }

    /* Vector put: 8 bytes at +16 and 4 bytes at +0 of my block in the next segment. */
    size_t b_mine = B_OFF + (size_t)rank * B_BLK;
    gex_piece_t pieces[2] = {{b_mine + 16, 8}, {b_mine, 4}};
    int32_t v[3] = {(int32_t)rank * 7, (int32_t)rank * 7 + 1, (int32_t)rank * 7 + 2};
    EXPECT(GEX_ERR_INVALID, gex_put_vector(ep, next, pieces, 2, v, 8));
    CHECK(gex_put_vector_nbi(ep, next, pieces, 2, v, sizeof v));
    CHECK(gex_nbi_sync(ep, GEX_NBI_PUTS));
    CHECK(gex_barrier(ep));
    int32_t w[3];
    memcpy(&w[0], seg + B_OFF + (size_t)prev * B_BLK + 16, 8);
    memcpy(&w[2], seg + B_OFF + (size_t)prev * B_BLK, 4);
    for (int k = 0; k < 3; k++)
        if (w[k] != (int32_t)prev * 7 + k) FAIL("vector piece %d = %d", k, w[k]);
    /* The same pieces again with an NBI vector get, completed by the gets' sync. */
    int32_t w2[3] = {-1, -1, -1};
    size_t b_prev = B_OFF + (size_t)prev * B_BLK;
    gex_piece_t mine_pieces[2] = {{b_prev + 16, 8}, {b_prev, 4}};
    CHECK(gex_get_vector_nbi(ep, w2, sizeof w2, rank, mine_pieces, 2));
    CHECK(gex_nbi_sync(ep, GEX_NBI_GETS));
    for (int k = 0; k < 3; k++)
        if (w2[k] != (int32_t)prev * 7 + k) FAIL("vector NBI get piece %d = %d", k, w2[k]);

    /* Non-commutative user reductions, combined in rank order. */
    size_t calls = 0;
    gex_user_op_t *matop, *affop, *bad = NULL;
    CHECK(gex_op_create(matmul, sizeof(mat2), 0, &calls, &matop));
    CHECK(gex_op_create(compose, sizeof(affine), 0, NULL, &affop));
    EXPECT(GEX_ERR_INVALID, gex_op_create(matmul, 24, 0, NULL, &bad));
    mat2 mine[2] = {rank_mat(rank), rank_mat2(rank)}, all[2], want[2], pre[2];
    want[0] = rank_mat(0);
    want[1] = rank_mat2(0);
    for (uint32_t r = 1; r < size; r++) {
        if (r == rank + 1) memcpy(pre, want, sizeof pre);
        want[0] = mul(want[0], rank_mat(r));
        want[1] = mul(want[1], rank_mat2(r));
    }
    if (rank + 1 == size) memcpy(pre, want, sizeof pre);
    CHECK(gex_allreduce_user(ep, world, mine, all, 2, matop));
    if (memcmp(all, want, sizeof all)) FAIL("allreduce of matrices: wrong product");
    CHECK(gex_scan_user(ep, world, mine, all, 2, matop));
    if (memcmp(all, pre, sizeof all)) FAIL("scan of matrices: wrong prefix product");
    /* Exclusive scan: rank r > 0 receives the product of ranks 0..r-1; rank 0's dst
     * is left as it was. */
    mat2 ex[2], ex_want[2] = {rank_mat(0), rank_mat2(0)};
    memset(ex, 0x5a, sizeof ex);
    for (uint32_t r = 1; r < rank; r++) {
        ex_want[0] = mul(ex_want[0], rank_mat(r));
        ex_want[1] = mul(ex_want[1], rank_mat2(r));
    }
    if (rank == 0) memcpy(ex_want, ex, sizeof ex);
    CHECK(gex_exscan_user(ep, world, mine, ex, 2, matop));
    if (memcmp(ex, ex_want, sizeof ex)) FAIL("exscan of matrices: wrong exclusive prefix");
    /* Reduce_scatter: block i of rank r is rank_mat(r + i); rank i receives
     * rank_mat(i) * rank_mat(1 + i) * ... in rank order. */
    mat2 *blocks = malloc(size * sizeof(mat2)), mine_rs, rs_want = rank_mat(rank);
    if (!blocks) FAIL("malloc");
    for (uint32_t i = 0; i < size; i++) blocks[i] = rank_mat(rank + i);
    for (uint32_t r = 1; r < size; r++) rs_want = mul(rs_want, rank_mat(r + rank));
    CHECK(gex_reduce_scatter_user_nb(ep, world, blocks, &mine_rs, 1, matop, &ev));
    CHECK(gex_event_wait(ep, &ev));
    if (memcmp(&mine_rs, &rs_want, sizeof rs_want)) FAIL("reduce_scatter of matrices: wrong block");
    free(blocks);
    affine f = rank_aff(rank), g, fw = rank_aff(0);
    for (uint32_t r = 1; r < size; r++) {
        affine h = rank_aff(r), c = {fw.a * h.a, fw.a * h.b + fw.b};
        fw = c;
    }
    CHECK(gex_allreduce_user_nb(ep, world, &f, &g, 1, affop, &ev));
    CHECK(gex_event_wait(ep, &ev));
    if (g.a != fw.a || g.b != fw.b) FAIL("affine composition %g x + %g, expected %g x + %g", g.a, g.b, fw.a, fw.b);
    if (size > 1 && calls == 0) FAIL("the matrix operator was never called");
    CHECK(gex_op_free(matop));
    CHECK(gex_op_free(affop));

    CHECK(gex_barrier(ep));
    printf("rank %u of %u: vis and user reductions ok\n", rank, size);
    CHECK(gex_team_free(ep, world));
    CHECK(gex_ep_close(ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
