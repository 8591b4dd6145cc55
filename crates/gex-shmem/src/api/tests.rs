//! One PE in this process (gex's singleton start): the direct paths from several
//! threads at once, contexts, quiet, and finalize racing them. One test, since a
//! process initialises OpenSHMEM once.
use super::*;
use gex_sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[test]
fn threads_contexts_and_finalize_on_one_pe() {
    let mut provided = -1;
    // SAFETY: `provided` is a local int.
    assert_eq!(unsafe { shmem_init_thread(3, &raw mut provided) }, 0);
    assert_eq!(provided, 3);
    assert_eq!((shmem_my_pe(), shmem_n_pes()), (0, 1));
    const THREADS: usize = 4;
    const N: usize = 20_000;
    let counter = shmem_calloc(1, 8) as usize;
    let words = shmem_calloc(THREADS * 8, 8) as usize;
    assert!(counter != 0 && words != 0);
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut ctx: *mut c_void = std::ptr::null_mut();
                // SAFETY: `ctx` is a local slot.
                assert_eq!(unsafe { shmem_ctx_create(0, &raw mut ctx) }, 0);
                let mine = (words + t * 64) as *mut c_void;
                for i in 0..N {
                    let v = [i as u64; 8];
                    // SAFETY: symmetric words of this PE's heap; `v` is a local.
                    unsafe {
                        shmem_long_atomic_fetch_inc(counter as *mut i64, 0);
                        if i % 2 == 0 {
                            shmem_putmem(mine, v.as_ptr().cast(), 64, 0);
                        } else {
                            shmem_ctx_putmem_nbi(ctx, mine, v.as_ptr().cast(), 64, 0);
                            shmem_ctx_quiet(ctx);
                        }
                    }
                    let mut back = [0u64; 8];
                    // SAFETY: as above.
                    unsafe { shmem_getmem(back.as_mut_ptr().cast(), mine, 64, 0) };
                    assert_eq!(back, v, "thread {t}, iteration {i}");
                }
                shmem_ctx_destroy(ctx);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    shmem_quiet();
    // Context handles: looked up without the lock, refused once destroyed.
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ctx` is a local slot.
    assert_eq!(unsafe { shmem_ctx_create(0, &raw mut ctx) }, 0);
    assert_eq!(ctx_pe(ctx, 0).unwrap(), 0);
    assert!(ctx_live(ctx).unwrap());
    shmem_ctx_destroy(ctx);
    assert!(matches!(ctx_pe(ctx, 0), Err(ShmemError::BadCtx)));
    assert!(matches!(ctx_live(ctx), Err(ShmemError::BadCtx)));
    assert!(!ctx_live(std::ptr::null_mut()).unwrap());
    // SAFETY: the symmetric counter.
    let total = unsafe { shmem_long_atomic_fetch(counter as *const i64, 0) };
    assert_eq!(total, (THREADS * N) as i64);
    // SAFETY: as above.
    let old = unsafe { shmem_long_atomic_compare_swap(counter as *mut i64, total, 7, 0) };
    assert_eq!(old, total);
    // SAFETY: as above.
    assert_eq!(unsafe { shmem_long_g(counter as *const i64, 0) }, 7);

    // Threads still putting while the PE finalises: their calls fail (not
    // initialised) once it began, and none touches unmapped memory.
    let stop = Arc::new(AtomicBool::new(false));
    let racers: Vec<_> = (0..2)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let v = ok.to_ne_bytes();
                    if state::put_on(None, words + t * 64, &v, 0, false).is_ok()
                        && state::amo(counter, 0, 8, Amo::Add, 1, 0, true).is_ok()
                    {
                        ok += 1;
                    } else {
                        break;
                    }
                }
                ok
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    shmem_finalize();
    let after = state::put_on(None, words, &[1], 0, false);
    assert!(
        matches!(after, Err(ShmemError::NotInitialized)),
        "{after:?}"
    );
    assert!(matches!(state::quiet(), Err(ShmemError::NotInitialized)));
    stop.store(true, Ordering::Relaxed);
    for r in racers {
        r.join().unwrap();
    }
}
