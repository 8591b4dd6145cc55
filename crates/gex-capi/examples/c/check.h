/* check.h: the examples' error check. Every gex call returns a gex_status_t. */
#ifndef EXAMPLE_CHECK_H
#define EXAMPLE_CHECK_H
#include <gex.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != GEX_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s (%d): %s\n", __FILE__, __LINE__, #call,    \
                    gex_error_message(rc_), rc_, gex_last_error());                    \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Expects `call` to fail with `code`. */
#define EXPECT(code, call)                                                            \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != (code)) {                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__,     \
                    __LINE__, #call, rc_, gex_error_message(rc_), (int)(code));       \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Reports a failed check of this rank (a `rank` variable in scope) and exits. */
#define FAIL(...)                                                                     \
    do {                                                                              \
        fprintf(stderr, "rank %u: ", rank);                                           \
        fprintf(stderr, __VA_ARGS__);                                                 \
        fputc('\n', stderr);                                                          \
        exit(1);                                                                      \
    } while (0)
#endif
