//! Language-model training on a GPU fabric: a model and a Megatron-style parallel layout become
//! the per-rank programs of one iteration ([`pipeline`]), every collective and message of which
//! runs on the congestion-aware engine with the chosen algorithm; compute comes from a roofline
//! of each GPU ([`compute`]). Reports step time, model FLOP/s per GPU, the pipeline bubble and
//! the communication exposed per parallel dimension.

pub mod compute;
pub mod model;
pub mod pipeline;
mod sharded;

pub use compute::{Attention, Gpu};
pub use model::{LlmModel, Recompute};

use std::collections::HashMap;
use std::sync::Mutex;

use crate::collective::CollectiveKind;
use crate::nccl::{self, Launch};
use crate::topology::{GpuSystem, NodeId, Topology};
use crate::units::Time;
use crate::workload::{program, Execution, SoloTimer, TrainOptions};
use crate::Error;

/// Times collectives inside one box of a GPU system, among all its GPUs, or along a rail (the
/// same GPU of several boxes) as the NCCL model predicts them (NCCL's algorithm, protocol and
/// channels, on the links at NCCL's rates, with its launch and base latencies): the
/// tensor-parallel group's collectives, alone on the box's NVLinks, and the data-parallel
/// group's when nothing else uses its links.
#[derive(Debug)]
pub struct NcclTimer {
    /// One box of the system, and the whole system (for groups of every GPU).
    system: GpuSystem,
    whole: GpuSystem,
    /// Per kind of group (its size in a box, the whole system, a rail of boxes), the NCCL
    /// model, and the times it predicted (groups of a kind differ only in which GPUs they hold).
    models: Mutex<HashMap<u32, nccl::Model>>,
    predicted: Mutex<HashMap<(u32, CollectiveKind, u64), Time>>,
}

impl NcclTimer {
    /// A timer for `system`'s boxes; None when the topology names no GPU system.
    pub fn for_topology(spec: &str) -> Result<Option<NcclTimer>, Error> {
        Ok(GpuSystem::parse(spec)?.map(|whole| {
            let mut system = whole.clone();
            system.boxes = 1;
            NcclTimer {
                system,
                whole,
                models: Mutex::new(HashMap::new()),
                predicted: Mutex::new(HashMap::new()),
            }
        }))
    }
}

impl SoloTimer for NcclTimer {
    fn time(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        npus: &[NodeId],
    ) -> Result<Option<Time>, Error> {
        let g = self.system.gpus_per_box;
        let n = npus.len() as u32;
        let one_box = npus.iter().all(|&x| x / g == npus[0] / g);
        let everyone = n == self.whole.gpus() && self.whole.boxes > 1;
        // One GPU a box, each the same one of its box: a rail, joined by the GPUs' own NICs.
        let mut boxes: Vec<u32> = npus.iter().map(|&x| x / g).collect();
        boxes.dedup();
        let rail = boxes.len() == npus.len() && npus.iter().all(|&x| x % g == npus[0] % g);
        if !(one_box || everyone || rail) || n < 2 {
            return Ok(None);
        }
        let key = if one_box {
            n
        } else if everyone {
            u32::MAX
        } else {
            u32::MAX - n
        };
        let known = self
            .predicted
            .lock()
            .expect("no panics while the lock is held");
        if let Some(&time) = known.get(&(key, kind, bytes)) {
            return Ok(Some(time));
        }
        drop(known);
        let mut models = self
            .models
            .lock()
            .expect("no panics while the lock is held");
        let model = match models.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) if everyone => {
                e.insert(nccl::Model::new(&self.whole))
            }
            std::collections::hash_map::Entry::Vacant(e) if !one_box => {
                let mut system = self.whole.clone();
                system.boxes = n;
                system.nics_per_box = (system.nics_per_box / system.gpus_per_box).max(1);
                system.gpus_per_box = 1;
                e.insert(nccl::Model::new(&system))
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut system = self.system.clone();
                system.use_first_gpus(n)?;
                e.insert(nccl::Model::new(&system))
            }
        };
        let time = model.predict(kind, bytes, 0, Launch::default())?.time;
        self.predicted
            .lock()
            .expect("no panics while the lock is held")
            .insert((key, kind, bytes), time);
        Ok(Some(time))
    }
}

/// ZeRO's partitioning of the optimizer state over the data-parallel group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroStage {
    None,
    /// Optimizer state sharded (Megatron's distributed optimizer): gradients reduce-scattered,
    /// weights all-gathered after the step.
    Optimizer,
    /// Gradients sharded as well (the same communication, less memory).
    Gradients,
    /// Weights sharded too (ZeRO-3, FSDP): each layer's weights all-gathered before its
    /// forward and again before its backward, its gradients reduce-scattered after it, every
    /// micro-batch.
    Parameters,
}

impl ZeroStage {
    /// The stage's number.
    pub fn level(self) -> u8 {
        match self {
            ZeroStage::None => 0,
            ZeroStage::Optimizer => 1,
            ZeroStage::Gradients => 2,
            ZeroStage::Parameters => 3,
        }
    }

    pub fn parse(level: u8) -> Result<ZeroStage, Error> {
        match level {
            0 => Ok(ZeroStage::None),
            1 => Ok(ZeroStage::Optimizer),
            2 => Ok(ZeroStage::Gradients),
            3 => Ok(ZeroStage::Parameters),
            _ => Err(Error::input(format!(
                "--zero {level}: expected 0, 1, 2 or 3"
            ))),
        }
    }
}

/// A parallel layout and the batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    /// Expert parallelism, carved out of the data-parallel group.
    pub ep: u64,
    /// Context parallelism: each sequence split over this many ranks (between tensor and data
    /// parallelism in the rank order, Megatron's tp-cp-dp-pp).
    pub cp: u64,
    pub virtual_stages: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    pub zero: ZeroStage,
    pub recompute: Recompute,
    pub sequence_parallel: bool,
    pub attention: Attention,
    /// Gradient buckets reduced while the last backward pass runs (Megatron-core's
    /// overlap_grad_reduce), or all gradients in one call after it (Megatron-LM 2021).
    pub overlap_grad_reduce: bool,
    /// Each micro-batch's weight gradients summed inside the weight-gradient product
    /// (Megatron-core's gradient_accumulation_fusion), or by a kernel of their own after it
    /// (PyTorch autograd's accumulation: Megatron-LM 2021, DDP, FSDP).
    pub fused_grad_accumulation: bool,
    /// FP16 training (loss scaling: the optimizer unscales the gradients and checks them for
    /// overflow) rather than BF16.
    pub fp16: bool,
    /// BF16 training's gradients accumulated and reduced in BF16 (Megatron's
    /// `--grad-reduce-in-bf16`) rather than FP32.
    pub grad_reduce_in_bf16: bool,
    /// Megatron's scatter/gather between pipeline stages: each tensor rank sends its share of
    /// the activations and the next stage all-gathers them in its tensor group, instead of every
    /// tensor rank sending them whole (`--no-scatter-gather-tensors-in-pipeline`).
    pub scatter_gather: bool,
    /// Which GPU each rank runs on.
    pub placement: Placement,
    /// Layers of the first and the last pipeline stage when they differ from the others'
    /// (Megatron's uneven split); None: every stage the same.
    pub first_stage_layers: Option<u64>,
    pub last_stage_layers: Option<u64>,
    /// The embedding and the loss each counted as a layer when the layers are split over the
    /// pipeline's chunks, so that the first chunk of the first stage and the last chunk of the
    /// last stage hold one layer fewer (Megatron-core's
    /// `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`).
    pub embedding_in_split: bool,
    pub loss_in_split: bool,
}

/// The order in which the parallel dimensions fill the GPUs, the first fastest: Megatron's
/// `tp-dp-pp` puts a tensor group on consecutive GPUs (one box), then data-parallel peers,
/// then stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Positions of tensor, data and pipeline in the order (0 fastest).
    order: [Dim; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dim {
    Tensor,
    Data,
    Pipeline,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            order: [Dim::Tensor, Dim::Data, Dim::Pipeline],
        }
    }
}

impl Placement {
    /// Reads `tp,dp,pp` (any order of the three).
    pub fn parse(text: &str) -> Result<Placement, Error> {
        let bad = || {
            Error::input(format!(
                "--placement '{text}': expected tp, dp and pp in some order, the fastest first \
                 (e.g. tp,dp,pp)"
            ))
        };
        let mut order = Vec::new();
        for word in text.split([',', '-']).map(str::trim) {
            let dim = match word {
                "tp" => Dim::Tensor,
                "dp" => Dim::Data,
                "pp" => Dim::Pipeline,
                _ => return Err(bad()),
            };
            if order.contains(&dim) {
                return Err(bad());
            }
            order.push(dim);
        }
        let order: [Dim; 3] = order.try_into().map_err(|_| bad())?;
        Ok(Placement { order })
    }

    /// `tp,dp,pp`.
    pub fn name(&self) -> String {
        let word = |d: &Dim| match d {
            Dim::Tensor => "tp",
            Dim::Data => "dp",
            Dim::Pipeline => "pp",
        };
        self.order.iter().map(word).collect::<Vec<_>>().join(",")
    }

    /// The GPU of each rank (Megatron's rank numbering: t + T (d + D p)) among `gpus`.
    pub fn gpus_of_ranks(&self, layout: &Layout, gpus: &[NodeId]) -> Vec<NodeId> {
        let size = |d: Dim| match d {
            Dim::Tensor => layout.tp,
            Dim::Data => layout.replicas(),
            Dim::Pipeline => layout.pp,
        };
        (0..layout.gpus())
            .map(|r| {
                let (t, d, p) = (
                    r % layout.tp,
                    r / layout.tp % layout.replicas(),
                    r / (layout.tp * layout.replicas()),
                );
                let index = |dim: Dim| match dim {
                    Dim::Tensor => t,
                    Dim::Data => d,
                    Dim::Pipeline => p,
                };
                let mut position = 0;
                for &dim in self.order.iter().rev() {
                    position = position * size(dim) + index(dim);
                }
                gpus[position as usize]
            })
            .collect()
    }
}

impl Layout {
    /// Bytes the optimizer step moves a weight in this layout's precision.
    pub fn optimizer_bytes(&self) -> f64 {
        compute::optimizer_bytes(self.gradient_bytes() == 2, self.fp16)
    }

    /// Bytes of a weight's gradient as it is accumulated and reduced over the data-parallel
    /// group ([`compute::gradient_bytes`]).
    pub fn gradient_bytes(&self) -> u64 {
        compute::gradient_bytes(self.fp16, self.grad_reduce_in_bf16)
    }

    pub fn gpus(&self) -> u64 {
        // Saturating: absurd sizes from the command line compare unequal instead of wrapping.
        self.tp
            .saturating_mul(self.cp)
            .saturating_mul(self.dp)
            .saturating_mul(self.pp)
    }

    /// Ranks of one stage that hold the same weights: context x data parallel (Megatron
    /// reduces gradients over both).
    pub fn replicas(&self) -> u64 {
        self.cp * self.dp
    }

    /// Micro-batches each pipeline runs per iteration.
    pub fn micro_batches(&self) -> u64 {
        self.global_batch / (self.dp * self.micro_batch)
    }

    /// `t8 p8 d24 v2 b1`: a label for a figure.
    pub fn short(&self) -> String {
        let mut text = format!("t{} p{} d{}", self.tp, self.pp, self.dp);
        if self.cp > 1 {
            text += &format!(" c{}", self.cp);
        }
        if self.ep > 1 {
            text += &format!(" e{}", self.ep);
        }
        text + &format!(" v{} b{}", self.virtual_stages, self.micro_batch)
    }

    /// `TP 8 x PP 8 x DP 24, micro-batch 1 (96 a pipeline)`.
    pub fn describe(&self) -> String {
        let mut text = format!("TP {} x PP {} x DP {}", self.tp, self.pp, self.dp);
        if self.cp > 1 {
            text += &format!(" x CP {}", self.cp);
        }
        if self.ep > 1 {
            text += &format!(" (EP {})", self.ep);
        }
        if self.virtual_stages > 1 {
            text += &format!(", {} virtual stages", self.virtual_stages);
        }
        text += &format!(
            ", micro-batch {} ({} a pipeline)",
            self.micro_batch,
            self.micro_batches()
        );
        text
    }
}

/// A model, a GPU and a layout: one training configuration.
#[derive(Clone, Debug)]
pub struct Plan {
    pub model: LlmModel,
    pub gpu: Gpu,
    pub layout: Layout,
    /// Measured layer times replacing the GPU's roofline, when given.
    pub layer_times: Option<compute::LayerTimes>,
}

impl Plan {
    /// Refuses a layout Megatron would refuse, naming the constraint.
    pub fn check(&self, gpus: u64) -> Result<(), Error> {
        let (m, l) = (&self.model, &self.layout);
        let fail = |text: String| Err(Error::input(text));
        if l.gpus() != gpus {
            let cp = if l.cp > 1 {
                format!(" x --cp {}", l.cp)
            } else {
                String::new()
            };
            return fail(format!(
                "--tp {} x --pp {} x --dp {}{cp} = {} GPUs, but the topology has {gpus}",
                l.tp,
                l.pp,
                l.dp,
                l.gpus()
            ));
        }
        if l.cp > 1 && (m.seq % (2 * l.cp) != 0 || l.zero == ZeroStage::Parameters) {
            return fail(format!(
                "--cp {}: context parallelism splits each sequence into 2 x cp equal pieces (seq \
                 {} does not split so), and runs without --zero 3",
                l.cp, m.seq
            ));
        }
        if m.heads % l.tp != 0 || m.kv_heads % l.tp != 0 {
            return fail(format!(
                "--tp {}: {} has {} attention heads and {} key-value heads; tensor parallelism \
                 must divide both",
                l.tp, m.name, m.heads, m.kv_heads
            ));
        }
        if m.ffn % l.tp != 0 || m.vocab % l.tp != 0 {
            return fail(format!(
                "--tp {}: must divide the MLP width {} and the vocabulary {}",
                l.tp, m.ffn, m.vocab
            ));
        }
        if let Err(why) = self.chunk_split() {
            return fail(why);
        }
        if l.global_batch.saturating_mul(m.seq) > 1 << 40 {
            return fail(format!(
                "--global-batch {}: {} tokens an iteration is beyond the largest supported (2^40)",
                l.global_batch,
                l.global_batch.saturating_mul(m.seq)
            ));
        }
        if l.global_batch % (l.dp * l.micro_batch) != 0 {
            return fail(format!(
                "--global-batch {} is not a multiple of --dp {} x --micro-batch {}",
                l.global_batch, l.dp, l.micro_batch
            ));
        }
        if l.virtual_stages > 1 && (l.pp < 2 || l.micro_batches() % l.pp != 0) {
            return fail(format!(
                "--virtual-stages {}: the interleaved schedule needs --pp >= 2 and micro-batches \
                 ({}) a multiple of --pp {}",
                l.virtual_stages,
                l.micro_batches(),
                l.pp
            ));
        }
        if l.ep > 1 && (m.experts % l.ep != 0 || l.dp % l.ep != 0) {
            return fail(format!(
                "--ep {}: must divide the {} experts and --dp {}",
                l.ep, m.experts, l.dp
            ));
        }
        if l.zero == ZeroStage::Parameters && (l.pp > 1 || l.ep > 1) {
            return fail(format!(
                "--zero 3 with --pp {} --ep {}: parameter sharding runs without pipeline or \
                 expert parallelism (as DeepSpeed and FSDP do)",
                l.pp, l.ep
            ));
        }
        if l.ep > 1 && m.experts == 1 {
            return fail(format!("--ep {}: {} has no experts", l.ep, m.name));
        }
        if let Some(times) = &self.layer_times {
            times.get(l.tp, l.micro_batch)?;
        }
        let need = self.memory_per_gpu();
        if need > self.gpu.memory_bytes {
            return fail(format!(
                "{} with {} needs about {:.1} GB a GPU ({:.1} GB weights, gradients and \
                 optimizer state, {:.1} GB activations), more than the {}'s {:.0} GB: raise \
                 --tp/--pp, use --zero 1 or --recompute full, or lower --micro-batch",
                m.name,
                l.describe(),
                need / 1e9,
                self.state_bytes() / 1e9,
                self.activation_bytes() / 1e9,
                self.gpu.name,
                self.gpu.memory_bytes / 1e9
            ));
        }
        Ok(())
    }

    /// Layers of each pipeline stage: the same for all, or (Megatron's uneven split, as Llama 3
    /// 405B ran 126 layers on 16 stages: 7, 8 x 14, 7) the first and last stages' given counts
    /// and the rest split evenly over the others. Err names the constraint a split breaks.
    fn stage_split(&self) -> Result<Vec<u64>, String> {
        let (m, l) = (&self.model, &self.layout);
        let (pp, v) = (l.pp, l.virtual_stages);
        let (first, last) = (l.first_stage_layers, l.last_stage_layers);
        if first.is_none() && last.is_none() {
            if m.layers % (pp * v) != 0 {
                return Err(format!(
                    "{} layers cannot be split into --pp {pp} x --virtual-stages {v} equal \
                     chunks (give --first-stage-layers / --last-stage-layers for an uneven split)",
                    m.layers
                ));
            }
            return Ok(vec![m.layers / pp; pp as usize]);
        }
        if pp < 2 {
            return Err("--first-stage-layers / --last-stage-layers need --pp 2 or more".into());
        }
        let given = first.iter().count() as u64 + last.iter().count() as u64;
        let fixed = first.unwrap_or(0) + last.unwrap_or(0);
        let rest = m.layers.checked_sub(fixed).ok_or_else(|| {
            format!(
                "--first-stage-layers + --last-stage-layers exceed the {} layers",
                m.layers
            )
        })?;
        let others = pp - given;
        if others == 0 && rest != 0 {
            return Err(format!(
                "--first-stage-layers + --last-stage-layers leave {rest} of the {} layers on no \
                 stage (--pp 2)",
                m.layers
            ));
        }
        if others > 0 && rest % others != 0 {
            return Err(format!(
                "the {rest} layers left after --first-stage-layers / --last-stage-layers do not \
                 split evenly over the other {others} stages"
            ));
        }
        let even = rest.checked_div(others).unwrap_or(0);
        let mut stages = vec![even; pp as usize];
        if let Some(f) = first {
            stages[0] = f;
        }
        if let Some(n) = last {
            stages[pp as usize - 1] = n;
        }
        if let Some(s) = stages.iter().position(|&n| n == 0 || n % v != 0) {
            return Err(format!(
                "stage {s} would hold {} layers: every stage needs a whole number of layers for \
                 each of its --virtual-stages {v} chunks, at least one",
                stages[s]
            ));
        }
        Ok(stages)
    }

    /// Layers of each model chunk in model order (chunk `c x pp + s` is virtual chunk `c` of
    /// stage `s`): its stage's layers over the stage's chunks ([`Plan::stage_split`]), or, with
    /// the embedding and loss counted as layers, every chunk the same but the first and last
    /// one layer short. Err names the constraint a split breaks.
    fn chunk_split(&self) -> Result<Vec<u64>, String> {
        let (m, l) = (&self.model, &self.layout);
        let (pp, v) = (l.pp, l.virtual_stages);
        if !(l.embedding_in_split || l.loss_in_split) {
            let stages = self.stage_split()?;
            return Ok((0..pp * v).map(|j| stages[(j % pp) as usize] / v).collect());
        }
        if l.first_stage_layers.is_some() || l.last_stage_layers.is_some() {
            return Err(
                "--account-for-embedding/loss-in-pipeline-split and --first-stage-layers \
                 / --last-stage-layers are two ways to split unevenly: give one"
                    .into(),
            );
        }
        let counted = m.layers + l.embedding_in_split as u64 + l.loss_in_split as u64;
        if !counted.is_multiple_of(pp * v) {
            return Err(format!(
                "{} layers, with the embedding or loss counted as layers {counted}, cannot be \
                 split into --pp {pp} x --virtual-stages {v} equal chunks",
                m.layers
            ));
        }
        let mut chunks = vec![counted / (pp * v); (pp * v) as usize];
        chunks[0] -= l.embedding_in_split as u64;
        *chunks.last_mut().expect("pp x v >= 1") -= l.loss_in_split as u64;
        if chunks.contains(&0) {
            return Err(format!(
                "{} layers over --pp {pp} x --virtual-stages {v} leave the first or last chunk \
                 with no layer once the embedding and loss count as layers",
                m.layers
            ));
        }
        Ok(chunks)
    }

    /// Layers of each model chunk of a plan that passed [`Plan::check`].
    pub fn chunk_layers(&self) -> Vec<u64> {
        let (pp, v) = (self.layout.pp, self.layout.virtual_stages);
        self.chunk_split()
            .unwrap_or_else(|_| vec![self.model.layers / (pp * v); (pp * v) as usize])
    }

    /// Layers held by each pipeline stage (all its virtual chunks), of a plan that passed
    /// [`Plan::check`].
    pub fn stage_layers(&self) -> Vec<u64> {
        let pp = self.layout.pp as usize;
        let mut stages = vec![0; pp];
        for (j, n) in self.chunk_layers().into_iter().enumerate() {
            stages[j % pp] += n;
        }
        stages
    }

    /// Weights held by a GPU of the first stage (which also holds the embedding).
    pub fn params_per_gpu(&self) -> f64 {
        let (m, l) = (&self.model, &self.layout);
        let layer =
            (m.attention_params() + m.experts / l.ep * m.mlp_params()) / l.tp + 4 * m.hidden;
        (self.stage_layers()[0] * layer + m.vocab * m.hidden / l.tp) as f64
    }

    /// Bytes of weights, gradients and optimizer state a GPU holds, as Megatron-LM's
    /// distributed-optimizer guide counts them a weight (docs/user-guide/features/
    /// dist_optimizer.md): the half-precision weight (2), its main gradient (4 in FP32, 2 in
    /// half precision: [`Layout::gradient_bytes`]) and the optimizer's FP32 main weight and two
    /// moments (12), plus an FP32 copy of half-precision gradients (4): 18 or 20, and 6 + 12/d
    /// or 4 + 16/d with the optimizer's part sharded over the d data-parallel ranks (ZeRO-1);
    /// ZeRO-2 shards the gradients too. ZeRO-3 (DeepSpeed, FSDP) shards all of the ZeRO paper's
    /// 2 + 2 + 12 and holds two layers gathered whole (the one computing and the one
    /// prefetched).
    fn state_bytes(&self) -> f64 {
        let l = &self.layout;
        let dp = l.dp as f64;
        let grads = l.gradient_bytes() as f64;
        let optimizer = 12.0 + if grads < 4.0 { 4.0 } else { 0.0 };
        let per_weight = match l.zero {
            ZeroStage::None => 2.0 + grads + optimizer,
            ZeroStage::Optimizer => 2.0 + grads + optimizer / dp,
            ZeroStage::Gradients => 2.0 + (grads + optimizer) / dp,
            ZeroStage::Parameters => {
                let m = &self.model;
                let layer = (m.attention_params() + m.experts / l.ep * m.mlp_params()) / l.tp;
                return self.params_per_gpu() * (2.0 + 2.0 + 12.0) / dp + 2.0 * 2.0 * layer as f64;
            }
        };
        self.params_per_gpu() * per_weight
    }

    /// Activations the first stage holds at its peak, per Korthikanti et al. (MLSys'23): a
    /// layer keeps s b h (10 + 24/t) + 5 a s^2 b / t bytes (34 s b h / t with sequence
    /// parallelism; no score matrix with FlashAttention), only its input (2 s b h) under full
    /// recomputation, for each of the micro-batches in flight (p, times 1 + (p-1)/(p v)
    /// interleaved).
    fn activation_bytes(&self) -> f64 {
        let (m, l) = (&self.model, &self.layout);
        // A context-parallel rank keeps its share of the sequence (and of the scores' rows).
        let (s, b, h) = (
            m.seq as f64 / l.cp as f64,
            l.micro_batch as f64,
            m.hidden as f64,
        );
        let t = l.tp as f64;
        let a = m.heads as f64;
        let scores = match l.attention {
            Attention::Standard => 5.0 * a * s * m.seq as f64 * b / t,
            Attention::Flash => 0.0,
        };
        let linear = if l.sequence_parallel {
            34.0 / t
        } else {
            10.0 + 24.0 / t
        };
        let full_layer = s * b * h * linear + scores;
        let kept = match l.recompute {
            Recompute::Full => 2.0 * s * b * h / if l.sequence_parallel { t } else { 1.0 },
            Recompute::Selective => s * b * h * linear,
            Recompute::None => full_layer,
        };
        let p = l.pp as f64;
        let in_flight = (l.pp.min(l.micro_batches())) as f64
            * if l.virtual_stages > 1 {
                1.0 + (p - 1.0) / (p * l.virtual_stages as f64)
            } else {
                1.0
            };
        let layers = self.stage_layers()[0] as f64;
        // The logits of one micro-batch in FP32, on the last stage; one layer's full working set
        // while it is recomputed.
        let logits = 4.0 * s * b * m.vocab as f64 / t;
        in_flight * layers * kept + full_layer + logits
    }

    /// Estimated peak memory of a GPU, bytes.
    pub fn memory_per_gpu(&self) -> f64 {
        self.state_bytes() + self.activation_bytes()
    }

    /// FLOPs of one iteration as the Megatron paper counts them.
    pub fn iteration_flops(&self) -> f64 {
        self.model
            .iteration_flops(self.layout.global_batch, self.layout.recompute)
    }
}

/// One simulated iteration.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub layout: Layout,
    pub step_time: Time,
    /// Model FLOP/s per GPU (the paper's count) and its fraction of the GPU's peak.
    pub tflops_per_gpu: f64,
    pub mfu: f64,
    /// The slowest rank's waits for messages not yet sent, over the step.
    pub bubble_fraction: f64,
    /// The slowest rank's exposed communication per dimension: tensor, pipeline, data,
    /// expert, context.
    pub exposed: [(&'static str, Time); 5],
    pub memory_bytes: f64,
    pub execution: Execution,
}

impl Outcome {
    /// The rank whose step is the iteration's (the slowest, ties to the lowest).
    pub fn slowest_rank(&self) -> &crate::workload::RankBreakdown {
        &self.execution.ranks[self.execution.slowest]
    }
}

/// The dimensions reported, in column order (`exposed_tp_s`, ...).
pub const DIMENSIONS: [(&str, &str); 5] = [
    ("tp", "tensor"),
    ("pp", "pipeline"),
    ("dp", "data"),
    ("ep", "expert"),
    ("cp", "context"),
];

/// Simulates one iteration of `plan` on `topology`, rank r on its r-th GPU.
pub fn simulate(
    plan: &Plan,
    topology: &Topology,
    options: &TrainOptions,
    observer: &mut dyn crate::sim::Observer,
) -> Result<Outcome, Error> {
    let gpus = topology.active_npus();
    plan.check(gpus.len() as u64)?;
    let npus = plan.layout.placement.gpus_of_ranks(&plan.layout, &gpus);
    let program = pipeline::program_counted(plan, options.progress.as_deref());
    let execution = program::execute(topology, &program, &npus, options, observer)?;
    let slowest = &execution.ranks[execution.slowest];
    let step = slowest.breakdown.total;
    let secs = step.as_secs_f64().max(1e-12);
    let gpus = plan.layout.gpus() as f64;
    let tflops = plan.iteration_flops() / secs / gpus / 1e12;
    let exposed = DIMENSIONS.map(|(_, group)| {
        let time = slowest
            .exposed_by_group
            .iter()
            .filter(|(g, _)| *g == group)
            .fold(Time::ZERO, |a, (_, t)| a + *t);
        (group, time)
    });
    Ok(Outcome {
        layout: plan.layout.clone(),
        step_time: step,
        tflops_per_gpu: tflops,
        mfu: tflops * 1e12 / plan.gpu.peak_flops,
        bubble_fraction: slowest.bubble.as_secs_f64() / secs,
        exposed,
        memory_bytes: plan.memory_per_gpu(),
        execution,
    })
}

/// The layouts a search covers: every combination of the sizes listed, the data-parallel size
/// given or what the GPUs leave.
#[derive(Clone, Debug)]
pub struct Search {
    pub tp: Vec<u64>,
    pub pp: Vec<u64>,
    pub dp: Option<u64>,
    pub micro_batch: Vec<u64>,
    pub virtual_stages: Vec<u64>,
}

/// The layouts of `search` that Megatron accepts and that fit in memory, in the order listed;
/// when none does, the first reason one was refused.
pub fn candidates(plan: &Plan, gpus: u64, search: &Search) -> Result<Vec<Layout>, Error> {
    let mut fits = Vec::new();
    let mut first_error = None;
    for &tp in &search.tp {
        for &pp in &search.pp {
            let per_replica = tp.saturating_mul(pp).saturating_mul(plan.layout.cp);
            let cp = plan.layout.cp;
            let dp = match search.dp {
                Some(d) => d,
                None if gpus.is_multiple_of(per_replica) => gpus / per_replica,
                None => {
                    first_error.get_or_insert(Error::input(format!(
                        "--tp {tp} x --pp {pp} x --cp {cp} does not divide the topology's {gpus} \
                         GPUs"
                    )));
                    continue;
                }
            };
            for &b in &search.micro_batch {
                for &v in &search.virtual_stages {
                    let mut candidate = plan.clone();
                    let l = &mut candidate.layout;
                    (l.tp, l.pp, l.dp, l.micro_batch, l.virtual_stages) = (tp, pp, dp, b, v);
                    match candidate.check(gpus) {
                        Ok(()) => fits.push(candidate.layout),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
        }
    }
    match (fits.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(fits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::Algorithm;
    use crate::topology::TopologyOptions;
    use crate::workload::Program;

    fn tiny(layers: u64, experts: u64) -> LlmModel {
        LlmModel {
            name: "tiny".into(),
            layers,
            hidden: 1024,
            heads: 16,
            kv_heads: 16,
            ffn: 4096,
            seq: 1024,
            vocab: 1024,
            experts,
            top_k: experts.min(2),
            gated_mlp: false,
            tied_embeddings: true,
            learned_positions: true,
        }
    }

    fn plan(model: LlmModel, tp: u64, pp: u64, dp: u64, batch: u64) -> Plan {
        Plan {
            model,
            gpu: Gpu::parse("a100").unwrap(),
            layer_times: None,
            layout: Layout {
                tp,
                pp,
                dp,
                ep: 1,
                cp: 1,
                virtual_stages: 1,
                micro_batch: 1,
                global_batch: batch,
                zero: ZeroStage::None,
                recompute: Recompute::Full,
                sequence_parallel: false,
                attention: Attention::Flash,
                overlap_grad_reduce: true,
                fused_grad_accumulation: true,
                fp16: false,
                grad_reduce_in_bf16: false,
                scatter_gather: true,
                placement: Placement::default(),
                first_stage_layers: None,
                last_stage_layers: None,
                embedding_in_split: false,
                loss_in_split: false,
            },
        }
    }

    fn options() -> TrainOptions {
        TrainOptions {
            validate: false,
            ..TrainOptions::new(Algorithm::Ring)
        }
    }

    /// The shortcut (tensor-parallel collectives timed alone) is exact: the same iteration with
    /// every collective simulated transfer by transfer ends at the same picosecond, with the
    /// same exposure per dimension, on a layout with tensor, pipeline and data parallelism.
    #[test]
    fn collectives_timed_alone_give_the_full_simulations_times() {
        let topology = TopologyOptions::new("dgx-a100:4").build().unwrap();
        for (tp, pp, dp, v, sp) in [(8, 2, 2, 1, false), (8, 4, 1, 2, true), (8, 1, 4, 1, true)] {
            let mut p = plan(tiny(8, 1), tp, pp, dp, 16);
            p.layout.virtual_stages = v;
            p.layout.sequence_parallel = sp;
            let program = pipeline::program(&p);
            let npus = topology.active_npus();
            let fast = program::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
            let tensor_groups = fast.timed_alone.iter().filter(|c| c.starts_with("tp"));
            assert_eq!(
                tensor_groups.count() as u64,
                pp * dp,
                "every tensor group is alone"
            );
            let full_program = Program {
                serial_communicators: Default::default(),
                ..program
            };
            let full =
                program::execute(&topology, &full_program, &npus, &options(), &mut ()).unwrap();
            assert!(full.timed_alone.is_empty());
            assert_eq!(fast.link_bytes, full.link_bytes);
            assert_eq!(fast.link_busy, full.link_busy);
            for (a, b) in fast.ranks.iter().zip(&full.ranks) {
                assert_eq!(a.breakdown.total, b.breakdown.total, "rank {}", a.rank);
                assert_eq!(a.exposed_by_group, b.exposed_by_group, "rank {}", a.rank);
                assert_eq!(a.bubble, b.bubble, "rank {}", a.rank);
            }
        }
    }

    /// Separate gradient accumulation adds, for every micro-batch after the first, one pass
    /// over the rank's weights (the layers' and the embedding's) at the memory rate: the new
    /// half-precision gradient read and the accumulated one read and written, FP32 in BF16
    /// training (2 + 4 + 4 bytes a weight). FP16 accumulates in half precision (2 + 2 + 2) and
    /// its optimizer then copies the sums to FP32 (2 read, 4 written) and unscales and checks
    /// them for overflow (4 read, 4 written).
    #[test]
    fn separate_gradient_accumulation_adds_a_pass_over_the_weights_per_micro_batch() {
        let topology = TopologyOptions::new("ring:2").build().unwrap();
        let model = tiny(4, 1);
        // Two tensor-parallel ranks and no data parallelism: no gradient crosses the network,
        // so the precision changes the step by the memory passes alone.
        let mut p = plan(model.clone(), 2, 1, 1, 4);
        let fused = simulate(&p, &topology, &options(), &mut ())
            .unwrap()
            .step_time;
        p.layout.fused_grad_accumulation = false;
        let separate = simulate(&p, &topology, &options(), &mut ())
            .unwrap()
            .step_time;
        // A rank holds half of each layer's matrices, its norms whole, half the embedding.
        let layer = (model.attention_params() + model.mlp_params()) / 2 + 4 * model.hidden;
        let weights = (4 * layer + model.vocab * model.hidden / 2) as f64;
        let a100 = Gpu::parse("a100").unwrap();
        let rate = a100.memory_bandwidth * 0.9;
        // 4 sequences, micro-batch 1: 4 micro-batches, 3 of them added to the first.
        let expected = 3.0 * 10.0 * weights / rate;
        let added = (separate - fused).as_secs_f64();
        assert!(
            (added / expected - 1.0).abs() < 1e-6,
            "{added} s added, {expected} s expected"
        );
        p.layout.fp16 = true;
        let fp16 = simulate(&p, &topology, &options(), &mut ())
            .unwrap()
            .step_time;
        let unscaled = (fp16 - separate).as_secs_f64();
        let expected = (3.0 * (6.0 - 10.0) + 6.0 + 8.0) * weights / rate;
        assert!(
            (unscaled / expected - 1.0).abs() < 1e-6,
            "{unscaled} s added, {expected} s expected"
        );
    }

    /// Bytes of the data-parallel collectives of rank 0's program, by kind.
    fn data_parallel_bytes(p: &Plan, kind: CollectiveKind) -> u64 {
        pipeline::program(p).ranks[0]
            .iter()
            .filter_map(|n| match &n.task {
                crate::workload::Task::Collective {
                    kind: k,
                    bytes,
                    group: crate::workload::CommGroup::Data,
                    ..
                } if *k == kind => Some(*bytes),
                _ => None,
            })
            .sum()
    }

    /// Weights, gradients and optimizer state per weight as Megatron-LM's guide tabulates
    /// them: 20 bytes with FP16 gradients, 18 with FP32 ones; the distributed optimizer 4 +
    /// 16/d and 6 + 12/d; ZeRO-3 the ZeRO paper's 16, all sharded, and two layers whole.
    #[test]
    fn state_memory_follows_megatrons_bytes_per_weight() {
        let model = tiny(4, 1);
        let mut p = plan(model.clone(), 1, 1, 4, 8);
        let weights = p.params_per_gpu();
        for (fp16, zero, per_weight) in [
            (true, ZeroStage::None, 20.0),
            (false, ZeroStage::None, 18.0),
            (true, ZeroStage::Optimizer, 4.0 + 16.0 / 4.0),
            (false, ZeroStage::Optimizer, 6.0 + 12.0 / 4.0),
            (false, ZeroStage::Gradients, 2.0 + 16.0 / 4.0),
        ] {
            p.layout.fp16 = fp16;
            p.layout.zero = zero;
            assert!(
                (p.state_bytes() / (weights * per_weight) - 1.0).abs() < 1e-12,
                "fp16 {fp16}, {zero:?}"
            );
        }
        p.layout.zero = ZeroStage::Parameters;
        let layer = (model.attention_params() + model.mlp_params()) as f64;
        assert!((p.state_bytes() - (weights * 16.0 / 4.0 + 4.0 * layer)).abs() < 1.0);
    }

    /// Megatron reduces BF16 training's gradients in FP32 (4 bytes a weight) unless told to
    /// reduce them in BF16, FP16 training's in FP16; the distributed optimizer gathers the
    /// weights in half precision either way. A rank holds 4 layers and the embedding.
    #[test]
    fn gradients_are_reduced_at_megatrons_width() {
        let model = tiny(4, 1);
        let weights = 4 * (model.attention_params() + model.mlp_params() + 4 * model.hidden)
            + model.vocab * model.hidden;
        let mut p = plan(model, 1, 1, 2, 8);
        p.layout.zero = ZeroStage::Optimizer;
        for (fp16, bf16_reduce, width) in [(false, false, 4), (false, true, 2), (true, false, 2)] {
            p.layout.fp16 = fp16;
            p.layout.grad_reduce_in_bf16 = bf16_reduce;
            let reduced = data_parallel_bytes(&p, CollectiveKind::ReduceScatter);
            assert_eq!(
                reduced,
                width * weights,
                "fp16 {fp16}, bf16 reduce {bf16_reduce}"
            );
            let gathered = data_parallel_bytes(&p, CollectiveKind::AllGather);
            assert_eq!(gathered, 2 * weights);
        }
    }

    /// With the distributed optimizer and overlapped reduction, the weights' gathers open the
    /// step and each layer's first forward waits for its own bucket only (Megatron-core's
    /// --overlap-param-gather): on a slow network the step is shorter than gathering after
    /// the optimizer. Without overlapped reduction the gathers follow the optimizer.
    #[test]
    fn weights_are_gathered_while_the_first_forward_runs() {
        let topology = TopologyOptions::new("ring:2")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let mut p = plan(tiny(8, 1), 1, 1, 2, 8);
        p.layout.zero = ZeroStage::Optimizer;
        let first_forward_waits = |p: &Plan| {
            let nodes = &pipeline::program(p).ranks[0];
            let gathers: Vec<u64> = nodes
                .iter()
                .filter(|n| n.name == "weights")
                .map(|n| n.id)
                .collect();
            let waiting = nodes
                .iter()
                .filter(|n| {
                    n.name == "F0.0" && n.deps.iter().any(|&d| gathers.contains(&(d as u64)))
                })
                .count();
            (gathers.len(), waiting)
        };
        let (gathers, waiting) = first_forward_waits(&p);
        assert!(gathers >= 2, "{gathers} buckets");
        assert_eq!(
            waiting, 8,
            "every layer of the first forward waits for its bucket"
        );
        let ahead = simulate(&p, &topology, &options(), &mut ())
            .unwrap()
            .step_time;
        p.layout.overlap_grad_reduce = false;
        assert_eq!(first_forward_waits(&p).1, 0);
        let after = simulate(&p, &topology, &options(), &mut ())
            .unwrap()
            .step_time;
        assert!(ahead < after, "{ahead} against {after}");
    }

    /// A tensor group whose links another communication uses is not timed alone: on a ring,
    /// or with the data-parallel peers in the same box (their ring crosses the tensor group's
    /// NVSwitch links).
    #[test]
    fn shared_links_are_simulated() {
        for (spec, tp, dp) in [("ring:8", 2, 4), ("dgx-a100:2", 4, 4)] {
            let topology = TopologyOptions::new(spec).build().unwrap();
            let p = plan(tiny(4, 1), tp, 1, dp, 8);
            let program = pipeline::program(&p);
            let npus = topology.active_npus();
            let run = program::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
            assert!(run.timed_alone.is_empty(), "{spec}: {:?}", run.timed_alone);
        }
    }

    /// A long iteration can say how far it is: every task of every rank is counted once as it
    /// is laid out on the network.
    #[test]
    fn laying_out_counts_every_task() {
        let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
        let p = plan(tiny(4, 1), 4, 2, 2, 8);
        let steps = std::sync::Arc::new(crate::report::Steps::default());
        let options = TrainOptions {
            progress: Some(steps.clone()),
            ..options()
        };
        simulate(&p, &topology, &options, &mut ()).unwrap();
        let tasks: u64 = pipeline::program(&p)
            .ranks
            .iter()
            .map(|r| r.len() as u64)
            .sum();
        assert!(tasks > 0);
        assert_eq!(steps.done(), tasks);
    }

    /// Llama 3 405B's split: 126 layers on 16 stages, 7 on the first and last; with two
    /// virtual stages each middle stage's 8 layers are two chunks of 4.
    #[test]
    fn uneven_stages_split_as_megatron_does() {
        let mut model = tiny(126, 1);
        model.heads = 16;
        let mut p = plan(model, 1, 16, 1, 32);
        p.layout.first_stage_layers = Some(7);
        p.layout.last_stage_layers = Some(7);
        assert!(p.check(16).is_ok());
        let layers = p.chunk_layers();
        assert_eq!(layers.len(), 16);
        assert_eq!((layers[0], layers[15]), (7, 7));
        assert!(layers[1..15].iter().all(|&n| n == 8));
        assert_eq!(layers.iter().sum::<u64>(), 126);
        p.layout.virtual_stages = 2;
        p.layout.first_stage_layers = Some(6);
        p.layout.last_stage_layers = Some(8);
        assert!(p.check(16).is_ok());
        assert_eq!(p.chunk_layers().iter().sum::<u64>(), 126);
        assert_eq!(p.stage_layers()[0], 6);
        // The iteration runs, every chunk's layers computed once each way.
        let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
        p.layout.virtual_stages = 1;
        p.layout.first_stage_layers = Some(7);
        p.layout.last_stage_layers = Some(7);
        let outcome = simulate(&p, &topology, &options(), &mut ()).unwrap();
        assert!(outcome.step_time > Time::ZERO);
    }

    /// Megatron-core's split counting the embedding and the loss as layers: 126 layers and the
    /// two counted make 128, four a chunk over 16 stages of two chunks, the first chunk of the
    /// first stage and the last of the last holding three (Llama 3 405B's 7, 8 x 14, 7, but
    /// interleaved). It refuses to be combined with the given first and last stages, and
    /// counts that do not divide.
    #[test]
    fn embedding_and_loss_count_as_layers_in_the_split() {
        let mut model = tiny(126, 1);
        model.heads = 16;
        let mut p = plan(model, 1, 16, 1, 32);
        p.layout.virtual_stages = 2;
        p.layout.embedding_in_split = true;
        p.layout.loss_in_split = true;
        assert!(p.check(16).is_ok());
        let chunks = p.chunk_layers();
        assert_eq!((chunks[0], chunks[31]), (3, 3));
        assert!(chunks[1..31].iter().all(|&n| n == 4));
        let stages = p.stage_layers();
        assert_eq!((stages[0], stages[15]), (7, 7));
        assert!(stages[1..15].iter().all(|&n| n == 8));
        // Only the embedding counted: 127 layers do not divide over 32 chunks.
        p.layout.loss_in_split = false;
        assert!(p.check(16).unwrap_err().to_string().contains("127"));
        p.layout.loss_in_split = true;
        p.layout.first_stage_layers = Some(7);
        assert!(p.check(16).unwrap_err().to_string().contains("give one"));
        // The iteration runs with the short chunks.
        p.layout.first_stage_layers = None;
        let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
        let outcome = simulate(&p, &topology, &options(), &mut ()).unwrap();
        assert!(outcome.step_time > Time::ZERO);
    }

    /// With pipeline stages of equal work and negligible messages, the first stage idles for
    /// (p - 1) forward-backward steps of m + p - 1: 1F1B's bubble.
    #[test]
    fn the_bubble_is_one_f_one_bs() {
        let topology = TopologyOptions::new("dgx-a100:1").build().unwrap();
        let mut model = tiny(8, 1);
        model.vocab = 16;
        let (p, m) = (4, 12);
        let outcome =
            simulate(&plan(model, 1, p, 2, 2 * m), &topology, &options(), &mut ()).unwrap();
        let expected = (p - 1) as f64 / (m + p - 1) as f64;
        assert!(
            (outcome.bubble_fraction / expected - 1.0).abs() < 0.03,
            "{} vs {expected}",
            outcome.bubble_fraction
        );
    }

    /// Exposure by dimension and the bubble split the stalls the breakdown charges to
    /// communication, nothing lost or counted twice.
    #[test]
    fn exposure_by_dimension_adds_up() {
        let topology = TopologyOptions::new("dgx-a100:4").build().unwrap();
        let mut p = plan(tiny(8, 1), 4, 2, 4, 16);
        p.layout.virtual_stages = 2;
        let outcome = simulate(&p, &topology, &options(), &mut ()).unwrap();
        for r in &outcome.execution.ranks {
            let by_group = r
                .exposed_by_group
                .iter()
                .fold(Time::ZERO, |a, (_, t)| a + *t);
            assert_eq!(
                by_group + r.bubble,
                r.breakdown.exposed_comm,
                "rank {}",
                r.rank
            );
        }
    }

    /// Experts' all-to-alls inside a box are faster than across boxes: the exposed
    /// expert-parallel time grows when expert parallelism leaves the box.
    #[test]
    fn expert_parallelism_across_boxes_costs_more() {
        let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
        let run = |ep| {
            let mut p = plan(tiny(2, 16), 1, 1, 16, 16);
            p.layout.ep = ep;
            simulate(&p, &topology, &options(), &mut ()).unwrap()
        };
        let (inside, across) = (run(8), run(16));
        let expert = |o: &Outcome| o.exposed[3].1;
        assert!(expert(&inside) > Time::ZERO);
        assert!(expert(&across) > expert(&inside));
    }

    /// ZeRO-3 gathers every layer's weights before its forward and its backward and reduces
    /// its gradients after, every micro-batch, on one data-parallel stream; it needs less
    /// memory than ZeRO-1, and it refuses pipeline parallelism.
    #[test]
    fn zero_3_gathers_each_layer_twice_and_reduces_it_once_per_micro_batch() {
        let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
        let mut p = plan(tiny(6, 1), 1, 1, 16, 32);
        p.layout.zero = ZeroStage::Parameters;
        let program = pipeline::program(&p);
        let count = |kind: CollectiveKind| {
            program.ranks[0]
                .iter()
                .filter(|n| matches!(n.task, crate::workload::Task::Collective { kind: k, .. } if k == kind))
                .count()
        };
        let (m, l) = (2, 6);
        assert_eq!(count(CollectiveKind::AllGather), 2 * m * l);
        assert_eq!(count(CollectiveKind::ReduceScatter), m * l);
        let three = simulate(&p, &topology, &options(), &mut ()).unwrap();
        assert!(three.step_time > Time::ZERO);
        let mut one = p.clone();
        one.layout.zero = ZeroStage::Optimizer;
        assert!(p.memory_per_gpu() < one.memory_per_gpu());
        let mut piped = p.clone();
        piped.layout.pp = 2;
        piped.layout.dp = 8;
        assert!(piped
            .check(16)
            .unwrap_err()
            .to_string()
            .contains("--zero 3"));
    }

    /// Context parallelism splits each sequence: keys and values are gathered in the context
    /// group every layer (exposed as context), each rank computes its share, and the shortcut
    /// stays exact with context groups sharing the tensor groups' links.
    #[test]
    fn context_parallelism_gathers_keys_and_values() {
        let topology = TopologyOptions::new("dgx-a100:4").build().unwrap();
        let mut p = plan(tiny(4, 1), 4, 2, 2, 16);
        p.layout.cp = 2;
        assert_eq!(p.layout.gpus(), 32);
        let outcome = simulate(&p, &topology, &options(), &mut ()).unwrap();
        assert!(outcome.exposed[4].1 > Time::ZERO, "{:?}", outcome.exposed);
        let program = pipeline::program(&p);
        let npus = topology.active_npus();
        let fast = program::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
        let full = Program {
            serial_communicators: Default::default(),
            ..program
        };
        let full = program::execute(&topology, &full, &npus, &options(), &mut ()).unwrap();
        for (a, b) in fast.ranks.iter().zip(&full.ranks) {
            assert_eq!(a.breakdown.total, b.breakdown.total, "rank {}", a.rank);
        }
        // Half the tokens a rank: less compute than the same micro-batch without the split.
        let mut whole = p.clone();
        (whole.layout.cp, whole.layout.dp) = (1, 4);
        let (split, unsplit) = (pipeline::step_times(&p).0, pipeline::step_times(&whole).0);
        assert!(
            split.forward < 0.6 * unsplit.forward,
            "{split:?} {unsplit:?}"
        );
        let mut odd = p.clone();
        odd.model.seq = 1026;
        assert!(odd.check(32).unwrap_err().to_string().contains("--cp 2"));
    }

    /// Megatron's placement puts rank r on the r-th GPU; any other order is a permutation of
    /// the GPUs, with the first dimension named on consecutive GPUs.
    #[test]
    fn placements_permute_the_gpus() {
        let mut p = plan(tiny(4, 1), 2, 2, 4, 16);
        let gpus: Vec<NodeId> = (100..116).collect();
        assert_eq!(Placement::default().gpus_of_ranks(&p.layout, &gpus), gpus);
        p.layout.placement = Placement::parse("dp,tp,pp").unwrap();
        let placed = p.layout.placement.gpus_of_ranks(&p.layout, &gpus);
        let mut sorted = placed.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, gpus);
        // Ranks 0 and 1 (a tensor pair) sit dp = 4 GPUs apart; ranks 0 and 2 (data peers) adjacent.
        assert_eq!((placed[0], placed[1], placed[2]), (100, 104, 101));
        assert_eq!(p.layout.placement.name(), "dp,tp,pp");
        assert!(Placement::parse("tp,tp,pp").is_err() && Placement::parse("tp,dp").is_err());
    }

    /// Layouts Megatron refuses are refused here, naming the constraint.
    #[test]
    fn bad_layouts_are_refused_by_name() {
        let model = tiny(6, 1);
        let refuse = |p: Plan, gpus: u64, words: &str| {
            let e = p.check(gpus).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
        };
        refuse(plan(model.clone(), 2, 2, 2, 8), 16, "= 8 GPUs");
        refuse(plan(model.clone(), 3, 1, 1, 8), 3, "tensor parallelism");
        refuse(plan(model.clone(), 1, 4, 1, 8), 4, "6 layers");
        // An uneven split only when asked, and only one that gives every stage whole chunks.
        let mut uneven = plan(model.clone(), 1, 4, 1, 8);
        uneven.layout.first_stage_layers = Some(1);
        refuse(uneven.clone(), 4, "5 layers left");
        uneven.layout.last_stage_layers = Some(1);
        assert!(uneven.check(4).is_ok());
        assert_eq!(uneven.chunk_layers(), [1, 2, 2, 1]);
        uneven.layout.virtual_stages = 2;
        refuse(uneven, 4, "stage 0 would hold 1 layers");
        refuse(plan(model.clone(), 1, 1, 4, 6), 4, "--global-batch 6");
        let mut huge = plan(model, 1, 1, 1, 8);
        huge.model.hidden = 65536;
        huge.model.heads = 64;
        huge.model.ffn = 4 * 65536;
        refuse(huge, 1, "more than the A100's 80 GB");
    }
}
