//! Language-model training on a GPU fabric: a model and a Megatron-style parallel layout become
//! the per-rank programs of one iteration ([`pipeline`]), every collective and message of which
//! runs on the congestion-aware engine with the chosen algorithm; compute comes from a roofline
//! of each GPU ([`compute`]). Reports step time, model FLOP/s per GPU, the pipeline bubble and
//! the communication exposed per parallel dimension.

pub mod compute;
mod layout;
pub mod model;
mod pass;
pub mod pipeline;
mod rank;
mod sharded;

pub use compute::{Attention, Gpu};
pub use layout::{Layout, Placement, ZeroStage};
pub use model::{LlmModel, Precision, Recompute};

use std::collections::HashMap;
use std::sync::Mutex;

use crate::collective::CollectiveKind;
use crate::nccl::{self, Launch};
use crate::topology::{GpuSystem, NodeId, Topology};
use crate::units::Time;
use crate::workload::{Execution, SoloTimer, TrainOptions};
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
    /// A timer for the GPU system `whole` and its boxes.
    pub fn for_system(whole: GpuSystem) -> NcclTimer {
        let mut system = whole.clone();
        system.boxes = 1;
        NcclTimer {
            system,
            whole,
            models: Mutex::new(HashMap::new()),
            predicted: Mutex::new(HashMap::new()),
        }
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
        if l.precision == Precision::Fp8
            && self.gpu.fp8_matmul_flops.is_none()
            && self.layer_times.is_none()
        {
            return fail(format!(
                "--precision fp8: the {} has no measured FP8 matmul rate (the A100 has no FP8 \
                 tensor cores; the MI300X's row of the measurement table is empty): train in \
                 bf16, or give --layer-times",
                self.gpu.name
            ));
        }
        if l.tp_comm_overlap && !l.sequence_parallel {
            return fail(
                "--tp-comm-overlap overlaps sequence parallelism's all-gathers and \
                 reduce-scatters: it needs --sequence-parallel, as Megatron-core asserts"
                    .to_string(),
            );
        }
        if l.async_tp_allreduce && l.sequence_parallel {
            return fail(
                "--async-tensor-model-parallel-allreduce places the all-reduces of layouts \
                 without --sequence-parallel (whose collectives Megatron-core places itself)"
                    .to_string(),
            );
        }
        if let Some(times) = &self.layer_times {
            if l.tp_comm_overlap || l.async_tp_allreduce {
                return fail(format!(
                    "--tp-comm-overlap and --async-tensor-model-parallel-allreduce overlap \
                     products with collectives, but {} times whole layers: drop one of the two",
                    times.file
                ));
            }
            if !m.dense_layers.is_empty() {
                return fail(format!(
                    "{} times one kind of layer, but {} mixes dense layers with expert layers",
                    times.file, m.name
                ));
            }
            times.get(l.tp, l.micro_batch)?;
        }
        let need = self.memory_per_gpu();
        if need > self.gpu.memory_bytes {
            // Only the remedies not already taken.
            let mut remedies = vec!["raise --tp/--pp (`--tp auto --pp auto` tries every size)"];
            if l.zero == ZeroStage::None {
                remedies.push("use --zero 1");
            }
            if l.recompute != Recompute::Full {
                remedies.push("use --recompute full");
            }
            if l.micro_batch > 1 {
                remedies.push("lower --micro-batch");
            }
            return fail(format!(
                "{} with {} needs about {:.1} GB a GPU ({:.1} GB weights, gradients and \
                 optimizer state, {:.1} GB activations), more than the {}'s {:.0} GB: {}",
                m.name,
                l.describe(),
                need / 1e9,
                self.state_bytes() / 1e9,
                self.activation_bytes() / 1e9,
                self.gpu.name,
                self.gpu.memory_bytes / 1e9,
                remedies.join(", ")
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

    /// The layers (from 0) of each model chunk, in the order of [`Plan::chunk_layers`]: the
    /// model's layers in order, chunk by chunk.
    pub fn chunk_ranges(&self) -> Vec<std::ops::Range<u64>> {
        let mut start = 0;
        self.chunk_layers()
            .into_iter()
            .map(|n| {
                start += n;
                start - n..start
            })
            .collect()
    }

    /// The first stage's layers by kind: (dense, of experts).
    fn first_stage_kinds(&self) -> (u64, u64) {
        self.stage_kinds(0)
    }

    /// Stage `stage`'s layers (over its model chunks) by kind: (dense, of experts).
    pub fn stage_kinds(&self, stage: u64) -> (u64, u64) {
        let pp = self.layout.pp as usize;
        self.chunk_ranges()
            .into_iter()
            .skip(stage as usize)
            .step_by(pp)
            .flatten()
            .fold((0, 0), |(dense, experts), i| {
                if self.model.is_dense_layer(i) {
                    (dense + 1, experts)
                } else {
                    (dense, experts + 1)
                }
            })
    }

    /// Bytes of one micro-batch's tokens on a rank (its share of each sequence under context
    /// parallelism), `width` half-precision values a token: the activations stages pass on and
    /// the tensor-parallel collectives carry.
    pub fn token_bytes(&self, width: u64) -> u64 {
        let l = &self.layout;
        l.micro_batch * self.model.seq / l.cp * width * 2
    }

    /// Weights held by a GPU of the first stage (which also holds the embedding).
    pub fn params_per_gpu(&self) -> f64 {
        let (m, l) = (&self.model, &self.layout);
        let (dense, experts) = self.first_stage_kinds();
        let layers = dense * m.dense_layer_model().rank_layer_params(l.tp, l.ep)
            + experts * m.rank_layer_params(l.tp, l.ep);
        (layers + m.vocab * m.hidden / l.tp) as f64
    }

    /// Bytes of weights, gradients and optimizer state a GPU holds, as Megatron-LM's
    /// distributed-optimizer guide counts them a weight (docs/user-guide/features/
    /// dist_optimizer.md): the half-precision weight (2), its main gradient (4 in FP32, 2 in
    /// half precision: [`Layout::gradient_bytes`]) and the optimizer's FP32 main weight and two
    /// moments (12), plus an FP32 copy of half-precision gradients (4): 18 or 20, and 6 + 12/d
    /// or 4 + 16/d with the optimizer's part sharded over the d ranks that hold the same
    /// weights (ZeRO-1; data times context parallelism: Megatron-core's distributed optimizer
    /// shards over its `intra_dp_cp_group`); ZeRO-2 shards the gradients too. ZeRO-3
    /// (DeepSpeed, FSDP) shards all of the ZeRO paper's 2 + 2 + 12 and holds two layers
    /// gathered whole (the one computing and the one prefetched). FP8 training adds each
    /// weight's FP8 copy and its transpose (2).
    fn state_bytes(&self) -> f64 {
        let l = &self.layout;
        let dp = l.replicas() as f64;
        let grads = l.gradient_bytes() as f64;
        let optimizer = 12.0 + if grads < 4.0 { 4.0 } else { 0.0 };
        // FP8 training keeps each weight's FP8 copy and its transpose (Transformer Engine).
        let fp8_copies = if l.precision == Precision::Fp8 {
            2.0
        } else {
            0.0
        };
        let per_weight = fp8_copies
            + match l.zero {
                ZeroStage::None => 2.0 + grads + optimizer,
                ZeroStage::Optimizer => 2.0 + grads + optimizer / dp,
                ZeroStage::Gradients => 2.0 + (grads + optimizer) / dp,
                ZeroStage::Parameters => {
                    let m = &self.model;
                    let layer = m
                        .rank_layer_params(l.tp, l.ep)
                        .max(m.dense_layer_model().rank_layer_params(l.tp, l.ep));
                    return self.params_per_gpu() * (2.0 + 2.0 + 12.0) / dp
                        + 2.0 * (2.0 + fp8_copies) * layer as f64;
                }
            };
        self.params_per_gpu() * per_weight
    }

    /// Activations the first stage holds at its peak, per Korthikanti et al. (MLSys'23): what a
    /// layer keeps ([`LlmModel::layer_activations`]: s b h (10 + 24/t) + 5 a s^2 b / t bytes for
    /// GPT, 34 s b h / t with sequence parallelism, no score matrix with FlashAttention), only
    /// its input (2 s b h) under full recomputation, for each of the micro-batches in flight
    /// (p, times 1 + (p-1)/(p v) interleaved).
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
        // One layer's whole working set, and what it keeps for its backward pass.
        let of_layer = |m: &LlmModel| {
            let stored = m.layer_activations_in(l.precision);
            let scores = match l.attention {
                Attention::Standard => stored.per_score * a * s * m.seq as f64 * b / t,
                Attention::Flash => 0.0,
            };
            let per_token = if l.sequence_parallel {
                (stored.replicated + stored.split) / t
            } else {
                stored.replicated + stored.split / t
            };
            let full_layer = s * b * per_token + scores;
            let kept = match l.recompute {
                Recompute::Full => 2.0 * s * b * h / if l.sequence_parallel { t } else { 1.0 },
                Recompute::Selective => s * b * per_token,
                Recompute::None => full_layer,
            };
            (full_layer, kept)
        };
        let (dense_layers, expert_layers) = self.first_stage_kinds();
        let (dense_full, dense_kept) = of_layer(&m.dense_layer_model());
        let (expert_full, expert_kept) = of_layer(m);
        let full_layer = match (dense_layers, expert_layers) {
            (_, 0) => dense_full,
            (0, _) => expert_full,
            _ => dense_full.max(expert_full),
        };
        let kept_by_layers = dense_layers as f64 * dense_kept + expert_layers as f64 * expert_kept;
        let p = l.pp as f64;
        let in_flight = (l.pp.min(l.micro_batches())) as f64
            * if l.virtual_stages > 1 {
                1.0 + (p - 1.0) / (p * l.virtual_stages as f64)
            } else {
                1.0
            };
        // The logits of one micro-batch in FP32, on the last stage; one layer's full working set
        // while it is recomputed.
        let logits = 4.0 * s * b * m.vocab as f64 / t;
        in_flight * kept_by_layers + full_layer + logits
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

    /// FLOPs of one iteration without what is recomputed: the model FLOPs of Korthikanti et
    /// al.'s and PaLM's model FLOPs utilization (72 B s l h^2 (1 + s/(6h) + V/(12 l h)) for a
    /// dense GPT), the same for every recomputation setting.
    pub fn model_flops(&self) -> f64 {
        self.model
            .iteration_flops(self.layout.global_batch, Recompute::None)
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
    /// The fraction of peak counting no recomputed FLOPs (Korthikanti et al.'s and PaLM's
    /// MFU; the paper's count makes it a hardware utilization when layers are recomputed).
    pub mfu_no_recompute: f64,
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

    /// The experts' all-to-alls' exposed seconds per expert layer and micro-batch, on the rank
    /// where that is longest: a rank's exposed expert time over the expert layers of its
    /// pipeline stage (a stage of dense layers only exchanges no tokens, and the slowest rank's
    /// stage may be one). None where no rank exposes any.
    pub fn exposed_per_expert_layer(&self, plan: &Plan) -> Option<f64> {
        let l = &self.layout;
        let plan = Plan {
            layout: l.clone(),
            ..plan.clone()
        };
        let stage_ranks = l.tp * l.replicas();
        let micro_batches = l.micro_batches() as f64;
        self.execution
            .ranks
            .iter()
            .filter_map(|r| {
                let exposed: f64 = r
                    .exposed_by_group
                    .iter()
                    .filter(|(g, _)| *g == "expert")
                    .map(|(_, t)| t.as_secs_f64())
                    .sum();
                let (_, expert_layers) = plan.stage_kinds(r.rank as u64 / stage_ranks);
                (exposed > 0.0 && expert_layers > 0)
                    .then(|| exposed / (micro_batches * expert_layers as f64))
            })
            .max_by(f64::total_cmp)
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
    let program = if plan.layout.zero == ZeroStage::Parameters {
        sharded::program(plan)
    } else {
        pipeline::program_counted(plan, options.progress.as_deref())
    };
    let execution = crate::workload::execute(topology, &program, &npus, options, observer)?;
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
        mfu_no_recompute: plan.model_flops() / secs / gpus / plan.gpu.peak_flops,
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
/// when none does, why the most parallel one tried (the likeliest to fit) was refused.
pub fn candidates(plan: &Plan, gpus: u64, search: &Search) -> Result<Vec<Layout>, Error> {
    let mut fits = Vec::new();
    // The refusal of the layout with the most model-parallel GPUs, and that count.
    let mut refusal: Option<(u64, Error)> = None;
    let mut refused = 0;
    let mut refuse = |width: u64, e: Error| {
        refused += 1;
        if refusal.as_ref().is_none_or(|(w, _)| width > *w) {
            refusal = Some((width, e));
        }
    };
    for &tp in &search.tp {
        for &pp in &search.pp {
            let per_replica = tp.saturating_mul(pp).saturating_mul(plan.layout.cp);
            let cp = plan.layout.cp;
            let dp = match search.dp {
                Some(d) => d,
                None if gpus.is_multiple_of(per_replica) => gpus / per_replica,
                None => {
                    refuse(
                        0,
                        Error::input(format!(
                            "--tp {tp} x --pp {pp} x --cp {cp} does not divide the topology's \
                             {gpus} GPUs"
                        )),
                    );
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
                        Err(e) => refuse(per_replica, e),
                    }
                }
            }
        }
    }
    match (fits.is_empty(), refusal) {
        (true, Some((_, e))) if refused > 1 => Err(Error::input(format!(
            "none of the {refused} layouts tried runs; the most parallel: {e}"
        ))),
        (true, Some((_, e))) => Err(e),
        _ => Ok(fits),
    }
}

#[cfg(test)]
mod tests;
