//! Command-line definitions and dispatch. Flags are parsed and validated here, in one place; the
//! work happens in the library modules. Arguments shared by several commands live here; each
//! command's own flags and its small driver live in the file named after it.

mod batch;
mod bound;
mod calibrate;
mod llm;
mod nccl_tests;
mod simulate;
mod system;
mod train;
mod trees;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::collective::CollectiveKind;
use crate::experiment::CollectiveRequest;
use crate::sim::{Observer, TimeModel};
use crate::synth::{IlpOptions, SynthOptions, Unwinding};
use crate::system::{load_system, SystemConfig};
use crate::topology::{SystemOverrides, Topology, TopologyOptions};
use crate::units::parse_bytes;
use crate::Error;

pub use batch::{BatchArgs, MergeArgs, RunFileArgs, SweepArgs};
pub use bound::BoundArgs;
pub use calibrate::CalibrateArgs;
pub use nccl_tests::NcclTestsArgs;
pub use simulate::{RunArgs, SimulateArgs, SynthesizeArgs};
pub use train::{TraceArgs, TrainArgs};
pub use trees::TreesArgs;

#[derive(Parser, Debug)]
#[command(
    name = "collsim",
    version,
    about = "Simulate and synthesize collective-communication algorithms"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Simulate a schedule file or a built-in algorithm on a topology.
    Simulate(SimulateArgs),
    /// Synthesize a topology-aware schedule (TACOS greedy link-chunk matching) and simulate it.
    Synthesize(SynthesizeArgs),
    /// Print the lower bounds of a collective on a topology.
    Bound(BoundArgs),
    /// Print ForestColl's optimal spanning trees (rate, trees per NPU, and every tree's paths).
    Trees(TreesArgs),
    /// Run sizes x algorithms (x chunk counts) on one network: a CSV row each and a plot of
    /// bandwidth against size.
    Sweep(SweepArgs),
    /// Run an experiment file: every combination it lists, with CSVs and figures.
    Run(RunFileArgs),
    /// Join the results folders of an experiment's shards (`--shard I/N`) into one.
    Merge(MergeArgs),
    /// Simulate a training iteration (compute and communication) per algorithm, from a
    /// workload file or Chakra execution traces.
    Train(TrainArgs),
    /// Predict the table nccl-tests would print on a GPU system (dgx-a100:N, hgx-h100:N, ...):
    /// NCCL's own choice of algorithm, protocol and channels per size, simulated; --compare
    /// puts a measured log beside it.
    NcclTests(NcclTestsArgs),
    /// Fit the NCCL model's free figures (link bandwidths, per-protocol latency and rate, the
    /// fixed cost) to measured nccl-tests logs of a system and write a GPU-system file that
    /// every --topology accepts.
    Calibrate(CalibrateArgs),
    /// Write a workload file as Chakra execution traces (one file per rank), as ASTRA-sim 2.x
    /// reads them.
    Trace(TraceArgs),
}

/// The network, shared by every command that takes `--topology`.
#[derive(Args, Debug, Clone)]
pub struct TopologyArgs {
    /// YAML file (collsim or ASTRA-sim form) or inline spec: ring:8, uring:8, fc:8, switch:16,
    /// mesh:8x8, torus:4x4x4, hypercube:6, dims:ring4,fc8, dgx1, dragonfly:GxA, spineleaf:LxSxH[xG],
    /// fattree:K, rail:BxG, bigraph:MxN
    // `[xG]` is the help's notation for an optional part, not a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, short = 't')]
    pub topology: String,
    /// Link bandwidth per direction, one value or one per dimension (e.g. 50GB/s, 50GiB/s, 400Gbps)
    /// [default: 50GB/s]
    #[arg(long, allow_hyphen_values = true)]
    pub bandwidth: Option<String>,
    /// Link latency, one value or one per dimension (e.g. 500ns, 0.5us) [default: 500ns]
    #[arg(long, allow_hyphen_values = true)]
    pub latency: Option<String>,
    /// Failed NPUs to remove, e.g. 7,9
    #[arg(long)]
    pub remove_npus: Option<String>,
    /// Failed links to remove: a-b (both directions) or a>b, comma-separated
    #[arg(long)]
    pub remove_links: Option<String>,
    #[command(flatten)]
    pub system: SystemOverrideArgs,
}

/// A named GPU system's figures replaced on the command line.
#[derive(Args, Debug, Clone, Default)]
pub struct SystemOverrideArgs {
    /// GPU systems on NVSwitch: each GPU's NVLinks as COUNTxSPEED a direction, e.g. 8x25GB/s
    /// (overrides the system's; NCCL rates them by count and the GPU's NVLink generation)
    #[arg(long)]
    pub nvlink: Option<String>,
    /// GPU systems: NICs per box as COUNTxSPEED, e.g. 16x100Gb (overrides the system's)
    #[arg(long)]
    pub nic: Option<String>,
    /// GPU systems: NIC kind, ib or roce
    #[arg(long)]
    pub nic_kind: Option<String>,
    /// GPU systems: the hosts' CPU vendor, intel, amd or other (NCCL's per-step network
    /// overhead is 1, 2 and 1 us) [default: the system's: AMD for dgx-a100, Intel for the HGX
    /// systems]
    #[arg(long)]
    pub cpu: Option<String>,
    /// GPU systems: how a GPU reaches its NIC, in NCCL's path types pix, pxb, pxn, phb or sys
    /// (beyond pxn on Hopper and later, pxb before, NCCL runs no LL128 across boxes) [default:
    /// pxb, a NIC on each GPU's PCIe switch]
    #[arg(long)]
    pub nic_path: Option<String>,
    /// GPU systems: the network's switches reduce (IB SHARP), so NCCL may run CollNet and NVLS
    /// across boxes
    #[arg(long)]
    pub sharp: bool,
}

impl SystemOverrideArgs {
    pub fn overrides(&self) -> SystemOverrides {
        SystemOverrides {
            nvlink: self.nvlink.clone(),
            nic: self.nic.clone(),
            nic_kind: self.nic_kind.clone(),
            cpu: self.cpu.clone(),
            nic_path: self.nic_path.clone(),
            sharp: self.sharp,
        }
    }
}

impl TopologyArgs {
    pub fn options(&self) -> TopologyOptions {
        TopologyOptions {
            spec: self.topology.clone(),
            bandwidth: self.bandwidth.clone(),
            latency: self.latency.clone(),
            remove_npus: self.remove_npus.clone(),
            remove_links: self.remove_links.clone(),
            system: self.system.overrides(),
        }
    }

    pub fn build(&self) -> Result<Topology, Error> {
        self.options().build()
    }
}

/// The collective, shared by simulate, synthesize, sweep and bound.
#[derive(Args, Debug, Clone)]
pub struct CollectiveArgs {
    /// all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce, gather, scatter
    #[arg(long, short = 'c')]
    pub collective: Option<String>,
    /// Per-NPU buffer (all-gather: output; reduce-scatter: input), e.g. 1GiB, 64MB; with several
    /// collectives, one size each in order (e.g. 1GiB,64MiB)
    #[arg(long, short = 's')]
    pub size: Option<String>,
    /// Pieces each NPU's data is split into for pipelining (forestcoll: pieces per tree)
    /// [default: the system file's preferred-dataset-splits; else for dbt, nccl-ring,
    /// nccl-tree, accl-hybrid, two-step-tree, hierarchical and themis pieces of at least 512 KiB
    /// (NCCL's pipeline step), up to 16, themis and hierarchical at least 4; forestcoll's own
    /// choice; 1 for the rest]
    #[arg(long, allow_negative_numbers = true, value_parser = chunk_count)]
    pub chunks: Option<u32>,
    /// Participating NPUs (a communicator), e.g. 0,2,4,6 or 0-7; with several collectives, one
    /// communicator each separated by ';' (e.g. '0-15;16-31') [default: all]
    #[arg(long)]
    pub npus: Option<String>,
    /// Root NPU of broadcast, reduce, gather and scatter [default: the first participant]; with
    /// several rooted collectives, one root each in order (e.g. 2,17)
    #[arg(long)]
    pub root: Option<String>,
}

/// NPU ids: `0,2,4` or ranges `0-7` (both ends included), comma-separated.
pub(crate) fn parse_ids(flag: &str, list: &str) -> Result<Vec<u32>, Error> {
    let id = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| Error::input(format!("{flag}: '{v}' is not an NPU id")))
    };
    let mut out = Vec::new();
    for item in list.split(',') {
        if item.trim().starts_with('-') {
            return Err(Error::input(format!(
                "{flag}: '{}' is not an NPU id (ids start at 0)",
                item.trim()
            )));
        }
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (id(a)?, id(b)?);
                if a > b {
                    return Err(Error::input(format!(
                        "{flag}: range '{item}' runs backwards"
                    )));
                }
                out.extend(a..=b);
            }
            None => out.push(id(item)?),
        }
    }
    Ok(out)
}

/// One value per collective: a single value serves them all, else exactly one each.
fn per_collective<T: Clone>(
    flag: &str,
    values: Vec<T>,
    collectives: usize,
) -> Result<Vec<T>, Error> {
    match values.len() {
        1 => Ok(vec![values[0].clone(); collectives]),
        n if n == collectives => Ok(values),
        n => Err(Error::input(format!(
            "{flag}: {n} values for {collectives} collective(s); give one, or one per collective \
             in order"
        ))),
    }
}

impl CollectiveArgs {
    /// The collectives to run together (`--collective a,b,c`); none when no `--collective`.
    /// `default_chunks` applies when `--chunks` is not given (None: each algorithm's own).
    pub fn requests_with(
        &self,
        default_chunks: Option<u32>,
    ) -> Result<Vec<CollectiveRequest>, Error> {
        let Some(names) = &self.collective else {
            if self.size.is_some() {
                return Err(Error::input("--size needs --collective"));
            }
            return Ok(Vec::new());
        };
        let kinds = names
            .split(',')
            .map(|name| CollectiveKind::parse(name.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let sizes = self
            .size
            .as_deref()
            .ok_or_else(|| Error::input("--collective needs --size"))?
            .split(',')
            .map(|s| parse_bytes(s).map_err(|e| Error::input(format!("--size: {e}"))))
            .collect::<Result<Vec<u64>, _>>()?;
        let sizes = per_collective("--size", sizes, kinds.len())?;
        let groups: Vec<Option<Vec<u32>>> = match self.npus.as_deref() {
            Some(text) => per_collective(
                "--npus",
                text.split(';')
                    .map(|group| parse_ids("--npus", group).map(Some))
                    .collect::<Result<Vec<_>, _>>()?,
                kinds.len(),
            )?,
            None => vec![None; kinds.len()],
        };
        let roots = self
            .root
            .as_deref()
            .map(|list| parse_ids("--root", list))
            .transpose()?
            .unwrap_or_default();
        let rooted = kinds.iter().filter(|k| k.is_rooted()).count();
        if roots.len() > 1 && roots.len() != rooted {
            return Err(Error::input(format!(
                "--root: {} roots for {rooted} rooted collective(s); give one root, or one per \
                 rooted collective in order",
                roots.len()
            )));
        }
        let mut next_root = roots.iter().copied().cycle();
        Ok(kinds
            .into_iter()
            .zip(sizes.into_iter().zip(groups))
            .map(|(kind, (size, npus))| CollectiveRequest {
                kind,
                size,
                chunks: self.chunks.or(default_chunks),
                npus,
                root: if kind.is_rooted() || rooted == 0 {
                    next_root.next()
                } else {
                    None
                },
            })
            .collect())
    }

    /// The collectives, with each algorithm's default chunks unless `--chunks` says otherwise.
    pub fn requests(&self) -> Result<Vec<CollectiveRequest>, Error> {
        self.requests_with(None)
    }

    /// Exactly one collective (for commands that take one).
    pub fn request(&self) -> Result<CollectiveRequest, Error> {
        let mut all = self.requests()?;
        match all.len() {
            0 => Err(Error::input("give --collective and --size")),
            1 => Ok(all.remove(0)),
            n => Err(Error::input(format!(
                "--collective: this command takes one collective, got {n}"
            ))),
        }
    }
}

/// ForestColl's setting, shared by the commands that run algorithms.
#[derive(Args, Debug, Clone, Default)]
pub struct ForestArgs {
    /// forestcoll: trees per NPU (fixed-k mode: the best rate that many trees allow) [default:
    /// the optimal number]
    #[arg(long)]
    pub trees: Option<u64>,
}

/// Synthesizer settings, shared by synthesize and by `--algorithm tacos` elsewhere.
#[derive(Args, Debug, Clone)]
pub struct SynthArgs {
    /// Independent seeded synthesis trials, run in parallel; the fastest schedule is kept
    /// [default: 4, or 1 when the schedule has over 4M transfers]
    #[arg(long)]
    pub trials: Option<u32>,
    /// Logical links per NPU when a switch is unwound for synthesis (TACOS's ring-like
    /// unwinding) [default: the best of splitting and degrees 1, 2 and 4 by simulated time]
    #[arg(long, conflicts_with = "unwind")]
    pub unwind_degree: Option<u32>,
    /// How switches are unwound for synthesis: `split` (cut-preserving edge splitting, any
    /// switch fabric) [default: the best of splitting and degrees 1, 2 and 4]
    #[arg(long, value_parser = ["split"])]
    pub unwind: Option<String>,
    /// X-way chunking: sub-chunks per chunk the matching uses [default: doubled from 1 while the
    /// schedule gets 1% faster: by the synthesizer's estimate, or simulated through switches]
    #[arg(long)]
    pub x_way: Option<u32>,
    /// tacos-ilp, taccl-like: wall-clock budget of the synthesis in seconds; a program cut short
    /// is completed with shortest paths [default: none]
    #[arg(long, value_name = "S")]
    pub time_limit: Option<f64>,
    /// tacos-ilp, taccl-like: time clustering, successive programs of this many time steps each
    /// [default: one program over the whole collective]
    #[arg(long, value_name = "T")]
    pub cluster: Option<u32>,
    /// A communication sketch (YAML, TACCL's idea): the links the schedule may use, and its
    /// chunks per NPU (see the guide)
    #[arg(long, value_name = "FILE")]
    pub sketch: Option<PathBuf>,
    /// On switch hierarchies, run TACOS's matching over unwound switches instead of planning
    /// one rank's chunk and translating it to every rank (the default there)
    #[arg(long)]
    pub no_symmetry: bool,
}

impl SynthArgs {
    /// The settings, or the flag at fault.
    fn options(&self) -> Result<SynthOptions, Error> {
        let ilp = IlpOptions::new(self.time_limit, self.cluster).map_err(|(setting, e)| {
            Error::input(format!("--{}: {e}", setting.replace('_', "-")))
        })?;
        Ok(SynthOptions {
            trials: self.trials,
            unwinding: match (&self.unwind, self.unwind_degree) {
                (Some(_), _) => Some(Unwinding::Split),
                (None, Some(d)) => Some(Unwinding::Degree(d)),
                (None, None) => None,
            },
            x_way: self.x_way,
            ilp,
            sketch: self
                .sketch
                .as_deref()
                .map(|p| crate::synth::Sketch::load(p).map(std::sync::Arc::new))
                .transpose()?,
            symmetry: !self.no_symmetry,
            ..SynthOptions::default()
        })
    }
}

/// How hierarchical and Themis run the dimensions: an ASTRA-sim system file and/or flags (the
/// flags win).
#[derive(Args, Debug, Clone, Default)]
pub struct MultiDimArgs {
    /// ASTRA-sim system configuration (JSON, or the 1.x text form): per-dimension
    /// implementations, inter/intra-dimension scheduling, active chunks, dataset splits, delays
    #[arg(long)]
    pub system: Option<PathBuf>,
    /// Chunks a dimension works on at once (hierarchical and Themis)
    #[arg(long)]
    pub active_chunks: Option<u32>,
    /// Which waiting chunk a dimension serves next: FIFO, SCF (smallest chunk first),
    /// lessRemainingPhaseFirst
    #[arg(long)]
    pub intra_dimension: Option<String>,
}

impl MultiDimArgs {
    /// The system file's settings with the flags applied; warnings go to stderr.
    pub fn resolve(&self) -> Result<SystemConfig, Error> {
        let mut config = match &self.system {
            Some(path) => load_system(path)?,
            None => SystemConfig::default(),
        };
        for warning in &config.warnings {
            eprintln!("warning: {warning}");
        }
        config
            .multi_dim
            .apply(self.active_chunks, self.intra_dimension.as_deref())
            .map_err(|(setting, e)| {
                Error::input(format!("--{}: {e}", setting.replace('_', "-")))
            })?;
        Ok(config)
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeModelArg {
    Exact,
    Astra,
}

impl From<TimeModelArg> for TimeModel {
    fn from(arg: TimeModelArg) -> TimeModel {
        match arg {
            TimeModelArg::Exact => TimeModel::Exact,
            TimeModelArg::Astra => TimeModel::Astra,
        }
    }
}

/// Shows a progress line on stderr for long simulations when stderr is a terminal.
pub(crate) struct Progress {
    shown: bool,
    lines: crate::report::ProgressLines,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            shown: false,
            lines: crate::report::ProgressLines::new("simulating", "transfers"),
        }
    }
}

impl Observer for Progress {
    fn progress(&mut self, completed: u64, total: u64) {
        use std::io::IsTerminal;
        self.lines.update(completed, total);
        if std::io::stderr().is_terminal() && total > 0 {
            eprint!(
                "\r  simulating: {completed}/{total} transfers ({:.0}%)",
                100.0 * completed as f64 / total as f64
            );
            self.shown = true;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.shown {
            eprintln!();
        }
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    crate::report::check_progress_pace().map_err(Error::Input)?;
    match cli.command {
        Command::Simulate(args) => {
            match (&args.multi_dim.system, &args.algorithm, &args.schedule) {
                (Some(path), None, None) => {
                    let path = path.clone();
                    system::simulate(args, &path)
                }
                _ => simulate::simulate(args),
            }
        }
        Command::Synthesize(args) => simulate::synthesize(args),
        Command::Bound(args) => bound::bound(args),
        Command::Trees(args) => trees::trees(args),
        Command::Sweep(args) => batch::sweep(args),
        Command::Run(args) => batch::run_file(args),
        Command::Merge(args) => batch::merge_shards(args),
        Command::Train(args) => {
            if args.llm.model.is_some() {
                llm::train(args)
            } else if let Some(path) = args.multi_dim.system.clone() {
                system::train(args, &path)
            } else {
                train::train(args)
            }
        }
        Command::Trace(args) => train::trace(args),
        Command::NcclTests(args) => nccl_tests::nccl_tests(args),
        Command::Calibrate(args) => calibrate::calibrate(args),
    }
}

/// Where a command's results folder goes; checked before anything runs.
#[derive(Args, Debug, Default)]
pub struct OutArgs {
    /// Results folder (made if missing; must be empty unless --force)
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Write into a non-empty --out folder, first removing what collsim wrote there before
    #[arg(long)]
    pub force: bool,
}

impl OutArgs {
    /// The results folder, ready to write, or None without --out.
    pub fn prepare(&self) -> Result<Option<crate::report::OutputDir>, Error> {
        self.prepare_reading(&[])
    }

    /// As [`OutArgs::prepare`], refusing when one of the run's `inputs` (path, flag) is an earlier
    /// result in the folder that `--force` would replace.
    pub fn prepare_reading(
        &self,
        inputs: &[(&std::path::Path, &str)],
    ) -> Result<Option<crate::report::OutputDir>, Error> {
        let Some(dir) = self.out.as_deref() else {
            return Ok(None);
        };
        let out = crate::report::OutputDir::prepare(dir, self.force)?;
        for (path, flag) in inputs {
            out.keep_input(path, flag)?;
        }
        Ok(Some(out))
    }
}

/// `--chunks`: a count of at least 1, named as such (not clap's "unexpected argument '-1'").
pub(crate) fn chunk_count(text: &str) -> Result<u32, String> {
    match text.trim().parse::<i128>() {
        Ok(n) if n < 1 => Err(format!("{n} is too small: at least 1")),
        Ok(n) if n > u32::MAX as i128 => Err(format!("{n} is too large: at most {}", u32::MAX)),
        Ok(n) => Ok(n as u32),
        Err(_) => Err("expected a whole number of chunks, at least 1".to_string()),
    }
}
