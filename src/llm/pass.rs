//! A pass of a stage's layers on a rank's stream: their compute and the communication each
//! layer needs. Without sequence parallelism the tensor group's all-reduces follow the layers'
//! compute, one after another (Megatron-LM 2021), or, asked for
//! (`TensorOverlap::AsyncAllReduce`, `--async-tensor-model-parallel-allreduce`, always on in
//! Megatron-core), each layer runs as pieces: the forward's all-reduces after the
//! attention-output and MLP-down products, on the stream by themselves, and the backward's
//! all-reduces of the query-key-value and MLP-up products' input gradients beside their weight
//! gradients (`LinearWithGradAccumulationAndAsyncCommunication`'s `allreduce_dgrad`). With
//! sequence parallelism each layer runs as pieces in order, every collective where Megatron-core
//! places it:
//!
//! - by itself (`TensorOverlap::Megatron`, Megatron-core's own, `tensor_parallel/layers.py`):
//!   the forward's all-gathers before the query-key-value and MLP-up products and
//!   reduce-scatters after the attention-output and MLP-down ones, and the backward's gathers of
//!   those two products' output gradients, on the stream by themselves; the backward gathers the
//!   query-key-value and MLP-up products' inputs again beside their input gradients and
//!   reduce-scatters those gradients beside their weight gradients
//!   (`LinearWithGradAccumulationAndAsyncCommunication`);
//! - or overlapped with the products (`TensorOverlap::Userbuffers`, `--tp-comm-overlap`), as
//!   Transformer Engine sets its userbuffers up by default (`initialize_ub`,
//!   transformer_engine/pytorch/module/base.py): the forward's gathers and the backward's
//!   gathers of output gradients by a ring exchange (as many chunks as tensor ranks, the local
//!   one first, each product chunk computed while the next arrives, on copy engines: all SMs
//!   left to the product); the forward's reduce-scatters by the pipeline method (the product in
//!   4 splits, each split's reduce-scatter beside the next split); the backward's as Megatron's
//!   own (the bulk method).
//!
//! A communication kernel beside a product takes 16 SMs from it: Transformer Engine's pipeline
//! and bulk methods' `num_sm` with `set_sm_margin`; NCCL's kernels beside Megatron's own take
//! one SM a channel, counted the same. What a layer's pieces take is the same for every layer of
//! a stage, so `layers` layers run as each piece `layers` times over: the sum of the layers'
//! times, as when run one by one.

use super::compute::LayerParts;
use super::model::Recompute;
use super::rank::{repeated, seconds, RankBuilder};
use crate::collective::CollectiveKind;
use crate::workload::{CommGroup, Task};

/// SMs a communication kernel takes from the product beside it.
pub const COMMUNICATION_SMS: u32 = 16;

/// Splits of a product whose output the pipeline method reduce-scatters split by split.
const SPLITS: u64 = 4;

/// Where a layer's tensor collectives meet its products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorOverlap {
    /// Sequence parallelism's, as Megatron-core places them itself.
    Megatron,
    /// Sequence parallelism's, in Transformer Engine's userbuffers (`--tp-comm-overlap`).
    Userbuffers,
    /// Without sequence parallelism, Megatron-core's all-reduces: the backward's beside the
    /// weight gradients (`--async-tensor-model-parallel-allreduce`).
    AsyncAllReduce,
}

/// The tensor a tensor-parallel collective moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor {
    /// The hidden state: tokens x hidden.
    Hidden,
    /// What the query-key-value products read across the tensor group, and whose gradient
    /// comes back: the hidden state, or latent attention's latents
    /// ([`crate::llm::LlmModel::attention_input_width`]).
    AttentionInput,
}

/// One piece of a sequence-parallel layer's pass, in seconds of compute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Piece {
    /// Compute alone.
    Compute(f64),
    /// A collective of the activations alone on the stream, the compute after it waiting.
    Alone(CollectiveKind, Tensor),
    /// A product whose input arrives by a ring exchange in `chunks` chunks, its own first, each
    /// computed while the next arrives.
    GatherInto {
        product: f64,
        chunks: u64,
        tensor: Tensor,
    },
    /// A product in splits, each split's output reduce-scattered while the next is computed.
    ScatterFrom(f64),
    /// A product beside a whole collective of another tensor.
    Beside(f64, CollectiveKind, Tensor),
}

/// The forward of one layer, in order, with `tp` tensor ranks.
pub fn forward_pieces(parts: &LayerParts, tp: u64, how: TensorOverlap) -> Vec<Piece> {
    let (linear, reserved) = (&parts.linear, &parts.linear_reserved);
    let between = Piece::Compute(parts.core.0 + parts.elementwise.0);
    match how {
        TensorOverlap::Megatron => vec![
            Piece::Alone(CollectiveKind::AllGather, Tensor::AttentionInput),
            Piece::Compute(linear[0].forward),
            between,
            Piece::Compute(linear[1].forward),
            Piece::Alone(CollectiveKind::ReduceScatter, Tensor::Hidden),
            Piece::Alone(CollectiveKind::AllGather, Tensor::Hidden),
            Piece::Compute(linear[2].forward + linear[3].forward),
            Piece::Alone(CollectiveKind::ReduceScatter, Tensor::Hidden),
        ],
        TensorOverlap::Userbuffers => vec![
            Piece::GatherInto {
                product: linear[0].forward,
                chunks: tp,
                tensor: Tensor::AttentionInput,
            },
            between,
            Piece::ScatterFrom(reserved[1].forward),
            Piece::GatherInto {
                product: linear[2].forward,
                chunks: tp,
                tensor: Tensor::Hidden,
            },
            Piece::ScatterFrom(reserved[3].forward),
        ],
        TensorOverlap::AsyncAllReduce => vec![
            Piece::Compute(linear[0].forward),
            between,
            Piece::Compute(linear[1].forward),
            Piece::Alone(CollectiveKind::AllReduce, Tensor::Hidden),
            Piece::Compute(linear[2].forward + linear[3].forward),
            Piece::Alone(CollectiveKind::AllReduce, Tensor::Hidden),
        ],
    }
}

/// The backward of one layer, in order: what `recompute` runs again, then each product's
/// gradients from the MLP's down projection back to the query-key-value one.
pub fn backward_pieces(
    parts: &LayerParts,
    tp: u64,
    recompute: Recompute,
    how: TensorOverlap,
) -> Vec<Piece> {
    let mut pieces = match recompute {
        Recompute::Full => forward_pieces(parts, tp, how),
        Recompute::Selective => vec![Piece::Compute(parts.core.0)],
        Recompute::None => Vec::new(),
    };
    let between = Piece::Compute(parts.core.1 + parts.elementwise.1);
    // Per product, from the MLP's down projection back: attention-output and MLP-down (row
    // parallel: their output gradient is gathered under sequence parallelism), then
    // query-key-value and MLP-up (column parallel: their input gradient is reduced).
    let row = |i: usize| row_parallel_gradients(parts, i, tp, how);
    let column = |i: usize| column_parallel_gradients(parts, i, how);
    pieces.extend(row(3));
    pieces.extend(column(2));
    pieces.push(between);
    pieces.extend(row(1));
    pieces.extend(column(0));
    pieces
}

/// A row-parallel product's gradients: without sequence parallelism both at once; with it, its
/// output gradient gathered first (by itself, or by a ring exchange under the input gradient's
/// product).
fn row_parallel_gradients(parts: &LayerParts, i: usize, tp: u64, how: TensorOverlap) -> Vec<Piece> {
    let l = &parts.linear[i];
    match how {
        TensorOverlap::AsyncAllReduce => {
            vec![Piece::Compute(l.input_gradient + l.weight_gradient)]
        }
        TensorOverlap::Megatron => vec![
            Piece::Alone(CollectiveKind::AllGather, Tensor::Hidden),
            Piece::Compute(l.input_gradient + l.weight_gradient),
        ],
        TensorOverlap::Userbuffers => vec![
            Piece::GatherInto {
                product: l.input_gradient,
                chunks: tp,
                tensor: Tensor::Hidden,
            },
            Piece::Compute(l.weight_gradient),
        ],
    }
}

/// A column-parallel product's gradients: without sequence parallelism its input gradient, then
/// that gradient all-reduced beside the weight gradient; with it, its input gathered again beside
/// the input gradient, which is reduce-scattered beside the weight gradient. The
/// query-key-value products' input is the attention's ([`Tensor::AttentionInput`]).
fn column_parallel_gradients(parts: &LayerParts, i: usize, how: TensorOverlap) -> Vec<Piece> {
    let (l, reserved) = (&parts.linear[i], &parts.linear_reserved[i]);
    let tensor = if i == 0 {
        Tensor::AttentionInput
    } else {
        Tensor::Hidden
    };
    match how {
        TensorOverlap::AsyncAllReduce => vec![
            Piece::Compute(l.input_gradient),
            Piece::Beside(reserved.weight_gradient, CollectiveKind::AllReduce, tensor),
        ],
        TensorOverlap::Megatron | TensorOverlap::Userbuffers => vec![
            Piece::Beside(reserved.input_gradient, CollectiveKind::AllGather, tensor),
            Piece::Beside(
                reserved.weight_gradient,
                CollectiveKind::ReduceScatter,
                tensor,
            ),
        ],
    }
}

/// Collectives of a layer's pass in the tensor group: how many of each kind, on which tensor.
pub(super) type TensorCounts = Vec<(CollectiveKind, u32, Tensor)>;

/// The communication of `layers` layers' pass on a rank's stream, after their compute: per
/// layer, collectives of each kind in the tensor group, all-gathers (forward) and
/// reduce-scatters (backward) of keys and values in the context group, and all-to-alls in the
/// expert group. Running each kind's collectives back to back ends the step when running them
/// in layer order would, since each runs alone on its links at a time set by its size.
#[derive(Clone, Copy)]
pub(super) struct LayerComm<'a> {
    pub(super) tp: &'a [(CollectiveKind, u32, Tensor)],
    /// Bytes of the hidden state's collectives, and of the attention input's.
    pub(super) tp_bytes: u64,
    pub(super) tp_attention_bytes: u64,
    pub(super) tp_name: &'a str,
    pub(super) cp: &'a [(CollectiveKind, u32)],
    pub(super) cp_bytes: u64,
    pub(super) cp_name: &'a str,
    pub(super) ep: u32,
    pub(super) ep_bytes: u64,
    pub(super) ep_name: &'a str,
}

impl LayerComm<'_> {
    /// Bytes of a tensor-group collective on `tensor`.
    pub(super) fn tp_bytes_of(&self, tensor: Tensor) -> u64 {
        match tensor {
            Tensor::Hidden => self.tp_bytes,
            Tensor::AttentionInput => self.tp_attention_bytes,
        }
    }

    pub(super) fn emit(&self, b: &mut RankBuilder, layers: u64) {
        // The tensor group's collectives of one kind and size run as one, in the order first
        // listed.
        let mut tensor: Vec<(CollectiveKind, u64, u32)> = Vec::new();
        for &(kind, per_layer, on) in self.tp {
            let bytes = self.tp_bytes_of(on);
            match tensor
                .iter_mut()
                .find(|(k, b, _)| *k == kind && *b == bytes)
            {
                Some((_, _, n)) => *n += per_layer,
                None => tensor.push((kind, bytes, per_layer)),
            }
        }
        let context = self.cp.iter().map(|&(kind, n)| (kind, self.cp_bytes, n));
        let groups = [
            (tensor, self.tp_name, CommGroup::Tensor),
            (context.collect(), self.cp_name, CommGroup::Context),
        ];
        for (counts, name, group) in groups {
            for (kind, bytes, per_layer) in counts {
                let times = per_layer * layers as u32;
                b.then(group.name(), repeated(kind, bytes, name, group, times), &[]);
            }
        }
        if self.ep > 0 {
            let times = self.ep * layers as u32;
            b.then(
                "expert",
                repeated(
                    CollectiveKind::AllToAll,
                    self.ep_bytes,
                    self.ep_name,
                    CommGroup::Expert,
                    times,
                ),
                &[],
            );
        }
    }
}

/// One pass (forward or backward) of a stage's layers on a rank.
pub(super) struct LayerPass<'a> {
    pub(super) forward: bool,
    /// Seconds of one layer's compute.
    pub(super) secs: f64,
    /// Seconds of compute a layer adds besides (a weight gradient's sum into the step's).
    pub(super) added: f64,
    pub(super) comm: LayerComm<'a>,
    /// With sequence parallelism, the layer's pieces; `comm` then holds no tensor-group
    /// collectives.
    pub(super) pieces: Option<&'a [Piece]>,
}

impl LayerPass<'_> {
    /// `layers` layers on `b`'s stream after its last node and `deps`, then `extra` seconds
    /// of compute (the logit layer, the embedding's gradient sum), then the context and
    /// expert groups' communication.
    pub(super) fn emit(
        &self,
        b: &mut RankBuilder,
        name: &str,
        layers: u64,
        extra: f64,
        deps: &[u32],
    ) {
        match self.pieces {
            Some(pieces) if layers > 0 => {
                let tail = layers as f64 * self.added + extra;
                self.emit_pieces(b, name, pieces, layers, tail, deps);
            }
            _ => {
                let secs = layers as f64 * (self.secs + self.added) + extra;
                b.then(name, self.compute(secs), deps);
            }
        }
        self.comm.emit(b, layers);
    }

    fn compute(&self, secs: f64) -> Task {
        Task::Compute {
            duration: seconds(secs),
            forward: self.forward,
        }
    }

    /// `layers` times each of `pieces`, then `tail` seconds of compute.
    fn emit_pieces(
        &self,
        b: &mut RankBuilder,
        name: &str,
        pieces: &[Piece],
        layers: u64,
        tail: f64,
        deps: &[u32],
    ) {
        let l = layers as f64;
        let bytes = self.comm.tp_bytes;
        let bytes_of = |on: Tensor| self.comm.tp_bytes_of(on);
        let tensor = |b: &mut RankBuilder, kind, bytes, deps| {
            let task = repeated(
                kind,
                bytes,
                self.comm.tp_name,
                CommGroup::Tensor,
                layers as u32,
            );
            b.add(CommGroup::Tensor.name(), task, deps)
        };
        // Compute not yet on the stream, and what it waits for.
        let mut pending = 0.0;
        let mut after: Vec<u32> = b.last.into_iter().chain(deps.iter().copied()).collect();
        let flush = |b: &mut RankBuilder, pending: &mut f64, after: &mut Vec<u32>| {
            if *pending > 0.0 {
                let id = b.add(name, self.compute(*pending), std::mem::take(after));
                *after = vec![id];
                *pending = 0.0;
            }
        };
        for &piece in pieces {
            match piece {
                Piece::Compute(secs) => pending += l * secs,
                Piece::GatherInto {
                    product,
                    chunks,
                    tensor: on,
                } => {
                    flush(b, &mut pending, &mut after);
                    let share = 1.0 / chunks as f64;
                    let c = b.add(
                        name,
                        self.compute(l * product * (1.0 - share)),
                        after.clone(),
                    );
                    let gather = tensor(b, CollectiveKind::AllGather, bytes_of(on), after);
                    after = vec![c, gather];
                    pending = l * product * share;
                }
                Piece::ScatterFrom(product) => {
                    let split = 1.0 / SPLITS as f64;
                    pending += l * product * split;
                    flush(b, &mut pending, &mut after);
                    let c = b.add(
                        name,
                        self.compute(l * product * (1.0 - split)),
                        after.clone(),
                    );
                    let ahead = bytes / SPLITS * (SPLITS - 1);
                    let scatter = tensor(b, CollectiveKind::ReduceScatter, ahead, after);
                    let last = tensor(
                        b,
                        CollectiveKind::ReduceScatter,
                        bytes - ahead,
                        vec![c, scatter],
                    );
                    after = vec![last];
                }
                Piece::Alone(kind, on) => {
                    flush(b, &mut pending, &mut after);
                    after = vec![tensor(b, kind, bytes_of(on), after)];
                }
                Piece::Beside(product, kind, on) => {
                    flush(b, &mut pending, &mut after);
                    let c = b.add(name, self.compute(l * product), after.clone());
                    let other = tensor(b, kind, bytes_of(on), after);
                    after = vec![c, other];
                }
            }
        }
        // The pass ends with compute (a product's weight gradient and its collective both
        // done), so the next compute's wait is charged to the collective it waited for.
        pending += tail;
        if pending > 0.0 || after.len() > 1 {
            b.last = Some(b.add(name, self.compute(pending), after));
        } else {
            b.last = after.first().copied();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::compute::{layer_parts, Work};
    use crate::llm::{Attention, Gpu, LlmModel};

    /// Seconds of compute a piece holds.
    fn compute(piece: &Piece) -> f64 {
        match *piece {
            Piece::Compute(secs) | Piece::ScatterFrom(secs) | Piece::Beside(secs, ..) => secs,
            Piece::GatherInto { product, .. } => product,
            Piece::Alone(..) => 0.0,
        }
    }

    /// With no SMs taken by communication kernels, a layer's pieces hold exactly its compute:
    /// the forward's, and the backward's after what each recomputation runs again.
    #[test]
    fn pieces_hold_the_layers_compute() {
        let model = LlmModel {
            name: "check".into(),
            layers: 4,
            hidden: 2048,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            latent: None,
            ffn: 8192,
            seq: 2048,
            vocab: 32000,
            experts: 1,
            top_k: 1,
            shared_ffn: 0,
            shared_expert_gate: false,
            dense_layers: Vec::new(),
            dense_ffn: 8192,
            gated_mlp: true,
            tied_embeddings: false,
            learned_positions: false,
            dropout: false,
            attention_window: None,
            windowed_layers: 0,
            attention_chunk: None,
            chunked_layers: 0,
        };
        // BF16, and FP8 with its casts.
        for fp8 in [false, true] {
            let work = Work {
                tp: 4,
                cp: 1,
                micro_batch: 2,
                sequence_parallel: true,
                recompute: Recompute::None,
                attention: Attention::Flash,
                fp8,
            };
            let h100 = Gpu::parse("h100").unwrap();
            let parts = layer_parts(&model, &h100, &work, 0);
            assert_eq!(parts.linear, parts.linear_reserved);
            let unsplit = Work {
                sequence_parallel: false,
                ..work
            };
            let all_reduced = layer_parts(&model, &h100, &unsplit, 0);
            let sum = |pieces: Vec<Piece>| pieces.iter().map(compute).sum::<f64>();
            let close = |a: f64, b: f64| assert!((a / b - 1.0).abs() < 1e-12, "{a} against {b}");
            for (parts, how) in [
                (&parts, TensorOverlap::Megatron),
                (&parts, TensorOverlap::Userbuffers),
                (&all_reduced, TensorOverlap::AsyncAllReduce),
            ] {
                close(sum(forward_pieces(parts, 4, how)), parts.forward());
                let backward = parts.backward();
                close(
                    sum(backward_pieces(parts, 4, Recompute::None, how)),
                    backward,
                );
                close(
                    sum(backward_pieces(parts, 4, Recompute::Selective, how)),
                    backward + parts.core.0,
                );
                close(
                    sum(backward_pieces(parts, 4, Recompute::Full, how)),
                    backward + parts.forward(),
                );
            }
        }
    }

    /// A product beside a communication kernel's 16 SMs runs on the rest: 132 - 16 SMs of an
    /// H100 at that share of its rate, so a product of whole waves on both takes 132 / 116 as
    /// long.
    #[test]
    fn reserved_sms_slow_the_product_beside_them() {
        let h100 = Gpu::parse("h100").unwrap();
        let rest = h100.reserving(COMMUNICATION_SMS);
        assert_eq!(rest.sms, 116);
        assert!((rest.matmul_flops / h100.matmul_flops - 116.0 / 132.0).abs() < 1e-12);
    }
}
