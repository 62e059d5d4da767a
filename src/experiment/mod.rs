//! One run end to end: build the topology, produce the schedule, simulate, summarise, write outputs.
//! The command line, sweeps and experiment files all go through [`execute`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::algorithms::{self, Algorithm};
use crate::bound;
use crate::collective::{Collective, CollectiveKind};
use crate::report::{self, OutputDir, Summary};
use crate::schedule::{self, Schedule};
use crate::sim::{self, Observer, SimOptions, SimResult};
use crate::topology::{NodeId, Topology};
use crate::Error;

/// Seed of the symbolic values when the run has none.
const VALIDATION_SEED: u64 = 0x00C0_FFEE;

/// Where the schedule comes from.
#[derive(Clone, Debug)]
pub enum ScheduleSource {
    /// A schedule file, optionally claiming a collective.
    File(PathBuf),
    /// A built-in algorithm.
    Algorithm(Algorithm),
}

/// The collective as the user described it, before it is bound to a topology.
#[derive(Clone, Debug)]
pub struct CollectiveRequest {
    pub kind: CollectiveKind,
    pub size: u64,
    pub chunks: u32,
    /// Participants; all active NPUs when `None`.
    pub npus: Option<Vec<NodeId>>,
    pub root: Option<NodeId>,
}

impl CollectiveRequest {
    pub fn resolve(&self, topology: &Topology) -> Result<Collective, Error> {
        let npus = match &self.npus {
            Some(list) => {
                if let Some(&bad) = list.iter().find(|&&v| !topology.is_active_npu(v)) {
                    return Err(Error::input(format!(
                        "--npus: {bad} is not an active NPU of {}",
                        topology.name()
                    )));
                }
                list.clone()
            }
            None => topology.active_npus(),
        };
        Collective::new(self.kind, npus, self.size, self.chunks, self.root)
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub source: ScheduleSource,
    pub collective: Option<CollectiveRequest>,
    pub options: SimOptions,
    pub seed: Option<u64>,
    /// Symbolically validate schedules that claim a collective before simulating them.
    pub validate: bool,
}

/// What one run produced.
pub struct RunOutcome {
    pub summary: Summary,
    pub schedule: Schedule,
    pub result: SimResult,
}

/// Produces the schedule, simulates it and summarises the run.
pub fn execute(
    topology: &Topology,
    spec: &RunSpec,
    observer: &mut dyn Observer,
) -> Result<RunOutcome, Error> {
    let collective = spec
        .collective
        .as_ref()
        .map(|c| c.resolve(topology))
        .transpose()?;
    let started = Instant::now();
    let (mut schedule, algorithm_name) = match &spec.source {
        ScheduleSource::File(path) => (schedule::load_schedule_file(path)?, file_label(path)),
        ScheduleSource::Algorithm(algorithm) => {
            let collective = collective.as_ref().ok_or_else(|| {
                Error::input("an algorithm needs --collective and --size (or give --schedule FILE)")
            })?;
            (
                algorithms::generate(*algorithm, topology, collective)?,
                algorithm.name().to_string(),
            )
        }
    };
    let synthesis_ms = matches!(spec.source, ScheduleSource::Algorithm(Algorithm::Tacos))
        .then(|| started.elapsed().as_secs_f64() * 1e3);
    if schedule.collective.is_none() {
        schedule.collective = collective.clone();
    }
    schedule.check(topology)?;
    // Validation and simulation are independent once the structure is checked, so the validator
    // runs on a second thread beside the simulator (2 cores: wall time max(v, s) instead of v + s).
    // Nothing is reported unless both succeed, so an invalid schedule never yields a result.
    let claim = schedule.collective.clone().filter(|_| spec.validate);
    let seed = spec.seed.unwrap_or(VALIDATION_SEED);
    let (validation, result) = std::thread::scope(|scope| {
        let validator = claim
            .as_ref()
            .map(|claim| scope.spawn(|| schedule::validate(&schedule, claim, seed)));
        let result = sim::simulate(topology, &schedule, &spec.options, observer);
        let validation =
            validator.map_or(Ok(()), |v| v.join().expect("the validator does not panic"));
        (validation, result)
    });
    validation?;
    let result = result?;
    let bound = collective
        .as_ref()
        .map(|c| bound::bounds(topology, c).total());
    let summary = Summary {
        topology: topology.name().to_string(),
        npus: collective
            .as_ref()
            .map_or(topology.active_npus().len() as u32, |c| c.ranks()),
        collective: collective
            .as_ref()
            .map_or("schedule".to_string(), |c| c.kind.name().to_string()),
        algorithm: algorithm_name,
        size_bytes: collective.as_ref().map(|c| c.size),
        chunks_per_npu: collective.as_ref().map(|c| c.chunks),
        collective_time: result.finish,
        busbw_factor: collective.as_ref().map(|c| c.kind.busbw_factor(c.ranks())),
        bound,
        transfers: schedule.len(),
        synthesis_ms,
        seed: spec.seed,
        time_model: spec.options.time_model.name().to_string(),
    };
    Ok(RunOutcome {
        summary,
        schedule,
        result,
    })
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Writes `summary.csv`, `transfers.csv` and `links.csv` of one run into `dir`.
pub fn write_outputs(topology: &Topology, outcome: &RunOutcome, dir: &Path) -> Result<(), Error> {
    let mut out = OutputDir::create(dir)?;
    report::write_transfers_csv(
        &outcome.schedule,
        &outcome.result,
        &out.file("transfers.csv"),
    )?;
    report::write_links_csv(topology, &outcome.result, &out.file("links.csv"))?;
    report::write_summary_csv(
        std::slice::from_ref(&outcome.summary),
        &out.file("summary.csv"),
    )?;
    out.commit()
}
