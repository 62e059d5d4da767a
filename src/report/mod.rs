//! Reports: the summary row, per-transfer and per-link CSVs, heat maps, utilisation over time and
//! the figures of sweeps, experiments and training runs, all in a results folder that is either
//! complete or absent.

mod heatmap;
mod parquet;
mod plot;
mod training;
mod utilization;

pub use heatmap::{HeatMetric, Heatmap, HeatmapGrid};
pub use parquet::{
    write_transfers_parquet, TransfersBegun, TransfersFile, LEADING_TRANSFER_COLUMNS,
};
pub use plot::{BarChart, LinePlot, Series};
pub use training::{
    breakdown_chart, timeline_chart, write_breakdown_csv, write_ranks_csv, write_timeline_json,
    BREAKDOWN_HEADER,
};
pub use utilization::{Utilization, BINS as UTILIZATION_BINS};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::schedule::{Schedule, TransferIndex};
use crate::sim::SimResult;
use crate::topology::Topology;
use crate::units::Time;
use crate::Error;

/// Columns of `summary.csv`, in DESIGN.md order, then collsim's extras.
pub const SUMMARY_HEADER: &str = "topology,npus,collective,algorithm,size_bytes,chunks_per_npu,\
collective_time_ns,algbw_GBps,busbw_GBps,bound_ns,efficiency,transfers,synthesis_ms,seed,time_model,\
link_utilization,dim_utilization,max_queue,queued_fraction";

/// One simulated run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub topology: String,
    pub npus: u32,
    /// Collective name, or `schedule` for an unclaimed schedule file.
    pub collective: String,
    pub algorithm: String,
    pub size_bytes: Option<u64>,
    pub chunks_per_npu: Option<u32>,
    pub collective_time: Time,
    /// nccl-tests bus-bandwidth factor of the collective.
    pub busbw_factor: Option<f64>,
    pub bound: Option<Time>,
    pub transfers: usize,
    pub synthesis_ms: Option<f64>,
    pub seed: Option<u64>,
    pub time_model: String,
    /// Mean over links of busy time / collective time.
    pub link_utilization: f64,
    /// The same per dimension of a multi-dimensional network (empty otherwise).
    pub dim_utilization: Vec<f64>,
    /// The most messages any link held at once (1: no message ever waited for a link).
    pub max_queue: u32,
    /// Mean over links of the time a message waited for the link / collective time.
    pub queued_fraction: f64,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

impl Summary {
    /// Size over time, in 1e9 bytes per second.
    pub fn algbw_gbps(&self) -> Option<f64> {
        let secs = self.collective_time.as_secs_f64();
        self.size_bytes
            .filter(|_| secs > 0.0)
            .map(|s| s as f64 / secs / 1e9)
    }

    pub fn busbw_gbps(&self) -> Option<f64> {
        Some(self.algbw_gbps()? * self.busbw_factor?)
    }

    /// Bound over time, at most 1: the simulator rounds each hop's delay to the picosecond, so a
    /// schedule may meet its bound to within a few picoseconds of it, which is 1
    /// ([`Summary::check`] refuses anything beyond that).
    pub fn efficiency(&self) -> Option<f64> {
        let t = self.collective_time.ps();
        self.bound
            .filter(|_| t > 0)
            .map(|b| (b.ps() as f64 / t as f64).min(1.0))
    }

    /// The invariants every reported summary keeps: its times are in range, and neither its
    /// efficiency nor its utilisation passes 1 (beyond the picoseconds of rounding).
    pub fn check(&self) -> Result<(), Error> {
        if self.collective_time == Time::ZERO && self.transfers > 0 {
            return Err(Error::input(
                "the collective takes less than a picosecond, collsim's time resolution: give \
                 a larger size, slower links or longer latencies",
            ));
        }
        if let Some(bound) = self.bound.filter(|b| !b.fits()) {
            return Err(Error::input(format!(
                "the lower bound ({bound}) passes the largest time collsim represents (2^64 ps, \
                 about 213 days): give a smaller size or faster links"
            )));
        }
        let t = self.collective_time.ps() as f64;
        if let Some(bound) = self.bound {
            let slack = 1e3 * self.transfers.max(1) as f64;
            if bound.ps() as f64 > t + slack {
                return Err(Error::Internal(format!(
                    "the lower bound {bound} exceeds the simulated time {}",
                    self.collective_time
                )));
            }
        }
        let utilizations =
            std::iter::once(self.link_utilization).chain(self.dim_utilization.iter().copied());
        for u in utilizations {
            if !(0.0..=1.0 + 1e-9).contains(&u) {
                return Err(Error::Internal(format!(
                    "a link utilisation of {u} is not a fraction"
                )));
            }
        }
        Ok(())
    }

    /// The CSV row matching [`SUMMARY_HEADER`].
    pub fn csv_row(&self) -> String {
        let f =
            |v: Option<f64>, digits: usize| v.map(|x| format!("{x:.digits$}")).unwrap_or_default();
        let quote = csv_field;
        [
            quote(&self.topology),
            self.npus.to_string(),
            quote(&self.collective),
            quote(&self.algorithm),
            opt(self.size_bytes),
            opt(self.chunks_per_npu),
            self.collective_time.ns_string(),
            f(self.algbw_gbps(), 6),
            f(self.busbw_gbps(), 6),
            self.bound.map(Time::ns_string).unwrap_or_default(),
            f(self.efficiency(), 6),
            self.transfers.to_string(),
            f(self.synthesis_ms, 3),
            opt(self.seed),
            self.time_model.clone(),
            format!("{:.6}", self.link_utilization),
            self.dim_utilization
                .iter()
                .map(|u| format!("{u:.6}"))
                .collect::<Vec<_>>()
                .join(";"),
            self.max_queue.to_string(),
            format!("{:.6}", self.queued_fraction),
        ]
        .join(",")
    }

    /// One line naming the run, for figure titles.
    pub fn title(&self) -> String {
        let size = self
            .size_bytes
            .map(|s| format!(" of {}", crate::units::format_bytes(s)))
            .unwrap_or_default();
        format!(
            "{}{size} on {}, {}",
            self.collective, self.topology, self.algorithm
        )
    }

    /// A few human-readable lines for the terminal.
    pub fn human(&self) -> String {
        let mut out = format!(
            "{} on {} ({} NPUs), algorithm {}\n",
            self.collective, self.topology, self.npus, self.algorithm
        );
        if let Some(size) = self.size_bytes {
            out += &format!(
                "  size            {} ({size} B)\n",
                crate::units::format_bytes(size)
            );
        }
        if let Some(chunks) = self.chunks_per_npu {
            out += &format!("  chunks          {chunks} per NPU\n");
        }
        out += &format!("  transfers       {}\n", self.transfers);
        out += &format!("  collective time {}\n", self.collective_time);
        if let (Some(a), Some(b)) = (self.algbw_gbps(), self.busbw_gbps()) {
            out += &format!("  algbw / busbw   {a:.3} / {b:.3} GB/s\n");
        }
        if let (Some(bound), Some(e)) = (self.bound, self.efficiency()) {
            out += &format!("  lower bound     {bound} (efficiency {e:.3})\n");
        }
        out += &format!(
            "  link busy       {:.1}% of the time on average",
            self.link_utilization * 100.0
        );
        if !self.dim_utilization.is_empty() {
            let dims: Vec<String> = self
                .dim_utilization
                .iter()
                .enumerate()
                .map(|(d, u)| format!("dim {} {:.1}%", d + 1, u * 100.0))
                .collect();
            out += &format!(" ({})", dims.join(", "));
        }
        out += "\n";
        out += &format!(
            "  link queues     at most {} message(s) at a link; one waiting {:.1}% of the time on \
             average\n",
            self.max_queue,
            self.queued_fraction * 100.0
        );
        if let Some(ms) = self.synthesis_ms {
            out += &format!("  synthesis       {ms:.1} ms\n");
        }
        out
    }
}

/// A results folder whose files are written under temporary names and renamed into place only when
/// the whole run succeeded, so a failed or interrupted run never leaves a folder that looks
/// complete, and a `--force` rerun that fails leaves the previous results as they were. It is
/// prepared before the run, so a folder that cannot be written (or that another run is writing)
/// is found at once.
pub struct OutputDir {
    dir: PathBuf,
    pending: Vec<(PathBuf, PathBuf)>,
    /// What the previous run listed in the manifest (with `--force`): removed at the commit.
    previous: Vec<PathBuf>,
    lock: PathBuf,
    /// The folder did not exist before: a run that fails removes it again (when empty).
    created: bool,
    committed: bool,
}

/// The file in a results folder listing what collsim wrote there, so `--force` removes exactly
/// that before writing again.
pub const MANIFEST: &str = ".collsim-manifest";

/// The file that marks a results folder as being written by a run (its process id inside).
pub const LOCK: &str = ".collsim-lock";

/// Temporary files and locks of every open [`OutputDir`], removed on Ctrl-C, SIGTERM or SIGHUP.
static PENDING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// On Ctrl-C, SIGTERM or SIGHUP (what Slurm sends at a time limit, what a closed terminal sends),
/// removes the temporary files and locks of unfinished outputs and exits with 130.
pub fn remove_partial_outputs_on_interrupt() {
    // A second handler cannot be installed (tests run many commands in one process): the first
    // one already does this.
    let _ = ctrlc::set_handler(|| {
        remove_pending_outputs();
        eprintln!("error: interrupted; unfinished output files removed");
        std::process::exit(130);
    });
}

/// Removes the temporary files and locks of outputs not yet moved into place (a run ending early).
pub fn remove_pending_outputs() {
    let pending = PENDING.lock().map(|p| p.clone()).unwrap_or_default();
    for path in pending {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether a file name is one of collsim's temporary names (`.name.partial.ext`, `.name.partial`).
fn is_partial(name: &str) -> bool {
    name.starts_with('.') && (name.contains(".partial.") || name.ends_with(".partial"))
}

impl OutputDir {
    /// Checks that `dir` can take the results before anything runs: it must be a folder (made if
    /// missing), writable, not being written by another run, and empty unless `force`. With
    /// `force` what collsim wrote there before is replaced when this run's results are complete.
    pub fn prepare(dir: &Path, force: bool) -> Result<OutputDir, Error> {
        let shown = dir.display();
        if dir.exists() && !dir.is_dir() {
            return Err(Error::input(format!(
                "{shown}: is a file; --out names the folder the results go to"
            )));
        }
        let created = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(&shown, e))?;
        let lock = take_lock(dir)?;
        let mut out = OutputDir {
            dir: dir.to_path_buf(),
            pending: Vec::new(),
            previous: Vec::new(),
            lock,
            created,
            committed: false,
        };
        // Temporary files of a run that was killed: no run is writing now (the lock says so).
        remove_stale_partials(dir);
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::io(&shown, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != LOCK)
            .count();
        if entries > 0 {
            if !force {
                return Err(Error::input(format!(
                    "{shown}: the folder is not empty; give --force to replace what collsim \
                     wrote there, or another folder"
                )));
            }
            out.previous = previous_outputs(dir);
        }
        let probe = dir.join(".collsim-write-test");
        std::fs::write(&probe, b"").map_err(|e| Error::io(&shown, e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(out)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Refuses to go on when `input`, which this run reads, is a result of an earlier run that
    /// `--force` would replace.
    pub fn keep_input(&self, input: &Path, flag: &str) -> Result<(), Error> {
        let (Ok(input), Ok(dir)) = (input.canonicalize(), self.dir.canonicalize()) else {
            return Ok(());
        };
        let Ok(relative) = input.strip_prefix(&dir) else {
            return Ok(());
        };
        if self.previous.iter().any(|p| p == relative) {
            return Err(Error::input(format!(
                "{flag} {}: --force would replace it, as a result of an earlier run in {}; \
                 copy it elsewhere or write the results to another folder",
                input.display(),
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// A path to write `name` to; it appears under its real name at [`OutputDir::commit`]. The
    /// temporary name keeps the extension last (`.heatmap.partial.png`): image encoders go by it.
    pub fn file(&mut self, name: &str) -> PathBuf {
        let real = self.dir.join(name);
        let parent = real.parent().unwrap_or(&self.dir).to_path_buf();
        // A folder that cannot be made shows up as the writer's error on the file itself.
        let _ = std::fs::create_dir_all(&parent);
        let file = real
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = match file.rsplit_once('.') {
            Some((stem, ext)) => parent.join(format!(".{stem}.partial.{ext}")),
            None => parent.join(format!(".{file}.partial")),
        };
        if self.pending.iter().any(|(_, r)| *r == real) {
            return tmp;
        }
        if let Ok(mut pending) = PENDING.lock() {
            pending.push(tmp.clone());
        }
        self.pending.push((tmp.clone(), real));
        tmp
    }

    /// Drops `name` from the files to commit, removing what was written of it.
    pub fn discard(&mut self, name: &str) {
        let real = self.dir.join(name);
        let (dropped, kept) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, r)| *r == real);
        self.pending = kept;
        let dropped: Vec<(PathBuf, PathBuf)> = dropped;
        for (tmp, _) in &dropped {
            let _ = std::fs::remove_file(tmp);
        }
        forget_pending(&dropped);
    }

    /// Replaces the previous run's files by this run's: refuses (changing nothing) where a file
    /// of this run would land on one collsim did not write; removes the previous run's files;
    /// moves every written file into place (summary files last, by call order) and records them
    /// in the manifest.
    pub fn commit(mut self) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending);
        for (_, real) in &pending {
            let ours = real
                .strip_prefix(&self.dir)
                .is_ok_and(|r| self.previous.iter().any(|p| p == r));
            if real.exists() && !ours {
                for (tmp, _) in &pending {
                    let _ = std::fs::remove_file(tmp);
                }
                forget_pending(&pending);
                return Err(Error::input(format!(
                    "{}: is not a file collsim wrote (the folder's manifest does not list it), \
                     so it was left as it was and this run's results were not written; move it \
                     or give another folder",
                    real.display()
                )));
            }
        }
        for relative in std::mem::take(&mut self.previous) {
            let path = self.dir.join(&relative);
            if pending.iter().any(|(_, real)| *real == path) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(path.display(), e)),
            }
            let mut parent = path.parent();
            while let Some(p) = parent.filter(|p| *p != self.dir) {
                if std::fs::remove_dir(p).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
        let mut manifest = String::new();
        for (tmp, real) in &pending {
            std::fs::rename(tmp, real).map_err(|e| Error::io(real.display(), e))?;
            if let Ok(relative) = real.strip_prefix(&self.dir) {
                manifest += &format!("{}\n", relative.display());
            }
        }
        forget_pending(&pending);
        self.committed = true;
        let path = self.dir.join(MANIFEST);
        std::fs::write(&path, manifest).map_err(|e| Error::io(path.display(), e))
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = std::fs::remove_file(tmp);
        }
        forget_pending(&self.pending);
        let _ = std::fs::remove_file(&self.lock);
        if let Ok(mut pending) = PENDING.lock() {
            pending.retain(|p| *p != self.lock);
        }
        if self.created && !self.committed {
            // Only an empty folder goes: a failed run leaves no empty results folder behind.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn forget_pending(files: &[(PathBuf, PathBuf)]) {
    if let Ok(mut pending) = PENDING.lock() {
        pending.retain(|p| !files.iter().any(|(tmp, _)| tmp == p));
    }
}

/// Marks `dir` as written by this process, or names the run that is writing it. A lock whose
/// process is gone (killed outright) is taken over.
fn take_lock(dir: &Path) -> Result<PathBuf, Error> {
    let lock = dir.join(LOCK);
    let me = std::process::id();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut file) => {
                let _ = write!(file, "{me}");
                if let Ok(mut pending) = PENDING.lock() {
                    pending.push(lock.clone());
                }
                return Ok(lock);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner: Option<u32> = std::fs::read_to_string(&lock)
                    .ok()
                    .and_then(|t| t.trim().parse().ok());
                let alive = match owner {
                    Some(pid) if Path::new("/proc/self").exists() => {
                        Path::new(&format!("/proc/{pid}")).exists()
                    }
                    // Without /proc, a lock is taken to be live.
                    _ => true,
                };
                if alive {
                    return Err(Error::input(format!(
                        "{}: another collsim run{} is writing results here; wait for it or give \
                         another folder (if no run is, remove {})",
                        dir.display(),
                        owner.map_or(String::new(), |p| format!(" (process {p})")),
                        lock.display()
                    )));
                }
                let _ = std::fs::remove_file(&lock);
            }
            Err(e) => return Err(Error::io(dir.display(), e)),
        }
    }
    Err(Error::input(format!(
        "{}: cannot take the folder's lock {}",
        dir.display(),
        lock.display()
    )))
}

/// Removes temporary files a killed run left anywhere under `dir`.
fn remove_stale_partials(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            remove_stale_partials(&path);
        } else if is_partial(&name) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The files a previous run listed in `dir`'s manifest, relative to `dir`; only paths inside the
/// folder (a tampered manifest must not reach elsewhere).
fn previous_outputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(dir.join(MANIFEST)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|relative| {
            !relative.is_absolute()
                && relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .collect();
    files.push(PathBuf::from(MANIFEST));
    files
}

pub(crate) fn writer(path: &Path) -> Result<BufWriter<File>, Error> {
    Ok(BufWriter::with_capacity(
        1 << 20,
        File::create(path).map_err(|e| Error::io(path.display(), e))?,
    ))
}

/// Writes `summary.csv`: the header and one row per summary.
pub fn write_summary_csv(rows: &[Summary], path: &Path) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "{SUMMARY_HEADER}").map_err(io)?;
    for row in rows {
        writeln!(w, "{}", row.csv_row()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Writes `transfers.csv` (`id,src,dst,bytes,start_ns,end_ns`), streaming from the recorded times;
/// start is when the transfer was issued, end when it completed at its destination.
pub fn write_transfers_csv(
    schedule: &Schedule,
    result: &SimResult,
    path: &Path,
) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "id,src,dst,bytes,start_ns,end_ns").map_err(io)?;
    for i in 0..schedule.len() {
        let t = schedule.transfer(i as TransferIndex);
        writeln!(
            w,
            "{},{},{},{},{},{}",
            schedule.id(i as TransferIndex),
            t.src,
            t.dst,
            t.bytes,
            result.issued(schedule, i as TransferIndex).ns_string(),
            result.completed[i].ns_string()
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Writes `links.csv` (`src,dst,bytes,busy_ns,utilization,max_queue,queued_ns`): utilisation is
/// busy time over the collective time; `max_queue` the most messages the link held at once, and
/// `queued_ns` the time a message waited for it.
pub fn write_links_csv(topology: &Topology, result: &SimResult, path: &Path) -> Result<(), Error> {
    let load = LinkLoad {
        bytes: &result.link_bytes,
        busy: &result.link_busy,
        max_queue: &result.link_max_queue,
        queued: &result.link_queued,
    };
    write_link_load_csv(topology, &load, result.finish, path)
}

/// What each link of a topology carried (one entry per link, in the topology's order).
pub struct LinkLoad<'a> {
    pub bytes: &'a [u64],
    pub busy: &'a [Time],
    pub max_queue: &'a [u32],
    pub queued: &'a [Time],
}

/// Writes `links.csv` from per-link loads, utilisation over `total`.
pub fn write_link_load_csv(
    topology: &Topology,
    load: &LinkLoad,
    total: Time,
    path: &Path,
) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "src,dst,bytes,busy_ns,utilization,max_queue,queued_ns").map_err(io)?;
    let total = total.ps() as f64;
    for (l, link) in topology.links().iter().enumerate() {
        let busy = load.busy[l];
        let utilization = if total > 0.0 {
            busy.ps() as f64 / total
        } else {
            0.0
        };
        writeln!(
            w,
            "{},{},{},{},{:.6},{},{}",
            link.src,
            link.dst,
            load.bytes[l],
            busy.ns_string(),
            utilization,
            load.max_queue[l],
            load.queued[l].ns_string()
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Saves a figure as `stem.png` and `stem.svg` into the results folder.
pub(crate) fn save_figure(
    figure: &impl plot::Figure,
    out: &mut OutputDir,
    stem: &str,
) -> Result<(), Error> {
    plot::save_png(figure, &out.file(&format!("{stem}.png")))?;
    plot::save_svg(figure, &out.file(&format!("{stem}.svg")))
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
/// bar cannot be drawn: nothing for the first 2 s, then a line at most every 5 s, with the time
/// left at the rate since the first report (the phase may begin well after the lines are made).
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
        let due = match last.printed {
            None => elapsed >= 2.0,
            Some(t) => now.duration_since(t).as_secs_f64() >= 5.0,
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
/// after the first 2 s: the phases that count nothing (tree packing, scheduling) are not silent
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
            let mut wait = std::time::Duration::from_secs(2);
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
                wait = std::time::Duration::from_secs(5);
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

/// A CSV field: quoted when it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn bandwidths_and_efficiency_follow_their_definitions() {
        let s = Summary {
            size_bytes: Some(2_000_000_000),
            collective_time: Time::from_ns(1_000_000_000),
            busbw_factor: Some(1.5),
            bound: Some(Time::from_ns(500_000_000)),
            ..Summary::default()
        };
        assert_eq!(s.algbw_gbps(), Some(2.0));
        assert_eq!(s.busbw_gbps(), Some(3.0));
        assert_eq!(s.efficiency(), Some(0.5));
        assert_eq!(
            s.csv_row().split(',').count(),
            SUMMARY_HEADER.split(',').count()
        );
    }

    #[test]
    fn uncommitted_output_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("collsim-out-{}", std::process::id()));
        {
            let mut out = OutputDir::prepare(&dir, false).unwrap();
            std::fs::write(out.file("summary.csv"), "x").unwrap();
        }
        // The folder this run made is gone again; one that existed stays, emptied.
        assert!(!dir.exists());
        std::fs::create_dir_all(&dir).unwrap();
        {
            let mut out = OutputDir::prepare(&dir, false).unwrap();
            std::fs::write(out.file("summary.csv"), "x").unwrap();
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_used_folder_needs_force_which_removes_only_what_collsim_wrote() {
        let dir = std::env::temp_dir().join(format!("collsim-force-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut out = OutputDir::prepare(&dir, false).unwrap();
        std::fs::write(out.file("runs/3/link_bytes.csv"), "old").unwrap();
        std::fs::write(out.file("summary.csv"), "old").unwrap();
        out.commit().unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let err = OutputDir::prepare(&dir, false).err().unwrap().to_string();
        assert!(
            err.contains("--force") && err.contains("not empty"),
            "{err}"
        );
        // Replaced only when the new results are complete: a run that fails keeps the old ones.
        let out = OutputDir::prepare(&dir, true).unwrap();
        drop(out);
        assert!(dir.join("summary.csv").exists() && dir.join("runs/3/link_bytes.csv").exists());
        let mut out = OutputDir::prepare(&dir, true).unwrap();
        std::fs::write(out.file("summary.csv"), "new").unwrap();
        out.commit().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("summary.csv")).unwrap(),
            "new"
        );
        assert!(!dir.join("runs").exists());
        assert!(dir.join("notes.txt").exists());
        // A file collsim did not write is never replaced: the run's results are refused.
        let mut out = OutputDir::prepare(&dir, true).unwrap();
        std::fs::write(out.file("notes.txt"), "results").unwrap();
        let err = out.commit().unwrap_err().to_string();
        assert!(err.contains("notes.txt"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
            "mine"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("summary.csv")).unwrap(),
            "new"
        );
        let file = dir.join("notes.txt");
        let err = OutputDir::prepare(&file, true).err().unwrap().to_string();
        assert!(err.contains("is a file"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_folder_another_run_writes_is_refused_and_a_dead_runs_lock_taken_over() {
        let dir = std::env::temp_dir().join(format!("collsim-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = OutputDir::prepare(&dir, false).unwrap();
        let err = OutputDir::prepare(&dir, true).err().unwrap().to_string();
        assert!(err.contains("another collsim run"), "{err}");
        drop(first);
        assert!(!dir.join(LOCK).exists());
        // A killed run: its lock names a process that is gone, its temporary file is left.
        std::fs::write(dir.join(LOCK), "4294967").unwrap();
        std::fs::write(dir.join(".summary.partial.csv"), "half").unwrap();
        let out = OutputDir::prepare(&dir, false).unwrap();
        assert!(!dir.join(".summary.partial.csv").exists());
        drop(out);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
