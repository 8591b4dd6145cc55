/* hello.c: every rank says who it is, then all meet in a barrier.
 *   cc hello.c $(pkg-config --cflags --libs gex) -o hello && gex-run -n 2 ./hello */
#include "check.h"

int main(void) {
    gex_client_t *client;
    gex_ep_t *ep;
    uint32_t rank, size;
    CHECK(gex_client_init(0, &client));
    CHECK(gex_client_rank(client, &rank));
    CHECK(gex_client_size(client, &size));
    CHECK(gex_ep_open(client, 0, &ep));
    printf("hello from rank %u of %u\n", rank, size);
    fflush(stdout);
    CHECK(gex_barrier(ep));
    /* Finalising with an endpoint open is refused, and changes nothing. */
    EXPECT(GEX_ERR_STATE, gex_client_finalize(client));
    CHECK(gex_ep_close(ep));
    CHECK(gex_client_finalize(client));
    return 0;
}
