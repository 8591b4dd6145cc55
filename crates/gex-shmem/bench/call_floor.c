/* call_floor: the least any OpenSHMEM library in a shared object of its own takes for
 * shmem_putmem + shmem_quiet, shmem_getmem and shmem_long_p + shmem_quiet of 8 bytes
 * between two PEs of one host, for shmem_bench (issue 27 point 4).
 *
 * Each function has the signature of the call it stands for and does only the
 * operation itself: a copy to or from the peer's memory, whose address the caller
 * got once from shmem_ptr, and for quiet a full fence. No argument check, no address
 * translation, no state. What is left is what a C program pays for calling a library
 * at all: the call through the PLT and the function's own entry and return, the
 * floor under gex-shmem's figures (its Rust counterpart, gex-perf, inlines the whole
 * operation into its loop). crates/gex-shmem/bench/run builds it as libcallfloor.so
 * and shmem_bench.c (with -DBENCH_CALL_FLOOR) times it beside gex-shmem.
 * docs/shmem.md, "The call floor". */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A copy of n bytes: 8 to 16 with two overlapping 8-byte moves (what gex-shmem's
 * small copies do), anything else with memcpy. */
static inline void copy(void *dst, const void *src, size_t n) {
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, (const char *)src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy((char *)dst + n - 8, &b, 8);
    } else {
        memcpy(dst, src, n);
    }
}

void call_floor_putmem(void *dest, const void *source, size_t nelems, int pe) {
    (void)pe;
    copy(dest, source, nelems);
}

void call_floor_getmem(void *dest, const void *source, size_t nelems, int pe) {
    (void)pe;
    copy(dest, source, nelems);
}

void call_floor_long_p(long *dest, long value, int pe) {
    (void)pe;
    *(volatile long *)dest = value;
}

/* A full fence, as gex-shmem's quiet is on shared memory: a locked or of 0 into a
 * local word on x86-64 (cheaper than mfence, the same ordering for ordinary stores;
 * not into (%rsp), the return address, which the ret would then read back from a
 * locked store), __atomic_thread_fence elsewhere. */
void call_floor_quiet(void) {
#if defined(__x86_64__)
    int w = 0;
    __asm__ volatile("lock orl $0, %0" : "+m"(w) : : "memory", "cc");
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}
