//! Baseline collective algorithms. Each is a producer of the schedule IR: it reads the topology and
//! the collective and returns a [`Schedule`] that claims that collective.

mod accl;
mod blink;
mod boxes;
pub(crate) mod builder;
mod ccube;
mod collectives;
mod dbt;
pub(crate) mod direct;
pub mod forestcoll;
mod hamiltonian;
mod hdrm;
mod hierarchical;
mod multitree;
pub mod nccl_kernels;
mod nccl_ring;
mod nccl_tree;
mod phases;
mod rhd;
mod ring;
mod themis;
mod tto;
mod two_step_tree;

pub(crate) use nccl_ring::channel_rings as nccl_channel_rings;
pub(crate) use nccl_ring::graph_rings as nccl_graph_rings;
pub(crate) use nccl_ring::mesh_channel_rings as nccl_mesh_channel_rings;
pub use phases::{DimAlgorithm, IntraDimension};

use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Schedule;
use crate::synth::Method;
use crate::topology::Topology;
use crate::Error;

/// The algorithms collsim can generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Ring,
    Direct,
    /// Direct with NPU `i` sending to `i+1`, `i+2`, ... (no destination is everyone's first).
    DirectStaggered,
    Rhd,
    Dbt,
    Hierarchical,
    Themis,
    /// TACOS greedy link-chunk matching.
    Tacos,
    /// TACOS's integer program over the time-expanded network.
    TacosIlp,
    /// The same program ignoring link congestion (the TACOS paper's TACCL proxy).
    TacclLike,
    ForestColl,
    /// EFLOPS's halving-doubling with rank mapping, on a BiGraph.
    Hdrm,
    /// ACCL's hybrid all-reduce for boxes of GPUs.
    AcclHybrid,
    /// NCCL's rings, one per channel, spread over the boxes' NICs.
    NcclRing,
    /// NCCL's double binary tree across boxes, chains inside them.
    NcclTree,
    /// The NCCL note's two-step tree broadcast (first copy to the farthest participant).
    TwoStepTree,
    /// MultiTree's height-balanced spanning trees from every NPU, built together step by step.
    MultiTree,
    /// C-Cube's two link-disjoint binary trees on a DGX-1, reducing and broadcasting at once.
    CCube,
    /// Blink's spanning trees packed from one root, reducing up and broadcasting down.
    Blink,
    /// TTO: three trees from edge NPUs of a 2-D mesh, reducing up and broadcasting down.
    Tto,
}

impl Algorithm {
    pub const ALL: [Algorithm; 20] = [
        Algorithm::Ring,
        Algorithm::Direct,
        Algorithm::DirectStaggered,
        Algorithm::Rhd,
        Algorithm::Dbt,
        Algorithm::Hierarchical,
        Algorithm::Themis,
        Algorithm::Tacos,
        Algorithm::TacosIlp,
        Algorithm::TacclLike,
        Algorithm::ForestColl,
        Algorithm::Hdrm,
        Algorithm::AcclHybrid,
        Algorithm::NcclRing,
        Algorithm::NcclTree,
        Algorithm::TwoStepTree,
        Algorithm::MultiTree,
        Algorithm::CCube,
        Algorithm::Blink,
        Algorithm::Tto,
    ];

    pub fn parse(text: &str) -> Result<Algorithm, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == text.to_ascii_lowercase())
            .ok_or_else(|| {
                Error::input(format!(
                    "unknown algorithm '{text}': expected one of ring, direct, direct-staggered, rhd, \
                     dbt, hierarchical, themis, tacos, tacos-ilp, taccl-like, forestcoll, hdrm, \
                     accl-hybrid, nccl-ring, nccl-tree, two-step-tree, multitree, c-cube, blink, tto"
                ))
            })
    }

    /// True when the algorithm has a form for `kind`.
    pub fn supports(self, kind: CollectiveKind) -> bool {
        use CollectiveKind::*;
        match self {
            Algorithm::Direct
            | Algorithm::DirectStaggered
            | Algorithm::Tacos
            | Algorithm::TacosIlp
            | Algorithm::TacclLike => true,
            Algorithm::Ring | Algorithm::ForestColl => {
                matches!(
                    kind,
                    AllReduce | AllGather | ReduceScatter | Broadcast | Reduce
                )
            }
            Algorithm::Rhd
            | Algorithm::Hierarchical
            | Algorithm::Themis
            | Algorithm::NcclRing
            | Algorithm::MultiTree => {
                matches!(kind, AllReduce | AllGather | ReduceScatter)
            }
            Algorithm::Dbt => matches!(kind, AllReduce | Broadcast | Reduce),
            Algorithm::Hdrm
            | Algorithm::AcclHybrid
            | Algorithm::NcclTree
            | Algorithm::CCube
            | Algorithm::Blink
            | Algorithm::Tto => kind == AllReduce,
            Algorithm::TwoStepTree => kind == Broadcast,
        }
    }

    /// The refusal of an algorithm that has no form for `kind`, naming those that have one.
    pub fn refusal(self, kind: CollectiveKind) -> Error {
        let able: Vec<&str> = Algorithm::ALL
            .into_iter()
            .filter(|a| a.supports(kind))
            .map(Algorithm::name)
            .collect();
        Error::input(format!(
            "{} has no {kind} form; algorithms with one: {}",
            self.name(),
            able.join(", ")
        ))
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::DirectStaggered => "direct-staggered",
            Algorithm::Rhd => "rhd",
            Algorithm::Dbt => "dbt",
            Algorithm::Hierarchical => "hierarchical",
            Algorithm::Themis => "themis",
            Algorithm::Tacos => "tacos",
            Algorithm::TacosIlp => "tacos-ilp",
            Algorithm::TacclLike => "taccl-like",
            Algorithm::ForestColl => "forestcoll",
            Algorithm::Hdrm => "hdrm",
            Algorithm::AcclHybrid => "accl-hybrid",
            Algorithm::NcclRing => "nccl-ring",
            Algorithm::NcclTree => "nccl-tree",
            Algorithm::TwoStepTree => "two-step-tree",
            Algorithm::MultiTree => "multitree",
            Algorithm::CCube => "c-cube",
            Algorithm::Blink => "blink",
            Algorithm::Tto => "tto",
        }
    }

    /// For the algorithms the synthesizer produces (run by the experiment layer, not
    /// [`generate`]), how it plans them.
    pub fn synthesis(self) -> Option<Method> {
        match self {
            Algorithm::Tacos => Some(Method::Greedy),
            Algorithm::TacosIlp => Some(Method::Ilp),
            Algorithm::TacclLike => Some(Method::TacclLike),
            _ => None,
        }
    }

    /// Whether the algorithm's stages overlap on different chunks (trees, NCCL's channels,
    /// ACCL's phases, one dimension after another), so that one chunk per NPU leaves most
    /// stages idle (a100_2x8 all-reduce 1 GB: nccl-tree 0.112 of the bound at one chunk, 0.570
    /// at 16; accl-hybrid 0.223 and 0.812). Ring, direct and halving-doubling exchange whole
    /// blocks per step and gain nothing from cutting them; ForestColl and the synthesizer
    /// choose their own pieces.
    pub fn pipelines_chunks(self) -> bool {
        matches!(
            self,
            Algorithm::Dbt
                | Algorithm::NcclRing
                | Algorithm::NcclTree
                | Algorithm::AcclHybrid
                | Algorithm::TwoStepTree
                | Algorithm::Hierarchical
                | Algorithm::Themis
                | Algorithm::CCube
                | Algorithm::Blink
                | Algorithm::Tto
        )
    }

    /// Chunks per NPU when `--chunks` is not given: 1, or for the algorithms that pipeline
    /// ([`Algorithm::pipelines_chunks`]) as many as keep each piece at least NCCL's pipeline step
    /// (its 4 MiB `DEFAULT_BUFFSIZE`, src/init.cc, over `NCCL_STEPS` = 8 slots,
    /// src/include/device.h: 512 KiB), up to
    /// [`MAX_DEFAULT_CHUNKS`], a power of two; Themis and hierarchical at least 4.
    pub fn default_chunks(self, kind: CollectiveKind, ranks: u32, size: u64) -> u32 {
        if !self.pipelines_chunks() {
            return 1;
        }
        let per_npu = match kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => size,
            _ => size / ranks.max(1) as u64,
        };
        let fit = (per_npu / PIPELINE_STEP_BYTES).clamp(1, MAX_DEFAULT_CHUNKS as u64) as u32;
        let least = match self {
            // Chunks are what Themis balances over the dimensions (one chunk keeps all but one
            // idle: torus 4x4 all-reduce 1 MB, 0.488 of the bound at 1 chunk, 1.000 at 4); the
            // TACOS paper runs it with 4 chunks where latency counts (Sec. VII-B3).
            Algorithm::Themis | Algorithm::Hierarchical => 4,
            _ => 1,
        };
        (1 << fit.ilog2()).max(least)
    }
}

/// NCCL's pipeline step: the default 4 MiB channel buffer (NCCL_BUFFSIZE) over its NCCL_STEPS
/// = 8 slots; pieces smaller than this pay their per-message latency for nothing.
pub const PIPELINE_STEP_BYTES: u64 = 512 << 10;

/// The most chunks per NPU a default gives: past 16 the pipeline's fill is within a few percent
/// and the schedule only grows (a100_2x8 nccl-ring all-reduce 1 GB: 0.611 of the bound at 16,
/// 0.614 at 64).
pub const MAX_DEFAULT_CHUNKS: u32 = 16;

/// How the multi-dimensional algorithms (hierarchical, Themis) run each dimension and share the
/// dimensions among chunks: collsim's defaults, or an ASTRA-sim system file's settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MultiDimOptions {
    /// Basic algorithm of each dimension per collective (ASTRA-sim's `*-implementation` lists);
    /// a collective without a list uses ring on rings, switches and mesh lines and direct on fully
    /// connected dimensions.
    pub implementations: Vec<(CollectiveKind, Vec<DimAlgorithm>)>,
    /// Order of dimensions per chunk: None keeps each algorithm's own (hierarchical ascending,
    /// Themis by load); `Some(true)` forces Themis's, `Some(false)` ascending.
    pub themis_order: Option<bool>,
    /// Which waiting chunk a dimension serves next. None: FIFO for hierarchical, smallest chunk
    /// first for Themis.
    pub intra_dimension: Option<IntraDimension>,
    /// Chunks a dimension works on at once. None: unlimited for hierarchical; for Themis the
    /// limit under which its offline model of the dimensions finishes first.
    pub active_chunks: Option<u32>,
}

impl MultiDimOptions {
    /// Sets an active-chunk limit and an intra-dimension policy given by name (from flags or
    /// files); the error names the setting at fault (`active_chunks`, `intra_dimension`).
    pub fn apply(
        &mut self,
        active_chunks: Option<u32>,
        intra_dimension: Option<&str>,
    ) -> Result<(), (&'static str, String)> {
        if let Some(a) = active_chunks {
            if a == 0 {
                return Err(("active_chunks", "must be at least 1".into()));
            }
            self.active_chunks = Some(a);
        }
        if let Some(name) = intra_dimension {
            self.intra_dimension =
                Some(IntraDimension::named(name).map_err(|e| ("intra_dimension", e))?);
        }
        Ok(())
    }

    /// The per-dimension algorithms given for `kind`, if any.
    pub fn implementation(&self, kind: CollectiveKind) -> Option<&[DimAlgorithm]> {
        self.implementations
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, list)| list.as_slice())
    }
}

/// Generates the schedule of `algorithm` for `collective` on `topology` with collsim's default
/// settings. The schedule claims the collective (possibly cut into finer pieces than the user's
/// chunks, which validation accounts for).
pub fn generate(
    algorithm: Algorithm,
    topology: &Topology,
    collective: &Collective,
) -> Result<Schedule, Error> {
    generate_with(algorithm, topology, collective, &MultiDimOptions::default())
}

/// Like [`generate`], with the multi-dimensional algorithms configured by `options`.
pub fn generate_with(
    algorithm: Algorithm,
    topology: &Topology,
    collective: &Collective,
    options: &MultiDimOptions,
) -> Result<Schedule, Error> {
    if !algorithm.supports(collective.kind) {
        return Err(algorithm.refusal(collective.kind));
    }
    match algorithm {
        Algorithm::Ring => ring::generate(collective, topology.is_bidirectional()),
        Algorithm::Direct => direct::generate(collective, false),
        Algorithm::DirectStaggered => direct::generate(collective, true),
        Algorithm::Rhd => rhd::generate(collective),
        Algorithm::Dbt => dbt::generate(collective),
        Algorithm::Hdrm => hdrm::generate(topology, collective),
        Algorithm::AcclHybrid => accl::generate(topology, collective),
        Algorithm::NcclRing => nccl_ring::generate(topology, collective),
        Algorithm::NcclTree => nccl_tree::generate(topology, collective),
        Algorithm::TwoStepTree => two_step_tree::generate(topology, collective),
        Algorithm::MultiTree => multitree::generate(topology, collective),
        Algorithm::CCube => ccube::generate(topology, collective),
        Algorithm::Blink => blink::generate(topology, collective),
        Algorithm::Tto => tto::generate(topology, collective),
        Algorithm::Hierarchical => hierarchical::generate(topology, collective, options, false),
        Algorithm::Themis => hierarchical::generate(topology, collective, options, true),
        Algorithm::ForestColl => {
            forestcoll::produce(topology, collective, None, Some(collective.chunks)).map(|p| p.0)
        }
        // The synthesizer is a producer of its own (crate::synth), run by the experiment layer.
        Algorithm::Tacos | Algorithm::TacosIlp | Algorithm::TacclLike => {
            Err(Error::input(format!(
                "{} is synthesized, not generated: use `collsim synthesize` or `--algorithm {}`",
                algorithm.name(),
                algorithm.name()
            )))
        }
    }
}

/// What the producers' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use crate::collective::{Collective, CollectiveKind};
    use crate::schedule::{validate, Schedule};
    use crate::sim::{simulate, SimOptions};
    use crate::topology::{Topology, TopologyOptions};

    /// `spec` with every link at `bandwidth` and `latency`, and an all-reduce of 1 GiB over
    /// all its NPUs at `chunks` per NPU.
    pub fn all_reduce_on(
        spec: &str,
        bandwidth: &str,
        latency: &str,
        chunks: u32,
    ) -> (Topology, Collective) {
        let t = TopologyOptions::new(spec)
            .with_links(bandwidth, latency)
            .build()
            .unwrap();
        let c = Collective::new(
            CollectiveKind::AllReduce,
            t.active_npus(),
            1 << 30,
            chunks,
            None,
        )
        .unwrap();
        (t, c)
    }

    /// The DGX-1 of the TACOS paper's Fig. 17(b) (25 GB/s, 0.7 us a link) with that all-reduce.
    pub fn dgx1_all_reduce(chunks: u32) -> (Topology, Collective) {
        all_reduce_on("dgx1", "25GB/s", "0.7us", chunks)
    }

    /// Validates `s` against the collective it claims and returns its simulated time in ps.
    pub fn validated_ps(t: &Topology, s: &Schedule) -> f64 {
        validate(s, s.collective.as_ref().unwrap(), 1).unwrap();
        simulate(t, s, &SimOptions::default(), &mut ())
            .unwrap()
            .finish
            .ps() as f64
    }
}
