//! The NCCL model: what NCCL would run for a collective on a GPU system, and how long it takes.
//!
//! 1. [`graph`]: NCCL's channel search gives each algorithm its channels and per-channel
//!    bandwidth on the system ([`crate::topology::GpuSystem`]).
//! 2. [`tuning`]: NCCL's cost model turns them into a latency and bandwidth per (algorithm,
//!    protocol) and picks the fastest, with the channel and thread counts NCCL would use; the
//!    user may force algorithms and protocols as NCCL_ALGO / NCCL_PROTO do.
//! 3. The choice is run, not evaluated by formula: the algorithm's kernels
//!    ([`crate::algorithms::nccl_kernels`]) produce a schedule of NCCL's channels, loops, chunks
//!    and slices, which is validated and simulated on the system's network. The network is the
//!    system's, with each link at the rate NCCL books for it under the protocol (NVLink at NCCL's
//!    per-link figure, the NIC at its search speed, scaled by the protocol's efficiency as NCCL's
//!    model scales it) and each hop at NCCL's per-step latency of the protocol; each box's
//!    NVSwitch is a relay NPU that reduces (NVLS). The call's fixed cost (NCCL's base latency and
//!    the kernel launches, [`constants::LAUNCH_US`]) is added. An all-to-all is NCCL's
//!    point-to-point traffic, planned by [`p2p`] instead of the tuning model.
//!
//! On one box of eight MI300X, calls RCCL runs as one of the MSCCL algorithms it ships (all-reduce
//! to 16 MiB, all-to-all to 43 MiB) run as those ([`msccl`]): each pair of GPUs exchanging its
//! blocks directly. On MI300X boxes the other calls are chosen by RCCL's cost model ([`rccl`]).
//!
//! CollNet Direct all-reduce runs on a SHARP network with the rails' leaf switches as reducing
//! relays, as do its all-gather and reduce-scatter along the rails and NVLS's all-reduce across
//! boxes there (NCCL's NVLS with CollNet). PAT (one GPU a box) runs its rounds
//! ([`nccl_kernels::pat`]). What is not modelled: CollNet Chain and NVLS's all-gather /
//! reduce-scatter across boxes ([`Model::unmodelled_choice`] says where NCCL would run one),
//! user buffer registration, the proxy thread's network progress, and clocks that differ
//! between GPUs.

pub mod algo;
pub mod calibrate;
mod chunking;
pub mod constants;
pub mod graph;
pub mod log;
pub mod msccl;
mod network;
pub mod nvls;
pub mod p2p;
pub mod rccl;
pub mod tuning;

use crate::algorithms::nccl_kernels::{self, Across, Cut, Kernel};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{validate_with_relays, Schedule};
use crate::sim::{simulate, SimOptions};
use crate::topology::{GpuSystem, Intra, ProxyHolds, SwitchRelays, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;
pub use algo::{Algo, Func, Proto};
use constants::*;
use graph::Graph;
use nvls::NvlsTuning;
use p2p::{P2pChannels, P2pSend};
use tuning::Tables;

/// Which algorithms and protocols may run: NCCL_ALGO / NCCL_PROTO lists (`Ring,Tree`,
/// `^LL128`), case-insensitive.
#[derive(Clone, Debug, PartialEq)]
pub struct Allowed {
    pub algos: [bool; ALGOS],
    pub protos: [bool; PROTOS],
    /// Whether the protocols were named (NCCL_PROTO set): NCCL then runs LL128 where its
    /// default would not.
    pub protos_named: bool,
}

impl Default for Allowed {
    fn default() -> Allowed {
        Allowed {
            algos: [true; ALGOS],
            protos: [true; PROTOS],
            protos_named: false,
        }
    }
}

impl Allowed {
    /// Applies an NCCL_ALGO-style list (`--nccl-algo`).
    pub fn set_algos(&mut self, text: &str) -> Result<(), Error> {
        let names: Vec<&str> = Algo::ALL.iter().map(|a| a.name()).collect();
        self.algos = parse_list(text, "--nccl-algo", &names)?
            .try_into()
            .expect("one flag per algorithm");
        Ok(())
    }

    /// Applies an NCCL_PROTO-style list (`--nccl-proto`).
    pub fn set_protos(&mut self, text: &str) -> Result<(), Error> {
        let names: Vec<&str> = Proto::ALL.iter().map(|p| p.name()).collect();
        self.protos = parse_list(text, "--nccl-proto", &names)?
            .try_into()
            .expect("one flag per protocol");
        self.protos_named = true;
        Ok(())
    }

    /// The protocols NCCL may run on `system`: unless NCCL_PROTO names them, LL128 only where
    /// NCCL enables it by default (src/graph/tuning.cc: NVIDIA GPUs of one generation whose
    /// GPUs meet over NVLink, "other cases are not tested and may cause silent data
    /// corruption", and across boxes only while each GPU reaches its NIC within NCCL's path
    /// limit, [`GpuSystem::ll128_across_boxes`]; RCCL, src/graph/tuning.cc: only on gfx90a, so
    /// not on the MI300X).
    fn protos_on(&self, system: &GpuSystem) -> [bool; PROTOS] {
        let mut protos = self.protos;
        let nvidia_nvlink = !tuning::runs_rccl(system) && system.intra == Intra::NvSwitch;
        let network_allows = system.boxes <= 1 || system.ll128_across_boxes();
        let by_default = nvidia_nvlink && network_allows;
        if !self.protos_named && !by_default {
            protos[Proto::LL128 as usize] = false;
        }
        protos
    }
}

/// How a call is run: on the first `gpus` GPUs of the box (`--gpus`), with NCCL_ALGO and
/// NCCL_PROTO set (in their syntax); nothing set is the whole system at NCCL's own choice. Calls
/// run several ways calibrate one model: per-hop latencies show only across GPU counts, each
/// protocol's only where it was run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Setting {
    pub gpus: Option<u32>,
    pub nccl_algo: Option<String>,
    pub nccl_proto: Option<String>,
}

impl Setting {
    /// Narrows `system` and `allowed` to this setting; errors name the flag.
    pub fn apply(&self, system: &mut GpuSystem, allowed: &mut Allowed) -> Result<(), Error> {
        if let Some(g) = self.gpus {
            system.use_first_gpus(g)?;
        }
        if let Some(a) = &self.nccl_algo {
            allowed.set_algos(a)?;
        }
        if let Some(p) = &self.nccl_proto {
            allowed.set_protos(p)?;
        }
        Ok(())
    }

    /// The model of `base` run this way.
    pub fn model(&self, base: &Model) -> Result<Model, Error> {
        if *self == Setting::default() {
            return Ok(base.clone());
        }
        let (mut system, mut allowed) = (base.system.clone(), base.allowed.clone());
        self.apply(&mut system, &mut allowed)?;
        Ok(Model::with_allowed(&system, allowed))
    }
}

/// `a,b` enables those names only; `^a,b` all but those.
fn parse_list(text: &str, flag: &str, names: &[&str]) -> Result<Vec<bool>, Error> {
    let (except, list) = match text.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut on = vec![except; names.len()];
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let i = names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(item))
            .ok_or_else(|| {
                Error::input(format!(
                    "{flag} '{item}': expected one of {}",
                    names.join(", ")
                ))
            })?;
        on[i] = !except;
    }
    if !on.contains(&true) {
        return Err(Error::input(format!("{flag} '{text}' enables nothing")));
    }
    Ok(on)
}

/// What NCCL runs for one call, and NCCL's own estimate of its time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    pub algo: Algo,
    pub proto: Proto,
    pub channels: u32,
    pub threads: u64,
    /// NCCL's cost model's time, us.
    pub estimate_us: f64,
}

/// The NCCL model of one system.
#[derive(Clone, Debug)]
pub struct Model {
    pub system: GpuSystem,
    pub graphs: [Graph; ALGOS],
    pub tables: Tables,
    pub allowed: Allowed,
    /// Channels of the communicator (rings doubled by NCCL's connect step).
    pub comm_channels: u32,
    pub nvls: NvlsTuning,
    /// The channels' rings, as ranks in sending order (channel `c` runs ring `c` modulo their
    /// count).
    pub rings: Vec<Vec<u32>>,
    /// The channels point-to-point sends (all-to-all) are striped over.
    pub p2p: P2pChannels,
    /// Transfers a simulated call may have ([`TRANSFER_BUDGET`]).
    transfer_budget: u64,
}

/// How nccl-tests issues a call: `gpus_per_thread` kernels launched one after another, on
/// elements of `element_bytes` (`-d`), reducing by average or not (`-o avg`). RCCL's MSCCL
/// algorithms need an element count they divide, and no average.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub gpus_per_thread: u32,
    pub element_bytes: u64,
    pub average: bool,
}

impl Default for Launch {
    /// One GPU a thread, nccl-tests' default `float` and `sum`.
    fn default() -> Launch {
        Launch {
            gpus_per_thread: 1,
            element_bytes: 4,
            average: false,
        }
    }
}

/// A simulated call.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub choice: Choice,
    /// The whole call as nccl-tests times it.
    pub time: Time,
    /// Transfers simulated.
    pub transfers: usize,
}

/// The channels' rings on `system`: GPUs in box order, entering each box on one local index and
/// leaving on another so that the channels spread over the NICs (every other channel reversed).
/// Where a box's GPUs are linked pairwise (xGMI), NCCL's search places each channel on links the
/// channels before it left free (it deducts each channel's bandwidth from the links it crosses,
/// src/graph/search.cc), so the rings spread over the mesh's links: one box runs edge-disjoint
/// Hamiltonian rings, each both ways; boxes in a ring cross each box on a path of its own links.
fn channel_rings(system: &GpuSystem) -> Vec<Vec<u32>> {
    let g = system.gpus_per_box;
    let boxes: Vec<Vec<u32>> = (0..system.boxes)
        .map(|b| (b * g..(b + 1) * g).collect())
        .collect();
    if system.intra == Intra::FullMesh {
        if system.boxes == 1 {
            let mesh = system
                .topology()
                .map(|t| crate::algorithms::nccl_graph_rings(&t, &boxes[0]))
                .unwrap_or_default();
            if !mesh.is_empty() {
                return mesh;
            }
        } else if let Some(rings) = crate::algorithms::nccl_mesh_channel_rings(&boxes) {
            return rings;
        }
    }
    crate::algorithms::nccl_channel_rings(&boxes, true)
}

/// The kernel that runs `kind` with `algo`.
fn kernel_of(kind: CollectiveKind, algo: Algo) -> Kernel {
    match (kind, algo) {
        (CollectiveKind::AllToAll, _) => Kernel::AllToAll,
        (CollectiveKind::Broadcast | CollectiveKind::Reduce, _) => Kernel::Chain,
        (_, Algo::Nvls | Algo::NvlsTree) => Kernel::Nvls,
        (_, Algo::CollNetDirect) => Kernel::CollNet,
        (CollectiveKind::AllReduce, Algo::Tree) => Kernel::Tree,
        (_, Algo::Pat) => Kernel::Pat,
        _ => Kernel::Ring,
    }
}

/// The slices a call's channels post (Simple's fence and flag per slice, [`Model::network`]).
#[derive(Clone, Copy, Debug)]
struct Posts {
    /// Bytes a channel copies between two posts.
    slice_bytes: u64,
    /// Channels sharing a GPU's link.
    channels: u32,
    /// Point-to-point sends: the receiver copies each slice out of its buffer after the post
    /// (a collective's receiver forwards it in its own next send).
    point_to_point: bool,
}

/// Transfers a simulated call may have. Beyond, a ring's or NVLS's loops are merged (a ring's
/// links carry its loops back to back, so their count no longer matters); a tree or chain,
/// whose pipeline fills and drains over its depth once a call (merged loops would make that
/// fill as many times longer), runs fewer loops of its own chunks and is extrapolated
/// ([`Extrapolation`]). 2^22 holds the whole of a 1 GiB tree all-reduce on 128 DGX A100 boxes
/// (2.5 s and 230 MB to simulate, now that a tree's builder and validator work a unit at a time)
/// and of NVLSTree's on 64 HGX H100 boxes.
const TRANSFER_BUDGET: u64 = 1 << 22;

/// Transfers a simulated all-to-all may have: its sends run side by side with no pipeline
/// across hops, so fewer, larger pieces barely move its time (a 4 GiB all-to-all on 16 HGX
/// H100 boxes: 0.02% at 2^19 against 2^22, where 2^22 takes 7.3 s and 2.2 GB, 2^19 0.9 s and
/// 0.6 GB).
const P2P_TRANSFER_BUDGET: u64 = 1 << 19;

/// A tree or chain call too long to simulate whole, run as the same chunks in `loops` of its
/// `all` loops. Every loop puts the same bytes on every link, and a pipeline in its steady
/// state advances one loop in its busiest link's time for a loop, so each further loop adds
/// that: `T(all) = T(loops) + (all - loops) x busiest link's busy time / loops`. It errs short:
/// the busiest link works off the pipeline's first burst at its full rate through a short run,
/// where a whole one has it idle a few percent of the call as the later stages drain at the end
/// (a 2 GiB tree on 128 DGX A100 boxes: -2.2% at the budget, -5.9% at an eighth of it), where
/// merging loops into larger chunks had been up to 56% long
/// (`a_long_pipeline_is_extrapolated_from_its_own_chunks`).
#[derive(Clone, Copy, Debug)]
struct Extrapolation {
    loops: u64,
    all: u64,
}

/// A call as NCCL runs it, independent of the system's calibrated figures: the choice, the
/// validated schedule of its channels, and what its network depends on ([`Model::plan`]).
pub struct Plan {
    choice: Choice,
    schedule: Schedule,
    posts: Posts,
    /// The share of a tree's modelled bandwidth NCCL's maintainers find it delivers.
    correction: f64,
    /// Where `schedule` holds only some of the call's loops: how to reach the whole call.
    extrapolation: Option<Extrapolation>,
}

impl Plan {
    /// A plan whose schedule has been validated for `collective` with `switches` relaying (the
    /// network [`Model::time`] builds places them by the same [`relays`]).
    fn validated(
        choice: Choice,
        collective: Collective,
        schedule: Schedule,
        switches: Vec<u32>,
        posts: Posts,
        correction: f64,
    ) -> Result<Plan, Error> {
        validate_with_relays(&schedule, &collective, &switches, 0x5eed)?;
        Ok(Plan {
            choice,
            schedule,
            posts,
            correction,
            extrapolation: None,
        })
    }

    /// What NCCL runs for the call.
    pub fn choice(&self) -> Choice {
        self.choice
    }
}

/// The switches that relay (and reduce) for an algorithm: each box's NVSwitch for NVLS and
/// NVLSTree, the rails' leaves too for CollNet Direct.
fn relays(algo: Algo, boxes: u32) -> SwitchRelays {
    match algo {
        Algo::CollNetDirect => SwitchRelays::BoxesAndRails,
        // NVLS across boxes sums the boxes in the network (SHARP).
        Algo::Nvls if boxes > 1 => SwitchRelays::BoxesAndRails,
        Algo::Nvls | Algo::NvlsTree => SwitchRelays::Boxes,
        _ => SwitchRelays::None,
    }
}

impl Model {
    pub fn new(system: &GpuSystem) -> Model {
        Model::with_allowed(system, Allowed::default())
    }

    pub fn with_allowed(system: &GpuSystem, allowed: Allowed) -> Model {
        let graphs = graph::search(system);
        let tables = tuning::tune(system, &graphs, &allowed.algos, &allowed.protos_on(system));
        let ring = graphs[Algo::Ring as usize].channels;
        let tree = graphs[Algo::Tree as usize].channels;
        let comm_channels = (2 * ring.min(tree)).clamp(1, MAX_CHANNELS);
        Model {
            system: system.clone(),
            graphs,
            tables,
            allowed,
            comm_channels,
            nvls: NvlsTuning::of(system),
            rings: channel_rings(system),
            p2p: P2pChannels::of(system, comm_channels),
            transfer_budget: TRANSFER_BUDGET,
        }
    }

    /// What NCCL picks for a call of `bytes` (nccl-tests' size) of `kind`.
    pub fn choose(&self, kind: CollectiveKind, bytes: u64) -> Result<Choice, Error> {
        if kind == CollectiveKind::AllToAll {
            // Point-to-point: NCCL's p2p plan, no tuning table.
            let send = self.p2p_send(bytes);
            return Ok(Choice {
                algo: Algo::Ring,
                proto: send.proto,
                channels: send.channels,
                threads: MAX_THREADS[send.proto as usize],
                estimate_us: 0.0,
            });
        }
        let func = Func::of(kind).ok_or_else(|| {
            Error::input(format!("NCCL has no {kind} collective (nccl-tests: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce)"))
        })?;
        let best = self.cheapest(func, bytes, |algo| self.runnable(algo, kind));
        let (estimate_us, algo, proto) = best.ok_or_else(|| {
            let collnet = self.allowed.algos[Algo::CollNetDirect as usize]
                || self.allowed.algos[Algo::CollNetChain as usize];
            let hint = if collnet && !(self.system.sharp && self.system.boxes > 1) {
                " (CollNet needs several boxes on a SHARP network: --sharp)"
            } else {
                ""
            };
            Error::input(format!(
                "no NCCL algorithm and protocol allowed by --nccl-algo/--nccl-proto runs {kind} on {}{hint}",
                self.system.name
            ))
        })?;
        let (channels, threads) = tuning::channels_and_threads(
            &self.system,
            self.comm_channels,
            self.nvls.channels,
            algo,
            proto,
            bytes,
        );
        Ok(Choice {
            algo,
            proto,
            channels,
            threads,
            estimate_us,
        })
    }

    /// NCCL's cost model's cheapest (time, algorithm, protocol) for `bytes` of `func` among the
    /// algorithms `among` admits.
    fn cheapest(
        &self,
        func: Func,
        bytes: u64,
        among: impl Fn(Algo) -> bool,
    ) -> Option<(f64, Algo, Proto)> {
        let mut best: Option<(f64, Algo, Proto)> = None;
        for algo in Algo::ALL.into_iter().filter(|&a| among(a)) {
            for proto in Proto::ALL {
                let time = tuning::algo_time(
                    &self.tables,
                    &self.system,
                    self.comm_channels,
                    func,
                    algo,
                    proto,
                    bytes,
                );
                if let Some(t) = time {
                    if best.is_none_or(|(b, _, _)| t < b) {
                        best = Some((t, algo, proto));
                    }
                }
            }
        }
        best
    }

    /// The algorithm NCCL would run for a call of `bytes` of `kind` when collsim does not model
    /// it (CollNet Chain), so that [`Model::choose`] runs NCCL's next choice instead;
    /// None when NCCL's choice is modelled.
    pub fn unmodelled_choice(&self, kind: CollectiveKind, bytes: u64) -> Option<Algo> {
        // (An all-to-all has no NCCL function: point-to-point sends, no choice.)
        let func = Func::of(kind)?;
        self.cheapest(func, bytes, |_| true)
            .map(|(_, algo, _)| algo)
            .filter(|&algo| !self.runnable(algo, kind))
    }

    /// Whether collsim models the algorithm's execution for `kind`: CollNet Direct for
    /// all-reduce, all-gather and reduce-scatter, NVLS across boxes (with SHARP) for all-reduce
    /// only, PAT for all-gather and reduce-scatter, not CollNet Chain (NCCL's own disable rules
    /// are applied in [`tuning::tune`]).
    fn runnable(&self, algo: Algo, kind: CollectiveKind) -> bool {
        match algo {
            Algo::CollNetDirect => matches!(
                kind,
                CollectiveKind::AllReduce
                    | CollectiveKind::AllGather
                    | CollectiveKind::ReduceScatter
            ),
            Algo::Nvls if self.system.boxes > 1 => kind == CollectiveKind::AllReduce,
            Algo::Pat => matches!(
                kind,
                CollectiveKind::AllGather | CollectiveKind::ReduceScatter
            ),
            Algo::CollNetChain => false,
            _ => true,
        }
    }

    /// Runs one call of `bytes` of `kind` as NCCL would (or as forced), launched as `launch` says.
    pub fn predict(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        root: u32,
        launch: Launch,
    ) -> Result<Prediction, Error> {
        let plan = self.plan(kind, bytes, root, launch)?;
        self.time(&plan, launch)
    }

    /// What NCCL runs for the call and its validated schedule, before any network: it depends on
    /// the system's shape, not on its calibrated figures, so a fit plans each call once and times
    /// it under every candidate calibration ([`Model::time`]).
    pub fn plan(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        root: u32,
        launch: Launch,
    ) -> Result<Plan, Error> {
        if let Some(algorithm) = self.msccl(kind, bytes, launch) {
            return self.plan_msccl(algorithm, kind, bytes);
        }
        let choice = self.choose(kind, bytes)?;
        let n = self.system.gpus();
        let npus: Vec<u32> = (0..n).collect();
        let pipelined = matches!(kernel_of(kind, choice.algo), Kernel::Tree | Kernel::Chain);
        let whole = self.cut(kind, bytes, choice, None);
        let cut = self.cut(kind, bytes, choice, Some(self.transfer_budget));
        // A tree's or chain's loops are not merged: it runs as many loops of its own chunks as
        // the budget holds (whole chunks of LL's and LL128's trips, at least two) and the call is
        // extrapolated from them.
        let per_chunk = whole.loops_per_chunk.max(1);
        let budgeted = cut.loops / per_chunk * per_chunk;
        let split = pipelined && whole.loops > cut.loops && budgeted >= 2 * per_chunk;
        let (cut, simulated, extrapolation) = if split {
            let extrapolation = Extrapolation {
                loops: budgeted as u64,
                all: whole.loops as u64,
            };
            let part = bytes / extrapolation.all * extrapolation.loops;
            (
                Cut {
                    loops: budgeted,
                    ..whole
                },
                part,
                Some(extrapolation),
            )
        } else {
            (cut, bytes, None)
        };
        let p2p = (kind == CollectiveKind::AllToAll).then(|| self.p2p_send(bytes));
        let chunks = match p2p {
            Some(send) => self.p2p_chunks(simulated, send),
            None => cut.chunks(),
        };
        let per_buffer = match kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => chunks as u64,
            _ => n as u64 * chunks as u64,
        };
        // A call smaller than one byte a piece is simulated at that size (latency-bound), and
        // its slices hold what its pieces then carry.
        let size = simulated.max(per_buffer);
        let posts = match p2p {
            // Each peer's send posts per chunk on each of its channels; a GPU's link carries
            // the channels of the peers in its box.
            Some(send) => Posts {
                slice_bytes: send.chunk,
                channels: (self.system.gpus_per_box.min(n) - 1).max(1) * send.channels,
                point_to_point: true,
            },
            None => {
                // The largest piece a send carries (a tree's send carries every rank's share of
                // a chunk; NVLS's scatter posts one chunk of every head at once).
                let per_send = match choice.algo {
                    Algo::Tree | Algo::Nvls | Algo::NvlsTree => per_buffer / n as u64,
                    _ => per_buffer,
                };
                Posts {
                    slice_bytes: size.div_ceil(per_send.max(1)).max(1),
                    channels: cut.channels,
                    point_to_point: false,
                }
            }
        };
        // (Point-to-point sends have no NCCL function and no correction.)
        let correction = Func::of(kind).map_or(1.0, |func| {
            tuning::tree_correction(&self.system, func, choice.algo, choice.proto, bytes)
        });
        let switches = self
            .system
            .reducing_switches(relays(choice.algo, self.system.boxes));
        let root = kind.is_rooted().then_some(root);
        let collective = Collective::new(kind, npus, size, chunks, root)?;
        let schedule = self.kernel(&collective, choice, cut, &switches)?;
        let mut plan = Plan::validated(choice, collective, schedule, switches, posts, correction)?;
        plan.extrapolation = extrapolation;
        Ok(plan)
    }

    /// Simulates a planned call on the system's network as this model's figures give it and
    /// adds the call's fixed cost.
    pub fn time(&self, plan: &Plan, launch: Launch) -> Result<Prediction, Error> {
        let topology = self.network(plan.choice, plan.posts, plan.correction)?;
        let result = simulate(&topology, &plan.schedule, &SimOptions::default(), &mut ())?;
        let mut finish = result.finish;
        if let Some(e) = plan.extrapolation {
            let busiest = result.link_busy.iter().max().copied().unwrap_or(Time::ZERO);
            let period = busiest.0 as f64 / e.loops as f64;
            finish = finish + Time::from_ps((period * (e.all - e.loops) as f64).round() as u64);
        }
        let fixed = self.fixed_cost_us(plan.choice, launch);
        Ok(Prediction {
            choice: plan.choice,
            time: finish + Time::from_ps((fixed * 1e6).round() as u64),
            transfers: plan.schedule.len(),
        })
    }

    /// RCCL's MSCCL algorithm for the call where RCCL runs one ([`msccl::find`]), left to its
    /// defaults: with an algorithm or protocol forced (NCCL_ALGO / NCCL_PROTO) collsim runs
    /// RCCL's rings and trees, as RCCL_MSCCL_ENABLE=0 would.
    fn msccl(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        launch: Launch,
    ) -> Option<&'static msccl::Algorithm> {
        if self.allowed != Allowed::default() || launch.average {
            return None;
        }
        msccl::find(&self.system, kind, bytes, launch.element_bytes)
    }

    /// Runs a call as RCCL's MSCCL algorithm: each pair of GPUs exchanges its blocks directly
    /// on the algorithm's channels (all-reduce: the all-pairs reduce-scatter, then the
    /// all-gather of the sums), at the protocol's share of the link and RCCL's step latency on
    /// xGMI, each Simple channel posting its pieces as a ring's slices.
    fn plan_msccl(
        &self,
        algorithm: &msccl::Algorithm,
        kind: CollectiveKind,
        bytes: u64,
    ) -> Result<Plan, Error> {
        let n = self.system.gpus();
        let proto = algorithm.proto;
        let channels = algorithm.channels;
        let choice = Choice {
            algo: Algo::Msccl,
            proto,
            channels,
            threads: MAX_THREADS[proto as usize],
            estimate_us: 0.0,
        };
        // Pieces a peer's part is cut in: all-reduce one a channel; all-to-all the file's
        // chunks a loop over the ranks, spread over the channels.
        let per_part = match kind {
            CollectiveKind::AllToAll => (algorithm.chunks_per_loop / n as u64).max(1) as u32,
            _ => channels,
        };
        // A piece for one peer, at most one step of the protocol's buffer.
        let pieces = n as u64 * per_part as u64;
        let piece = bytes.div_ceil(pieces).max(1);
        // A GPU's links carry its channels to every peer at once.
        let posts = Posts {
            slice_bytes: piece.min(step_data_bytes(proto as usize)),
            channels: (n - 1) * channels,
            point_to_point: false,
        };
        let switches = self
            .system
            .reducing_switches(relays(choice.algo, self.system.boxes));
        let collective =
            Collective::new(kind, (0..n).collect(), bytes.max(pieces), per_part, None)?;
        let schedule = match kind {
            CollectiveKind::AllToAll => nccl_kernels::all_to_all(&collective, channels)?,
            _ => nccl_kernels::all_pairs_all_reduce(&collective)?,
        };
        Plan::validated(choice, collective, schedule, switches, posts, 1.0)
    }

    /// The call's fixed cost outside the simulated traffic, us: NCCL's base latency of the
    /// algorithm and protocol, the kernel launch, and the launches of the other GPUs a thread
    /// drives before the last one starts.
    fn fixed_cost_us(&self, choice: Choice, launch: Launch) -> f64 {
        let (a, p) = (choice.algo as usize, choice.proto as usize);
        let base = match choice.algo {
            // NVLS's latency in NCCL's model is a fixed cost of the call.
            Algo::Nvls | Algo::NvlsTree => HW_LATENCY[HW_NVLINK][a][p],
            // Not in the tuner's tables: the launch and fixed overhead alone.
            Algo::Msccl => 0.0,
            _ => tuning::base_latency(&self.system, choice.algo, choice.proto),
        };
        // NCCL's model adds a step a rank to PAT's base latency: its kernel takes the parts one
        // at a time whatever the network does.
        let steps = if choice.algo == Algo::Pat {
            self.system.gpus() as f64 * PAT_RANK_LATENCY_US
        } else {
            0.0
        };
        let others = launch.gpus_per_thread.saturating_sub(1) as f64;
        let fixed = self
            .system
            .calibration
            .fixed_us
            .unwrap_or(FIXED_OVERHEAD_US);
        base + steps + fixed + others * LAUNCH_US
    }

    /// How each send of an all-to-all of `bytes` per rank runs (NCCL's p2p plan).
    fn p2p_send(&self, bytes: u64) -> P2pSend {
        let per_pair = bytes / self.system.gpus().max(1) as u64;
        // Without LL in NCCL_PROTO the connections have no LL buffers; Simple's are always there.
        let ll = self.allowed.protos[Proto::LL as usize];
        self.p2p.send(per_pair, ll)
    }

    /// Pieces per pair of an all-to-all of `bytes` per rank: the send's channels, each cut in
    /// its steps' chunks (fewer, larger pieces beyond the transfer budget).
    fn p2p_chunks(&self, bytes: u64, send: P2pSend) -> u32 {
        let n = self.system.gpus() as u64;
        let per_pair = (bytes / n.max(1)).max(1);
        let channels = (send.channels as u64).min(per_pair);
        let per_channel = send.part.div_ceil(send.chunk.max(1)).max(1);
        let budget = (P2P_TRANSFER_BUDGET / (n * n * channels)).max(1);
        (channels * per_channel.min(budget)).min(per_pair) as u32
    }

    /// The schedule of the chosen algorithm.
    fn kernel(
        &self,
        c: &Collective,
        choice: Choice,
        cut: Cut,
        switches: &[u32],
    ) -> Result<Schedule, Error> {
        let g = self.system.gpus_per_box;
        match kernel_of(c.kind, choice.algo) {
            Kernel::AllToAll => nccl_kernels::all_to_all(c, choice.channels),
            Kernel::Chain => nccl_kernels::chain(c, &self.rings, cut, g),
            Kernel::Nvls => {
                let across = if choice.algo == Algo::Nvls {
                    Across::Network
                } else {
                    Across::Tree
                };
                nccl_kernels::nvls(c, g, switches, cut, across)
            }
            // The rails' leaves come after the boxes' switches.
            Kernel::CollNet => {
                let leaves = switches.len() - self.system.rails() as usize;
                nccl_kernels::collnet_direct(c, g, &switches[leaves..], cut)
            }
            Kernel::Tree => {
                let mesh = self.system.intra == Intra::FullMesh;
                nccl_kernels::tree_all_reduce(c, g, cut, self.comm_channels, mesh)
            }
            Kernel::Ring => nccl_kernels::ring(c, &self.rings, cut),
            Kernel::Pat => nccl_kernels::pat(c, cut),
        }
    }
}

#[cfg(test)]
mod tests;
