//! The `collsim` binary: parse the command line, run it, map errors to exit statuses.
//!
//! Every failure ends with one `error:` line: bad input and unwritable outputs exit 2 (clap's
//! own usage errors too), an allocation the machine cannot serve exits 2, a broken invariant of
//! collsim itself exits 70, Ctrl-C exits 130 after removing unfinished output files, and a
//! closed stdout (a pipe into `head`) ends the run quietly.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;

/// The system allocator, ending the process with one `error:` line and exit status 2 when an
/// allocation fails, where Rust would abort with a backtrace, and backing large blocks with huge
/// pages ([`collsim::memory::advise_huge_pages`]).
struct ExitOnOutOfMemory;

/// `p`, a fresh block of `bytes`, after the checks every allocation gets.
#[inline]
fn served(p: *mut u8, bytes: usize) -> *mut u8 {
    if p.is_null() {
        out_of_memory(bytes);
    }
    if bytes >= collsim::memory::HUGE_PAGE_BLOCK {
        collsim::memory::advise_huge_pages(p, bytes);
    } else if cfg!(all(target_os = "linux", target_env = "gnu"))
        && p as usize + bytes > HEAP_ADVISED_TO.load(Ordering::Relaxed)
    {
        advise_heap_growth(p as usize);
    }
    p
}

/// The end of the C heap (the part below the program break) already advised to be backed by
/// huge pages.
static HEAP_ADVISED_TO: AtomicUsize = AtomicUsize::new(0);

/// How far the C heap grows at a time ([`libc::M_TOP_PAD`]): far enough that the heap's growth
/// is mostly whole huge pages, which the kernel backs as they are first touched.
const HEAP_GROWTH: i32 = 64 << 20;

/// Asks for huge pages on the C heap up to the program break, where a small block at `p` lies
/// past the part already advised. Small blocks (the synthesizer's per-link and per-NPU arrays and
/// logs, hundreds of megabytes on a 200x200 mesh) were otherwise on 4 KiB pages, read at
/// scattered places, each a likely TLB miss: with the heap on huge pages a 100x100 mesh's
/// synthesis took 7-8% less time and a 200x200 mesh's 12% (2026-11-26). Blocks mapped on their
/// own or in other threads' heaps lie above the break and are left alone.
#[cold]
fn advise_heap_growth(p: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `sbrk(0)` only reads the current program break.
        let brk = unsafe { libc::sbrk(0) } as usize;
        if p >= brk {
            return;
        }
        let from = match HEAP_ADVISED_TO.load(Ordering::Relaxed) {
            0 => p,
            advised => advised.min(p),
        };
        collsim::memory::advise_huge_pages(from as *mut u8, brk - from);
        HEAP_ADVISED_TO.fetch_max(brk, Ordering::Relaxed);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = p;
}

unsafe impl GlobalAlloc for ExitOnOutOfMemory {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        served(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        served(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        served(unsafe { System.realloc(ptr, layout, new_size) }, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: ExitOnOutOfMemory = ExitOnOutOfMemory;

/// Reports a failed allocation without allocating (the formatting writes straight to stderr).
fn out_of_memory(bytes: usize) -> ! {
    let _ = writeln!(
        std::io::stderr(),
        "error: out of memory: could not allocate {:.1} GB more; try fewer NPUs, a smaller \
         --chunks, or --no-validate",
        bytes as f64 / 1e9
    );
    std::process::exit(2)
}

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets one of the C allocator's parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, HEAP_GROWTH);
    }
    std::panic::set_hook(Box::new(|info| {
        // A third-party reader failing on a corrupt file: the caller reports it as bad input.
        if collsim::reading_untrusted() {
            return;
        }
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default()
            .replace('\n', " ");
        // A reader that stops early (`collsim trees ... | head`) closes stdout: end quietly,
        // as Unix tools do, leaving no half-written output files behind.
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            collsim::report::remove_pending_outputs();
            std::process::exit(0);
        }
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error, please report: {message}{place}");
        std::process::exit(70);
    }));
    collsim::report::remove_partial_outputs_on_interrupt();
    let cli = match collsim::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => err.exit(),
        Err(err) => {
            // clap's message and tips on one line, without the usage block.
            let rendered = err.to_string();
            let lines: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(|l| l.trim())
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            let mut message = String::new();
            for line in lines {
                if !message.is_empty() {
                    message += if message.ends_with(':') { " " } else { "; " };
                }
                message += line;
            }
            eprintln!("{message}; see --help");
            std::process::exit(2);
        }
    };
    if let Err(err) = collsim::cli::run(cli) {
        let message = err.to_string().replace('\n', " ");
        eprintln!("error: {message}");
        std::process::exit(match err {
            collsim::Error::Input(_) | collsim::Error::Io { .. } => 2,
            collsim::Error::Internal(_) => 70,
        });
    }
}
