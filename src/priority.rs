//! Thread priorities for pipelines whose stages share two cores: the stage on the critical path
//! (a synthesis that plans every send) keeps a core of its own when the stages behind it (its
//! in-order simulation, the writing of its tables) would otherwise take turns with it.

/// How much lower than the process a thread behind the critical path runs (a nice increment:
/// at 5 the scheduler weighs it about a third of a normal thread).
const BEHIND: i32 = 5;

/// Lowers the calling thread's priority: it runs behind the critical path, on what the other
/// threads leave. Only a hint; where the system refuses or has no such notion, nothing changes.
pub fn run_behind() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid has no preconditions; setpriority on the calling thread's id changes only
    // its own scheduling weight.
    unsafe {
        let tid = libc::gettid();
        let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, now + BEHIND);
    }
}
