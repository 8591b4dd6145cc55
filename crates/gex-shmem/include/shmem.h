/*
 * shmem.h: OpenSHMEM 1.5 for C on gex (libgexshmem). Hand-written; every function it
 * declares is exported by libgexshmem and every exported shmem_ function is declared
 * here (crates/gex-shmem/tests/exports.sh checks both ways).
 *
 * Build: cc prog.c $(pkg-config --cflags --libs gexshmem)   (or: oshcc prog.c)
 * Run:   gex-run -n 4 ./prog                                  (or: oshrun -n 4 ./prog)
 * What is supported and what is not: docs/shmem.md.
 *
 * The typed families are declared through X-macros over the specification's type
 * tables; the generic names (shmem_put, shmem_atomic_fetch_add, ...) are C11 _Generic
 * selections over the distinct standard C types (fixed-width types are aliases of them).
 */
#ifndef GEXSHMEM_SHMEM_H
#define GEXSHMEM_SHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Constants ---------------------------------------------------------------- */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define SHMEM_MAX_NAME_LEN 256
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define SHMEM_VENDOR_STRING "gex-shmem (OpenSHMEM on gex)"
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_LE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_GE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_LE SHMEM_CMP_LE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_GE SHMEM_CMP_GE

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

#define SHMEM_CTX_PRIVATE 1
#define SHMEM_CTX_SERIALIZED 2
#define SHMEM_CTX_NOSTORE 4

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L
#define SHMEM_MALLOC_INVALID_HINT (~3L)

#define SHMEM_TEAM_NUM_CONTEXTS 1L

/* Work arrays of the deprecated active-set collectives (which gex-shmem does not
 * provide: docs/shmem.md); kept so that programs declaring them compile. */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_BARRIER_SYNC_SIZE 1
#define SHMEM_BCAST_SYNC_SIZE 1
#define SHMEM_REDUCE_SYNC_SIZE 1
#define SHMEM_COLLECT_SYNC_SIZE 1
#define SHMEM_ALLTOALL_SYNC_SIZE 1
#define SHMEM_ALLTOALLS_SYNC_SIZE 1
#define SHMEM_SYNC_SIZE 1
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---- Handles ------------------------------------------------------------------ */
/* Teams and contexts are small handles into the library's tables (never dereferenced). */
typedef struct gexshmem_team *shmem_team_t;
typedef struct gexshmem_ctx *shmem_ctx_t;
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_TEAM_WORLD ((shmem_team_t)1)
#define SHMEM_TEAM_SHARED ((shmem_team_t)2)
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_DEFAULT ((shmem_ctx_t)1)

typedef struct {
    int num_contexts;
} shmem_team_config_t;

/* ---- Setup, exit, query ------------------------------------------------------- */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void *shmem_team_ptr(shmem_team_t team, const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);
/* Profiling control: gex-shmem has no profiling interface, so this does nothing. */
static inline void shmem_pcontrol(const int level, ...) { (void)level; }

/* ---- Symmetric heap ----------------------------------------------------------- */
void *shmem_malloc(size_t size);
void *shmem_malloc_with_hints(size_t size, long hints);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);

/* ---- Type tables (the specification's) ---------------------------------------- */
#define GEXSHMEM_RMA_TYPES_NO_LD(X) \
    X(float, float) X(double, double) X(char, char) X(signed char, schar) \
    X(short, short) X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint) \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8) \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8) \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) \
    X(ptrdiff_t, ptrdiff)
#define GEXSHMEM_RMA_TYPES(X) GEXSHMEM_RMA_TYPES_NO_LD(X) X(long double, longdouble)
#define GEXSHMEM_SIZES(X) X(8) X(16) X(32) X(64) X(128)
#define GEXSHMEM_AMO_STD_TYPES(X) \
    X(int, int) X(long, long) X(long long, longlong) X(unsigned int, uint) \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int32_t, int32) \
    X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) \
    X(ptrdiff_t, ptrdiff)
#define GEXSHMEM_AMO_EXT_TYPES(X) GEXSHMEM_AMO_STD_TYPES(X) X(float, float) X(double, double)
#define GEXSHMEM_AMO_BIT_TYPES(X) \
    X(unsigned int, uint) X(unsigned long, ulong) X(unsigned long long, ulonglong) \
    X(int32_t, int32) X(int64_t, int64) X(uint32_t, uint32) X(uint64_t, uint64)
#define GEXSHMEM_P2P_TYPES(X) \
    X(short, short) X(int, int) X(long, long) X(long long, longlong) \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) X(int32_t, int32) X(int64_t, int64) \
    X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) X(ptrdiff_t, ptrdiff)
#define GEXSHMEM_BIT_RED_TYPES(X) \
    X(unsigned char, uchar) X(unsigned short, ushort) X(unsigned int, uint) \
    X(unsigned long, ulong) X(unsigned long long, ulonglong) X(int8_t, int8) \
    X(int16_t, int16) X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8) \
    X(uint16_t, uint16) X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size)
#define GEXSHMEM_CMP_RED_TYPES(X) \
    X(char, char) X(signed char, schar) X(short, short) X(int, int) X(long, long) \
    X(long long, longlong) X(ptrdiff_t, ptrdiff) X(unsigned char, uchar) \
    X(unsigned short, ushort) X(unsigned int, uint) X(unsigned long, ulong) \
    X(unsigned long long, ulonglong) X(int8_t, int8) X(int16_t, int16) \
    X(int32_t, int32) X(int64_t, int64) X(uint8_t, uint8) X(uint16_t, uint16) \
    X(uint32_t, uint32) X(uint64_t, uint64) X(size_t, size) X(float, float) \
    X(double, double)

/* ---- RMA ---------------------------------------------------------------------- */
#define GEXSHMEM_DECL_RMA(T, N) \
    void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_ctx_##N##_put(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_ctx_##N##_get(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe); \
    void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe); \
    void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
GEXSHMEM_RMA_TYPES(GEXSHMEM_DECL_RMA)

#define GEXSHMEM_DECL_PG(T, N) \
    void shmem_##N##_p(T *dest, T value, int pe); \
    void shmem_ctx_##N##_p(shmem_ctx_t ctx, T *dest, T value, int pe); \
    T shmem_##N##_g(const T *source, int pe); \
    T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T *source, int pe);
GEXSHMEM_RMA_TYPES_NO_LD(GEXSHMEM_DECL_PG)

/* long double is passed by value in x87 registers, which the library's language does
 * not have: its p and g are put and get of one element, inline. */
static inline void shmem_ctx_longdouble_p(shmem_ctx_t ctx, long double *dest, long double value, int pe) {
    shmem_ctx_longdouble_put(ctx, dest, &value, 1, pe);
}
static inline void shmem_longdouble_p(long double *dest, long double value, int pe) {
    shmem_ctx_longdouble_put(SHMEM_CTX_DEFAULT, dest, &value, 1, pe);
}
static inline long double shmem_ctx_longdouble_g(shmem_ctx_t ctx, const long double *source, int pe) {
    long double v;
    shmem_ctx_longdouble_get(ctx, &v, source, 1, pe);
    return v;
}
static inline long double shmem_longdouble_g(const long double *source, int pe) {
    return shmem_ctx_longdouble_g(SHMEM_CTX_DEFAULT, source, pe);
}

#define GEXSHMEM_DECL_SIZED(S) \
    void shmem_put##S(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_ctx_put##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##S(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_ctx_get##S(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe); \
    void shmem_put##S##_nbi(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_ctx_put##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe); \
    void shmem_get##S##_nbi(void *dest, const void *source, size_t nelems, int pe); \
    void shmem_ctx_get##S##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe); \
    void shmem_put##S##_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_ctx_put##S##_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_put##S##_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe); \
    void shmem_ctx_put##S##_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
#define GEXSHMEM_DECL_STRIDED(S) \
    void shmem_iput##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_ctx_iput##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_iget##S(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe); \
    void shmem_ctx_iget##S(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);
GEXSHMEM_SIZES(GEXSHMEM_DECL_SIZED)
GEXSHMEM_DECL_SIZED(mem)
GEXSHMEM_SIZES(GEXSHMEM_DECL_STRIDED)

uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
void shmem_fence(void);
void shmem_ctx_fence(shmem_ctx_t ctx);
void shmem_quiet(void);
void shmem_ctx_quiet(shmem_ctx_t ctx);

/* ---- Inline calls ------------------------------------------------------------
 * The puts and gets on the default context (shmem_putmem, shmem_getmem, the sized
 * and typed put and get, their _nbi forms, the typed p and g), shmem_fence and
 * shmem_quiet are inlined into the program where the library would do no more than
 * the CPU can:
 *  - a put or get when the other PE's heap is mapped in this process (over smp: every
 *    PE of the node; a get also needs that PE not to be this one, whose gets serve
 *    incoming requests): a range check and a copy from or to the mapping that
 *    shmem_init published, complete when it returns, as the library's;
 *  - fence and quiet when no operation went through the network since the last
 *    quiet: a full memory barrier.
 * Everything else calls the library: another context, static data, PEs reached
 * through the network, before shmem_init and after shmem_finalize, a null local
 * buffer, a length that overflows. Taking a function's address gives the library's
 * function. Define GEXSHMEM_NO_INLINE before including shmem.h to call the library
 * always. docs/shmem.md, "Inline calls".
 *
 * gexshmem_view_v1, gexshmem_peer_t and gexshmem_view_t are the library's, not
 * OpenSHMEM's: their layout belongs to this version of gex-shmem (header and library
 * are installed together), and a change of layout renames the symbol (_v2), so that a
 * program built against another layout fails to link instead of misreading it. */
#if !defined(GEXSHMEM_NO_INLINE) && (defined(__GNUC__) || defined(__clang__))
#include <string.h>

/* One PE's heap as this process maps it: its address, and how many bytes of it a
 * direct copy may reach (0: not mapped here). */
typedef struct gexshmem_peer { uintptr_t base; uintptr_t lim; } gexshmem_peer_t;
/* This PE's heap address, every PE's gexshmem_peer_t, the library's two flags of work
 * for quiet (a byte and a count, read atomically), the PE count and this PE. */
typedef struct gexshmem_view {
    uintptr_t heap_base;
    const gexshmem_peer_t *peers;
    const unsigned char *ep_nbi;
    const uint64_t *outstanding;
    uint32_t npes;
    uint32_t me;
} gexshmem_view_t;
/* Set by shmem_init once the heaps are mapped, null before it and after
 * shmem_finalize; the view it points to never changes. */
extern gexshmem_view_t *gexshmem_view_v1;

/* Where this process maps the len bytes at symmetric address addr of PE pe (NULL: not
 * a direct copy), given the view v. */
static inline char *gexshmem_direct_at(const gexshmem_view_t *v, const void *addr, size_t len, int pe) {
    if ((uint32_t)pe >= v->npes) return NULL;
    uintptr_t lim = v->peers[pe].lim;
    uintptr_t off = (uintptr_t)addr - v->heap_base;
    if (lim == 0 || off > lim || len > lim - off) return NULL;
    return (char *)v->peers[pe].base + off;
}

/* Copies len bytes at symmetric address source of PE pe into dest when that is a
 * direct copy (returns 1); returns 0, having done nothing, when the library must.
 * memmove: the two may overlap (a put within this PE's heap, a buffer from
 * shmem_ptr); for a constant small length the compiler makes it a load and a store. */
static inline int gexshmem_direct_get(void *dest, const void *source, size_t len, int pe) {
    const gexshmem_view_t *v = __atomic_load_n(&gexshmem_view_v1, __ATOMIC_ACQUIRE);
    if (v == NULL || dest == NULL || (uint32_t)pe == v->me) return 0;
    const char *at = gexshmem_direct_at(v, source, len, pe);
    if (at == NULL) return 0;
    memmove(dest, at, len);
    return 1;
}

/* The same for len bytes from source to symmetric address dest of PE pe. */
static inline int gexshmem_direct_put(void *dest, const void *source, size_t len, int pe) {
    const gexshmem_view_t *v = __atomic_load_n(&gexshmem_view_v1, __ATOMIC_ACQUIRE);
    if (v == NULL || source == NULL) return 0;
    char *at = gexshmem_direct_at(v, dest, len, pe);
    if (at == NULL) return 0;
    memmove(at, source, len);
    return 1;
}

#define GEXSHMEM_FAST_RMA(T, N) \
    static inline void gexshmem_fast_##N##_get(T *dest, const T *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / sizeof(T) || !gexshmem_direct_get(dest, source, nelems * sizeof(T), pe)) \
            (shmem_##N##_get)(dest, source, nelems, pe); \
    } \
    static inline void gexshmem_fast_##N##_put(T *dest, const T *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / sizeof(T) || !gexshmem_direct_put(dest, source, nelems * sizeof(T), pe)) \
            (shmem_##N##_put)(dest, source, nelems, pe); \
    } \
    static inline T gexshmem_fast_##N##_g(const T *source, int pe) { \
        T v; \
        if (gexshmem_direct_get(&v, source, sizeof v, pe)) return v; \
        return (shmem_##N##_g)(source, pe); \
    } \
    static inline void gexshmem_fast_##N##_p(T *dest, T value, int pe) { \
        if (!gexshmem_direct_put(dest, &value, sizeof value, pe)) (shmem_##N##_p)(dest, value, pe); \
    } \
    static inline void gexshmem_fast_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / sizeof(T) || !gexshmem_direct_get(dest, source, nelems * sizeof(T), pe)) \
            (shmem_##N##_get_nbi)(dest, source, nelems, pe); \
    } \
    static inline void gexshmem_fast_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / sizeof(T) || !gexshmem_direct_put(dest, source, nelems * sizeof(T), pe)) \
            (shmem_##N##_put_nbi)(dest, source, nelems, pe); \
    }
#define GEXSHMEM_FAST_SIZED(S) \
    static inline void gexshmem_fast_get##S(void *dest, const void *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / ((S) / 8) || !gexshmem_direct_get(dest, source, nelems * ((S) / 8), pe)) \
            (shmem_get##S)(dest, source, nelems, pe); \
    } \
    static inline void gexshmem_fast_put##S(void *dest, const void *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / ((S) / 8) || !gexshmem_direct_put(dest, source, nelems * ((S) / 8), pe)) \
            (shmem_put##S)(dest, source, nelems, pe); \
    } \
    static inline void gexshmem_fast_get##S##_nbi(void *dest, const void *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / ((S) / 8) || !gexshmem_direct_get(dest, source, nelems * ((S) / 8), pe)) \
            (shmem_get##S##_nbi)(dest, source, nelems, pe); \
    } \
    static inline void gexshmem_fast_put##S##_nbi(void *dest, const void *source, size_t nelems, int pe) { \
        if (nelems > SIZE_MAX / ((S) / 8) || !gexshmem_direct_put(dest, source, nelems * ((S) / 8), pe)) \
            (shmem_put##S##_nbi)(dest, source, nelems, pe); \
    }
GEXSHMEM_RMA_TYPES(GEXSHMEM_FAST_RMA)
GEXSHMEM_SIZES(GEXSHMEM_FAST_SIZED)
static inline void gexshmem_fast_getmem(void *dest, const void *source, size_t nelems, int pe) {
    if (!gexshmem_direct_get(dest, source, nelems, pe)) (shmem_getmem)(dest, source, nelems, pe);
}
static inline void gexshmem_fast_putmem(void *dest, const void *source, size_t nelems, int pe) {
    if (!gexshmem_direct_put(dest, source, nelems, pe)) (shmem_putmem)(dest, source, nelems, pe);
}
static inline void gexshmem_fast_getmem_nbi(void *dest, const void *source, size_t nelems, int pe) {
    if (!gexshmem_direct_get(dest, source, nelems, pe)) (shmem_getmem_nbi)(dest, source, nelems, pe);
}
static inline void gexshmem_fast_putmem_nbi(void *dest, const void *source, size_t nelems, int pe) {
    if (!gexshmem_direct_put(dest, source, nelems, pe)) (shmem_putmem_nbi)(dest, source, nelems, pe);
}

/* A full memory barrier, the library's (on x86-64 a locked or of 0 into a local: it
 * orders every load and store, non-temporal ones included, at half mfence's cost).
 * Then, when nothing went through the network since the last quiet, the direct
 * operations before it are complete and visible: fence and quiet are done. */
static inline int gexshmem_direct_quiet(void) {
    const gexshmem_view_t *v = __atomic_load_n(&gexshmem_view_v1, __ATOMIC_ACQUIRE);
    if (v == NULL) return 0;
#if defined(__x86_64__)
    unsigned w = 0;
    __asm__ __volatile__("lock; orl $0, %0" : "+m"(w) : : "memory", "cc");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
    return !__atomic_load_n(v->ep_nbi, __ATOMIC_ACQUIRE) && __atomic_load_n(v->outstanding, __ATOMIC_ACQUIRE) == 0;
}
static inline void gexshmem_fast_fence(void) {
    if (!gexshmem_direct_quiet()) (shmem_fence)();
}
static inline void gexshmem_fast_quiet(void) {
    if (!gexshmem_direct_quiet()) (shmem_quiet)();
}

/* The names, one by one (a macro cannot define macros; tests/exports.sh checks that
 * every inline call has its name here). */
#define shmem_getmem(...) gexshmem_fast_getmem(__VA_ARGS__)
#define shmem_putmem(...) gexshmem_fast_putmem(__VA_ARGS__)
#define shmem_get8(...) gexshmem_fast_get8(__VA_ARGS__)
#define shmem_get16(...) gexshmem_fast_get16(__VA_ARGS__)
#define shmem_get32(...) gexshmem_fast_get32(__VA_ARGS__)
#define shmem_get64(...) gexshmem_fast_get64(__VA_ARGS__)
#define shmem_get128(...) gexshmem_fast_get128(__VA_ARGS__)
#define shmem_put8(...) gexshmem_fast_put8(__VA_ARGS__)
#define shmem_put16(...) gexshmem_fast_put16(__VA_ARGS__)
#define shmem_put32(...) gexshmem_fast_put32(__VA_ARGS__)
#define shmem_put64(...) gexshmem_fast_put64(__VA_ARGS__)
#define shmem_put128(...) gexshmem_fast_put128(__VA_ARGS__)
#define shmem_float_get(...) gexshmem_fast_float_get(__VA_ARGS__)
#define shmem_double_get(...) gexshmem_fast_double_get(__VA_ARGS__)
#define shmem_longdouble_get(...) gexshmem_fast_longdouble_get(__VA_ARGS__)
#define shmem_char_get(...) gexshmem_fast_char_get(__VA_ARGS__)
#define shmem_schar_get(...) gexshmem_fast_schar_get(__VA_ARGS__)
#define shmem_short_get(...) gexshmem_fast_short_get(__VA_ARGS__)
#define shmem_int_get(...) gexshmem_fast_int_get(__VA_ARGS__)
#define shmem_long_get(...) gexshmem_fast_long_get(__VA_ARGS__)
#define shmem_longlong_get(...) gexshmem_fast_longlong_get(__VA_ARGS__)
#define shmem_uchar_get(...) gexshmem_fast_uchar_get(__VA_ARGS__)
#define shmem_ushort_get(...) gexshmem_fast_ushort_get(__VA_ARGS__)
#define shmem_uint_get(...) gexshmem_fast_uint_get(__VA_ARGS__)
#define shmem_ulong_get(...) gexshmem_fast_ulong_get(__VA_ARGS__)
#define shmem_ulonglong_get(...) gexshmem_fast_ulonglong_get(__VA_ARGS__)
#define shmem_int8_get(...) gexshmem_fast_int8_get(__VA_ARGS__)
#define shmem_int16_get(...) gexshmem_fast_int16_get(__VA_ARGS__)
#define shmem_int32_get(...) gexshmem_fast_int32_get(__VA_ARGS__)
#define shmem_int64_get(...) gexshmem_fast_int64_get(__VA_ARGS__)
#define shmem_uint8_get(...) gexshmem_fast_uint8_get(__VA_ARGS__)
#define shmem_uint16_get(...) gexshmem_fast_uint16_get(__VA_ARGS__)
#define shmem_uint32_get(...) gexshmem_fast_uint32_get(__VA_ARGS__)
#define shmem_uint64_get(...) gexshmem_fast_uint64_get(__VA_ARGS__)
#define shmem_size_get(...) gexshmem_fast_size_get(__VA_ARGS__)
#define shmem_ptrdiff_get(...) gexshmem_fast_ptrdiff_get(__VA_ARGS__)
#define shmem_float_put(...) gexshmem_fast_float_put(__VA_ARGS__)
#define shmem_double_put(...) gexshmem_fast_double_put(__VA_ARGS__)
#define shmem_longdouble_put(...) gexshmem_fast_longdouble_put(__VA_ARGS__)
#define shmem_char_put(...) gexshmem_fast_char_put(__VA_ARGS__)
#define shmem_schar_put(...) gexshmem_fast_schar_put(__VA_ARGS__)
#define shmem_short_put(...) gexshmem_fast_short_put(__VA_ARGS__)
#define shmem_int_put(...) gexshmem_fast_int_put(__VA_ARGS__)
#define shmem_long_put(...) gexshmem_fast_long_put(__VA_ARGS__)
#define shmem_longlong_put(...) gexshmem_fast_longlong_put(__VA_ARGS__)
#define shmem_uchar_put(...) gexshmem_fast_uchar_put(__VA_ARGS__)
#define shmem_ushort_put(...) gexshmem_fast_ushort_put(__VA_ARGS__)
#define shmem_uint_put(...) gexshmem_fast_uint_put(__VA_ARGS__)
#define shmem_ulong_put(...) gexshmem_fast_ulong_put(__VA_ARGS__)
#define shmem_ulonglong_put(...) gexshmem_fast_ulonglong_put(__VA_ARGS__)
#define shmem_int8_put(...) gexshmem_fast_int8_put(__VA_ARGS__)
#define shmem_int16_put(...) gexshmem_fast_int16_put(__VA_ARGS__)
#define shmem_int32_put(...) gexshmem_fast_int32_put(__VA_ARGS__)
#define shmem_int64_put(...) gexshmem_fast_int64_put(__VA_ARGS__)
#define shmem_uint8_put(...) gexshmem_fast_uint8_put(__VA_ARGS__)
#define shmem_uint16_put(...) gexshmem_fast_uint16_put(__VA_ARGS__)
#define shmem_uint32_put(...) gexshmem_fast_uint32_put(__VA_ARGS__)
#define shmem_uint64_put(...) gexshmem_fast_uint64_put(__VA_ARGS__)
#define shmem_size_put(...) gexshmem_fast_size_put(__VA_ARGS__)
#define shmem_ptrdiff_put(...) gexshmem_fast_ptrdiff_put(__VA_ARGS__)
#define shmem_float_g(...) gexshmem_fast_float_g(__VA_ARGS__)
#define shmem_double_g(...) gexshmem_fast_double_g(__VA_ARGS__)
#define shmem_longdouble_g(...) gexshmem_fast_longdouble_g(__VA_ARGS__)
#define shmem_char_g(...) gexshmem_fast_char_g(__VA_ARGS__)
#define shmem_schar_g(...) gexshmem_fast_schar_g(__VA_ARGS__)
#define shmem_short_g(...) gexshmem_fast_short_g(__VA_ARGS__)
#define shmem_int_g(...) gexshmem_fast_int_g(__VA_ARGS__)
#define shmem_long_g(...) gexshmem_fast_long_g(__VA_ARGS__)
#define shmem_longlong_g(...) gexshmem_fast_longlong_g(__VA_ARGS__)
#define shmem_uchar_g(...) gexshmem_fast_uchar_g(__VA_ARGS__)
#define shmem_ushort_g(...) gexshmem_fast_ushort_g(__VA_ARGS__)
#define shmem_uint_g(...) gexshmem_fast_uint_g(__VA_ARGS__)
#define shmem_ulong_g(...) gexshmem_fast_ulong_g(__VA_ARGS__)
#define shmem_ulonglong_g(...) gexshmem_fast_ulonglong_g(__VA_ARGS__)
#define shmem_int8_g(...) gexshmem_fast_int8_g(__VA_ARGS__)
#define shmem_int16_g(...) gexshmem_fast_int16_g(__VA_ARGS__)
#define shmem_int32_g(...) gexshmem_fast_int32_g(__VA_ARGS__)
#define shmem_int64_g(...) gexshmem_fast_int64_g(__VA_ARGS__)
#define shmem_uint8_g(...) gexshmem_fast_uint8_g(__VA_ARGS__)
#define shmem_uint16_g(...) gexshmem_fast_uint16_g(__VA_ARGS__)
#define shmem_uint32_g(...) gexshmem_fast_uint32_g(__VA_ARGS__)
#define shmem_uint64_g(...) gexshmem_fast_uint64_g(__VA_ARGS__)
#define shmem_size_g(...) gexshmem_fast_size_g(__VA_ARGS__)
#define shmem_ptrdiff_g(...) gexshmem_fast_ptrdiff_g(__VA_ARGS__)
#define shmem_float_p(...) gexshmem_fast_float_p(__VA_ARGS__)
#define shmem_double_p(...) gexshmem_fast_double_p(__VA_ARGS__)
#define shmem_longdouble_p(...) gexshmem_fast_longdouble_p(__VA_ARGS__)
#define shmem_char_p(...) gexshmem_fast_char_p(__VA_ARGS__)
#define shmem_schar_p(...) gexshmem_fast_schar_p(__VA_ARGS__)
#define shmem_short_p(...) gexshmem_fast_short_p(__VA_ARGS__)
#define shmem_int_p(...) gexshmem_fast_int_p(__VA_ARGS__)
#define shmem_long_p(...) gexshmem_fast_long_p(__VA_ARGS__)
#define shmem_longlong_p(...) gexshmem_fast_longlong_p(__VA_ARGS__)
#define shmem_uchar_p(...) gexshmem_fast_uchar_p(__VA_ARGS__)
#define shmem_ushort_p(...) gexshmem_fast_ushort_p(__VA_ARGS__)
#define shmem_uint_p(...) gexshmem_fast_uint_p(__VA_ARGS__)
#define shmem_ulong_p(...) gexshmem_fast_ulong_p(__VA_ARGS__)
#define shmem_ulonglong_p(...) gexshmem_fast_ulonglong_p(__VA_ARGS__)
#define shmem_int8_p(...) gexshmem_fast_int8_p(__VA_ARGS__)
#define shmem_int16_p(...) gexshmem_fast_int16_p(__VA_ARGS__)
#define shmem_int32_p(...) gexshmem_fast_int32_p(__VA_ARGS__)
#define shmem_int64_p(...) gexshmem_fast_int64_p(__VA_ARGS__)
#define shmem_uint8_p(...) gexshmem_fast_uint8_p(__VA_ARGS__)
#define shmem_uint16_p(...) gexshmem_fast_uint16_p(__VA_ARGS__)
#define shmem_uint32_p(...) gexshmem_fast_uint32_p(__VA_ARGS__)
#define shmem_uint64_p(...) gexshmem_fast_uint64_p(__VA_ARGS__)
#define shmem_size_p(...) gexshmem_fast_size_p(__VA_ARGS__)
#define shmem_ptrdiff_p(...) gexshmem_fast_ptrdiff_p(__VA_ARGS__)
#define shmem_fence(...) gexshmem_fast_fence(__VA_ARGS__)
#define shmem_quiet(...) gexshmem_fast_quiet(__VA_ARGS__)
#define shmem_getmem_nbi(...) gexshmem_fast_getmem_nbi(__VA_ARGS__)
#define shmem_putmem_nbi(...) gexshmem_fast_putmem_nbi(__VA_ARGS__)
#define shmem_get8_nbi(...) gexshmem_fast_get8_nbi(__VA_ARGS__)
#define shmem_get16_nbi(...) gexshmem_fast_get16_nbi(__VA_ARGS__)
#define shmem_get32_nbi(...) gexshmem_fast_get32_nbi(__VA_ARGS__)
#define shmem_get64_nbi(...) gexshmem_fast_get64_nbi(__VA_ARGS__)
#define shmem_get128_nbi(...) gexshmem_fast_get128_nbi(__VA_ARGS__)
#define shmem_put8_nbi(...) gexshmem_fast_put8_nbi(__VA_ARGS__)
#define shmem_put16_nbi(...) gexshmem_fast_put16_nbi(__VA_ARGS__)
#define shmem_put32_nbi(...) gexshmem_fast_put32_nbi(__VA_ARGS__)
#define shmem_put64_nbi(...) gexshmem_fast_put64_nbi(__VA_ARGS__)
#define shmem_put128_nbi(...) gexshmem_fast_put128_nbi(__VA_ARGS__)
#define shmem_float_get_nbi(...) gexshmem_fast_float_get_nbi(__VA_ARGS__)
#define shmem_double_get_nbi(...) gexshmem_fast_double_get_nbi(__VA_ARGS__)
#define shmem_longdouble_get_nbi(...) gexshmem_fast_longdouble_get_nbi(__VA_ARGS__)
#define shmem_char_get_nbi(...) gexshmem_fast_char_get_nbi(__VA_ARGS__)
#define shmem_schar_get_nbi(...) gexshmem_fast_schar_get_nbi(__VA_ARGS__)
#define shmem_short_get_nbi(...) gexshmem_fast_short_get_nbi(__VA_ARGS__)
#define shmem_int_get_nbi(...) gexshmem_fast_int_get_nbi(__VA_ARGS__)
#define shmem_long_get_nbi(...) gexshmem_fast_long_get_nbi(__VA_ARGS__)
#define shmem_longlong_get_nbi(...) gexshmem_fast_longlong_get_nbi(__VA_ARGS__)
#define shmem_uchar_get_nbi(...) gexshmem_fast_uchar_get_nbi(__VA_ARGS__)
#define shmem_ushort_get_nbi(...) gexshmem_fast_ushort_get_nbi(__VA_ARGS__)
#define shmem_uint_get_nbi(...) gexshmem_fast_uint_get_nbi(__VA_ARGS__)
#define shmem_ulong_get_nbi(...) gexshmem_fast_ulong_get_nbi(__VA_ARGS__)
#define shmem_ulonglong_get_nbi(...) gexshmem_fast_ulonglong_get_nbi(__VA_ARGS__)
#define shmem_int8_get_nbi(...) gexshmem_fast_int8_get_nbi(__VA_ARGS__)
#define shmem_int16_get_nbi(...) gexshmem_fast_int16_get_nbi(__VA_ARGS__)
#define shmem_int32_get_nbi(...) gexshmem_fast_int32_get_nbi(__VA_ARGS__)
#define shmem_int64_get_nbi(...) gexshmem_fast_int64_get_nbi(__VA_ARGS__)
#define shmem_uint8_get_nbi(...) gexshmem_fast_uint8_get_nbi(__VA_ARGS__)
#define shmem_uint16_get_nbi(...) gexshmem_fast_uint16_get_nbi(__VA_ARGS__)
#define shmem_uint32_get_nbi(...) gexshmem_fast_uint32_get_nbi(__VA_ARGS__)
#define shmem_uint64_get_nbi(...) gexshmem_fast_uint64_get_nbi(__VA_ARGS__)
#define shmem_size_get_nbi(...) gexshmem_fast_size_get_nbi(__VA_ARGS__)
#define shmem_ptrdiff_get_nbi(...) gexshmem_fast_ptrdiff_get_nbi(__VA_ARGS__)
#define shmem_float_put_nbi(...) gexshmem_fast_float_put_nbi(__VA_ARGS__)
#define shmem_double_put_nbi(...) gexshmem_fast_double_put_nbi(__VA_ARGS__)
#define shmem_longdouble_put_nbi(...) gexshmem_fast_longdouble_put_nbi(__VA_ARGS__)
#define shmem_char_put_nbi(...) gexshmem_fast_char_put_nbi(__VA_ARGS__)
#define shmem_schar_put_nbi(...) gexshmem_fast_schar_put_nbi(__VA_ARGS__)
#define shmem_short_put_nbi(...) gexshmem_fast_short_put_nbi(__VA_ARGS__)
#define shmem_int_put_nbi(...) gexshmem_fast_int_put_nbi(__VA_ARGS__)
#define shmem_long_put_nbi(...) gexshmem_fast_long_put_nbi(__VA_ARGS__)
#define shmem_longlong_put_nbi(...) gexshmem_fast_longlong_put_nbi(__VA_ARGS__)
#define shmem_uchar_put_nbi(...) gexshmem_fast_uchar_put_nbi(__VA_ARGS__)
#define shmem_ushort_put_nbi(...) gexshmem_fast_ushort_put_nbi(__VA_ARGS__)
#define shmem_uint_put_nbi(...) gexshmem_fast_uint_put_nbi(__VA_ARGS__)
#define shmem_ulong_put_nbi(...) gexshmem_fast_ulong_put_nbi(__VA_ARGS__)
#define shmem_ulonglong_put_nbi(...) gexshmem_fast_ulonglong_put_nbi(__VA_ARGS__)
#define shmem_int8_put_nbi(...) gexshmem_fast_int8_put_nbi(__VA_ARGS__)
#define shmem_int16_put_nbi(...) gexshmem_fast_int16_put_nbi(__VA_ARGS__)
#define shmem_int32_put_nbi(...) gexshmem_fast_int32_put_nbi(__VA_ARGS__)
#define shmem_int64_put_nbi(...) gexshmem_fast_int64_put_nbi(__VA_ARGS__)
#define shmem_uint8_put_nbi(...) gexshmem_fast_uint8_put_nbi(__VA_ARGS__)
#define shmem_uint16_put_nbi(...) gexshmem_fast_uint16_put_nbi(__VA_ARGS__)
#define shmem_uint32_put_nbi(...) gexshmem_fast_uint32_put_nbi(__VA_ARGS__)
#define shmem_uint64_put_nbi(...) gexshmem_fast_uint64_put_nbi(__VA_ARGS__)
#define shmem_size_put_nbi(...) gexshmem_fast_size_put_nbi(__VA_ARGS__)
#define shmem_ptrdiff_put_nbi(...) gexshmem_fast_ptrdiff_put_nbi(__VA_ARGS__)
#define GEXSHMEM_INLINE_CALLS 1
#endif

/* ---- Atomics ------------------------------------------------------------------ */
#define GEXSHMEM_DECL_AMO_EXT(T, N) \
    T shmem_##N##_atomic_fetch(const T *source, int pe); \
    T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T *source, int pe); \
    void shmem_##N##_atomic_set(T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T *dest, T value, int pe); \
    T shmem_##N##_atomic_swap(T *dest, T value, int pe); \
    T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe); \
    void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T *fetch, const T *source, int pe); \
    void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
#define GEXSHMEM_DECL_AMO_STD(T, N) \
    T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe); \
    T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T *dest, T cond, T value, int pe); \
    T shmem_##N##_atomic_fetch_inc(T *dest, int pe); \
    T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T *dest, int pe); \
    void shmem_##N##_atomic_inc(T *dest, int pe); \
    void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T *dest, int pe); \
    T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe); \
    T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T *dest, T value, int pe); \
    void shmem_##N##_atomic_add(T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T *dest, T value, int pe); \
    void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe); \
    void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T cond, T value, int pe); \
    void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe); \
    void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T *fetch, T *dest, int pe); \
    void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
#define GEXSHMEM_DECL_AMO_BIT1(T, N, OP) \
    T shmem_##N##_atomic_fetch_##OP(T *dest, T value, int pe); \
    T shmem_ctx_##N##_atomic_fetch_##OP(shmem_ctx_t ctx, T *dest, T value, int pe); \
    void shmem_##N##_atomic_##OP(T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_##OP(shmem_ctx_t ctx, T *dest, T value, int pe); \
    void shmem_##N##_atomic_fetch_##OP##_nbi(T *fetch, T *dest, T value, int pe); \
    void shmem_ctx_##N##_atomic_fetch_##OP##_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
#define GEXSHMEM_DECL_AMO_BIT(T, N) \
    GEXSHMEM_DECL_AMO_BIT1(T, N, and) GEXSHMEM_DECL_AMO_BIT1(T, N, or) GEXSHMEM_DECL_AMO_BIT1(T, N, xor)
GEXSHMEM_AMO_EXT_TYPES(GEXSHMEM_DECL_AMO_EXT)
GEXSHMEM_AMO_STD_TYPES(GEXSHMEM_DECL_AMO_STD)
GEXSHMEM_AMO_BIT_TYPES(GEXSHMEM_DECL_AMO_BIT)

/* ---- Point-to-point synchronisation ------------------------------------------- */
#define GEXSHMEM_DECL_P2P(T, N) \
    void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value); \
    void shmem_##N##_wait(T *ivar, T cmp_value); \
    void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value); \
    void shmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values); \
    int shmem_##N##_test(T *ivar, int cmp, T cmp_value); \
    int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value); \
    size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value); \
    int shmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp, const T *cmp_values); \
    size_t shmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, const T *cmp_values);
GEXSHMEM_P2P_TYPES(GEXSHMEM_DECL_P2P)

/* ---- Barriers, teams, collectives --------------------------------------------- */
void shmem_barrier_all(void);
void shmem_sync_all(void);
int shmem_team_sync(shmem_team_t team);
int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask, shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange,
                        const shmem_team_config_t *xaxis_config, long xaxis_mask, shmem_team_t *xaxis_team,
                        const shmem_team_config_t *yaxis_config, long yaxis_mask, shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);
/* shmem_sync(team): the team form (the deprecated active-set form is not provided). */
#define shmem_sync(...) shmem_team_sync(__VA_ARGS__)

#define GEXSHMEM_DECL_COLL(T, N) \
    int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root); \
    int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems); \
    int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems); \
    int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems); \
    int shmem_##N##_alltoalls(shmem_team_t team, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
GEXSHMEM_RMA_TYPES(GEXSHMEM_DECL_COLL)
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);

#define GEXSHMEM_DECL_RED(T, N, OP) \
    int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce);
#define GEXSHMEM_DECL_BIT_RED(T, N) GEXSHMEM_DECL_RED(T, N, and) GEXSHMEM_DECL_RED(T, N, or) GEXSHMEM_DECL_RED(T, N, xor)
#define GEXSHMEM_DECL_CMP_RED(T, N) \
    GEXSHMEM_DECL_RED(T, N, max) GEXSHMEM_DECL_RED(T, N, min) GEXSHMEM_DECL_RED(T, N, sum) GEXSHMEM_DECL_RED(T, N, prod)
GEXSHMEM_BIT_RED_TYPES(GEXSHMEM_DECL_BIT_RED)
GEXSHMEM_CMP_RED_TYPES(GEXSHMEM_DECL_CMP_RED)
GEXSHMEM_DECL_RED(float _Complex, complexf, sum) GEXSHMEM_DECL_RED(float _Complex, complexf, prod)
GEXSHMEM_DECL_RED(double _Complex, complexd, sum) GEXSHMEM_DECL_RED(double _Complex, complexd, prod)

/* Reductions of long double: the library folds with a combine function of this header
 * (its language has no long double). Not part of OpenSHMEM: an implementation detail. */
int gexshmem_reduce_with(shmem_team_t team, void *dest, const void *source, size_t nreduce, size_t size,
                         void (*combine)(void *acc, const void *x, size_t n));
#define GEXSHMEM_LD_RED(OP, EXPR) \
    static inline void gexshmem_ld_##OP(void *acc, const void *x, size_t n) { \
        long double *a = (long double *)acc; const long double *b = (const long double *)x; \
        for (size_t i = 0; i < n; i++) a[i] = (EXPR); \
    } \
    static inline int shmem_longdouble_##OP##_reduce(shmem_team_t team, long double *dest, const long double *source, size_t nreduce) { \
        return gexshmem_reduce_with(team, dest, source, nreduce, sizeof(long double), gexshmem_ld_##OP); \
    }
GEXSHMEM_LD_RED(max, b[i] > a[i] ? b[i] : a[i])
GEXSHMEM_LD_RED(min, b[i] < a[i] ? b[i] : a[i])
GEXSHMEM_LD_RED(sum, a[i] + b[i])
GEXSHMEM_LD_RED(prod, a[i] * b[i])

/* ---- Contexts ----------------------------------------------------------------- */
int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);

/* ---- Distributed locks -------------------------------------------------------- */
void shmem_set_lock(long *lock);
void shmem_clear_lock(long *lock);
int shmem_test_lock(long *lock);

#ifdef __cplusplus
}
#endif

/* ---- C11 generic names -------------------------------------------------------- */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L

/* The distinct standard types, for _Generic (fixed-width types are aliases of them). */
#define GEXSHMEM_G_RMA(X, F) \
    X(float, float, F) X(double, double, F) X(long double, longdouble, F) X(char, char, F) \
    X(signed char, schar, F) X(short, short, F) X(int, int, F) X(long, long, F) \
    X(long long, longlong, F) X(unsigned char, uchar, F) X(unsigned short, ushort, F) \
    X(unsigned int, uint, F) X(unsigned long, ulong, F) X(unsigned long long, ulonglong, F)
#define GEXSHMEM_G_AMO_STD(X, F) \
    X(int, int, F) X(long, long, F) X(long long, longlong, F) X(unsigned int, uint, F) \
    X(unsigned long, ulong, F) X(unsigned long long, ulonglong, F)
#define GEXSHMEM_G_AMO_EXT(X, F) GEXSHMEM_G_AMO_STD(X, F) X(float, float, F) X(double, double, F)
#define GEXSHMEM_G_AMO_BIT(X, F) \
    X(unsigned int, uint, F) X(unsigned long, ulong, F) X(unsigned long long, ulonglong, F) \
    X(int, int32, F) X(long, int64, F)
#define GEXSHMEM_G_P2P(X, F) \
    X(short, short, F) X(int, int, F) X(long, long, F) X(long long, longlong, F) \
    X(unsigned short, ushort, F) X(unsigned int, uint, F) X(unsigned long, ulong, F) \
    X(unsigned long long, ulonglong, F)
#define GEXSHMEM_G_BIT_RED(X, F) \
    X(unsigned char, uchar, F) X(unsigned short, ushort, F) X(unsigned int, uint, F) \
    X(unsigned long, ulong, F) X(unsigned long long, ulonglong, F) X(signed char, int8, F) \
    X(short, int16, F) X(int, int32, F) X(long, int64, F)
#define GEXSHMEM_G_CMP_RED(X, F) \
    X(char, char, F) X(signed char, schar, F) X(short, short, F) X(int, int, F) X(long, long, F) \
    X(long long, longlong, F) X(unsigned char, uchar, F) X(unsigned short, ushort, F) \
    X(unsigned int, uint, F) X(unsigned long, ulong, F) X(unsigned long long, ulonglong, F) \
    X(float, float, F) X(double, double, F) X(long double, longdouble, F)
#define GEXSHMEM_G_SUM_RED(X, F) GEXSHMEM_G_CMP_RED(X, F) \
    X(float _Complex, complexf, F) X(double _Complex, complexd, F)

#define GEXSHMEM_G(T, N, F) T *: shmem_##N##_##F,
#define GEXSHMEM_GC(T, N, F) T *: shmem_ctx_##N##_##F,
#define GEXSHMEM_GCONST(T, N, F) T *: shmem_##N##_##F, const T *: shmem_##N##_##F,
#define GEXSHMEM_GCCONST(T, N, F) T *: shmem_ctx_##N##_##F, const T *: shmem_ctx_##N##_##F,

/* gex's extension: the index of the gex endpoint carrying ctx's operations to PEs
 * reached through an endpoint (0: the PE's own; -1: not a live context), and in *ops
 * (if not NULL) how many operations it carried for ctx. docs/shmem.md, "Contexts". */
int gexshmem_ctx_endpoint(shmem_ctx_t ctx, uint64_t *ops);
void gexshmem_generic_type_not_supported(void);
#define GEXSHMEM_SEL(LIST, X, F, arg) _Generic((arg), LIST(X, F) default: gexshmem_generic_type_not_supported)

/* Argument-count dispatch: the ctx form has one argument more. */
#define GEXSHMEM_ARGN(_1, _2, _3, _4, _5, _6, _7, _8, _9, N, ...) N
#define GEXSHMEM_PICK(...) GEXSHMEM_ARGN(__VA_ARGS__, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define GEXSHMEM_CAT(a, b) GEXSHMEM_CAT_(a, b)
#define GEXSHMEM_CAT_(a, b) a##b

/* RMA: shmem_put(dest, source, nelems, pe) or shmem_put(ctx, dest, source, nelems, pe). */
#define GEXSHMEM_RMA_GEN(F, NARGS, ...) GEXSHMEM_CAT(GEXSHMEM_RMA_GEN_, GEXSHMEM_CAT(NARGS, GEXSHMEM_CAT(_, GEXSHMEM_PICK(__VA_ARGS__))))(F, __VA_ARGS__)
#define GEXSHMEM_PLAIN(LIST, X, F, first, ...) GEXSHMEM_SEL(LIST, X, F, first)(first, __VA_ARGS__)
#define GEXSHMEM_CTX(LIST, X, F, ctx, first, ...) GEXSHMEM_SEL(LIST, X, F, first)(ctx, first, __VA_ARGS__)

#define GEXSHMEM_DISPATCH(LIST, F, N, ...) \
    GEXSHMEM_CAT(GEXSHMEM_D_, GEXSHMEM_CAT(N, GEXSHMEM_CAT(_, GEXSHMEM_PICK(__VA_ARGS__))))(LIST, F, __VA_ARGS__)
/* N: the plain form's argument count. */
#define GEXSHMEM_D_2_2(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_2_3(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D_3_3(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_3_4(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D_4_4(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_4_5(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D_5_5(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_5_6(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D_6_6(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_6_7(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D_7_7(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D_7_8(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
/* Const-source forms (g, atomic_fetch): the selector is a pointer to const or not. */
#define GEXSHMEM_DC_2_2(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_GCONST, F, __VA_ARGS__)
#define GEXSHMEM_DC_2_3(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GCCONST, F, __VA_ARGS__)
#define GEXSHMEM_DISPATCH_CONST(LIST, F, N, ...) \
    GEXSHMEM_CAT(GEXSHMEM_DC_, GEXSHMEM_CAT(N, GEXSHMEM_CAT(_, GEXSHMEM_PICK(__VA_ARGS__))))(LIST, F, __VA_ARGS__)
/* The plain forms of put, get, their _nbi forms, p and g select the inline calls (above). */
#define GEXSHMEM_GF(T, N, F) T *: gexshmem_fast_##N##_##F,
#define GEXSHMEM_GFCONST(T, N, F) T *: gexshmem_fast_##N##_##F, const T *: gexshmem_fast_##N##_##F,
#define GEXSHMEM_DF_4_4(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_GF, F, __VA_ARGS__)
#define GEXSHMEM_DF_4_5(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_DF_2_2(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_GFCONST, F, __VA_ARGS__)
#define GEXSHMEM_DF_2_3(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GCCONST, F, __VA_ARGS__)
#define GEXSHMEM_DF_3_3(L, F, ...) GEXSHMEM_PLAIN(L, GEXSHMEM_GF, F, __VA_ARGS__)
#define GEXSHMEM_DF_3_4(L, F, ...) GEXSHMEM_CTX(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_DISPATCH_FAST(LIST, F, N, ...) \
    GEXSHMEM_CAT(GEXSHMEM_DF_, GEXSHMEM_CAT(N, GEXSHMEM_CAT(_, GEXSHMEM_PICK(__VA_ARGS__))))(LIST, F, __VA_ARGS__)
/* Forms whose selecting argument is the second (the _nbi fetching atomics select on dest). */
#define GEXSHMEM_PLAIN2(LIST, X, F, fetch, first, ...) GEXSHMEM_SEL(LIST, X, F, first)(fetch, first, __VA_ARGS__)
#define GEXSHMEM_CTX2(LIST, X, F, ctx, fetch, first, ...) GEXSHMEM_SEL(LIST, X, F, first)(ctx, fetch, first, __VA_ARGS__)
#define GEXSHMEM_D2_3_3(L, F, ...) GEXSHMEM_PLAIN2(L, GEXSHMEM_GCONST, F, __VA_ARGS__)
#define GEXSHMEM_D2_3_4(L, F, ...) GEXSHMEM_CTX2(L, GEXSHMEM_GCCONST, F, __VA_ARGS__)
#define GEXSHMEM_D2_4_4(L, F, ...) GEXSHMEM_PLAIN2(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D2_4_5(L, F, ...) GEXSHMEM_CTX2(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_D2_5_5(L, F, ...) GEXSHMEM_PLAIN2(L, GEXSHMEM_G, F, __VA_ARGS__)
#define GEXSHMEM_D2_5_6(L, F, ...) GEXSHMEM_CTX2(L, GEXSHMEM_GC, F, __VA_ARGS__)
#define GEXSHMEM_DISPATCH2(LIST, F, N, ...) \
    GEXSHMEM_CAT(GEXSHMEM_D2_, GEXSHMEM_CAT(N, GEXSHMEM_CAT(_, GEXSHMEM_PICK(__VA_ARGS__))))(LIST, F, __VA_ARGS__)

#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_put(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, put, 4, __VA_ARGS__)
#else
#define shmem_put(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, put, 4, __VA_ARGS__)
#endif
#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_get(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, get, 4, __VA_ARGS__)
#else
#define shmem_get(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, get, 4, __VA_ARGS__)
#endif
#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_put_nbi(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, put_nbi, 4, __VA_ARGS__)
#else
#define shmem_put_nbi(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, put_nbi, 4, __VA_ARGS__)
#endif
#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_get_nbi(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, get_nbi, 4, __VA_ARGS__)
#else
#define shmem_get_nbi(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, get_nbi, 4, __VA_ARGS__)
#endif
#define shmem_iput(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, iput, 6, __VA_ARGS__)
#define shmem_iget(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, iget, 6, __VA_ARGS__)
#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_p(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, p, 3, __VA_ARGS__)
#else
#define shmem_p(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, p, 3, __VA_ARGS__)
#endif
#ifdef GEXSHMEM_INLINE_CALLS
#define shmem_g(...) GEXSHMEM_DISPATCH_FAST(GEXSHMEM_G_RMA, g, 2, __VA_ARGS__)
#else
#define shmem_g(...) GEXSHMEM_DISPATCH_CONST(GEXSHMEM_G_RMA, g, 2, __VA_ARGS__)
#endif
#define shmem_put_signal(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, put_signal, 7, __VA_ARGS__)
#define shmem_put_signal_nbi(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_RMA, put_signal_nbi, 7, __VA_ARGS__)

#define shmem_atomic_fetch(...) GEXSHMEM_DISPATCH_CONST(GEXSHMEM_G_AMO_EXT, atomic_fetch, 2, __VA_ARGS__)
#define shmem_atomic_set(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_EXT, atomic_set, 3, __VA_ARGS__)
#define shmem_atomic_swap(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_EXT, atomic_swap, 3, __VA_ARGS__)
#define shmem_atomic_compare_swap(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_STD, atomic_compare_swap, 4, __VA_ARGS__)
#define shmem_atomic_fetch_inc(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_STD, atomic_fetch_inc, 2, __VA_ARGS__)
#define shmem_atomic_inc(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_STD, atomic_inc, 2, __VA_ARGS__)
#define shmem_atomic_fetch_add(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_STD, atomic_fetch_add, 3, __VA_ARGS__)
#define shmem_atomic_add(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_STD, atomic_add, 3, __VA_ARGS__)
#define shmem_atomic_fetch_and(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_fetch_and, 3, __VA_ARGS__)
#define shmem_atomic_fetch_or(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_fetch_or, 3, __VA_ARGS__)
#define shmem_atomic_fetch_xor(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_fetch_xor, 3, __VA_ARGS__)
#define shmem_atomic_and(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_and, 3, __VA_ARGS__)
#define shmem_atomic_or(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_or, 3, __VA_ARGS__)
#define shmem_atomic_xor(...) GEXSHMEM_DISPATCH(GEXSHMEM_G_AMO_BIT, atomic_xor, 3, __VA_ARGS__)
#define shmem_atomic_fetch_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_EXT, atomic_fetch_nbi, 3, __VA_ARGS__)
#define shmem_atomic_swap_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_EXT, atomic_swap_nbi, 4, __VA_ARGS__)
#define shmem_atomic_compare_swap_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_STD, atomic_compare_swap_nbi, 5, __VA_ARGS__)
#define shmem_atomic_fetch_inc_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_STD, atomic_fetch_inc_nbi, 3, __VA_ARGS__)
#define shmem_atomic_fetch_add_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_STD, atomic_fetch_add_nbi, 4, __VA_ARGS__)
#define shmem_atomic_fetch_and_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_BIT, atomic_fetch_and_nbi, 4, __VA_ARGS__)
#define shmem_atomic_fetch_or_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_BIT, atomic_fetch_or_nbi, 4, __VA_ARGS__)
#define shmem_atomic_fetch_xor_nbi(...) GEXSHMEM_DISPATCH2(GEXSHMEM_G_AMO_BIT, atomic_fetch_xor_nbi, 4, __VA_ARGS__)

#define GEXSHMEM_P2P(F, first, ...) GEXSHMEM_SEL(GEXSHMEM_G_P2P, GEXSHMEM_G, F, first)(first, __VA_ARGS__)
#define shmem_wait_until(...) GEXSHMEM_P2P(wait_until, __VA_ARGS__)
#define shmem_wait(...) GEXSHMEM_P2P(wait, __VA_ARGS__)
#define shmem_wait_until_all(...) GEXSHMEM_P2P(wait_until_all, __VA_ARGS__)
#define shmem_wait_until_any(...) GEXSHMEM_P2P(wait_until_any, __VA_ARGS__)
#define shmem_wait_until_some(...) GEXSHMEM_P2P(wait_until_some, __VA_ARGS__)
#define shmem_wait_until_all_vector(...) GEXSHMEM_P2P(wait_until_all_vector, __VA_ARGS__)
#define shmem_wait_until_any_vector(...) GEXSHMEM_P2P(wait_until_any_vector, __VA_ARGS__)
#define shmem_wait_until_some_vector(...) GEXSHMEM_P2P(wait_until_some_vector, __VA_ARGS__)
#define shmem_test(...) GEXSHMEM_P2P(test, __VA_ARGS__)
#define shmem_test_all(...) GEXSHMEM_P2P(test_all, __VA_ARGS__)
#define shmem_test_any(...) GEXSHMEM_P2P(test_any, __VA_ARGS__)
#define shmem_test_some(...) GEXSHMEM_P2P(test_some, __VA_ARGS__)
#define shmem_test_all_vector(...) GEXSHMEM_P2P(test_all_vector, __VA_ARGS__)
#define shmem_test_any_vector(...) GEXSHMEM_P2P(test_any_vector, __VA_ARGS__)
#define shmem_test_some_vector(...) GEXSHMEM_P2P(test_some_vector, __VA_ARGS__)

/* Collectives select on dest, their second argument. */
#define GEXSHMEM_COLL(LIST, F, team, dest, ...) GEXSHMEM_SEL(LIST, GEXSHMEM_G, F, dest)(team, dest, __VA_ARGS__)
#define shmem_broadcast(...) GEXSHMEM_COLL(GEXSHMEM_G_RMA, broadcast, __VA_ARGS__)
#define shmem_collect(...) GEXSHMEM_COLL(GEXSHMEM_G_RMA, collect, __VA_ARGS__)
#define shmem_fcollect(...) GEXSHMEM_COLL(GEXSHMEM_G_RMA, fcollect, __VA_ARGS__)
#define shmem_alltoall(...) GEXSHMEM_COLL(GEXSHMEM_G_RMA, alltoall, __VA_ARGS__)
#define shmem_alltoalls(...) GEXSHMEM_COLL(GEXSHMEM_G_RMA, alltoalls, __VA_ARGS__)
#define shmem_and_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_BIT_RED, and_reduce, __VA_ARGS__)
#define shmem_or_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_BIT_RED, or_reduce, __VA_ARGS__)
#define shmem_xor_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_BIT_RED, xor_reduce, __VA_ARGS__)
#define shmem_max_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_CMP_RED, max_reduce, __VA_ARGS__)
#define shmem_min_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_CMP_RED, min_reduce, __VA_ARGS__)
#define shmem_sum_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_SUM_RED, sum_reduce, __VA_ARGS__)
#define shmem_prod_reduce(...) GEXSHMEM_COLL(GEXSHMEM_G_SUM_RED, prod_reduce, __VA_ARGS__)

#endif /* C11 */

#endif /* GEXSHMEM_SHMEM_H */
