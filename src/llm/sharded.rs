//! The iteration of a ZeRO-3 / FSDP layout (weights, gradients and optimizer state sharded over
//! the data-parallel group, no pipeline): per micro-batch, each layer's weights are all-gathered
//! before its forward and again before its backward, and its gradients reduce-scattered after
//! its backward, on the data-parallel communicator's one stream (NCCL runs a communicator's
//! calls in the order issued), one layer ahead of the compute (DeepSpeed's prefetch: at most
//! two layers gathered at once), so gathering overlaps compute as far as the network allows.

use super::compute::optimizer_time;
use super::pass::{LayerComm, LayerPass};
use super::pipeline::{layer_kinds, logit_layer_time, tensor_collectives};
use super::rank::{repeated, seconds, RankBuilder};
use super::Plan;
use crate::collective::CollectiveKind;
use crate::workload::{CommGroup, Program, Task};

/// The iteration's programs.
pub fn program(plan: &Plan) -> Program {
    let l = &plan.layout;
    let model = &plan.model;
    let (tp, dp) = (l.tp, l.dp);
    let layers = model.layers as usize;
    let head = logit_layer_time(plan);
    let kinds = layer_kinds(plan);
    let kind_of = |j: usize| model.is_dense_layer(j as u64) as usize;
    let (tp_forward, tp_backward) = tensor_collectives(plan);
    let activation = plan.token_bytes(model.hidden);
    let attention_input = plan.token_bytes(model.attention_input_width());
    // Each layer's weights (this tensor rank's part), whole, in half precision; the embedding
    // travels with the first layer.
    let embedding_bytes = 2 * model.vocab * model.hidden / tp;
    let bytes_of =
        |j: usize| 2 * kinds[kind_of(j)].params + if j == 0 { embedding_bytes } else { 0 };
    let shard_params = plan.params_per_gpu() / dp as f64;
    let mut ranks = Vec::with_capacity((tp * dp) as usize);
    let mut serial = std::collections::BTreeSet::new();
    for d in 0..dp {
        for t in 0..tp {
            let tp_name = format!("tp{d}");
            let dp_name = format!("dp{t}");
            serial.insert(tp_name.clone());
            serial.insert(dp_name.clone());
            let mut b = RankBuilder {
                nodes: Vec::new(),
                named: t == 0 && d == 0,
                last: None,
            };
            // The data-parallel stream: each call after the one issued before it.
            let mut comm: Option<u32> = None;
            let issue = |b: &mut RankBuilder,
                         comm: &mut Option<u32>,
                         kind: CollectiveKind,
                         bytes: u64,
                         after: Option<u32>| {
                let deps: Vec<u32> = comm.iter().chain(after.iter()).copied().collect();
                let name = if kind == CollectiveKind::AllGather {
                    "gather-weights"
                } else {
                    "reduce-gradients"
                };
                let id = b.add(
                    name,
                    repeated(kind, bytes, &dp_name, CommGroup::Data, 1),
                    deps,
                );
                *comm = Some(id);
                id
            };
            for mb in 0..l.micro_batches() {
                let forward_comm = LayerComm {
                    tp: &tp_forward,
                    tp_bytes: activation,
                    tp_attention_bytes: attention_input,
                    tp_name: &tp_name,
                    cp: &[],
                    cp_bytes: 0,
                    cp_name: "",
                    ep: 0,
                    ep_bytes: 0,
                    ep_name: "",
                };
                let backward_comm = LayerComm {
                    tp: &tp_backward,
                    ..forward_comm
                };
                let forward_passes = kinds.each_ref().map(|kind| LayerPass {
                    forward: true,
                    secs: kind.time.forward,
                    added: 0.0,
                    comm: forward_comm,
                    pieces: kind.pieces.as_ref().map(|(forward, _)| forward.as_slice()),
                });
                let backward_passes = kinds.each_ref().map(|kind| LayerPass {
                    forward: false,
                    secs: kind.time.backward,
                    added: 0.0,
                    comm: backward_comm,
                    pieces: kind
                        .pieces
                        .as_ref()
                        .map(|(_, backward)| backward.as_slice()),
                });
                let mut gathered = vec![0u32; layers];
                let mut done = vec![0u32; layers];
                gathered[0] = issue(
                    &mut b,
                    &mut comm,
                    CollectiveKind::AllGather,
                    bytes_of(0),
                    None,
                );
                for j in 0..layers {
                    if j + 1 < layers {
                        // Prefetch the next layer once the one before this has freed its weights.
                        let freed = j.checked_sub(1).map(|k| done[k]);
                        gathered[j + 1] = issue(
                            &mut b,
                            &mut comm,
                            CollectiveKind::AllGather,
                            bytes_of(j + 1),
                            freed,
                        );
                    }
                    let extra = if j + 1 == layers { head.forward } else { 0.0 };
                    let name = b.label(|| format!("F{mb}.{j}"));
                    forward_passes[kind_of(j)].emit(&mut b, &name, 1, extra, &[gathered[j]]);
                    done[j] = b.last.expect("just added");
                }
                gathered[layers - 1] = issue(
                    &mut b,
                    &mut comm,
                    CollectiveKind::AllGather,
                    bytes_of(layers - 1),
                    None,
                );
                for j in (0..layers).rev() {
                    if j > 0 {
                        gathered[j - 1] = issue(
                            &mut b,
                            &mut comm,
                            CollectiveKind::AllGather,
                            bytes_of(j - 1),
                            None,
                        );
                    }
                    let extra = if j + 1 == layers { head.backward } else { 0.0 };
                    let name = b.label(|| format!("B{mb}.{j}"));
                    backward_passes[kind_of(j)].emit(&mut b, &name, 1, extra, &[gathered[j]]);
                    let computed = b.last;
                    issue(
                        &mut b,
                        &mut comm,
                        CollectiveKind::ReduceScatter,
                        bytes_of(j),
                        computed,
                    );
                }
            }
            let last: Vec<u32> = comm.into_iter().collect();
            b.then(
                "optimizer",
                Task::Compute {
                    duration: seconds(optimizer_time(
                        &plan.gpu,
                        shard_params,
                        plan.layout.optimizer_bytes(),
                    )),
                    forward: false,
                },
                &last,
            );
            ranks.push(b.nodes);
        }
    }
    Program {
        name: model.name.clone(),
        ranks,
        serial_communicators: serial,
    }
}
