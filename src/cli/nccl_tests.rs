//! `collsim nccl-tests OP`: the table nccl-tests' `OP_perf` would print on a GPU system, each
//! size run through the NCCL model (`crate::nccl`), optionally beside a measured log.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::collective::CollectiveKind;
use crate::nccl::{log, Algo, Allowed, Launch, Model, Prediction, Setting};
use crate::report::{save_figure, LinePlot, OutputDir, Series};
use crate::topology::GpuSystem;
use crate::units::format_bytes_approx;
use crate::Error;
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// nccl-tests' own table, with the algorithm and protocol per row.
    Table,
    /// One CSV row per size.
    Csv,
}

#[derive(Args, Debug)]
pub struct NcclTestsArgs {
    /// all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce (nccl-tests' names)
    pub op: String,
    #[command(flatten)]
    pub system: NcclSystemArgs,
    /// Smallest size (nccl-tests' -b; K, M, G are powers of 1024) [default: 32M, or with
    /// --compare and neither -b nor -e, every size the log holds]
    #[arg(short = 'b', long = "minbytes")]
    pub min_bytes: Option<String>,
    /// Largest size (-e) [default: 32M, or the log's sizes as for -b]
    #[arg(short = 'e', long = "maxbytes")]
    pub max_bytes: Option<String>,
    /// Factor between sizes (-f); 1 steps by -i instead, as nccl-tests does [default: 2, or 1
    /// when only -i is given]
    #[arg(short = 'f', long = "stepfactor")]
    pub factor: Option<u64>,
    /// Increment between sizes when -f is 1 (nccl-tests' -i) [default: 1M]
    #[arg(short = 'i', long = "stepbytes")]
    pub step_bytes: Option<String>,
    /// Reduction of all_reduce, reduce_scatter and reduce (-o): sum, prod, min, max or avg.
    /// NCCL's choice and its kernels' time do not depend on it (its cost model has no term for
    /// the operation); it names the table's redop column
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub reduction: String,
    /// Data type (-d): float, half, bfloat16, double, int8, uint8, int32, uint32, int64, uint64,
    /// f8e4m3, f8e5m2
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Root rank of broadcast and reduce (-r)
    #[arg(short = 'r', long, default_value_t = 0)]
    pub root: u32,
    /// A measured nccl-tests log of OP (its own output, or a Markdown table of size, time,
    /// algbw, busbw): adds the measured time and the error per size
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Results folder for nccl_tests.csv and, with --compare, busbw.png/.svg (predicted and
    /// measured bus bandwidth over size); made if missing, must be empty unless --force (`-o`
    /// is nccl-tests' reduction, as there)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write into a non-empty --out folder, first removing what collsim wrote there before
    #[arg(long)]
    pub force: bool,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
    #[command(flatten)]
    pub measurement: MeasurementArgs,
}

/// nccl-tests' options that set how it measures, not what NCCL runs: taken so that a measured
/// run's command line works as written. Those that change no call's time are accepted and have
/// no effect (a prediction is the time of one call in the steady state, the mean nccl-tests
/// reports); those that change what the timer sees (several calls in one launch, CUDA graphs,
/// a wait after each call, CPU time) are refused unless at their defaults.
#[derive(Args, Debug)]
pub struct MeasurementArgs {
    /// Threads a process, each driving -g GPUs (-t); the ranks are processes x threads x -g, so
    /// threads x -g may not pass the GPUs taking part
    #[arg(short = 't', long = "nthreads")]
    pub threads: Option<u32>,
    /// Timed iterations (-n): no effect
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Warm-up iterations (-w): no effect
    #[arg(short = 'w', long = "warmup_iters")]
    pub warmup_iters: Option<u64>,
    /// Data check (-c): no effect (nccl-tests checks outside its timed loop)
    #[arg(short = 'c', long = "check")]
    pub check: Option<u64>,
    /// Which rank's time is reported (-a, 0-3): no effect (every rank's call ends together)
    #[arg(short = 'a', long = "average")]
    pub average: Option<u8>,
    /// Parallel communicator set-up (-p): no effect
    #[arg(short = 'p', long = "parallel_init")]
    pub parallel_init: Option<u8>,
    /// Run cycles (-N): no effect
    #[arg(short = 'N', long = "run_cycles")]
    pub run_cycles: Option<u64>,
    /// Timeout in seconds (-T): no effect
    #[arg(short = 'T', long = "timeout")]
    pub timeout: Option<u64>,
    /// Calls aggregated in one group (-m): only 1 (collsim times each call with its own launch)
    #[arg(short = 'm', long = "agg_iters")]
    pub agg_iters: Option<u64>,
    /// Wait for each call before the next (-z): only 0
    #[arg(short = 'z', long = "blocking")]
    pub blocking: Option<u8>,
    /// CUDA graph launches (-G): only 0
    #[arg(short = 'G', long = "cudagraph")]
    pub cuda_graph: Option<u64>,
    /// Report CPU time (-C): only 0
    #[arg(short = 'C', long = "report_cputime")]
    pub report_cputime: Option<u8>,
}

impl MeasurementArgs {
    /// Refuses what collsim cannot predict; `launch` and `gpus` bound `-t`.
    fn check(&self, launch: Launch, gpus: u32) -> Result<(), Error> {
        if let Some(t) = self.threads {
            let g = launch.gpus_per_thread;
            if t == 0 || u64::from(t) * u64::from(g) > u64::from(gpus) {
                return Err(Error::input(format!(
                    "-t {t}: threads x -g ({g}) GPUs must be between 1 and the {gpus} GPUs \
                     taking part"
                )));
            }
        }
        if self.agg_iters == Some(0) {
            return Err(Error::input("-m 0: aggregated iterations are at least 1"));
        }
        if let Some(a) = self.average.filter(|&a| a > 3) {
            return Err(Error::input(format!(
                "-a {a}: expected 0 (rank 0), 1 (mean), 2 (min) or 3 (max)"
            )));
        }
        let refused = [
            (
                "-m",
                self.agg_iters.filter(|&m| m != 1),
                "several calls in one group launch share their launch and overlap; collsim \
                 times one call at a time",
            ),
            (
                "-z",
                self.blocking.map(u64::from).filter(|&z| z != 0),
                "nccl-tests then waits on the host after each call, a cost collsim does not \
                 model",
            ),
            (
                "-G",
                self.cuda_graph.filter(|&g| g != 0),
                "CUDA graphs change the launch cost collsim charges each call",
            ),
            (
                "-C",
                self.report_cputime.map(u64::from).filter(|&c| c != 0),
                "collsim predicts the GPU time of a call, not the CPU's",
            ),
        ];
        for (flag, value, why) in refused {
            if let Some(v) = value {
                return Err(Error::input(format!("{flag} {v}: not supported: {why}")));
            }
        }
        Ok(())
    }
}

/// The GPU system NCCL runs on and how nccl-tests drives it, shared by `nccl-tests` and
/// `calibrate`.
#[derive(Args, Debug)]
pub struct NcclSystemArgs {
    /// A GPU system: dgx-a100:N, hgx-h100:N, hgx-h200:N, hgx-b200:N, hgx-a800:N, hgx-h800:N (N
    /// boxes of 8), mi300x:N, pcie:G, or a GPU-system file (FILE.yml, FILE.yml:N for N boxes of
    /// it)
    #[arg(long)]
    pub topology: String,
    /// GPUs driven by one thread (-g): their kernels are launched one after another [default:
    /// as the measured log's own command line or header says (`-g N`, `nGpus N`), else 1]
    #[arg(short = 'g', long = "ngpus")]
    pub gpus_per_thread: Option<u32>,
    /// GPUs taking part (nccl-tests' ranks: processes x threads x -g): the first N GPUs of one
    /// box, or across boxes the first N/boxes of each [default: every GPU of the system]
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Algorithms NCCL may use, as NCCL_ALGO takes them (Ring,Tree,NVLS,NVLSTree,CollNetDirect;
    /// ^ excludes)
    #[arg(long)]
    pub nccl_algo: Option<String>,
    /// Protocols NCCL may use, as NCCL_PROTO takes them (LL,LL128,Simple; ^ excludes)
    #[arg(long)]
    pub nccl_proto: Option<String>,
    #[command(flatten)]
    pub overrides: super::SystemOverrideArgs,
}

impl NcclSystemArgs {
    /// The system (with the flags' overrides), what NCCL may run on it, and how it is launched
    /// (`-g`, else as the measured `log` ran, else one GPU a thread).
    pub fn build(&self, log: Option<&Path>) -> Result<(GpuSystem, Allowed, Launch), Error> {
        let mut system = GpuSystem::parse(&self.topology)?.ok_or_else(|| {
            Error::input(format!(
                "--topology '{}': NCCL runs on a GPU system: dgx-a100:N, hgx-h100:N, \
                 hgx-h200:N, hgx-b200:N, hgx-a800:N, hgx-h800:N, mi300x:N, pcie:G or a \
                 GPU-system file",
                self.topology
            ))
        })?;
        system.apply(&self.overrides.overrides())?;
        let header = match log {
            Some(log) => {
                let header = log::header(log)?;
                if let Some(note) =
                    other_gpus(log, header.device.as_deref(), &system, &self.topology)
                {
                    eprintln!("note: {note}");
                }
                header
            }
            None => log::Header::default(),
        };
        let mut allowed = Allowed::default();
        let setting = Setting {
            gpus: self.gpus,
            nccl_algo: self.nccl_algo.clone(),
            nccl_proto: self.nccl_proto.clone(),
        };
        setting.apply(&mut system, &mut allowed)?;
        let gpus = system.gpus();
        let gpus_per_thread = match self.gpus_per_thread {
            Some(g) => g,
            None => header.gpus_per_thread.unwrap_or(1).min(gpus),
        };
        if gpus_per_thread == 0 || gpus_per_thread > gpus {
            return Err(Error::input(format!(
                "-g {gpus_per_thread}: between 1 and the system's {gpus} GPUs"
            )));
        }
        let launch = Launch {
            gpus_per_thread,
            ..Launch::default()
        };
        Ok((system, allowed, launch))
    }
}

/// What to say when a measured log ran on a `device` that `system` (named `topology`) does not
/// hold; None when it holds it or the log names none.
fn other_gpus(
    log: &Path,
    device: Option<&str>,
    system: &GpuSystem,
    topology: &str,
) -> Option<String> {
    let name = device?;
    GpuSystem::kind_of_device(name)
        .filter(|&kind| kind != system.kind)
        .map(|kind| {
            format!(
                "{}: its ranks ran on {name}, which {kind} models; {topology} holds {}s",
                log.display(),
                system.gpu.to_ascii_uppercase()
            )
        })
}

/// What to say when NCCL's cost model would run, at some of `sizes`, an algorithm collsim does
/// not model (CollNet Chain): those rows ran NCCL's next choice.
fn unmodelled_note(model: &Model, kind: CollectiveKind, sizes: &[u64]) -> Option<String> {
    let picked: Vec<(u64, Algo)> = sizes
        .iter()
        .filter_map(|&size| model.unmodelled_choice(kind, size).map(|a| (size, a)))
        .collect();
    let (&(first, _), &(last, _)) = (picked.first()?, picked.last()?);
    let mut algos: Vec<&str> = Vec::new();
    for &(_, algo) in &picked {
        if !algos.contains(&algo.name()) {
            algos.push(algo.name());
        }
    }
    let sizes = if first == last {
        format!("at {}", crate::units::format_bytes(first))
    } else {
        format!(
            "at {} of the sizes from {} to {}",
            picked.len(),
            crate::units::format_bytes(first),
            crate::units::format_bytes(last)
        )
    };
    Some(format!(
        "NCCL's cost model would run {} {sizes}, which collsim does not model; those rows \
         run the algorithm NCCL ranks next",
        algos.join(" or ")
    ))
}

/// A size flag in nccl-tests' notation ([`crate::units::parse_nccl_bytes`]).
fn nccl_size(text: &str, flag: &str) -> Result<u64, Error> {
    crate::units::parse_nccl_bytes(text).map_err(|e| Error::input(format!("{flag}: {e}")))
}

/// The data type `-d` names: nccl-tests' own name for it, and its bytes.
fn datatype(name: &str) -> Result<(&'static str, u64), Error> {
    log::datatype(name).ok_or_else(|| {
        let all = if name == "all" {
            " (one type a run; --compare reads a `-d all` log's rows of the type -d names)"
        } else {
            ""
        };
        Error::input(format!(
            "-d '{name}': expected {}{all}",
            log::datatype_names()
        ))
    })
}

/// The algorithm column: all-to-all runs as NCCL's point-to-point sends, not a collective
/// algorithm (unless RCCL runs it as one of its MSCCL algorithms).
fn algorithm_label(line: &Line) -> &'static str {
    if line.p2p {
        "P2P"
    } else {
        line.prediction.choice.algo.name()
    }
}

/// One printed row.
struct Line {
    p2p: bool,
    size: u64,
    count: u64,
    prediction: Prediction,
    measured: Option<f64>,
}

/// nccl-tests' own -b and -e.
const DEFAULT_BYTES: &str = "32M";

/// How nccl-tests steps from one size to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Times a factor (`-f`).
    Factor(u64),
    /// Plus an increment (`-f 1 -i BYTES`).
    Bytes(u64),
}

/// The most sizes one table runs: an increment that would make more is refused.
const MAX_SIZES: u64 = 100_000;

/// nccl-tests' sizes from `min` to `max` by `step`, each rounded down to a multiple of `align`
/// (whole elements per rank), repeats dropped.
fn sweep(min: u64, max: u64, step: Step, align: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = min;
    while size <= max {
        let aligned = size / align * align;
        if aligned > 0 && sizes.last() != Some(&aligned) {
            sizes.push(aligned);
        }
        let next = match step {
            Step::Factor(factor) => size.checked_mul(factor),
            Step::Bytes(bytes) => size.checked_add(bytes),
        };
        size = match next {
            Some(s) => s,
            None => break,
        };
    }
    sizes
}

/// The step of `-f` and `-i` as nccl-tests reads them: a factor above 1 wins; `-f 1` (or `-i`
/// alone) steps by `-i`, 1M unless given.
fn size_step(args: &NcclTestsArgs, min: u64, max: u64) -> Result<Step, Error> {
    let bytes = args
        .step_bytes
        .as_deref()
        .map(|t| nccl_size(t, "-i"))
        .transpose()?;
    let factor = args.factor.unwrap_or(if bytes.is_some() { 1 } else { 2 });
    let step = match (factor, bytes) {
        (0, _) => return Err(Error::input("-f 0: the factor must be at least 1")),
        (1, bytes) => Step::Bytes(bytes.unwrap_or(1 << 20)),
        (f, _) => Step::Factor(f),
    };
    if let Step::Bytes(b) = step {
        if b == 0 {
            return Err(Error::input("-i 0: the increment must be positive"));
        }
        if (max - min) / b >= MAX_SIZES {
            return Err(Error::input(format!(
                "-b {min} -e {max} -i {b}: more than {MAX_SIZES} sizes; use a larger -i or -f 2"
            )));
        }
    }
    Ok(step)
}

/// nccl-tests' names of the reductions `-o` takes.
const REDUCTIONS: [&str; 5] = ["sum", "prod", "min", "max", "avg"];

pub fn nccl_tests(args: NcclTestsArgs) -> Result<(), Error> {
    let kind = log::kind(&args.op)?;
    let (system, allowed, launch) = args.system.build(args.compare.as_deref())?;
    let gpus = system.gpus();
    if gpus < 2 {
        return Err(Error::input(format!(
            "topology '{}': nccl-tests needs at least 2 GPUs (one GPU's call is a local copy, \
             which collsim does not model)",
            system.name
        )));
    }
    args.measurement.check(launch, gpus)?;
    let (min_text, max_text) = (
        args.min_bytes.as_deref().unwrap_or(DEFAULT_BYTES),
        args.max_bytes.as_deref().unwrap_or(DEFAULT_BYTES),
    );
    let (min, max) = (nccl_size(min_text, "-b")?, nccl_size(max_text, "-e")?);
    if min == 0 || max < min {
        return Err(Error::input(format!(
            "-b {min_text} -e {max_text}: sizes must be positive and -e at least -b"
        )));
    }
    let step = size_step(&args, min, max)?;
    if !REDUCTIONS.contains(&args.reduction.as_str()) {
        return Err(Error::input(format!(
            "-o '{}': expected sum, prod, min, max or avg",
            args.reduction
        )));
    }
    if kind.is_rooted() && args.root >= gpus {
        return Err(Error::input(format!(
            "-r {}: the root must be a rank below {gpus}",
            args.root
        )));
    }
    let (type_name, tsize) = datatype(&args.datatype)?;
    let launch = Launch {
        element_bytes: tsize,
        average: args.reduction == "avg",
        ..launch
    };
    let measured = match &args.compare {
        Some(path) => Some(log::read_for(path, &args.op, type_name, gpus)?),
        None => None,
    };
    // The folder is checked before anything runs.
    let mut out = args
        .out
        .as_deref()
        .map(|dir| OutputDir::prepare(dir, args.force))
        .transpose()?;
    let model = Model::with_allowed(&system, allowed);
    // nccl-tests rounds each size down to whole elements, and where the ranks split it, to a
    // multiple of 16 bytes a rank (since its commit 29f4114, December 2024, for aligned
    // buffers). Its count column is the count each call is given (`paramcount`): per rank where
    // the ranks split the buffer (all-gather's send, reduce-scatter's receive, all-to-all's
    // per-peer block), the whole buffer otherwise.
    let split = matches!(
        kind,
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll
    );
    let (align, per_count) = if split {
        (16 * gpus as u64, tsize * gpus as u64)
    } else {
        (tsize, tsize)
    };
    let sweep_given = args.min_bytes.is_some() || args.max_bytes.is_some();
    let sizes = match (&measured, sweep_given) {
        (Some(rows), false) => {
            let mut sizes: Vec<u64> = rows.iter().map(|r| r.size).filter(|&s| s > 0).collect();
            sizes.sort_unstable();
            sizes.dedup();
            sizes
        }
        _ => sweep(min, max, step, align),
    };
    // Sizes are simulated side by side; the table keeps their order.
    let bar = (sizes.len() > 8)
        .then(|| crate::report::progress_bar(sizes.len() as u64, &args.op, "sizes"));
    let predictions: Vec<Result<Prediction, Error>> = sizes
        .par_iter()
        .map(|&size| {
            let prediction = model.predict(kind, size, args.root, launch);
            if let Some(bar) = &bar {
                bar.inc(1);
            }
            prediction
        })
        .collect();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let mut lines = Vec::with_capacity(sizes.len());
    for (&size, prediction) in sizes.iter().zip(predictions) {
        let prediction = prediction?;
        let measured_us = measured
            .as_ref()
            .and_then(|rows| rows.iter().find(|r| r.size == size).map(|r| r.time_us));
        lines.push(Line {
            p2p: kind == CollectiveKind::AllToAll && prediction.choice.algo != Algo::Msccl,
            size,
            count: size / per_count,
            prediction,
            measured: measured_us,
        });
    }
    if let Some(note) = unmodelled_note(&model, kind, &sizes) {
        eprintln!("note: {note}");
    }
    let factor = kind.busbw_factor(gpus);
    let root = if kind.is_rooted() {
        args.root as i64
    } else {
        -1
    };
    let redop = match kind {
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce => {
            args.reduction.as_str()
        }
        _ => "none",
    };
    let compare = measured.is_some();
    let csv = render_csv(&lines, &args.datatype, redop, root, factor, compare);
    if let Some(mut dir) = out.take() {
        let path = dir.file("nccl_tests.csv");
        std::fs::write(&path, &csv).map_err(|e| Error::io(path.display(), e))?;
        if compare {
            busbw_plot(&lines, &args.op, &system.name, factor, &mut dir)?;
        }
        dir.commit()?;
    }
    let text = match args.format {
        TableFormat::Csv => csv,
        TableFormat::Table => render_table(
            &lines,
            &args,
            (&system, launch),
            redop,
            root,
            factor,
            compare,
        ),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("stdout", e))
}

impl Line {
    /// The predicted time, us.
    fn time_us(&self) -> f64 {
        self.prediction.time.as_ns_f64() / 1e3
    }

    /// nccl-tests' algorithm bandwidth (GB/s) of a call taking `time_us`.
    fn algbw(&self, time_us: f64) -> f64 {
        self.size as f64 / (time_us * 1e3)
    }
}

fn render_csv(
    lines: &[Line],
    dtype: &str,
    redop: &str,
    root: i64,
    factor: f64,
    compare: bool,
) -> String {
    let mut s =
        String::from("size,count,type,redop,root,time_us,algbw,busbw,algorithm,protocol,channels");
    if compare {
        s.push_str(",measured_time_us,time_error");
    }
    s.push('\n');
    for l in lines {
        let t = l.time_us();
        let algbw = l.algbw(t);
        let c = &l.prediction.choice;
        s.push_str(&format!(
            "{},{},{dtype},{redop},{root},{t:.3},{algbw:.3},{:.3},{},{},{}",
            l.size,
            l.count,
            algbw * factor,
            algorithm_label(l),
            c.proto.name(),
            c.channels
        ));
        if compare {
            match l.measured {
                Some(m) => s.push_str(&format!(",{m},{:.4}", t / m - 1.0)),
                None => s.push_str(",,"),
            }
        }
        s.push('\n');
    }
    s
}

fn render_table(
    lines: &[Line],
    args: &NcclTestsArgs,
    (system, launch): (&GpuSystem, Launch),
    redop: &str,
    root: i64,
    factor: f64,
    compare: bool,
) -> String {
    let mut s = format!(
        "# collsim nccl-tests: {}_perf on {} ({} GPUs in {} box{}), -g {}, NCCL's cost model \
         choosing, collsim's network simulating\n",
        args.op,
        system.name,
        system.gpus(),
        system.boxes,
        if system.boxes == 1 { "" } else { "es" },
        launch.gpus_per_thread
    );
    s.push_str("#       size         count      type   redop    root     time   algbw   busbw  algorithm  protocol  channels");
    if compare {
        s.push_str("  measured   error");
    }
    s.push_str("\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)");
    if compare {
        s.push_str("                                 (us)");
    }
    s.push('\n');
    let mut busbw_sum = 0.0;
    let mut errors = Vec::new();
    for l in lines {
        let t = l.time_us();
        let algbw = l.algbw(t);
        busbw_sum += algbw * factor;
        let c = &l.prediction.choice;
        s.push_str(&format!(
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7.2}  {:>6.2}  {:>6.2}  {:>9}  {:>8}  {:>8}",
            l.size,
            l.count,
            args.datatype,
            redop,
            root,
            t,
            algbw,
            algbw * factor,
            algorithm_label(l),
            c.proto.name(),
            c.channels
        ));
        if let Some(m) = l.measured {
            let e = t / m - 1.0;
            if l.size >= 1 << 20 {
                errors.push(e.abs());
            }
            s.push_str(&format!("  {m:>8.2}  {:>+6.1}%", 100.0 * e));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "# Avg bus bandwidth    : {:.4}\n",
        busbw_sum / lines.len().max(1) as f64
    ));
    if compare && !errors.is_empty() {
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        let worst = errors.iter().cloned().fold(0.0, f64::max);
        s.push_str(&format!(
            "# Time error from 1 MiB up: mean {:.1}%, worst {:.1}% over {} sizes\n",
            100.0 * mean,
            100.0 * worst,
            errors.len()
        ));
    }
    s
}

fn busbw_plot(
    lines: &[Line],
    op: &str,
    system: &str,
    factor: f64,
    out: &mut OutputDir,
) -> Result<(), Error> {
    let predicted: Vec<(f64, f64)> = lines
        .iter()
        .map(|l| (l.size as f64, l.algbw(l.time_us()) * factor))
        .collect();
    let measured: Vec<(f64, f64)> = lines
        .iter()
        .filter_map(|l| l.measured.map(|m| (l.size as f64, l.algbw(m) * factor)))
        .collect();
    let figure = LinePlot {
        title: format!("{op} on {system}: collsim's NCCL model against the measured log"),
        x_label: "size".into(),
        y_label: "bus bandwidth (GB/s)".into(),
        log_x: true,
        x_format: |x| format_bytes_approx(x),
        y_max: None,
        series: vec![
            Series {
                name: "collsim (predicted)".into(),
                points: predicted,
                dashed: false,
            },
            Series {
                name: "measured".into(),
                points: measured,
                dashed: true,
            },
        ],
    };
    save_figure(&figure, out, "busbw")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_nccl_tests_does() {
        assert_eq!(nccl_size("8", "-b").unwrap(), 8);
        assert_eq!(nccl_size("8G", "-e").unwrap(), 8 << 30);
        assert_eq!(nccl_size("128M", "-b").unwrap(), 128 << 20);
        assert_eq!(nccl_size("1KiB", "-b").unwrap(), 1024);
        assert!(nccl_size("lots", "-b").is_err());
        assert!(log::kind("allreduce").is_err());
        assert_eq!(datatype("half").unwrap(), ("half", 2));
        assert_eq!(datatype("float32").unwrap(), ("float", 4));
        let unknown = datatype("quad").unwrap_err().to_string();
        assert!(unknown.contains("expected int8, uint8,"), "{unknown}");
        assert!(unknown.contains("bfloat16, f8e4m3 or f8e5m2"), "{unknown}");
        assert!(datatype("all")
            .unwrap_err()
            .to_string()
            .contains("one type a run"));
    }

    /// `--help` names every type `-d` takes (its list is written by hand beside the table).
    #[test]
    fn the_help_names_every_data_type() {
        let command = NcclTestsArgs::augment_args(clap::Command::new("nccl-tests"));
        let help = command
            .get_arguments()
            .find(|a| a.get_id() == "datatype")
            .and_then(|a| a.get_help())
            .expect("-d has a help text")
            .to_string();
        let names = log::datatype_names().replace(" or ", ", ");
        for name in names.split(", ") {
            assert!(datatype(name).is_ok(), "{name}");
            assert!(help.contains(name), "-d's help leaves out {name}: {help}");
        }
    }
}
