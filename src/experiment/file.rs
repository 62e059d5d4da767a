//! Experiment files: the runs a figure or table needs, as the product of topologies, collectives,
//! sizes, algorithms, chunk counts and seeds.
//!
//! ```yaml
//! name: tacos-fig2a
//! description: TACOS Fig. 2(a), all-reduce bandwidth of the baselines on 64 NPUs
//! bandwidth: 50GB/s          # defaults for inline topologies that do not set their own
//! latency: 0.5us
//! topologies:
//!   - ring:64
//!   - {spec: mesh:8x8, name: 2D Mesh, bandwidth: 50GB/s, remove_npus: "7,9"}
//!   - {spec: dgx-a100:2, name: RoCE, nic: 16x100Gb, nic_kind: roce}  # also nvlink, cpu, nic_path, sharp
//! collectives: [all-reduce]
//! sizes: [1GB]               # or a range: "1KB..1GB:x10"
//! algorithms: [ring, direct, rhd, tacos]
//! chunks: [1]
//! seeds: [1]
//! routing: ecmp              # optional: dor (default), ecmp (hashed by each run's seed), pinned
//! heatmaps: true             # per-run heat maps, one colour scale per (topology, collective, size)
//! utilization: true          # link utilisation over time, one figure per (topology, collective,
//!                            #   size), time over the fastest run's (TACOS Fig. 18)
//! system: astra_system.json  # optional: ASTRA-sim system file for hierarchical and Themis runs
//! active_chunks: 1           # optional: chunks a dimension works on at once
//! intra_dimension: SCF       # optional: FIFO, SCF, lessRemainingPhaseFirst
//! trials: 16                 # optional, synthesizers: greedy trials, sub-chunks per chunk,
//! x_way: 1                   #   and for tacos-ilp / taccl-like the time limit in seconds and
//! time_limit: 60             #   the time-clustering window in steps
//! cluster: 4
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::algorithms::{Algorithm, IntraDimension, MultiDimOptions};
use crate::collective::CollectiveKind;
use crate::sim::{SimOptions, TimeModel};
use crate::synth::{IlpOptions, SynthOptions};
use crate::system::{load_system, SystemConfig};
use crate::topology::{Routing, SystemOverrides, Topology, TopologyOptions};
use crate::units::{parse_bytes, parse_size_list};
use crate::Error;

/// One network of an experiment.
#[derive(Clone, Debug)]
pub struct TopologyEntry {
    pub options: TopologyOptions,
    /// Shown in results instead of the topology's own name.
    pub name: Option<String>,
}

impl TopologyEntry {
    pub fn build(&self) -> Result<Topology, Error> {
        let mut topology = self.options.build()?;
        if let Some(name) = &self.name {
            topology.set_name(name.clone());
        }
        Ok(topology)
    }
}

/// One algorithm of an experiment, with its own multi-dimensional settings and display name
/// where the file gives them (`{algorithm: themis, intra_dimension: FIFO, name: themis-FIFO}`).
#[derive(Clone, Debug, PartialEq)]
pub struct AlgorithmEntry {
    pub algorithm: Algorithm,
    /// Shown in results instead of the algorithm's name.
    pub name: Option<String>,
    pub active_chunks: Option<u32>,
    pub intra_dimension: Option<IntraDimension>,
    /// ForestColl's trees per NPU (None: the optimal number).
    pub trees: Option<u64>,
}

impl AlgorithmEntry {
    pub fn plain(algorithm: Algorithm) -> AlgorithmEntry {
        AlgorithmEntry {
            algorithm,
            name: None,
            active_chunks: None,
            intra_dimension: None,
            trees: None,
        }
    }

    /// The name results show.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.algorithm.name().to_string())
    }

    /// The experiment's multi-dimensional settings with this entry's own applied.
    pub fn multi_dim(&self, base: &MultiDimOptions) -> MultiDimOptions {
        MultiDimOptions {
            active_chunks: self.active_chunks.or(base.active_chunks),
            intra_dimension: self.intra_dimension.or(base.intra_dimension),
            ..base.clone()
        }
    }
}

/// A set of runs: every combination of the lists, in the order topology, collective, size,
/// algorithm, chunks, seed (the last varies fastest).
#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: String,
    pub description: Option<String>,
    pub topologies: Vec<TopologyEntry>,
    pub collectives: Vec<CollectiveKind>,
    pub sizes: Vec<u64>,
    pub algorithms: Vec<AlgorithmEntry>,
    /// Pieces per NPU; None runs with each algorithm's default.
    pub chunks: Vec<Option<u32>>,
    /// None runs with each algorithm's default seed.
    pub seeds: Vec<Option<u64>>,
    /// Root NPU of rooted collectives.
    pub root: Option<u32>,
    pub options: SimOptions,
    pub validate: bool,
    pub synth: SynthOptions,
    /// Per-dimension algorithms and chunk scheduling of hierarchical and Themis.
    pub multi_dim: MultiDimOptions,
    /// Keep per-link loads and draw a heat map per run.
    pub heatmaps: bool,
    /// Keep each run's link utilisation over time and draw the runs of a network together.
    pub utilization: bool,
}

/// One run of an experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    /// Position in the experiment's run list (stable across shards).
    pub index: usize,
    /// Index into [`Experiment::topologies`].
    pub topology: usize,
    pub collective: CollectiveKind,
    pub size: u64,
    pub algorithm: AlgorithmEntry,
    pub chunks: Option<u32>,
    pub seed: Option<u64>,
}

impl Experiment {
    /// Every run, in order.
    pub fn plans(&self) -> Vec<RunPlan> {
        let mut plans = Vec::new();
        for topology in 0..self.topologies.len() {
            for &collective in &self.collectives {
                for &size in &self.sizes {
                    for algorithm in &self.algorithms {
                        for &chunks in &self.chunks {
                            for &seed in &self.seeds {
                                plans.push(RunPlan {
                                    index: plans.len(),
                                    topology,
                                    collective,
                                    size,
                                    algorithm: algorithm.clone(),
                                    chunks,
                                    seed,
                                });
                            }
                        }
                    }
                }
            }
        }
        plans
    }

    /// Reads an experiment file. Paths in it (topology and system files) are relative to it.
    pub fn load(path: &Path) -> Result<(Experiment, String), Error> {
        let shown = path.display().to_string();
        let text = crate::read_text(path, "cannot read experiment file")?;
        let base = path.parent().unwrap_or(Path::new("."));
        let exp = Experiment::parse_in(&text, &shown, base)?;
        Ok((exp, text))
    }

    /// Parses experiment YAML whose relative paths are relative to the working directory.
    pub fn parse(text: &str, file: &str) -> Result<Experiment, Error> {
        Experiment::parse_in(text, file, Path::new("."))
    }

    /// Parses experiment YAML; `file` names the source in errors, relative paths start at `base`.
    pub fn parse_in(text: &str, file: &str, base: &Path) -> Result<Experiment, Error> {
        let raw: RawExperiment = crate::yaml::from_str(file, text)?;
        let field = |name: &str, e: String| Error::input(format!("{file}: field '{name}': {e}"));
        let nonempty = |name: &str, len: usize| {
            if len == 0 {
                Err(field(name, "must list at least one entry".into()))
            } else {
                Ok(())
            }
        };
        nonempty("topologies", raw.topologies.len())?;
        nonempty("collectives", raw.collectives.len())?;
        nonempty("algorithms", raw.algorithms.len())?;
        let raw_specs: Vec<String> = raw
            .topologies
            .iter()
            .map(|t| match t {
                RawTopology::Spec(spec) => spec.clone(),
                RawTopology::Full(entry) => entry.spec.clone(),
            })
            .collect();
        let topologies = raw
            .topologies
            .into_iter()
            .map(|t| match t {
                RawTopology::Spec(spec) => TopologyEntry {
                    options: TopologyOptions {
                        spec,
                        ..TopologyOptions::default()
                    },
                    name: None,
                },
                RawTopology::Full(entry) => {
                    let RawTopologyEntry {
                        spec,
                        name,
                        bandwidth,
                        latency,
                        remove_npus,
                        remove_links,
                        nvlink,
                        nic,
                        nic_kind,
                        cpu,
                        nic_path,
                        sharp,
                    } = *entry;
                    TopologyEntry {
                        options: TopologyOptions {
                            spec,
                            bandwidth,
                            latency,
                            remove_npus: remove_npus.map(|v| v.text()),
                            remove_links,
                            system: SystemOverrides {
                                nvlink,
                                nic,
                                nic_kind,
                                cpu,
                                nic_path,
                                sharp,
                            },
                        },
                        name,
                    }
                }
            })
            .map(|mut entry| {
                let inline =
                    !entry.options.spec.ends_with(".yml") && !entry.options.spec.ends_with(".yaml");
                if inline {
                    entry.options.bandwidth = entry.options.bandwidth.or(raw.bandwidth.clone());
                    entry.options.latency = entry.options.latency.or(raw.latency.clone());
                } else {
                    entry.options.spec = base.join(&entry.options.spec).display().to_string();
                }
                entry
            })
            .collect();
        let topologies: Vec<TopologyEntry> = topologies;
        let shown: Vec<&str> = topologies
            .iter()
            .zip(&raw_specs)
            .map(|(t, spec)| t.name.as_deref().unwrap_or(spec))
            .collect();
        same_name("topologies", &shown).map_err(|e| field("topologies", e))?;
        let collectives = raw
            .collectives
            .iter()
            .map(|c| CollectiveKind::parse(c).map_err(|e| field("collectives", e.to_string())))
            .collect::<Result<_, _>>()?;
        let algorithms = raw
            .algorithms
            .iter()
            .map(|a| {
                let parse = |name: &str| {
                    Algorithm::parse(name).map_err(|e| field("algorithms", e.to_string()))
                };
                Ok(match a {
                    RawAlgorithm::Name(name) => AlgorithmEntry::plain(parse(name)?),
                    RawAlgorithm::Full(RawAlgorithmEntry {
                        algorithm,
                        name,
                        active_chunks,
                        intra_dimension,
                        trees,
                    }) => {
                        let mut own = MultiDimOptions::default();
                        own.apply(*active_chunks, intra_dimension.as_deref())
                            .map_err(|(setting, e)| {
                                field("algorithms", format!("{setting}: {e}"))
                            })?;
                        AlgorithmEntry {
                            algorithm: parse(algorithm)?,
                            name: name.clone(),
                            active_chunks: own.active_chunks,
                            intra_dimension: own.intra_dimension,
                            trees: *trees,
                        }
                    }
                })
            })
            .collect::<Result<Vec<AlgorithmEntry>, Error>>()?;
        let labels: Vec<String> = algorithms.iter().map(AlgorithmEntry::label).collect();
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        same_name("algorithms", &labels).map_err(|e| field("algorithms", e))?;
        let sizes = match raw.sizes {
            RawSizes::One(v) => v.sizes(),
            RawSizes::Many(list) => list
                .into_iter()
                .map(|v| v.sizes())
                .collect::<Result<Vec<_>, _>>()
                .map(|l| l.concat()),
        }
        .map_err(|e| field("sizes", e))?;
        nonempty("sizes", sizes.len())?;
        let mut system = match &raw.system {
            Some(path) => load_system(&base.join(path))?,
            None => SystemConfig::default(),
        };
        for warning in &system.warnings {
            eprintln!("warning: {warning}");
        }
        system
            .multi_dim
            .apply(raw.active_chunks, raw.intra_dimension.as_deref())
            .map_err(|(setting, e)| field(setting, e))?;
        let chunks: Vec<Option<u32>> = match raw.chunks {
            Some(list) => {
                nonempty("chunks", list.len())?;
                if list.contains(&0) {
                    return Err(field("chunks", "chunk counts must be at least 1".into()));
                }
                list.into_iter().map(Some).collect()
            }
            None => vec![system.chunks],
        };
        let seeds = match raw.seeds {
            Some(list) if list.is_empty() => return Err(field("seeds", "is empty".into())),
            Some(list) => list.into_iter().map(Some).collect(),
            None => vec![None],
        };
        let time_model = match raw.time_model.as_deref() {
            None => TimeModel::Exact,
            Some(t) => TimeModel::parse(t)
                .ok_or_else(|| field("time_model", format!("'{t}' is not exact or astra")))?,
        };
        let routing = match raw.routing.as_deref() {
            None => Routing::Dor,
            Some(r) => Routing::named(r, 1)
                .ok_or_else(|| field("routing", format!("'{r}' is not dor, ecmp or pinned")))?,
        };
        Ok(Experiment {
            name: raw.name.unwrap_or_else(|| "experiment".into()),
            description: raw.description,
            topologies,
            collectives,
            sizes,
            algorithms,
            chunks,
            seeds,
            root: raw.root,
            options: SimOptions {
                routing,
                ..system.sim_options(time_model)
            },
            validate: raw.validate.unwrap_or(true),
            synth: SynthOptions {
                trials: raw.trials,
                x_way: raw.x_way,
                ilp: IlpOptions::new(raw.time_limit, raw.cluster)
                    .map_err(|(setting, e)| field(setting, e))?,
                ..SynthOptions::default()
            },
            multi_dim: system.multi_dim,
            heatmaps: raw.heatmaps.unwrap_or(false),
            utilization: raw.utilization.unwrap_or(false),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    name: Option<String>,
    description: Option<String>,
    bandwidth: Option<String>,
    latency: Option<String>,
    topologies: Vec<RawTopology>,
    collectives: Vec<String>,
    sizes: RawSizes,
    algorithms: Vec<RawAlgorithm>,
    chunks: Option<Vec<u32>>,
    seeds: Option<Vec<u64>>,
    root: Option<u32>,
    time_model: Option<String>,
    /// dor, ecmp (seeded by each run's seed) or pinned.
    routing: Option<String>,
    validate: Option<bool>,
    trials: Option<u32>,
    /// Sub-chunks per chunk for the synthesizer (tacos, tacos-ilp, taccl-like).
    x_way: Option<u32>,
    /// tacos-ilp, taccl-like: seconds of synthesis before the programs stop.
    time_limit: Option<f64>,
    /// tacos-ilp, taccl-like: time clustering window in time steps.
    cluster: Option<u32>,
    heatmaps: Option<bool>,
    utilization: Option<bool>,
    /// An ASTRA-sim system file for hierarchical and Themis runs.
    system: Option<String>,
    active_chunks: Option<u32>,
    intra_dimension: Option<String>,
}

/// Two entries of one list shown under one name would share a row key and a figure series: one
/// of them would silently vanish from the figures.
fn same_name(list: &str, names: &[&str]) -> Result<(), String> {
    for (j, b) in names.iter().enumerate() {
        if let Some(i) = names[..j].iter().position(|a| a == b) {
            return Err(format!(
                "{list}[{i}] and {list}[{j}] are both named '{b}'; give one of them a different \
                 `name:`"
            ));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawTopology {
    Spec(String),
    Full(Box<RawTopologyEntry>),
}

/// A topology entry with its name and figures.
#[derive(Deserialize)]
struct RawTopologyEntry {
    spec: String,
    name: Option<String>,
    bandwidth: Option<String>,
    latency: Option<String>,
    remove_npus: Option<IdList>,
    remove_links: Option<String>,
    nvlink: Option<String>,
    nic: Option<String>,
    nic_kind: Option<String>,
    cpu: Option<String>,
    nic_path: Option<String>,
    #[serde(default)]
    sharp: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawAlgorithm {
    Name(String),
    Full(RawAlgorithmEntry),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlgorithmEntry {
    algorithm: String,
    name: Option<String>,
    active_chunks: Option<u32>,
    intra_dimension: Option<String>,
    trees: Option<u64>,
}

/// `7` or `"7,9"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum IdList {
    One(u32),
    Text(String),
}

impl IdList {
    fn text(self) -> String {
        match self {
            IdList::One(v) => v.to_string(),
            IdList::Text(t) => t,
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSizes {
    One(SizeValue),
    Many(Vec<SizeValue>),
}

/// A byte count, a size with a unit, or a range.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    fn sizes(self) -> Result<Vec<u64>, String> {
        match self {
            SizeValue::Bytes(b) => Ok(vec![b]),
            SizeValue::Text(t) if t.contains("..") => {
                parse_size_list(&t).map_err(|e| e.to_string())
            }
            SizeValue::Text(t) => parse_bytes(&t).map(|b| vec![b]).map_err(|e| e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_the_product_of_the_lists_in_order() {
        let exp = Experiment::parse(
            "topologies: [ring:4, {spec: 'mesh:2x2', name: small mesh}]\n\
             collectives: [all-reduce]\nsizes: '1KiB..4KiB'\nalgorithms: [ring, direct]\n\
             seeds: [1, 2]\nbandwidth: 10GB/s\n",
            "x.yaml",
        )
        .unwrap();
        let plans = exp.plans();
        assert_eq!(plans.len(), 2 * 3 * 2 * 2);
        assert_eq!(plans[0].seed, Some(1));
        assert_eq!(plans[1].seed, Some(2));
        assert_eq!(plans[2].algorithm.algorithm, Algorithm::Direct);
        assert_eq!(plans[4].size, 2048);
        assert_eq!(plans[12].topology, 1);
        assert!(plans.iter().enumerate().all(|(i, p)| p.index == i));
        assert_eq!(exp.topologies[1].name.as_deref(), Some("small mesh"));
        assert_eq!(
            exp.topologies[1].options.bandwidth.as_deref(),
            Some("10GB/s")
        );
    }

    #[test]
    fn a_gpu_systems_figures_are_overridden_per_topology() {
        let exp = Experiment::parse(
            "topologies: [dgx-a100:2, {spec: dgx-a100:2, name: slow, nvlink: 8x25GB/s, nic: 2x25Gb, nic_kind: roce, nic_path: phb, sharp: true}]\n\
             collectives: [all-reduce]\nsizes: [1MiB]\nalgorithms: [ring]\n",
            "x.yaml",
        )
        .unwrap();
        let systems: Vec<crate::topology::GpuSystem> = exp
            .topologies
            .iter()
            .map(|t| t.options.gpu_system().unwrap().unwrap())
            .collect();
        assert_eq!(systems[0].nics_per_box, 8);
        assert_eq!(systems[1].nics_per_box, 2);
        assert_eq!(systems[1].nic_kind, crate::topology::NicKind::RoCE);
        assert!(systems[1].sharp && !systems[0].sharp);
        assert_eq!(systems[1].nic_path, crate::topology::NicPath::Phb);
        assert_eq!(systems[0].nic_path, crate::topology::NicPath::Pxb);
        assert_eq!(
            (systems[0].links_per_gpu, systems[1].links_per_gpu),
            (12, 8)
        );
    }

    #[test]
    fn file_paths_are_relative_to_the_experiment_and_algorithms_carry_settings() {
        let exp = Experiment::parse_in(
            "topologies: [net.yml, 'ring:4']\ncollectives: [all-reduce]\nsizes: [1MB]\n\
             algorithms: [ring, {algorithm: themis, intra_dimension: FIFO, name: t-fifo, active_chunks: 2}]\n",
            "e.yaml",
            Path::new("/data/exp"),
        )
        .unwrap();
        assert_eq!(exp.topologies[0].options.spec, "/data/exp/net.yml");
        assert_eq!(exp.topologies[1].options.spec, "ring:4");
        let entry = &exp.algorithms[1];
        assert_eq!(entry.label(), "t-fifo");
        let md = entry.multi_dim(&MultiDimOptions::default());
        assert_eq!(md.active_chunks, Some(2));
        assert_eq!(md.intra_dimension, Some(IntraDimension::Fifo));
        let err = Experiment::parse(
            "topologies: ['ring:4']\ncollectives: [all-reduce]\nsizes: [1MB]\n\
             algorithms: [{algorithm: themis, intra: FIFO}]\n",
            "e.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("e.yaml") && err.contains("algorithms"),
            "{err}"
        );
    }

    #[test]
    fn mistakes_name_the_file_and_field() {
        for (text, needle) in [
            ("topologies: [ring:4]\ncollectives: [all-mix]\nsizes: 1KB\nalgorithms: [ring]", "collectives"),
            ("topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: 1QB\nalgorithms: [ring]", "sizes"),
            ("topologies: []\ncollectives: [all-reduce]\nsizes: 1KB\nalgorithms: [ring]", "topologies"),
            ("topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: 1KB\nalgorithms: [ring]\nsize: 1", "size"),
            ("topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: 1KB\nalgorithms: [warp]", "algorithms"),
        ] {
            let err = Experiment::parse(text, "exp.yaml").unwrap_err().to_string();
            assert!(err.contains("exp.yaml") && err.contains(needle), "{err}");
        }
    }
}
