//! The symmetric heap: `shmem_malloc`, `shmem_calloc`, `shmem_align`, `shmem_free`,
//! `shmem_realloc`, collectively on every PE.

use super::*;

/// Allocates `size` bytes aligned to `align` (zeroed if `zero`), collectively: the
/// block is the same on every PE, and ready (zeroed) on every PE before any returns.
fn alloc(name: &str, size: usize, align: usize, zero: bool) -> *mut c_void {
    entry(name, || {
        with(|s| {
            s.barrier_all()?;
            let r = s.heap.alloc(size, align);
            if let (Some(off), true) = (r, zero) {
                // SAFETY: a fresh block of at least `size` bytes of this PE's heap, which
                // no other PE writes before the barrier below.
                unsafe { std::ptr::write_bytes((s.heap_base + off) as *mut u8, 0, size) };
            }
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(r.map_or(std::ptr::null_mut(), |off| {
                (s.heap_base + off) as *mut c_void
            }))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc("shmem_malloc", size, MIN_ALIGN, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc_with_hints(size: usize, _hints: c_long) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc("shmem_malloc_with_hints", size, MIN_ALIGN, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    if size == 0 || !alignment.is_power_of_two() {
        return std::ptr::null_mut();
    }
    alloc("shmem_align", size, alignment, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    let Some(n) = count.checked_mul(size).filter(|&n| n > 0) else {
        return std::ptr::null_mut();
    };
    alloc("shmem_calloc", n, MIN_ALIGN, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    entry("shmem_free", || {
        with(|s| {
            s.barrier_all()?;
            if !ptr.is_null() {
                let off = (ptr as usize).wrapping_sub(s.heap_base);
                if !s.heap.free(off) {
                    return Err(ShmemError::Invalid(
                        format!("shmem_free of {ptr:p}, not a block of the symmetric heap").into(),
                    ));
                }
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    entry("shmem_realloc", || {
        with(|s| {
            s.barrier_all()?;
            let old = if ptr.is_null() {
                None
            } else {
                let off = (ptr as usize).wrapping_sub(s.heap_base);
                Some((
                    off,
                    s.heap.size_of(off).ok_or_else(|| {
                        ShmemError::Invalid(
                            format!("shmem_realloc of {ptr:p}, not a block of the symmetric heap")
                                .into(),
                        )
                    })?,
                ))
            };
            let out = if size == 0 {
                if let Some((off, _)) = old {
                    s.heap.free(off);
                }
                std::ptr::null_mut()
            } else {
                match s.heap.alloc(size, MIN_ALIGN) {
                    None => std::ptr::null_mut(),
                    Some(new) => {
                        if let Some((off, len)) = old {
                            // SAFETY: both blocks are inside this PE's segment; `copy`
                            // allows them to overlap.
                            unsafe {
                                std::ptr::copy(
                                    (s.heap_base + off) as *const u8,
                                    (s.heap_base + new) as *mut u8,
                                    len.min(size),
                                )
                            };
                            s.heap.free(off);
                        }
                        (s.heap_base + new) as *mut c_void
                    }
                }
            };
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(out)
        })
    })
}
