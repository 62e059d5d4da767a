//! Thread priorities for pipelines whose stages share two cores: the stages on the critical path
//! (a synthesis that plans every send, on one worker or two) keep the cores they need when the
//! stages behind them (its in-order simulation, the writing of its tables) would otherwise take
//! turns with them.

/// How much lower than the process a thread behind the critical path runs where the system has
/// no idle class (a nice increment: at 5 the scheduler weighs it about a third of a normal
/// thread).
const BEHIND: i32 = 5;

/// Lowers the calling thread's priority: it runs behind the critical path, on what the other
/// threads leave. On Linux it joins the idle class, which runs only on a core no other thread
/// wants: a synthesis split between two workers waits for the slower one at every window, and
/// with a nice increment the in-order simulation still took turns with one worker, which the
/// other then waited for (mesh 100x100: 8.8 s of waiting instead of 14.6 s, 54 s instead of
/// 59 s, 2026-11-26). The stage behind is paced by the bounded queues it reads: when it falls
/// far behind, the stages before it block and leave it their core. Only a hint; where the
/// system refuses or has no such notion, the nice increment, or nothing, applies.
pub fn run_behind() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid has no preconditions; sched_setscheduler and setpriority on the calling
    // thread's id change only its own scheduling.
    unsafe {
        let tid = libc::gettid();
        let idle = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &idle) != 0 {
            let now = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, now + BEHIND);
        }
    }
}
