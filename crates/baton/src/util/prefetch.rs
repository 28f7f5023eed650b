//! Prefetch hints: ask the CPU to bring a cache line in before it is read.
//!
//! Plain loads of lines at scattered places wait for each other behind the locked
//! instructions that follow them, such as a reference count or a join counter. Prefetch
//! hints do not, so the misses overlap. The scheduler issues them on large, scattered
//! graphs, as soon as an address is known, in `engine/run/prefetch_sites.rs`. A hint
//! changes nothing the program can observe.

#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line holding `*at` into its caches. A hint only: it
/// changes nothing the program can observe, and does nothing where it is not supported,
/// that is on targets other than x86-64.
/// A zero-sized value, such as a closure that captures nothing, has no line to bring in:
/// its address may dangle, so it gets no hint.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(at: &T) {
    if size_of_val(at) != 0 {
        prefetch_ptr(std::ptr::from_ref(at).cast::<u8>());
    }
}

/// The hint for the line holding the byte at `at`, which may point anywhere: the hint never
/// reads or faults.
#[inline(always)]
fn prefetch_ptr(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    // SAFETY: `_mm_prefetch` needs SSE, which the `cfg` above guarantees. The hint reads no
    // memory the program can observe and cannot fault, whatever the address. Here it is
    // always inside a live value of non-zero size.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = at;
}

/// [`prefetch`]es every cache line `*at` spans: more than one for a value larger than a
/// line, or one that straddles two.
#[inline(always)]
pub(crate) fn prefetch_all<T>(at: &T) {
    let bytes = std::ptr::from_ref(at).cast::<u8>();
    let mut offset = 0;
    while offset < size_of::<T>() {
        prefetch_ptr(bytes.wrapping_add(offset));
        offset += LINE;
    }
    // The last byte's line, when the value straddles one more line than its size needs.
    if let Some(last) = size_of::<T>().checked_sub(1) {
        prefetch_ptr(bytes.wrapping_add(last));
    }
}

/// A cache line's size on the targets that have prefetch hints.
const LINE: usize = 64;

#[cfg(test)]
mod tests {
    use super::{prefetch, prefetch_all};

    /// The hint leaves what it points at as it was, whatever the type. Hints change nothing
    /// observable, so this can fail only under Miri or a sanitizer, which check the
    /// `unsafe` call's address; it is here for them.
    #[test]
    fn a_prefetch_changes_nothing() {
        let values: Vec<u64> = (0..1024).collect();
        for v in &values {
            prefetch(v);
        }
        prefetch(values.as_slice());
        prefetch("a str");
        let wide = [7u8; 200];
        prefetch_all(&wide);
        prefetch_all(&());
        assert!(wide.iter().all(|&b| b == 7));
        assert!(values.iter().copied().eq(0..1024));
    }
}
