//! The per-rank programs of one training iteration of a Megatron-style layout: tensor
//! parallelism inside each pipeline stage, 1F1B pipelining (interleaved over virtual stages when
//! asked), data parallelism with gradient buckets reduced as the last backward pass produces
//! them (and, with the distributed optimizer, the weights gathered as the first forward passes
//! need them), expert parallelism's all-to-alls, and the optimizer step.
//!
//! Ranks are numbered as Megatron numbers them: tensor-parallel rank fastest, then
//! data-parallel, then pipeline (rank = t + T (d + D p)); rank r runs on the r-th GPU, so a
//! tensor-parallel group of up to 8 shares a box and data- and pipeline-parallel peers sit on
//! the same rail of different boxes.
//!
//! Each pipeline step of a rank is, on its one stream: receive (and, with the scatter/gather
//! optimisation, all-gather in the tensor group), compute, the step's tensor-parallel
//! collectives and all-to-alls, send. A step's compute is one node: every tensor-parallel rank
//! computes the same amount, so once they meet at the first collective they stay in step, and
//! running the step's compute before its collectives ends it at the same time as interleaving
//! them would. The last backward step of each model chunk runs layer by layer so that each
//! gradient bucket is reduced as soon as its layers are done. With sequence parallelism, or
//! Megatron-core's asynchronous all-reduces without it, the tensor group's collectives run
//! inside the step instead, each where Megatron-core places it (`pass.rs`).

use super::compute::{
    gradient_accumulation_time, head_time, layer_parts, layer_time, optimizer_time, LayerTime, Work,
};
use super::model::{LlmModel, Precision};
use super::pass::{
    backward_pieces, forward_pieces, LayerComm, LayerPass, Piece, Tensor, TensorCounts,
    TensorOverlap, COMMUNICATION_SMS,
};
use super::rank::{collective, seconds, RankBuilder};
use super::{Plan, ZeroStage};
use crate::collective::CollectiveKind;
use crate::workload::{CommGroup, Program, Task};

/// Megatron's default gradient bucket: max(40M, 1M x data-parallel size) parameters.
fn bucket_params(dp: u64) -> u64 {
    (40_000_000u64).max(1_000_000 * dp)
}

/// One step of a stage's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub forward: bool,
    pub micro_batch: u64,
    pub chunk: u64,
}

/// The order in which stage `stage` of `p` runs its forward and backward steps over `m`
/// micro-batches and `v` model chunks: Megatron's 1F1B (warm-up forwards, then one forward and
/// one backward in turn, then the remaining backwards), interleaved when `v > 1` (forwards
/// take the chunks in order `p` micro-batches at a time, backwards in reverse).
pub fn stage_order(stage: u64, p: u64, m: u64, v: u64) -> Vec<Step> {
    let total = m * v;
    let warmup = if v == 1 {
        (p - stage - 1).min(total)
    } else {
        ((p - stage - 1) * 2 + (v - 1) * p).min(total)
    };
    let forward = |k: u64| Step {
        forward: true,
        micro_batch: (k / (p * v)) * p + k % p,
        chunk: (k % (p * v)) / p,
    };
    let backward = |k: u64| Step {
        forward: false,
        micro_batch: (k / (p * v)) * p + k % p,
        chunk: v - 1 - (k % (p * v)) / p,
    };
    let mut order = Vec::with_capacity(2 * total as usize);
    order.extend((0..warmup).map(&forward));
    for i in 0..total - warmup {
        order.push(forward(warmup + i));
        order.push(backward(i));
    }
    order.extend((total - warmup..total).map(&backward));
    order
}

/// The gathers of a step's weights in the order its forward passes need them, on the
/// data-parallel stream: the layers of `chunks` model chunks (`layers(c)`: each layer's weights
/// in chunk `c`) in buckets of at least `bucket` weights, a chunk's last bucket ending with it.
/// Returns, per chunk and layer, the gather holding that layer.
fn weight_gathers(
    b: &mut RankBuilder,
    dp_name: &str,
    chunks: u64,
    bucket: u64,
    layers: impl Fn(u64) -> Vec<u64>,
) -> Vec<Vec<u32>> {
    let mut previous: Option<u32> = None;
    let mut per_chunk = Vec::with_capacity(chunks as usize);
    for c in 0..chunks {
        let params = layers(c);
        let mut of_layer = vec![0; params.len()];
        let (mut since, mut from) = (0u64, 0usize);
        for (j, p) in params.iter().enumerate() {
            since += p;
            if since >= bucket || j + 1 == params.len() {
                let id = b.add(
                    "weights",
                    collective(
                        CollectiveKind::AllGather,
                        since * 2,
                        dp_name,
                        CommGroup::Data,
                    ),
                    previous.into_iter().collect(),
                );
                of_layer[from..=j].fill(id);
                previous = Some(id);
                (since, from) = (0, j + 1);
            }
        }
        per_chunk.push(of_layer);
    }
    per_chunk
}

/// The context-parallel collectives of one layer's forward and backward: keys and values
/// gathered before attention, their gradients reduce-scattered after its backward (gathered
/// again for a recomputed forward); none without context parallelism.
pub(super) fn context_collectives(plan: &Plan) -> (Counts, Counts) {
    let l = &plan.layout;
    if l.cp == 1 {
        return (Vec::new(), Vec::new());
    }
    let mut backward = vec![(CollectiveKind::ReduceScatter, 1)];
    if l.recompute == super::Recompute::Full {
        backward.push((CollectiveKind::AllGather, 1));
    }
    (vec![(CollectiveKind::AllGather, 1)], backward)
}

/// What a layer's work depends on besides the model and the GPU.
fn work(plan: &Plan) -> Work {
    let l = &plan.layout;
    Work {
        tp: l.tp,
        cp: l.cp,
        micro_batch: l.micro_batch,
        sequence_parallel: l.sequence_parallel,
        recompute: l.recompute,
        attention: l.attention,
        fp8: l.precision == Precision::Fp8,
    }
}

/// The logit layer's times for one micro-batch.
pub(super) fn logit_layer_time(plan: &Plan) -> LayerTime {
    head_time(&plan.model, &plan.gpu, &work(plan))
}

/// One layer's time for one micro-batch of `model` (the plan's, or its dense layers'):
/// measured, or the roofline's.
pub(super) fn layer_time_of(plan: &Plan, model: &LlmModel) -> LayerTime {
    let l = &plan.layout;
    match &plan.layer_times {
        Some(times) => times
            .get(l.tp, l.micro_batch)
            .expect("Plan::check found the row"),
        None => layer_time(model, &plan.gpu, &work(plan)),
    }
}

/// What a layer of one kind (the model's expert layers, or its dense ones) is on a rank.
pub(super) struct LayerKind {
    pub(super) time: LayerTime,
    pub(super) pieces: Option<(Vec<Piece>, Vec<Piece>)>,
    /// The rank's weights of the layer.
    pub(super) params: u64,
    /// The expert group's all-to-alls of its forward and of its backward.
    pub(super) all_to_alls: (u32, u32),
}

/// The plan's layers by kind, indexed by whether dense: `[expert, dense]` (a dense model's
/// both its one kind).
pub(super) fn layer_kinds(plan: &Plan) -> [LayerKind; 2] {
    let l = &plan.layout;
    let dense = plan.model.dense_layer_model();
    [&plan.model, &dense].map(|model| {
        let all_to_alls = match (model.experts > 1, l.recompute == super::Recompute::Full) {
            (false, _) => (0, 0),
            (true, true) => (2, 4),
            (true, false) => (2, 2),
        };
        LayerKind {
            time: layer_time_of(plan, model),
            pieces: layer_pieces(plan, model),
            params: model.rank_layer_params(l.tp, l.ep),
            all_to_alls,
        }
    })
}

/// Whether a layer runs as pieces, its tensor collectives among them ([`layer_pieces`]): with
/// more than one tensor rank, sequence parallelism or Megatron-core's asynchronous all-reduces,
/// and the compute model's products (measured layer times are whole layers).
fn runs_in_pieces(plan: &Plan) -> bool {
    let l = &plan.layout;
    l.tp > 1 && (l.sequence_parallel || l.async_tp_allreduce) && plan.layer_times.is_none()
}

/// A layer's forward and backward (of `model`: the plan's, or its dense layers') split at
/// their tensor-parallel collectives, each where Megatron-core places it (overlapped with the
/// products under `--tp-comm-overlap`), when the layer runs as pieces.
fn layer_pieces(plan: &Plan, model: &LlmModel) -> Option<(Vec<Piece>, Vec<Piece>)> {
    if !runs_in_pieces(plan) {
        return None;
    }
    let l = &plan.layout;
    let how = if !l.sequence_parallel {
        TensorOverlap::AsyncAllReduce
    } else if l.tp_comm_overlap {
        TensorOverlap::Userbuffers
    } else {
        TensorOverlap::Megatron
    };
    let parts = layer_parts(model, &plan.gpu, &work(plan), COMMUNICATION_SMS);
    Some((
        forward_pieces(&parts, l.tp, how),
        backward_pieces(&parts, l.tp, l.recompute, how),
    ))
}

/// Collectives of one layer's pass: how many of each kind.
pub(super) type Counts = Vec<(CollectiveKind, u32)>;

/// The tensor-parallel collectives that follow one layer's forward and backward, by kind and
/// tensor (none when they run inside its pieces, [`layer_pieces`]): without sequence
/// parallelism two all-reduces of the hidden state forward (after the attention-output and
/// MLP-down products) and two of input gradients backward (the query-key-value products', of the
/// attention's input, and the MLP-up ones'); with it, the attention's input and the MLP's
/// gathered and two reduce-scatters forward, and backward two gathers and two reduce-scatters,
/// one of each on the attention's input. A recomputed forward adds the forward's.
pub(super) fn tensor_collectives(plan: &Plan) -> (TensorCounts, TensorCounts) {
    let l = &plan.layout;
    if l.tp == 1 || runs_in_pieces(plan) {
        return (Vec::new(), Vec::new());
    }
    let (gather, scatter, reduce) = (
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllReduce,
    );
    let (forward, gradients) = if l.sequence_parallel {
        (
            vec![
                (gather, 1, Tensor::AttentionInput),
                (gather, 1, Tensor::Hidden),
                (scatter, 2, Tensor::Hidden),
            ],
            vec![
                (gather, 1, Tensor::AttentionInput),
                (gather, 1, Tensor::Hidden),
                (scatter, 1, Tensor::AttentionInput),
                (scatter, 1, Tensor::Hidden),
            ],
        )
    } else {
        (
            vec![(reduce, 2, Tensor::Hidden)],
            vec![
                (reduce, 1, Tensor::AttentionInput),
                (reduce, 1, Tensor::Hidden),
            ],
        )
    };
    let mut backward = gradients;
    if l.recompute == super::Recompute::Full {
        backward.extend(forward.iter().copied());
    }
    (forward, backward)
}

/// The iteration's programs (a layout whose weights are not sharded: ZeRO-3's are
/// `sharded`'s).
pub fn program(plan: &Plan) -> Program {
    program_counted(plan, None)
}

/// [`program`], counting the ranks built on `progress` (a long build can say how far it is).
pub fn program_counted(plan: &Plan, progress: Option<&crate::report::Steps>) -> Program {
    let l = &plan.layout;
    if let Some(steps) = progress {
        steps.begin("ranks built", l.tp * l.pp * l.replicas());
    }
    let model = &plan.model;
    // Data-parallel indices run over context x data parallel ranks (tp-cp-dp-pp order).
    let (tp, pp, dp, v) = (l.tp, l.pp, l.replicas(), l.virtual_stages);
    let cp = l.cp;
    let m = l.micro_batches();
    let head = logit_layer_time(plan);
    let kinds = layer_kinds(plan);
    let kind_of = |i: u64| &kinds[model.is_dense_layer(i) as usize];
    let chunk_ranges = plan.chunk_ranges();
    // One micro-batch's activations between stages, and the tensor-parallel collectives' size.
    let activation = plan.token_bytes(model.hidden);
    let attention_input = plan.token_bytes(model.attention_input_width());
    // Keys and values of the whole sequence (this tensor rank's heads), gathered in the
    // context group.
    let kv_bytes = l.micro_batch * model.seq * (model.key_width() + model.value_width()) / tp * 2;
    let (cp_forward, cp_backward) = context_collectives(plan);
    let scatter_gather = tp > 1 && l.scatter_gather;
    let message = if scatter_gather {
        activation / tp
    } else {
        activation
    };
    let (tp_forward, tp_backward) = tensor_collectives(plan);
    // Megatron-core overlaps the interleaved schedule's sends with the next step's compute
    // (`overlap_p2p_comm`); it turns that off without interleaving.
    let async_sends = l.overlap_p2p && v > 1;
    let expert_bytes = plan.token_bytes(model.top_k * model.hidden);
    let embedding_params = model.vocab * model.hidden / tp;
    // Gradients are accumulated and reduced at this width a weight; weights travel in half
    // precision.
    let grad_bytes = l.gradient_bytes();
    // Data parallelism sums the gradients everywhere, or leaves each rank its shard (ZeRO).
    let reduce = if l.zero == ZeroStage::None {
        CollectiveKind::AllReduce
    } else {
        CollectiveKind::ReduceScatter
    };
    // A micro-batch's weight gradients added to the step's by a kernel of their own (not when
    // fused into the product, nor when measured layer times already hold it).
    let accumulation = |params: u64| {
        if l.fused_grad_accumulation || plan.layer_times.is_some() {
            0.0
        } else {
            gradient_accumulation_time(&plan.gpu, params as f64, grad_bytes)
        }
    };
    let layer_accumulation = kinds.each_ref().map(|kind| accumulation(kind.params));
    let embedding_accumulation = accumulation(embedding_params);
    let bucket = bucket_params(dp) * grad_bytes;
    // Megatron-core's overlapped parameter gather (the distributed optimizer with
    // `--overlap-param-gather`, which needs `--overlap-grad-reduce`): the updated weights are
    // gathered bucket by bucket while the next step's first forward passes run, each layer
    // waiting for its own bucket. One step of that steady state opens with the gathers on the
    // data-parallel stream and ends at its optimizer.
    let gather_weights_ahead = l.zero != ZeroStage::None && dp > 1 && l.overlap_grad_reduce;
    let rank_of = |t: u64, d: u64, s: u64| (t + tp * (d + dp * s)) as u32;
    let mut ranks = Vec::with_capacity((tp * pp * dp) as usize);
    let mut serial = std::collections::BTreeSet::new();
    for s in 0..pp {
        for d in 0..dp {
            for t in 0..tp {
                let tp_name = format!("tp{s}.{d}");
                serial.insert(tp_name.clone());
                let dp_name = format!("dp{s}.{t}");
                serial.insert(dp_name.clone());
                let ep_name = format!("ep{s}.{t}.{}", d / l.ep);
                let cp_name = format!("cp{s}.{t}.{}", d / cp);
                serial.insert(cp_name.clone());
                let order = stage_order(s, pp, m, v);
                let mut last_backward = vec![usize::MAX; v as usize];
                for (i, step) in order.iter().enumerate() {
                    if !step.forward {
                        last_backward[step.chunk as usize] = i;
                    }
                }
                let mut b = RankBuilder {
                    nodes: Vec::new(),
                    named: t == 0 && d == 0,
                    last: None,
                };
                let mut grads: Vec<u32> = Vec::new();
                let mut params_since_bucket = 0u64;
                let mut dp_buckets: Vec<u64> = Vec::new();
                // The gather of each chunk's layers' weights, when the step opens with them.
                let layer_gathers: Vec<Vec<u32>> = if gather_weights_ahead {
                    weight_gathers(&mut b, &dp_name, v, bucket_params(dp), |c| {
                        let layers = chunk_ranges[(c * pp + s) as usize].clone();
                        let start = layers.start;
                        layers
                            .map(|i| {
                                kind_of(i).params
                                    + if s == 0 && c == 0 && i == start {
                                        embedding_params
                                    } else {
                                        0
                                    }
                            })
                            .collect()
                    })
                } else {
                    Vec::new()
                };
                let last_gather = layer_gathers.iter().flatten().max().copied();
                for (i, step) in order.iter().enumerate() {
                    let c = step.chunk;
                    let chunk = chunk_ranges[(c * pp + s) as usize].clone();
                    let layers_per_chunk = chunk.end - chunk.start;
                    let first = s == 0 && c == 0;
                    let last = s == pp - 1 && c == v - 1;
                    // Stage and chunk before and after this one on the way forward.
                    let before = (!first).then(|| if s > 0 { (s - 1, c) } else { (pp - 1, c - 1) });
                    let after = (!last).then(|| if s < pp - 1 { (s + 1, c) } else { (0, c + 1) });
                    // Messages between two ranks pair in order, one tag a way (forward 0,
                    // backward 1): every stage enumerates (micro-batch, chunk) in the same order
                    // (`stage_order`'s formulas do not depend on the stage), so the k-th message
                    // sent is the k-th received.
                    let (from, to, dir) = if step.forward {
                        (before, after, 0)
                    } else {
                        (after, before, 1)
                    };
                    let label = if step.forward { "F" } else { "B" };
                    let mut ready = Vec::new();
                    if let Some(sender) = from {
                        let recv = b.add(
                            "recv",
                            Task::Recv {
                                peer: rank_of(t, d, sender.0),
                                bytes: message,
                                tag: dir,
                            },
                            Vec::new(),
                        );
                        ready.push(recv);
                        if scatter_gather {
                            let gather = b.then(
                                "gather",
                                collective(
                                    CollectiveKind::AllGather,
                                    activation,
                                    &tp_name,
                                    CommGroup::Pipeline,
                                ),
                                &[recv],
                            );
                            ready = vec![gather];
                        }
                    }
                    let name = b.label(|| format!("{label}{}.{c}", step.micro_batch));
                    let comm = |kind: &LayerKind| LayerComm {
                        tp: if step.forward {
                            &tp_forward
                        } else {
                            &tp_backward
                        },
                        tp_bytes: activation,
                        tp_attention_bytes: attention_input,
                        tp_name: &tp_name,
                        cp: if step.forward {
                            &cp_forward
                        } else {
                            &cp_backward
                        },
                        cp_bytes: kv_bytes,
                        cp_name: &cp_name,
                        ep: if step.forward {
                            kind.all_to_alls.0
                        } else {
                            kind.all_to_alls.1
                        },
                        ep_bytes: expert_bytes,
                        ep_name: &ep_name,
                    };
                    // The first micro-batch's gradients start the sum; later ones are added.
                    let accumulating = !step.forward && step.micro_batch > 0;
                    let passes = [0, 1].map(|dense| {
                        let kind = &kinds[dense];
                        LayerPass {
                            forward: step.forward,
                            secs: if step.forward {
                                kind.time.forward
                            } else {
                                kind.time.backward
                            },
                            added: if accumulating {
                                layer_accumulation[dense]
                            } else {
                                0.0
                            },
                            comm: comm(kind),
                            pieces: kind.pieces.as_ref().map(|(forward, backward)| {
                                if step.forward {
                                    forward.as_slice()
                                } else {
                                    backward.as_slice()
                                }
                            }),
                        }
                    });
                    let pass_of = |i: u64| &passes[model.is_dense_layer(i) as usize];
                    let mut extra = 0.0;
                    if last {
                        extra += if step.forward {
                            head.forward
                        } else {
                            head.backward
                        };
                    }
                    if accumulating && (first || last) {
                        // The embedding's gradients, and the logit layer's (one matrix with the
                        // embedding's when they are tied and on one stage).
                        let matrices = if first && last && !model.tied_embeddings {
                            2.0
                        } else {
                            1.0
                        };
                        extra += matrices * embedding_accumulation;
                    }
                    // The chunk's last backward reduces its gradients bucket by bucket.
                    let by_bucket = !step.forward
                        && i == last_backward[c as usize]
                        && dp > 1
                        && l.overlap_grad_reduce;
                    if !by_bucket {
                        if gather_weights_ahead
                            && step.forward
                            && step.micro_batch == 0
                            && layers_per_chunk > 0
                        {
                            // Layer by layer, each after its weights' gather.
                            for (j, &gather) in layer_gathers[c as usize].iter().enumerate() {
                                let end = j as u64 + 1 == layers_per_chunk;
                                let mut deps = vec![gather];
                                if j == 0 {
                                    deps.extend_from_slice(&ready);
                                }
                                let extra = if end { extra } else { 0.0 };
                                pass_of(chunk.start + j as u64)
                                    .emit(&mut b, &name, 1, extra, &deps);
                            }
                        } else {
                            // Run by run of layers of one kind, in the pass's order (the
                            // backward from the last layer), `extra` with the logit layer's
                            // end of it: after the last forward run, with the first backward.
                            let mut runs = model.layer_runs(chunk.clone());
                            if !step.forward {
                                runs.reverse();
                            }
                            if runs.is_empty() {
                                passes[0].emit(&mut b, &name, 0, extra, &ready);
                            }
                            let with_extra = if step.forward {
                                runs.len().saturating_sub(1)
                            } else {
                                0
                            };
                            for (r, &(dense, n)) in runs.iter().enumerate() {
                                let extra = if r == with_extra { extra } else { 0.0 };
                                let deps = if r == 0 { &ready[..] } else { &[] };
                                passes[dense as usize].emit(&mut b, &name, n, extra, deps);
                            }
                        }
                        if first && step.forward && tp > 1 {
                            // The vocabulary-parallel embedding's all-reduce.
                            b.then(
                                "embedding",
                                collective(
                                    CollectiveKind::AllReduce,
                                    activation,
                                    &tp_name,
                                    CommGroup::Tensor,
                                ),
                                &[],
                            );
                        }
                    } else {
                        // Layer by layer from the last, reducing each bucket of gradients
                        // when it is full.
                        for j in 0..layers_per_chunk {
                            let (extra, deps) = if j == 0 {
                                (extra, ready.as_slice())
                            } else {
                                (0.0, &[][..])
                            };
                            let layer = chunk.end - 1 - j;
                            pass_of(layer).emit(&mut b, &name, 1, extra, deps);
                            params_since_bucket += kind_of(layer).params * grad_bytes;
                            let chunk_done = j + 1 == layers_per_chunk;
                            if chunk_done && first {
                                params_since_bucket += embedding_params * grad_bytes;
                            }
                            if params_since_bucket >= bucket || chunk_done {
                                // NCCL runs a communicator's calls in the order issued (the
                                // step's weight gathers first).
                                let before = grads.last().or(last_gather.as_ref()).copied();
                                let deps: Vec<u32> = b.last.into_iter().chain(before).collect();
                                let g = b.add(
                                    "gradients",
                                    collective(
                                        reduce,
                                        params_since_bucket,
                                        &dp_name,
                                        CommGroup::Data,
                                    ),
                                    deps,
                                );
                                grads.push(g);
                                dp_buckets.push(params_since_bucket);
                                params_since_bucket = 0;
                            }
                        }
                    }
                    if let Some((ns, _)) = to {
                        let send = Task::Send {
                            peer: rank_of(t, d, ns),
                            bytes: message,
                            tag: dir,
                        };
                        if async_sends {
                            // Off the stream: the next step computes while it leaves.
                            b.add("send", send, b.last.into_iter().collect());
                        } else {
                            // Megatron's point-to-point calls wait for their sends.
                            b.then("send", send, &[]);
                        }
                    }
                }
                let stage_params = chunk_ranges
                    .iter()
                    .skip(s as usize)
                    .step_by(pp as usize)
                    .flat_map(|layers| layers.clone())
                    .map(|i| kind_of(i).params)
                    .sum::<u64>()
                    + if s == 0 { embedding_params } else { 0 };
                if !l.overlap_grad_reduce && dp > 1 {
                    // Every gradient in one call once the backward passes are done.
                    let g = b.then(
                        "gradients",
                        collective(reduce, stage_params * grad_bytes, &dp_name, CommGroup::Data),
                        &[],
                    );
                    grads.push(g);
                    dp_buckets.push(stage_params * grad_bytes);
                }
                // Tied embeddings: the first and last stages sum their embedding gradients.
                if pp > 1 && model.tied_embeddings && (s == 0 || s == pp - 1) {
                    b.then(
                        "embedding-gradients",
                        collective(
                            CollectiveKind::AllReduce,
                            embedding_params * grad_bytes,
                            &format!("emb{t}.{d}"),
                            CommGroup::Pipeline,
                        ),
                        &[],
                    );
                }
                let optimized = stage_params
                    + if s == pp - 1 && s > 0 {
                        embedding_params
                    } else {
                        0
                    };
                let shard = if plan.layout.zero == ZeroStage::None {
                    1
                } else {
                    dp
                };
                b.then(
                    "optimizer",
                    Task::Compute {
                        duration: seconds(optimizer_time(
                            &plan.gpu,
                            optimized as f64 / shard as f64,
                            plan.layout.optimizer_bytes(),
                        )),
                        forward: false,
                    },
                    &grads,
                );
                if plan.layout.zero != ZeroStage::None && dp > 1 && !gather_weights_ahead {
                    // The distributed optimizer gathers the updated half-precision weights.
                    for bytes in dp_buckets {
                        let weights = bytes / grad_bytes * 2;
                        b.then(
                            "weights",
                            collective(
                                CollectiveKind::AllGather,
                                weights,
                                &dp_name,
                                CommGroup::Data,
                            ),
                            &[],
                        );
                    }
                }
                ranks.push((rank_of(t, d, s), b.nodes));
                if let Some(steps) = progress {
                    steps.step();
                }
            }
        }
    }
    ranks.sort_by_key(|(r, _)| *r);
    Program {
        name: model.name.clone(),
        ranks: ranks.into_iter().map(|(_, n)| n).collect(),
        serial_communicators: serial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_warms_up_then_alternates() {
        // Stage 0 of 4 with 8 micro-batches: 3 forwards, then F/B pairs, then 3 backwards.
        let order = stage_order(0, 4, 8, 1);
        let marks: String = order
            .iter()
            .map(|s| if s.forward { 'F' } else { 'B' })
            .collect();
        assert_eq!(marks, "FFFFBFBFBFBFBBBB");
        // The last stage alternates from the start.
        let marks: String = stage_order(3, 4, 8, 1)
            .iter()
            .map(|s| if s.forward { 'F' } else { 'B' })
            .collect();
        assert_eq!(marks, "FBFBFBFBFBFBFBFB");
    }

    /// Messages pair in order: what a stage sends its neighbour one way, in its order, is what
    /// the neighbour receives, in its own order (the model chunk advancing where the pipeline
    /// wraps from the last stage to the first).
    #[test]
    fn messages_between_two_stages_pair_in_order() {
        for (p, m, v) in [(2, 4, 2), (4, 8, 2), (4, 8, 3), (3, 6, 1)] {
            let next = |s: u64, c: u64| if s + 1 < p { (s + 1, c) } else { (0, c + 1) };
            for s in 0..p {
                let (to, _) = next(s, 0);
                for forward in [true, false] {
                    // Forward: s sends (mb, c) to `to` as (mb, c'), c' = c or c + 1 at the wrap.
                    let sent: Vec<(u64, u64)> = if forward {
                        stage_order(s, p, m, v)
                            .iter()
                            .filter(|x| x.forward && next(s, x.chunk).1 < v)
                            .map(|x| (x.micro_batch, next(s, x.chunk).1))
                            .collect()
                    } else {
                        // Backward: `to` sends to s what s needs for its backward steps.
                        stage_order(to, p, m, v)
                            .iter()
                            .filter(|x| !x.forward && (to != 0 || x.chunk != 0))
                            .map(|x| (x.micro_batch, if to == 0 { x.chunk - 1 } else { x.chunk }))
                            .collect()
                    };
                    let received: Vec<(u64, u64)> = if forward {
                        stage_order(to, p, m, v)
                            .iter()
                            .filter(|x| x.forward && (to != 0 || x.chunk != 0))
                            .map(|x| (x.micro_batch, x.chunk))
                            .collect()
                    } else {
                        stage_order(s, p, m, v)
                            .iter()
                            .filter(|x| !x.forward && next(s, x.chunk).1 < v)
                            .map(|x| (x.micro_batch, x.chunk))
                            .collect()
                    };
                    assert_eq!(
                        sent, received,
                        "p {p} m {m} v {v} stage {s} forward {forward}"
                    );
                }
            }
        }
    }

    #[test]
    fn interleaving_visits_every_chunk_of_every_micro_batch_once_each_way() {
        for (p, m, v) in [(2, 4, 2), (4, 8, 2), (4, 4, 3)] {
            for s in 0..p {
                let order = stage_order(s, p, m, v);
                assert_eq!(order.len() as u64, 2 * m * v);
                for forward in [true, false] {
                    let mut seen: Vec<(u64, u64)> = order
                        .iter()
                        .filter(|x| x.forward == forward)
                        .map(|x| (x.micro_batch, x.chunk))
                        .collect();
                    seen.sort_unstable();
                    seen.dedup();
                    assert_eq!(seen.len() as u64, m * v);
                }
                // A micro-batch's chunk goes backward only after it went forward.
                for (i, x) in order.iter().enumerate().filter(|(_, x)| !x.forward) {
                    assert!(order[..i].iter().any(|y| y.forward
                        && y.micro_batch == x.micro_batch
                        && y.chunk == x.chunk));
                }
            }
        }
    }
}
