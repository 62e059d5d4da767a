//! Training iterations: a workload's layers with their compute times and the collectives each
//! phase issues, run on the event engine so that overlapping collectives share the network.
//!
//! The iteration: the forward pass layer by layer, each forward communication blocking; the
//! backward pass in reverse, each layer's input-gradient compute and its blocking communication,
//! then its weight-gradient compute, whose communication is issued asynchronously and overlaps
//! the rest of the backward pass; finally each layer's weight update, once its weight-gradient
//! communication is done, in the order they were issued. Compute runs on one stream per NPU (the
//! same on every NPU); the stream's stalls are the exposed communication, each charged to the
//! (data- or model-parallel) communication it waited for, so
//! `forward + backward + exposed = total` holds by construction and overlapped communication is
//! never counted twice. Model-parallel groups are the first NPUs (the innermost dimensions), data
//! parallel groups the NPUs with the same position in each model-parallel group.
//!
//! DLRM (ASTRA-sim's HYBRID_DLRM): layer 0's forward all-to-all is waited for only before the
//! top MLP (the layer after `last_bottom_layer`); its backward all-to-all starts after that layer's
//! input-gradient compute and is waited for before layer 0's weight-gradient compute.

mod file;

pub use file::{load_workload, parse_astra, parse_yaml};

use std::collections::{BTreeMap, HashMap};

use crate::algorithms::{self, Algorithm, MultiDimOptions};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{self, Schedule, TransferIndex};
use crate::sim::{self, Observer, SimOptions};
use crate::synth::{self, SynthOptions};
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

/// Simulates one training iteration of `workload` on `topology`.
pub fn simulate_iteration(
    topology: &Topology,
    workload: &Workload,
    options: &TrainOptions,
    observer: &mut dyn Observer,
) -> Result<Breakdown, Error> {
    let groups = Groups::new(topology, workload)?;
    let mut it = Iteration {
        topology,
        workload,
        options,
        groups,
        schedule: Schedule::new(),
        cache: HashMap::new(),
        unwound: synth::Unwound::default(),
        stream: Vec::new(),
        notes: Vec::new(),
    };
    it.build()?;
    let sim_options = SimOptions {
        record_transfers: true,
        ..options.sim.clone()
    };
    let result = sim::simulate(topology, &it.schedule, &sim_options, observer)?;
    let mut b = Breakdown {
        workload: workload.name.clone(),
        algorithm: options.algorithm.name().to_string(),
        forward_compute: Time::ZERO,
        backward_compute: Time::ZERO,
        exposed_comm: Time::ZERO,
        exposed_data_parallel: Time::ZERO,
        exposed_model_parallel: Time::ZERO,
        total: Time::ZERO,
        notes: it.notes,
    };
    let mut free = Time::ZERO;
    for step in &it.stream {
        let started = result.issued[step.node as usize];
        let stall = Time(started.ps() - free.ps());
        if stall > Time::ZERO {
            let binding = step
                .awaits
                .iter()
                .max_by_key(|(end, _)| result.completed[*end as usize])
                .map(|&(_, group)| group)
                .expect("the stream only stalls for communication");
            match binding {
                CommGroup::Data => b.exposed_data_parallel = b.exposed_data_parallel + stall,
                CommGroup::Model => b.exposed_model_parallel = b.exposed_model_parallel + stall,
            }
            b.exposed_comm = b.exposed_comm + stall;
        }
        free = result.completed[step.node as usize];
        let compute = Time(free.ps() - started.ps());
        if step.forward {
            b.forward_compute = b.forward_compute + compute;
        } else {
            b.backward_compute = b.backward_compute + compute;
        }
    }
    b.total = free;
    debug_assert_eq!(b.total, result.finish);
    Ok(b)
}

/// One iteration per algorithm, run in parallel, in the order given.
pub fn compare(
    topology: &Topology,
    workload: &Workload,
    algorithms: &[Algorithm],
    options: &TrainOptions,
) -> Result<Vec<Breakdown>, Error> {
    use rayon::prelude::*;
    let bar = crate::report::progress_bar(algorithms.len() as u64, &workload.name, "algorithms");
    // In a log (no bar), each algorithm says when it is done, so a slow one can be told apart.
    let finished = crate::report::Milestones::new(&workload.name, algorithms.len() as u64);
    let rows = algorithms
        .par_iter()
        .map(|&algorithm| {
            let options = TrainOptions {
                algorithm,
                ..options.clone()
            };
            let row = simulate_iteration(topology, workload, &options, &mut ());
            bar.inc(1);
            finished.reached(&format!("{} done", algorithm.name()));
            row
        })
        .collect::<Result<Vec<_>, _>>();
    bar.finish_and_clear();
    rows
}

/// The NPU lists of each kind of group.
struct Groups {
    /// Per kind: the groups, each in rank order, and the dimensions they span when they are
    /// whole dimensions of a dimensional network.
    data: (Vec<Vec<NodeId>>, Option<std::ops::Range<usize>>),
    model: (Vec<Vec<NodeId>>, Option<std::ops::Range<usize>>),
}

impl Groups {
    fn new(topology: &Topology, w: &Workload) -> Result<Groups, Error> {
        let npus = topology.active_npus();
        let n = npus.len() as u32;
        let all = |dims: usize| (vec![npus.clone()], Some(0..dims));
        let dims = topology.dims();
        if !w.parallelism.hybrid() {
            return Ok(Groups {
                data: all(dims.len()),
                model: all(dims.len()),
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
        // Whole leading dimensions when the group size is their product.
        let mut product = 1u32;
        let mut inner = None;
        for (d, dim) in dims.iter().enumerate() {
            product *= dim.size;
            if product == mp {
                inner = Some(d + 1);
                break;
            }
            if product > mp {
                break;
            }
        }
        let model = (0..n / mp)
            .map(|k| (k * mp..(k + 1) * mp).collect())
            .collect();
        let data = (0..mp)
            .map(|i| (0..n / mp).map(|j| i + j * mp).collect())
            .collect();
        Ok(Groups {
            model: (model, inner.map(|k| 0..k)),
            data: (data, inner.map(|k| k..dims.len())),
        })
    }

    fn of(&self, group: CommGroup) -> &(Vec<Vec<NodeId>>, Option<std::ops::Range<usize>>) {
        match group {
            CommGroup::Data => &self.data,
            CommGroup::Model => &self.model,
        }
    }
}

/// A compute step on the stream and the communication it waited for.
struct Step {
    node: TransferIndex,
    forward: bool,
    awaits: Vec<(TransferIndex, CommGroup)>,
}

struct Iteration<'a> {
    topology: &'a Topology,
    workload: &'a Workload,
    options: &'a TrainOptions,
    groups: Groups,
    schedule: Schedule,
    /// The schedules of one collective (one per group), made once per kind, size and group.
    cache: HashMap<(CollectiveKind, u64, CommGroup), Vec<Schedule>>,
    /// The topology as the synthesizer unwinds it, shared by every TACOS collective.
    unwound: synth::Unwound,
    stream: Vec<Step>,
    notes: Vec<String>,
}

impl Iteration<'_> {
    fn build(&mut self) -> Result<(), Error> {
        let w = self.workload;
        let layers = w.layers.len();
        let dlrm = w.parallelism == Parallelism::Dlrm;
        let top = w.last_bottom_layer.map(|l| l as usize + 1);
        // Communication a later step waits for, by step key.
        let mut pending: BTreeMap<(Pass, usize), Vec<(TransferIndex, CommGroup)>> = BTreeMap::new();
        let mut blocking: Vec<(TransferIndex, CommGroup)> = Vec::new();
        for l in 0..layers {
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::Forward, l)).unwrap_or_default());
            let phase = &w.layers[l].forward;
            let node = self.compute(phase.compute, awaits, true);
            if let Some(comm) = &phase.comm {
                let end = self.communicate(node, comm, Pass::Forward)?;
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
        let mut weight_comms: Vec<(usize, Option<(TransferIndex, CommGroup)>)> = Vec::new();
        for l in (0..layers).rev() {
            let layer = &w.layers[l];
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::InputGrad, l)).unwrap_or_default());
            let node = self.compute(layer.input_grad.compute, awaits, false);
            if let Some(comm) = &layer.input_grad.comm {
                // DLRM issues the embeddings' backward all-to-all early (below).
                let early = dlrm && l == 0 && top.is_some_and(|t| t < layers);
                if !early {
                    let end = self.communicate(node, comm, Pass::InputGrad)?;
                    blocking.push(end);
                }
            }
            if dlrm && Some(l) == top {
                // The embeddings' backward all-to-all starts with the top MLP's input gradient.
                if let Some(comm) = &w.layers[0].input_grad.comm {
                    let end = self.communicate(node, comm, Pass::InputGrad)?;
                    pending.entry((Pass::WeightGrad, 0)).or_default().push(end);
                }
            }
            let mut awaits = std::mem::take(&mut blocking);
            awaits.extend(pending.remove(&(Pass::WeightGrad, l)).unwrap_or_default());
            let node = self.compute(layer.weight_grad.compute, awaits, false);
            let end = match &layer.weight_grad.comm {
                Some(comm) => Some(self.communicate(node, comm, Pass::WeightGrad)?),
                None => None,
            };
            weight_comms.push((l, end));
        }
        let mut leftover = std::mem::take(&mut blocking);
        leftover.extend(pending.into_values().flatten());
        for (i, (l, end)) in weight_comms.into_iter().enumerate() {
            let mut awaits: Vec<_> = end.into_iter().collect();
            if i == 0 {
                awaits.append(&mut leftover);
            }
            self.compute(w.layers[l].update, awaits, false);
        }
        Ok(())
    }

    /// Appends a compute step of `duration` after the previous one and the communication it
    /// waits for.
    fn compute(
        &mut self,
        duration: Time,
        awaits: Vec<(TransferIndex, CommGroup)>,
        forward: bool,
    ) -> TransferIndex {
        let mut deps: Vec<TransferIndex> = awaits.iter().map(|&(end, _)| end).collect();
        deps.extend(self.stream.last().map(|s| s.node));
        let node = self.schedule.push_wait(0, duration, &deps);
        self.stream.push(Step {
            node,
            forward,
            awaits,
        });
        node
    }

    /// Appends a collective issued when `after` completes; returns the step that marks its end
    /// (on every group) and the group kind it is charged to.
    fn communicate(
        &mut self,
        after: TransferIndex,
        comm: &Comm,
        pass: Pass,
    ) -> Result<(TransferIndex, CommGroup), Error> {
        let group = self.workload.group(pass, comm);
        let key = (comm.collective, comm.bytes, group);
        if !self.cache.contains_key(&key) {
            let parts = self.make(comm, group)?;
            self.cache.insert(key, parts);
        }
        let parts = &self.cache[&key];
        let mut sinks = Vec::new();
        for part in parts {
            let base = self.schedule.append(part, &[after]);
            let mut needed = vec![false; part.len()];
            for t in 0..part.len() as TransferIndex {
                for &d in part.deps(t) {
                    needed[d as usize] = true;
                }
            }
            sinks.extend(
                (0..part.len() as TransferIndex)
                    .filter(|&t| !needed[t as usize])
                    .map(|t| base + t),
            );
        }
        let end = self.schedule.push_wait(0, Time::ZERO, &sinks);
        Ok((end, group))
    }

    /// The schedules of a collective on every group of a kind, validated.
    fn make(&mut self, comm: &Comm, group: CommGroup) -> Result<Vec<Schedule>, Error> {
        let (lists, dims) = self.groups.of(group);
        let (lists, dims) = (lists.clone(), dims.clone());
        let mut parts = Vec::with_capacity(lists.len());
        for npus in &lists {
            let mut s = self.make_one(comm, npus, dims.clone())?;
            if self.options.validate {
                let claim = s.collective.clone().expect("generated schedules claim");
                schedule::validate(&s, &claim, self.options.seed)
                    .map_err(|e| Error::input(format!("{} on {npus:?}: {e}", comm.collective)))?;
            }
            s.collective = None;
            parts.push(s);
        }
        Ok(parts)
    }

    fn make_one(
        &mut self,
        comm: &Comm,
        npus: &[NodeId],
        dims: Option<std::ops::Range<usize>>,
    ) -> Result<Schedule, Error> {
        let o = self.options;
        // As many chunks as asked for, halved while the collective cannot be cut that finely.
        let mut chunks = o.chunks.unwrap_or(1).max(1);
        let c = loop {
            match Collective::new(comm.collective, npus.to_vec(), comm.bytes, chunks, None) {
                Ok(c) => break c,
                Err(_) if chunks > 1 => chunks /= 2,
                Err(e) => return Err(e),
            }
        };
        let whole = npus.len() == self.topology.active_npus().len();
        let generated = match o.algorithm {
            Algorithm::Tacos => {
                let options = SynthOptions {
                    seed: o.seed,
                    ..o.synth.clone()
                };
                synth::synthesize_unwound(
                    self.topology,
                    &mut self.unwound,
                    std::slice::from_ref(&c),
                    &options,
                )
                .map(|mut s| s.schedules.remove(0))
            }
            // ForestColl packs its trees for the group on the whole network: its paths may leave
            // the group's NPUs.
            Algorithm::ForestColl => algorithms::forestcoll::produce(
                self.topology,
                &c,
                o.trees,
                o.chunks.map(|_| chunks),
            )
            .map(|(s, _)| s),
            Algorithm::Hierarchical | Algorithm::Themis if !whole => match dims {
                // The group is whole dimensions: generate on them and move onto its NPUs.
                Some(range) => {
                    let sub = self.topology.sub_dimensions(range)?;
                    let local = Collective::new(
                        comm.collective,
                        (0..npus.len() as NodeId).collect(),
                        comm.bytes,
                        chunks,
                        None,
                    )?;
                    algorithms::generate_with(o.algorithm, &sub, &local, &o.multi_dim).map(
                        |mut s| {
                            s.relabel(npus);
                            s
                        },
                    )
                }
                None => Err(Error::input(format!(
                    "{}: a group of {} NPUs is not whole dimensions of {}",
                    o.algorithm.name(),
                    npus.len(),
                    self.topology.name()
                ))),
            },
            a => algorithms::generate_with(a, self.topology, &c, &o.multi_dim),
        };
        match generated {
            Ok(s) => Ok(s),
            Err(e) if o.algorithm != Algorithm::Direct => {
                let note = format!(
                    "{} {} of {} B: {e}; ran direct instead",
                    o.algorithm.name(),
                    comm.collective,
                    comm.bytes
                );
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
                algorithms::generate(Algorithm::Direct, self.topology, &c)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn options(algorithm: Algorithm) -> TrainOptions {
        TrainOptions {
            algorithm,
            multi_dim: MultiDimOptions::default(),
            synth: SynthOptions::default(),
            sim: SimOptions::default(),
            validate: true,
            seed: 1,
            chunks: None,
            trees: None,
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
        let b = simulate_iteration(&t, &w, &options(Algorithm::Ring), &mut ()).unwrap();
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
