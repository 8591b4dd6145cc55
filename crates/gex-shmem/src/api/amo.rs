//! Atomics. Every AMO type is 4 or 8 bytes: the operations run on the word's bits
//! (two's complement add is the same for signed and unsigned; floats only fetch, set
//! and swap).

use super::*;

fn amo(
    ctx: *mut c_void,
    addr: *const c_void,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> Result<u64, ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    state::amo(addr as usize, pe, width, op, a, b, fetch)
}

/// An atomic entry point: the lock-free CPU atomic on a mapped heap word when the
/// context is the default one, else `amo` under `entry`.
#[inline(always)]
fn amo_call(
    name: &str,
    ctx: *mut c_void,
    addr: *const c_void,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> u64 {
    if ctx == CTX_DEFAULT {
        if let Some(v) = state::amo_direct(addr as usize, pe, width, op, a, b) {
            return v;
        }
    }
    entry(name, || amo(ctx, addr, pe, width, op, a, b, fetch))
}

macro_rules! amo_ext {
    ($($tn:ident $t:ty, $u:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch>](ctx: *mut c_void, source: *const $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch", ctx, source.cast(), pe, w, Amo::Fetch, 0, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch>](source: *const $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch>](CTX_DEFAULT, source, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_set>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_set", ctx, dest.cast(), pe, w, Amo::Set, value.to_bits() as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_set>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_set>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_swap>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_swap", ctx, dest.cast(), pe, w, Amo::Swap, value.to_bits() as u64, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_swap>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_swap>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_nbi>](ctx: *mut c_void, fetch: *mut $t, source: *const $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch>](ctx, source, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_nbi>](fetch: *mut $t, source: *const $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_nbi>](CTX_DEFAULT, fetch, source, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_swap_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_swap>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_swap_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_swap_nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_swap_nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
    )* } };
}

/// Integer AMO types' `to_bits`/`from_bits` (the identity on their two's complement).
trait Bits: Sized {
    type U;
    fn to_bits(self) -> Self::U;
    fn from_bits(u: Self::U) -> Self;
}
macro_rules! bits {
    ($($t:ty => $u:ty;)*) => {$(
        impl Bits for $t {
            type U = $u;
            #[inline]
            fn to_bits(self) -> $u { self as $u }
            #[inline]
            fn from_bits(u: $u) -> $t { u as $t }
        }
    )*};
}
bits!(i32 => u32; i64 => u64; u32 => u32; u64 => u64; usize => u64; isize => u64;);

macro_rules! amo_std {
    ($($tn:ident $t:ty, $u:ty;)*) => {
        amo_ext!($($tn $t, $u;)*);
        paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_compare_swap>](ctx: *mut c_void, dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_compare_swap", ctx, dest.cast(), pe, w, Amo::Cswap, cond.to_bits() as u64, value.to_bits() as u64, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_compare_swap>](dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_compare_swap>](CTX_DEFAULT, dest, cond, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_add>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch_add", ctx, dest.cast(), pe, w, Amo::Add, value.to_bits() as u64, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_add>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_add>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_add>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_add", ctx, dest.cast(), pe, w, Amo::Add, value.to_bits() as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_add>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_add>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_inc>](ctx: *mut c_void, dest: *mut $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch_inc", ctx, dest.cast(), pe, w, Amo::Add, 1, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_inc>](dest: *mut $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc>](CTX_DEFAULT, dest, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_inc>](ctx: *mut c_void, dest: *mut $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_inc", ctx, dest.cast(), pe, w, Amo::Add, 1, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_inc>](dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_inc>](CTX_DEFAULT, dest, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_compare_swap_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_compare_swap>](ctx, dest, cond, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_compare_swap_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_compare_swap_nbi>](fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_compare_swap_nbi>](CTX_DEFAULT, fetch, dest, cond, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_add_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_add>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_add_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_add_nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_add_nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_inc_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc>](ctx, dest, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_inc_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_inc_nbi>](fetch: *mut $t, dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc_nbi>](CTX_DEFAULT, fetch, dest, pe) }
        }
    )* } };
}

macro_rules! amo_bit {
    ($($tn:ident $t:ty, $u:ty;)*) => { paste::paste! { $(
        amo_bit!(@op $tn $t, $u, and And);
        amo_bit!(@op $tn $t, $u, or Or);
        amo_bit!(@op $tn $t, $u, xor Xor);
    )* } };
    (@op $tn:ident $t:ty, $u:ty, $op:ident $amo:ident) => { paste::paste! {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_ $op>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_fetch_bitwise", ctx, dest.cast(), pe, w, Amo::$amo, value as $u as u64, 0, true) as $t
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_ $op>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_ $op>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_bitwise", ctx, dest.cast(), pe, w, Amo::$amo, value as $u as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_ $op>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_ $op>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_ $op _nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_bitwise_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_ $op _nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op _nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
    } };
}

amo_std!(
    int i32, u32; long i64, u64; longlong i64, u64; uint u32, u32; ulong u64, u64;
    ulonglong u64, u64; int32 i32, u32; int64 i64, u64; uint32 u32, u32; uint64 u64, u64;
    size usize, u64; ptrdiff isize, u64;
);
amo_ext!(float f32, u32; double f64, u64;);
amo_bit!(
    uint u32, u32; ulong u64, u64; ulonglong u64, u64; int32 i32, u32; int64 i64, u64;
    uint32 u32, u32; uint64 u64, u64;
);
