//! A parallel layout: how a model's iteration is split over the GPUs (tensor, pipeline, data,
//! expert and context parallelism, ZeRO, the batch and what Megatron does with it) and where
//! each rank runs.

use super::compute::{self, Attention};
use super::model::{Precision, Recompute};
use crate::topology::NodeId;
use crate::Error;

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
    /// The tensor group's collectives overlapped with the products that make or use their
    /// tensors (Megatron-core's `--tp-comm-overlap`), not run after the layer's compute.
    pub tp_comm_overlap: bool,
    /// Without sequence parallelism, the backward's tensor all-reduces of input gradients beside
    /// the weight-gradient products (Megatron's `--async-tensor-model-parallel-allreduce`, always
    /// on in Megatron-core), not after the layer's compute.
    pub async_tp_allreduce: bool,
    /// The interleaved schedule's sends overlapped with the next step's compute
    /// (Megatron-core's `overlap_p2p_comm`), not waited for.
    pub overlap_p2p: bool,
    pub attention: Attention,
    /// Gradient buckets reduced while the last backward pass runs (Megatron-core's
    /// overlap_grad_reduce), or all gradients in one call after it (Megatron-LM 2021).
    pub overlap_grad_reduce: bool,
    /// Each micro-batch's weight gradients summed inside the weight-gradient product
    /// (Megatron-core's gradient_accumulation_fusion), or by a kernel of their own after it
    /// (PyTorch autograd's accumulation: Megatron-LM 2021, DDP, FSDP).
    pub fused_grad_accumulation: bool,
    /// The number formats it trains in.
    pub precision: Precision,
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
        compute::optimizer_bytes(self.gradient_bytes() == 2, self.precision)
    }

    /// Bytes of a weight's gradient as it is accumulated and reduced over the data-parallel
    /// group ([`compute::gradient_bytes`]).
    pub fn gradient_bytes(&self) -> u64 {
        compute::gradient_bytes(self.precision, self.grad_reduce_in_bf16)
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
