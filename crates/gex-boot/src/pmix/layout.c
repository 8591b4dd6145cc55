/* Compile-time check of the declarations in ffi.rs against the real pmix.h: the
 * build fails here if a size, offset or constant the Rust side hard-codes differs.
 * Keep the numbers in step with ffi.rs (which asserts the same sizes on its side). */
#include <stddef.h>
#include <stdint.h>
#include <pmix.h>

_Static_assert(PMIX_MAX_NSLEN == 255, "PMIX_MAX_NSLEN");
_Static_assert(sizeof(pmix_proc_t) == 260, "sizeof(pmix_proc_t)");
_Static_assert(offsetof(pmix_proc_t, rank) == 256, "pmix_proc_t.rank");
_Static_assert(sizeof(pmix_rank_t) == 4, "pmix_rank_t");
_Static_assert(sizeof(pmix_status_t) == sizeof(int), "pmix_status_t");
_Static_assert(sizeof(pmix_data_type_t) == 2, "pmix_data_type_t");
_Static_assert(sizeof(pmix_scope_t) == 1, "pmix_scope_t");
_Static_assert(sizeof(pmix_byte_object_t) == 16, "sizeof(pmix_byte_object_t)");
_Static_assert(offsetof(pmix_byte_object_t, size) == 8, "pmix_byte_object_t.size");
_Static_assert(sizeof(pmix_value_t) == 32, "sizeof(pmix_value_t)");
_Static_assert(offsetof(pmix_value_t, data) == 8, "pmix_value_t.data");
_Static_assert(sizeof(pmix_info_t) == 552, "sizeof(pmix_info_t)");
_Static_assert(offsetof(pmix_info_t, flags) == 512, "pmix_info_t.flags");
_Static_assert(offsetof(pmix_info_t, value) == 520, "pmix_info_t.value");
_Static_assert(PMIX_RANK_WILDCARD == 4294967294u, "PMIX_RANK_WILDCARD");
_Static_assert(PMIX_SUCCESS == 0, "PMIX_SUCCESS");
_Static_assert(PMIX_ERR_NOT_FOUND == -46, "PMIX_ERR_NOT_FOUND");
_Static_assert(PMIX_ERR_TIMEOUT == -24, "PMIX_ERR_TIMEOUT");
_Static_assert(PMIX_ERR_UNREACH == -25, "PMIX_ERR_UNREACH");
_Static_assert(PMIX_ERR_LOST_CONNECTION == -61, "PMIX_ERR_LOST_CONNECTION");
_Static_assert(PMIX_BOOL == 1, "PMIX_BOOL");
_Static_assert(PMIX_INT == 6, "PMIX_INT");
_Static_assert(PMIX_STRING == 3, "PMIX_STRING");
_Static_assert(PMIX_UINT32 == 14, "PMIX_UINT32");
_Static_assert(PMIX_BYTE_OBJECT == 27, "PMIX_BYTE_OBJECT");
_Static_assert(PMIX_GLOBAL == 3, "PMIX_GLOBAL");

/* An archive with one symbol: some archivers dislike empty objects. */
const int gex_pmix_layout_checked = 1;
