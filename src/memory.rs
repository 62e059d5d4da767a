//! A guard against runs that cannot fit in memory: the big structures (topologies, schedules)
//! are estimated before they are built and refused with the estimate against what the machine
//! has, rather than failing half-way with an allocation abort. Also the cache hint that the
//! passes over those structures use where their accesses are scattered.

use crate::Error;

/// Bytes a run holds per transfer at least: the transfer's ends (8 B; its size is a byte or
/// nothing while the schedule has few sizes), its dependency and piece entries (4 B each), and
/// the simulator's list of dependents (8 B).
pub const BYTES_PER_TRANSFER: u64 = 24;

/// Bytes a topology holds per link at least: the link, its adjacency entries and routing state.
pub const BYTES_PER_LINK: u64 = 64;

/// Bytes this process can still allocate: the machine's available memory, or less under an
/// address-space limit (`ulimit -v`). None where the system does not say (not Linux).
pub fn available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let machine = kib_field(&meminfo, "MemAvailable:")?;
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max address space"))?;
            line.split_whitespace().nth(3)?.parse::<u64>().ok()
        });
    let headroom = limit.map(|limit| {
        let used = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| kib_field(&s, "VmSize:"))
            .unwrap_or(0);
        limit.saturating_sub(used)
    });
    Some(headroom.map_or(machine, |h| h.min(machine)))
}

/// `field` of a /proc file whose values are in kB, in bytes.
fn kib_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

/// Refuses `what` when the `needed` bytes pass what is available, naming both and `advice`.
pub fn ensure(needed: u64, what: &str, advice: &str) -> Result<(), Error> {
    ensure_within(needed, available(), what, advice)
}

fn ensure_within(
    needed: u64,
    available: Option<u64>,
    what: &str,
    advice: &str,
) -> Result<(), Error> {
    match available {
        Some(have) if needed > have => Err(Error::input(format!(
            "{what} needs about {} of memory; {} available; {advice}",
            in_words(needed),
            in_words(have)
        ))),
        _ => Ok(()),
    }
}

/// Bytes in decimal units with one decimal, as a person would say them ("640.0 GB").
fn in_words(bytes: u64) -> String {
    let b = bytes as f64;
    match b {
        b if b >= 1e12 => format!("{:.1} TB", b / 1e12),
        b if b >= 1e9 => format!("{:.1} GB", b / 1e9),
        b => format!("{:.1} MB", b / 1e6),
    }
}

/// Multiplies counts of things by their size, saturating: an estimate too large to count is
/// simply too large.
pub fn bytes(count: u64, each: u64) -> u64 {
    count.saturating_mul(each)
}

/// Hints the CPU to fetch `value`'s cache line: passes that know which scattered entries they
/// will read a few steps ahead (the simulator's next events, the validator's next transfers)
/// overlap those memory misses instead of stalling on each in turn.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint with no architectural effect; any address is allowed.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Blocks at least this large are backed by transparent huge pages.
pub const HUGE_PAGE_BLOCK: usize = 4 << 20;

/// Asks the kernel to back the block at `ptr` of `len` bytes with transparent huge pages (2 MiB),
/// where the system leaves them to the program (`madvise` mode, as on this machine kind). The big
/// arrays (transfers, dependencies, the synthesizer's bitsets and logs) are written once and then
/// read at scattered places: with 4 KiB pages, faulting them in and missing the TLB cost a tenth
/// of a 4096-NPU all-to-all and of a 6400-NPU synthesis. Only a hint; errors are ignored.
#[inline]
pub fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + len) & !(PAGE - 1);
        if end > start {
            // SAFETY: the range lies inside a block the caller owns; MADV_HUGEPAGE changes no
            // contents, only how the kernel backs the pages.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// `len` zeros, in fresh memory that the kernel maps in on a thread of its own, behind the
/// others, while the caller goes on: for arrays written at scattered places through a long
/// single-threaded pass (the simulator's per-transfer completion times), whose first touch would
/// otherwise stall that pass page by page. Filling them with zeros instead, before the pass,
/// cost 1.8 s for 0.5 GB on this machine kind, whose virtual machines back memory on first
/// touch. Where the system cannot map ahead, the pages come in as they are first written.
pub fn zeroed_prefaulted<T: bytemuck::Zeroable>(len: usize) -> Vec<T> {
    let v: Vec<T> = bytemuck::zeroed_vec(len);
    let bytes = std::mem::size_of_val(v.as_slice());
    if bytes >= HUGE_PAGE_BLOCK {
        let start = v.as_ptr() as usize;
        // Only the address crosses: mapping pages in changes no contents, so the block may be
        // written meanwhile, and if it is freed first the kernel refuses or maps in pages of
        // whatever lies there now, changing nothing either.
        let _ = std::thread::Builder::new()
            .name("prefault".into())
            .spawn(move || {
                crate::priority::run_behind();
                populate(start, bytes);
            });
    }
    v
}

/// Asks the kernel to map in the pages of `[start, start + len)` writable (Linux 5.14 and
/// later); a hint whose failure changes nothing.
fn populate(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let from = start.next_multiple_of(PAGE);
        let to = (start + len) & !(PAGE - 1);
        if to > from {
            // SAFETY: MADV_POPULATE_WRITE only faults pages in, as a write would, without
            // changing what they hold; on a range no longer mapped it fails with no effect.
            unsafe {
                libc::madvise(
                    from as *mut libc::c_void,
                    to - from,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zeros however large, while the pages are being mapped in beside the caller's writes.
    #[test]
    fn prefaulted_vectors_are_zeros_and_take_writes_meanwhile() {
        for len in [0, 3, HUGE_PAGE_BLOCK / 8 * 3 + 5] {
            let mut v: Vec<u64> = zeroed_prefaulted(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0));
            for (i, x) in v.iter_mut().enumerate().step_by(4096) {
                *x = i as u64;
            }
            assert!(v
                .iter()
                .enumerate()
                .all(|(i, &x)| x == (i % 4096 == 0) as u64 * i as u64));
        }
    }

    #[test]
    fn the_machine_reports_some_memory() {
        if cfg!(target_os = "linux") {
            assert!(available().is_some_and(|b| b > 0));
        }
    }

    #[test]
    fn estimates_past_the_memory_are_refused_with_both_figures() {
        let err = ensure_within(
            640_000_000_000,
            Some(22_000_000_000),
            "the schedule",
            "try less",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("640.0 GB") && err.contains("22.0 GB"), "{err}");
        assert!(err.contains("try less"), "{err}");
        assert!(ensure_within(1 << 20, Some(1 << 30), "x", "y").is_ok());
        assert!(ensure_within(u64::MAX, None, "x", "y").is_ok());
        assert_eq!(bytes(u64::MAX, 2), u64::MAX);
    }
}
