//! Signs of life on long runs: progress lines for logs (stderr not a terminal), a heartbeat
//! thread that prints them on a clock, and progress bars for terminals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable that sets how soon the first progress line comes and how often the
/// next ones do, in seconds: for logs that want a denser record, and for tests that must see a
/// line from a run of a second or two.
pub const PROGRESS_SECONDS_VARIABLE: &str = "COLLSIM_PROGRESS_SECONDS";

/// When progress lines come: the first after `first`, the next every `every`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    pub first: Duration,
    pub every: Duration,
}

impl Pace {
    /// The default: nothing for runs under 2 s, then a line every 5 s.
    pub const DEFAULT: Pace = Pace {
        first: Duration::from_secs(2),
        every: Duration::from_secs(5),
    };

    /// The pace a value of [`PROGRESS_SECONDS_VARIABLE`] asks for (one positive number of seconds
    /// for both the first delay and the gap), or why the value is not one.
    pub fn parse(value: &str) -> Result<Pace, String> {
        match value.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => {
                let d = Duration::from_secs_f64(s);
                Ok(Pace { first: d, every: d })
            }
            _ => Err(format!(
                "{PROGRESS_SECONDS_VARIABLE}: expected a positive number of seconds (at most a \
                 day), got {value:?}"
            )),
        }
    }

    /// The pace [`PROGRESS_SECONDS_VARIABLE`] asks for: the default when it is unset, an error
    /// naming it when it is set to anything but a pace.
    fn from_environment() -> Result<Pace, String> {
        match std::env::var_os(PROGRESS_SECONDS_VARIABLE) {
            None => Ok(Pace::DEFAULT),
            Some(v) => Pace::parse(&v.to_string_lossy()),
        }
    }

    /// The pace of this process: [`PROGRESS_SECONDS_VARIABLE`] when it is set and valid, else
    /// the default ([`check_progress_pace`] refuses an invalid value before any work starts).
    pub fn current() -> Pace {
        static PACE: OnceLock<Pace> = OnceLock::new();
        *PACE.get_or_init(|| Pace::from_environment().unwrap_or(Pace::DEFAULT))
    }
}

/// Refuses a set but invalid [`PROGRESS_SECONDS_VARIABLE`], naming it.
pub fn check_progress_pace() -> Result<(), String> {
    Pace::from_environment().map(|_| ())
}

/// A progress line for a log: `progress: <label>: k/total <what> (p%), N s`, and the time the
/// rest takes at `rate` steps a second when known.
fn count_line(
    label: &str,
    what: &str,
    done: u64,
    total: u64,
    elapsed: f64,
    rate: Option<f64>,
) -> String {
    let left = rate.map_or(String::new(), |r| {
        format!(
            ", about {:.0} s left",
            total.saturating_sub(done) as f64 / r
        )
    });
    format!(
        "progress: {label}: {done}/{total} {what} ({:.0}%), {elapsed:.1} s{left}",
        100.0 * done as f64 / total.max(1) as f64
    )
}

/// Progress as plain lines on stderr when it is not a terminal (a Slurm log, `2>log`), where a
/// bar cannot be drawn: nothing for the first 2 s, then a line at most every 5 s ([`Pace`]), with
/// the time left at the rate since the first report (the phase may begin well after the lines are
/// made).
pub struct ProgressLines {
    label: String,
    what: String,
    started: Instant,
    last: std::sync::Mutex<Reported>,
    enabled: bool,
}

/// What [`ProgressLines`] remembers between reports.
#[derive(Default)]
struct Reported {
    /// When the last line was printed.
    printed: Option<Instant>,
    /// The first report: its time and count.
    first: Option<(Instant, u64)>,
}

impl ProgressLines {
    pub fn new(label: &str, what: &str) -> ProgressLines {
        use std::io::IsTerminal;
        ProgressLines {
            label: label.to_string(),
            what: what.to_string(),
            started: Instant::now(),
            last: std::sync::Mutex::new(Reported::default()),
            enabled: !std::io::stderr().is_terminal(),
        }
    }

    /// Reports `done` of `total`, if a line is due.
    pub fn update(&self, done: u64, total: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let (since, from) = *last.first.get_or_insert((now, done));
        let pace = Pace::current();
        let due = match last.printed {
            None => elapsed >= pace.first.as_secs_f64(),
            Some(t) => now.duration_since(t) >= pace.every,
        };
        if due && total > 0 {
            last.printed = Some(now);
            let rate = done
                .checked_sub(from)
                .filter(|&d| d > 0)
                .map(|d| d as f64 / now.duration_since(since).as_secs_f64().max(1e-9));
            eprintln!(
                "{}",
                count_line(&self.label, &self.what, done, total, elapsed, rate)
            );
        }
    }
}

/// Steps of a run that each end something worth a line (an algorithm of a training
/// comparison), counted and timed on stderr when it is not a terminal, where a bar cannot show
/// them: `progress: <label>: <what> (k/n), N s`.
pub struct Milestones {
    label: String,
    total: u64,
    done: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
    enabled: bool,
}

impl Milestones {
    pub fn new(label: &str, total: u64) -> Milestones {
        use std::io::IsTerminal;
        Milestones {
            label: label.to_string(),
            total,
            done: std::sync::atomic::AtomicU64::new(0),
            started: std::time::Instant::now(),
            enabled: !std::io::stderr().is_terminal(),
        }
    }

    /// Counts one step and prints its line.
    pub fn reached(&self, what: &str) {
        let k = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if self.enabled {
            eprintln!(
                "progress: {}: {what} ({k}/{}), {:.1} s",
                self.label,
                self.total,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Steps of a phase, counted where they are done and read by a [`Heartbeat`]: a phase that learns
/// its size late (the synthesizer's sends) [`Steps::begin`]s it, counts, and [`Steps::end`]s it.
#[derive(Debug, Default)]
pub struct Steps {
    done: AtomicU64,
    /// The phase being counted; None between phases.
    phase: std::sync::Mutex<Option<Phase>>,
}

/// A phase [`Steps`] counts: what, how many, since when.
#[derive(Clone, Debug)]
struct Phase {
    what: String,
    total: u64,
    since: Instant,
}

impl Steps {
    /// Starts counting `total` steps of `what` from zero.
    pub fn begin(&self, what: &str, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        if let Ok(mut phase) = self.phase.lock() {
            *phase = Some(Phase {
                what: what.to_string(),
                total,
                since: Instant::now(),
            });
        }
    }

    /// Sets how many steps are done.
    pub fn set(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
    }

    /// Counts one step done.
    pub fn step(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Steps counted since the phase began.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Stops counting: the heartbeat says only the time again.
    pub fn end(&self) {
        if let Ok(mut phase) = self.phase.lock() {
            *phase = None;
        }
    }
}

/// While alive, and when stderr is not a terminal, prints `progress: <label>, N s` every 5 s
/// after the first 2 s ([`Pace`]): the phases that count nothing (tree packing, scheduling) are not silent
/// in a log either. While its [`Steps`] count, it also says how many are done and about how long
/// the rest will take at the rate so far: `progress: <label>: k/total <what> (p%), N s, about M s
/// left`.
pub struct Heartbeat {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    steps: Arc<Steps>,
}

impl Heartbeat {
    pub fn start(label: &str) -> Heartbeat {
        Heartbeat::spawn(label.to_string(), Arc::new(Steps::default()))
    }

    /// A heartbeat over `total` steps of `what`; [`Heartbeat::step`] counts one done.
    pub fn counting(label: &str, what: &str, total: u64) -> Heartbeat {
        let steps = Steps::default();
        steps.begin(what, total);
        Heartbeat::spawn(label.to_string(), Arc::new(steps))
    }

    /// Counts one step done (for a counting heartbeat).
    pub fn step(&self) {
        self.steps.step();
    }

    /// The counter the heartbeat reads, for the code doing the steps.
    pub fn steps(&self) -> Arc<Steps> {
        Arc::clone(&self.steps)
    }

    fn spawn(label: String, steps: Arc<Steps>) -> Heartbeat {
        use std::io::IsTerminal;
        if std::io::stderr().is_terminal() {
            return Heartbeat {
                stop: None,
                thread: None,
                steps,
            };
        }
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let counted = Arc::clone(&steps);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let pace = Pace::current();
            let mut wait = pace.first;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                let elapsed = started.elapsed().as_secs_f64();
                let phase = counted.phase.lock().ok().and_then(|p| p.clone());
                if let Some(Phase { what, total, since }) = phase {
                    let k = counted.done.load(Ordering::Relaxed).min(total);
                    let rate = (k > 0).then(|| k as f64 / since.elapsed().as_secs_f64().max(1e-9));
                    eprintln!("{}", count_line(&label, &what, k, total, elapsed, rate));
                } else {
                    eprintln!("progress: {label}, {elapsed:.0} s");
                }
                wait = pace.every;
            }
        });
        Heartbeat {
            stop: Some(stop),
            thread: Some(thread),
            steps,
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A progress bar on stderr (drawn only when stderr is a terminal) counting `what`.
pub(crate) fn progress_bar(len: u64, message: &str, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{msg:.bold}} [{{wide_bar}}] {{pos}}/{{len}} {what} {{elapsed_precise}} eta {{eta}}"
        ))
        .expect("a valid progress template")
        .progress_chars("=> "),
    );
    bar.set_message(message.chars().take(28).collect::<String>());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_pace_takes_one_positive_number_of_seconds() {
        let half = Duration::from_millis(500);
        assert_eq!(
            Pace::parse(" 0.5 "),
            Ok(Pace {
                first: half,
                every: half
            })
        );
        for bad in ["0", "-1", "soon", "", "inf", "NaN", "1e9"] {
            let err = Pace::parse(bad).unwrap_err();
            assert!(err.starts_with("COLLSIM_PROGRESS_SECONDS: "), "{err}");
        }
    }

    #[test]
    fn progress_lines_say_the_time_left_at_the_rate_so_far() {
        assert_eq!(
            count_line("running", "sends", 25, 100, 10.0, Some(2.5)),
            "progress: running: 25/100 sends (25%), 10.0 s, about 30 s left"
        );
        assert_eq!(
            count_line("simulating", "transfers", 0, 8, 2.25, None),
            "progress: simulating: 0/8 transfers (0%), 2.2 s"
        );
    }
}
