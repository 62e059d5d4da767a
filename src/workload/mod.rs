//! Training iterations: a workload's layers with their compute times and the collectives each
//! phase issues, run on the event engine so that overlapping collectives share the network.
//!
//! The iteration: the forward pass layer by layer, each forward communication blocking; the
//! backward pass in reverse, each layer's input-gradient compute and its blocking communication,
//! then its weight-gradient compute, whose communication is issued asynchronously and overlaps
//! the rest of the backward pass; finally each layer's weight update, once its weight-gradient
//! communication is done, in the order they were issued. Every NPU runs this as its own program
//! ([`program`]), each collective on the NPU's group of its kind; compute runs on one stream per
//! NPU, whose stalls are the exposed communication, each charged to the (data- or model-parallel)
//! communication it waited for, so `forward + backward + exposed = total` holds by construction
//! and overlapped communication is never counted twice. The same programs, written as Chakra
//! traces ([`chakra`]) and read back, run to the same times. Model-parallel groups are the first NPUs (the innermost dimensions), data
//! parallel groups the NPUs with the same position in each model-parallel group.
//!
//! DLRM (ASTRA-sim's HYBRID_DLRM): layer 0's forward all-to-all is waited for only before the
//! top MLP (the layer after `last_bottom_layer`); its backward all-to-all starts after that layer's
//! input-gradient compute and is waited for before layer 0's weight-gradient compute.

pub mod chakra;
mod emitter;
pub mod execution;
mod file;
pub mod program;

pub use execution::{execute, Execution, RankBreakdown, Span};
pub use file::{load_workload, parse_astra, parse_yaml};
pub use program::{Node, Program, Task};

use std::collections::BTreeMap;

use crate::algorithms::{Algorithm, MultiDimOptions};
use crate::collective::CollectiveKind;
use crate::sim::{Observer, SimOptions};
use crate::synth::SynthOptions;
use crate::topology::{NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// How a workload is parallelised (ASTRA-sim's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallelism {
    /// Every communication among all NPUs, data-parallel.
    Data,
    /// Every communication among all NPUs, model-parallel.
    Model,
    /// Forward and input-gradient communication in model-parallel groups, weight gradients in
    /// data-parallel groups.
    HybridDataModel,
    /// Forward and input-gradient communication in data-parallel groups, weight gradients in
    /// model-parallel groups.
    HybridModelData,
    /// As HybridDataModel (Megatron-style tensor parallelism inside the model-parallel group).
    Transformer,
    /// Embedding all-to-all among all NPUs (model-parallel tables), the MLPs data-parallel.
    Dlrm,
}

impl Parallelism {
    pub fn parse(name: &str) -> Option<Parallelism> {
        match name.to_ascii_lowercase().replace('-', "_").as_str() {
            "data" => Some(Parallelism::Data),
            "model" => Some(Parallelism::Model),
            "hybrid_data_model" => Some(Parallelism::HybridDataModel),
            "hybrid_model_data" => Some(Parallelism::HybridModelData),
            "transformer" | "hybrid_transformer" => Some(Parallelism::Transformer),
            "dlrm" | "hybrid_dlrm" => Some(Parallelism::Dlrm),
            _ => None,
        }
    }

    fn hybrid(self) -> bool {
        matches!(
            self,
            Parallelism::HybridDataModel | Parallelism::HybridModelData | Parallelism::Transformer
        )
    }
}

/// Which kind of group a communication runs in (and is charged to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommGroup {
    Data,
    Model,
    /// Model parallelism by kind (language-model layouts): tensor, pipeline, expert, context.
    Tensor,
    Pipeline,
    Expert,
    Context,
}

impl CommGroup {
    /// The name reports use (`data`, `model`, `tensor`, `pipeline`, `expert`, `context`).
    pub fn name(self) -> &'static str {
        match self {
            CommGroup::Data => "data",
            CommGroup::Model => "model",
            CommGroup::Tensor => "tensor",
            CommGroup::Pipeline => "pipeline",
            CommGroup::Expert => "expert",
            CommGroup::Context => "context",
        }
    }

    /// Whether the breakdown's model-parallel column takes this group's exposure.
    pub fn is_model_parallel(self) -> bool {
        self != CommGroup::Data
    }
}

/// A collective a phase issues.
#[derive(Clone, Debug, PartialEq)]
pub struct Comm {
    pub collective: CollectiveKind,
    /// The per-NPU size, as collsim defines it for the collective.
    pub bytes: u64,
    /// Set explicitly in collsim YAML; otherwise the parallelism decides.
    pub group: Option<CommGroup>,
}

/// Compute, then optionally a collective.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Phase {
    pub compute: Time,
    pub comm: Option<Comm>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub name: String,
    pub forward: Phase,
    pub input_grad: Phase,
    pub weight_grad: Phase,
    /// Local weight update after the layer's weight-gradient communication.
    pub update: Time,
}

/// A training workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: String,
    pub parallelism: Parallelism,
    /// NPUs per model-parallel group (hybrids); default: the network's first dimension.
    pub model_parallel_npus: Option<u32>,
    /// DLRM: the last layer of the bottom MLP.
    pub last_bottom_layer: Option<u32>,
    pub layers: Vec<Layer>,
}

impl Workload {
    pub fn new(
        name: String,
        parallelism: Parallelism,
        model_parallel_npus: Option<u32>,
        last_bottom_layer: Option<u32>,
        layers: Vec<Layer>,
    ) -> Result<Workload, String> {
        if layers.is_empty() {
            return Err("the workload has no layers".into());
        }
        if parallelism == Parallelism::Dlrm {
            match last_bottom_layer {
                Some(l) if (l as usize) < layers.len() => {}
                Some(l) => {
                    return Err(format!(
                        "last bottom layer {l} is not one of the {} layers",
                        layers.len()
                    ))
                }
                None => return Err("a DLRM workload names its last bottom layer".into()),
            }
        }
        Ok(Workload {
            name,
            parallelism,
            model_parallel_npus,
            last_bottom_layer,
            layers,
        })
    }

    /// The group a phase's communication runs in.
    fn group(&self, pass: Pass, comm: &Comm) -> CommGroup {
        if let Some(g) = comm.group {
            return g;
        }
        let forward_like = pass != Pass::WeightGrad;
        match self.parallelism {
            Parallelism::Data => CommGroup::Data,
            Parallelism::Model => CommGroup::Model,
            Parallelism::HybridDataModel | Parallelism::Transformer if forward_like => {
                CommGroup::Model
            }
            Parallelism::HybridDataModel | Parallelism::Transformer => CommGroup::Data,
            Parallelism::HybridModelData if forward_like => CommGroup::Data,
            Parallelism::HybridModelData => CommGroup::Model,
            Parallelism::Dlrm if comm.collective == CollectiveKind::AllToAll => CommGroup::Model,
            Parallelism::Dlrm => CommGroup::Data,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pass {
    Forward,
    InputGrad,
    WeightGrad,
}

/// How one iteration is simulated.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub algorithm: Algorithm,
    pub multi_dim: MultiDimOptions,
    pub synth: SynthOptions,
    pub sim: SimOptions,
    /// Validate every distinct collective schedule before it is used.
    pub validate: bool,
    pub seed: u64,
    /// Chunks each collective is cut into (fewer for collectives too small to cut so finely);
    /// None for each algorithm's default (1, or ForestColl's pieces per tree).
    pub chunks: Option<u32>,
    /// ForestColl's trees per NPU (None: the optimal number).
    pub trees: Option<u64>,
    /// Times the collectives of serial communicators that run alone on their links
    /// ([`Program::serial_communicators`]) as another model would (the NCCL model); None, or a
    /// timer that declines, leaves them to the engine.
    pub solo_timer: Option<std::sync::Arc<dyn SoloTimer>>,
    /// The ranks whose spans the timeline keeps (None: every rank).
    pub timeline_ranks: Option<Vec<u32>>,
    /// Counts the program's tasks as they are laid out on the network, for a progress line
    /// (one program at a time).
    pub progress: Option<std::sync::Arc<crate::report::Steps>>,
}

/// A model of how long a collective takes alone on its links.
pub trait SoloTimer: Send + Sync + std::fmt::Debug {
    /// The time of `kind` of `bytes` among `npus` (sorted), or None to leave it to the engine.
    fn time(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        npus: &[NodeId],
    ) -> Result<Option<Time>, Error>;
}

impl TrainOptions {
    /// `algorithm` with collsim's defaults: validated, seed 1, each algorithm's own chunks and
    /// trees, the exact time model.
    pub fn new(algorithm: Algorithm) -> TrainOptions {
        TrainOptions {
            algorithm,
            multi_dim: MultiDimOptions::default(),
            synth: SynthOptions::default(),
            sim: SimOptions::default(),
            validate: true,
            seed: 1,
            chunks: None,
            trees: None,
            solo_timer: None,
            timeline_ranks: None,
            progress: None,
        }
    }
}

/// Where one iteration's time went.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    pub workload: String,
    pub algorithm: String,
    pub forward_compute: Time,
    /// Input- and weight-gradient compute and weight updates.
    pub backward_compute: Time,
    /// Time the compute stream waited for communication.
    pub exposed_comm: Time,
    pub exposed_data_parallel: Time,
    pub exposed_model_parallel: Time,
    pub total: Time,
    /// Collectives run with another algorithm because the chosen one has no form for them.
    pub notes: Vec<String>,
}

/// Simulates one training iteration of `workload` on `topology`: every NPU runs the workload's
/// program (see [`program`]); the breakdown is the slowest rank's.
pub fn simulate_iteration(
    topology: &Topology,
    workload: &Workload,
    options: &TrainOptions,
    observer: &mut dyn Observer,
) -> Result<Breakdown, Error> {
    let program = workload.program(topology)?;
    let npus = topology.active_npus();
    Ok(execute(topology, &program, &npus, options, observer)?.breakdown)
}

/// One iteration per algorithm, run in parallel, in the order given: `run` executes one.
pub fn compare_with<T: Send>(
    name: &str,
    algorithms: &[Algorithm],
    options: &TrainOptions,
    run: impl Fn(&TrainOptions) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    use rayon::prelude::*;
    let bar = crate::report::progress_bar(algorithms.len() as u64, name, "algorithms");
    // In a log (no bar), each algorithm says when it is done, so a slow one can be told apart.
    let finished = crate::report::Milestones::new(name, algorithms.len() as u64);
    let rows = algorithms
        .par_iter()
        .map(|&algorithm| {
            let options = TrainOptions {
                algorithm,
                ..options.clone()
            };
            let row = run(&options);
            bar.inc(1);
            finished.reached(&format!("{} done", algorithm.name()));
            row
        })
        .collect::<Result<Vec<_>, _>>();
    bar.finish_and_clear();
    rows
}

/// One iteration of `workload` per algorithm, run in parallel, in the order given.
pub fn compare(
    topology: &Topology,
    workload: &Workload,
    algorithms: &[Algorithm],
    options: &TrainOptions,
) -> Result<Vec<Breakdown>, Error> {
    compare_with(&workload.name, algorithms, options, |o| {
        simulate_iteration(topology, workload, o, &mut ())
    })
}

/// The NPU lists of each kind of group.
struct Groups {
    data: Vec<Vec<NodeId>>,
    model: Vec<Vec<NodeId>>,
}

impl Groups {
    fn new(topology: &Topology, w: &Workload) -> Result<Groups, Error> {
        let npus = topology.active_npus();
        let n = npus.len() as u32;
        let dims = topology.dims();
        if !w.parallelism.hybrid() {
            return Ok(Groups {
                data: vec![npus.clone()],
                model: vec![npus],
            });
        }
        if n != topology.npus() {
            return Err(Error::input(format!(
                "{}: hybrid parallelism needs a network without failed NPUs",
                w.name
            )));
        }
        let mp = match w.model_parallel_npus {
            Some(m) => m,
            None => dims.first().map(|d| d.size).ok_or_else(|| {
                Error::input(format!(
                    "{}: give model_parallel_npus (the network has no dimensions to take it from)",
                    w.name
                ))
            })?,
        };
        if mp == 0 || !n.is_multiple_of(mp) {
            return Err(Error::input(format!(
                "{}: model-parallel groups of {mp} NPUs do not divide the {n} NPUs of {}",
                w.name,
                topology.name()
            )));
        }
        let model = (0..n / mp)
            .map(|k| (k * mp..(k + 1) * mp).collect())
            .collect();
        let data = (0..mp)
            .map(|i| (0..n / mp).map(|j| i + j * mp).collect())
            .collect();
        Ok(Groups { model, data })
    }

    /// The index of the group of `kind` that rank `npu` belongs to.
    fn index_of(&self, kind: CommGroup, npu: NodeId) -> usize {
        let lists = match kind {
            CommGroup::Data => &self.data,
            _ => &self.model,
        };
        lists
            .iter()
            .position(|g| g.binary_search(&npu).is_ok())
            .expect("every NPU is in a group of each kind")
    }
}

impl Workload {
    /// The program every rank runs (the same on all of them, each collective on the rank's own
    /// group of its kind): the iteration described in this module's documentation.
    pub fn program(&self, topology: &Topology) -> Result<Program, Error> {
        let groups = Groups::new(topology, self)?;
        let template = self.rank_program();
        let ranks = topology
            .active_npus()
            .iter()
            .map(|&npu| {
                template
                    .iter()
                    .map(|node| {
                        let mut node = node.clone();
                        if let Task::Collective {
                            communicator,
                            group,
                            ..
                        } = &mut node.task
                        {
                            *communicator =
                                format!("{}{}", group.name(), groups.index_of(*group, npu));
                        }
                        node
                    })
                    .collect()
            })
            .collect();
        Ok(Program {
            name: self.name.clone(),
            ranks,
            ..Program::default()
        })
    }

    /// One rank's nodes (communicators still unnamed).
    fn rank_program(&self) -> Vec<Node> {
        let mut p = ProgramBuilder::default();
        let layers = self.layers.len();
        let dlrm = self.parallelism == Parallelism::Dlrm;
        let top = self.last_bottom_layer.map(|l| l as usize + 1);
        // Communication a later step waits for, by step key.
        let mut pending: BTreeMap<(Pass, usize), Vec<u32>> = BTreeMap::new();
        let mut blocking: Vec<u32> = Vec::new();
        for l in 0..layers {
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::Forward, l)).unwrap_or_default());
            let layer = &self.layers[l];
            let phase = &layer.forward;
            let node = p.compute(&layer.name, "forward", phase.compute, awaits, true);
            if let Some(comm) = &phase.comm {
                let end = p.communicate(self, &layer.name, node, comm, Pass::Forward);
                let deferred = dlrm && comm.collective == CollectiveKind::AllToAll;
                match (deferred, top) {
                    (true, Some(t)) if t < layers => {
                        pending.entry((Pass::Forward, t)).or_default().push(end)
                    }
                    (true, _) => pending
                        .entry((Pass::InputGrad, layers - 1))
                        .or_default()
                        .push(end),
                    (false, _) => blocking.push(end),
                }
            }
        }
        let mut weight_comms: Vec<(usize, Option<u32>)> = Vec::new();
        for l in (0..layers).rev() {
            let layer = &self.layers[l];
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::InputGrad, l)).unwrap_or_default());
            let node = p.compute(
                &layer.name,
                "input_grad",
                layer.input_grad.compute,
                awaits,
                false,
            );
            if let Some(comm) = &layer.input_grad.comm {
                // DLRM issues the embeddings' backward all-to-all early (below).
                let early = dlrm && l == 0 && top.is_some_and(|t| t < layers);
                if !early {
                    let end = p.communicate(self, &layer.name, node, comm, Pass::InputGrad);
                    blocking.push(end);
                }
            }
            if dlrm && Some(l) == top {
                // The embeddings' backward all-to-all starts with the top MLP's input gradient.
                if let Some(comm) = &self.layers[0].input_grad.comm {
                    let name = &self.layers[0].name;
                    let end = p.communicate(self, name, node, comm, Pass::InputGrad);
                    pending.entry((Pass::WeightGrad, 0)).or_default().push(end);
                }
            }
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::WeightGrad, l)).unwrap_or_default());
            let node = p.compute(
                &layer.name,
                "weight_grad",
                layer.weight_grad.compute,
                awaits,
                false,
            );
            let end = layer
                .weight_grad
                .comm
                .as_ref()
                .map(|comm| p.communicate(self, &layer.name, node, comm, Pass::WeightGrad));
            weight_comms.push((l, end));
        }
        let mut leftover = std::mem::take(&mut blocking);
        leftover.extend(pending.into_values().flatten());
        for (i, (l, end)) in weight_comms.into_iter().enumerate() {
            let mut awaits: Vec<_> = end.into_iter().collect();
            if i == 0 {
                awaits.append(&mut leftover);
            }
            let layer = &self.layers[l];
            p.compute(&layer.name, "update", layer.update, awaits, false);
        }
        p.nodes
    }
}

/// Appends one rank's nodes: compute in a stream, collectives after the compute that issues them.
#[derive(Default)]
struct ProgramBuilder {
    nodes: Vec<Node>,
    last_compute: Option<u32>,
}

impl ProgramBuilder {
    fn push(&mut self, name: String, task: Task, deps: Vec<u32>) -> u32 {
        let index = self.nodes.len() as u32;
        self.nodes.push(Node {
            id: index as u64,
            name,
            task,
            deps,
        });
        index
    }

    /// A compute step of `duration` after the previous one and the communication it waits for.
    fn compute(
        &mut self,
        layer: &str,
        phase: &str,
        duration: Time,
        mut awaits: Vec<u32>,
        forward: bool,
    ) -> u32 {
        awaits.extend(self.last_compute);
        let node = self.push(
            format!("{layer}.{phase}"),
            Task::Compute { duration, forward },
            awaits,
        );
        self.last_compute = Some(node);
        node
    }

    /// A collective issued when `after` completes.
    fn communicate(
        &mut self,
        w: &Workload,
        layer: &str,
        after: u32,
        comm: &Comm,
        pass: Pass,
    ) -> u32 {
        let group = w.group(pass, comm);
        let phase = match pass {
            Pass::Forward => "forward",
            Pass::InputGrad => "input_grad",
            Pass::WeightGrad => "weight_grad",
        };
        self.push(
            format!("{layer}.{phase}.{}", comm.collective),
            Task::Collective {
                kind: comm.collective,
                bytes: comm.bytes,
                communicator: String::new(),
                group,
                times: 1,
            },
            vec![after],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms;
    use crate::collective::Collective;
    use crate::sim;
    use crate::topology::TopologyOptions;

    fn layer(f: u64, ig: u64, wg: u64, comm: Option<Comm>) -> Layer {
        Layer {
            name: "l".into(),
            forward: Phase {
                compute: Time::from_ns(f),
                comm: None,
            },
            input_grad: Phase {
                compute: Time::from_ns(ig),
                comm: None,
            },
            weight_grad: Phase {
                compute: Time::from_ns(wg),
                comm,
            },
            update: Time::ZERO,
        }
    }

    #[test]
    fn weight_gradient_communication_overlaps_the_rest_of_the_backward_pass() {
        let t = TopologyOptions::new("ring:4")
            .with_links("50GiB/s", "0.5us")
            .build()
            .unwrap();
        let ar = |bytes| {
            Some(Comm {
                collective: CollectiveKind::AllReduce,
                bytes,
                group: None,
            })
        };
        // Layer 1's weight gradient (issued first) overlaps layer 0's long backward compute.
        let w = Workload::new(
            "two".into(),
            Parallelism::Data,
            None,
            None,
            vec![
                layer(10, 1_000_000, 10, ar(1 << 20)),
                layer(10, 10, 10, ar(1 << 20)),
            ],
        )
        .unwrap();
        let b = simulate_iteration(&t, &w, &TrainOptions::new(Algorithm::Ring), &mut ()).unwrap();
        assert_eq!(
            b.forward_compute + b.backward_compute + b.exposed_comm,
            b.total
        );
        assert_eq!(b.exposed_model_parallel, Time::ZERO);
        assert_eq!(b.forward_compute, Time::from_ns(20));
        assert_eq!(b.backward_compute, Time::from_ns(1_000_030));
        // Only layer 0's all-reduce (issued last) is exposed: one all-reduce time, not two.
        let c = Collective::new(
            CollectiveKind::AllReduce,
            vec![0, 1, 2, 3],
            1 << 20,
            1,
            None,
        )
        .unwrap();
        let s = algorithms::generate(Algorithm::Ring, &t, &c).unwrap();
        let one = sim::simulate(&t, &s, &SimOptions::default(), &mut ())
            .unwrap()
            .finish;
        assert_eq!(b.exposed_comm, one);
    }
}
