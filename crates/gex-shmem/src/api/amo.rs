//! Atomics. Every AMO type is 4 or 8 bytes: the operations run on the word's bits
//! (two's complement add is the same for signed and unsigned; floats only fetch, set
//! and swap).

use super::*;

/// An atomic entry point: the lock-free CPU atomic on a mapped heap word when the
/// context is the default one, else `state::amo` under `entry`.
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
    entry(name, || {
        let pe = ctx_pe(ctx, pe)?;
        state::amo(addr as usize, pe, width, op, a, b, fetch)
    })
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

/// `$f`: entry point `$cf` on the default context (a call of it, as the C library's
/// `shmem_<op>` is `shmem_ctx_<op>` on `SHMEM_CTX_DEFAULT`).
macro_rules! on_default {
    ($cf:ident $f:ident ($($p:ident: $t:ty),*) $(-> $r:ty)?) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $f($($p: $t),*) $(-> $r)? {
            // SAFETY: the caller's promise (this module's).
            unsafe { $cf(CTX_DEFAULT, $($p),*) }
        }
    };
}

/// One atomic of type `$t` (bits `$u`) named `shmem_ctx_<$tn><$name>` and
/// `shmem_<$tn><$name>`, with the parameters `$p` before `pe`: `amo_call($what, ..)` of
/// `$op` with operands `$a`, `$b` on the word at `$addr`. A fetching one (`fetch`)
/// returns the old value and has its `_nbi` forms, which store it at `fetch`.
macro_rules! amo_op {
    ($tn:ident $t:ty, $u:ty; $name:ident $what:literal ($($p:ident: $pt:ty),*) [$addr:ident, $op:expr, $a:expr, $b:expr]) => { paste::paste! {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn $name>](ctx: *mut c_void, $($p: $pt,)* pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call($what, ctx, $addr.cast(), pe, w, $op, $a, $b, false);
        }
        on_default!([<shmem_ctx_ $tn $name>] [<shmem_ $tn $name>] ($($p: $pt,)* pe: c_int));
    } };
    ($tn:ident $t:ty, $u:ty; $name:ident $what:literal ($($p:ident: $pt:ty),*) [$addr:ident, $op:expr, $a:expr, $b:expr] fetch $nbi_what:literal) => { paste::paste! {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn $name>](ctx: *mut c_void, $($p: $pt,)* pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call($what, ctx, $addr.cast(), pe, w, $op, $a, $b, true) as $u)
        }
        on_default!([<shmem_ctx_ $tn $name>] [<shmem_ $tn $name>] ($($p: $pt,)* pe: c_int) -> $t);
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn $name _nbi>](ctx: *mut c_void, fetch: *mut $t, $($p: $pt,)* pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn $name>](ctx, $($p,)* pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry($nbi_what, || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        on_default!([<shmem_ctx_ $tn $name _nbi>] [<shmem_ $tn $name _nbi>] (fetch: *mut $t, $($p: $pt,)* pe: c_int));
    } };
}

/// The atomics of every AMO type: fetch, set, swap.
macro_rules! amo_ext {
    ($($tn:ident $t:ty, $u:ty;)*) => { $(
        amo_op!($tn $t, $u; _atomic_fetch "atomic_fetch" (source: *const $t) [source, Amo::Fetch, 0, 0] fetch "atomic_fetch_nbi");
        amo_op!($tn $t, $u; _atomic_set "atomic_set" (dest: *mut $t, value: $t) [dest, Amo::Set, value.to_bits() as u64, 0]);
        amo_op!($tn $t, $u; _atomic_swap "atomic_swap" (dest: *mut $t, value: $t) [dest, Amo::Swap, value.to_bits() as u64, 0] fetch "atomic_swap_nbi");
    )* };
}

/// The atomics of the standard AMO types: those of `amo_ext!`, compare-and-swap, add
/// and increment.
macro_rules! amo_std {
    ($($tn:ident $t:ty, $u:ty;)*) => {
        amo_ext!($($tn $t, $u;)*);
        $(
        amo_op!($tn $t, $u; _atomic_compare_swap "atomic_compare_swap" (dest: *mut $t, cond: $t, value: $t) [dest, Amo::Cswap, cond.to_bits() as u64, value.to_bits() as u64] fetch "atomic_compare_swap_nbi");
        amo_op!($tn $t, $u; _atomic_fetch_add "atomic_fetch_add" (dest: *mut $t, value: $t) [dest, Amo::Add, value.to_bits() as u64, 0] fetch "atomic_fetch_add_nbi");
        amo_op!($tn $t, $u; _atomic_add "atomic_add" (dest: *mut $t, value: $t) [dest, Amo::Add, value.to_bits() as u64, 0]);
        amo_op!($tn $t, $u; _atomic_fetch_inc "atomic_fetch_inc" (dest: *mut $t) [dest, Amo::Add, 1, 0] fetch "atomic_fetch_inc_nbi");
        amo_op!($tn $t, $u; _atomic_inc "atomic_inc" (dest: *mut $t) [dest, Amo::Add, 1, 0]);
        )*
    };
}

/// The bitwise atomics of the bitwise AMO types: and, or, xor, fetching or not.
macro_rules! amo_bit {
    ($($tn:ident $t:ty, $u:ty;)*) => { $(
        amo_bit!(@op $tn $t, $u, and And);
        amo_bit!(@op $tn $t, $u, or Or);
        amo_bit!(@op $tn $t, $u, xor Xor);
    )* };
    (@op $tn:ident $t:ty, $u:ty, $op:ident $amo:ident) => { paste::paste! {
        amo_op!($tn $t, $u; [<_atomic_fetch_ $op>] "atomic_fetch_bitwise" (dest: *mut $t, value: $t) [dest, Amo::$amo, value.to_bits() as u64, 0] fetch "atomic_fetch_bitwise_nbi");
        amo_op!($tn $t, $u; [<_atomic_ $op>] "atomic_bitwise" (dest: *mut $t, value: $t) [dest, Amo::$amo, value.to_bits() as u64, 0]);
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
