//! Tests of the language-model workloads: layouts, programs and their execution.

use super::*;
use crate::algorithms::Algorithm;
use crate::topology::TopologyOptions;
use crate::workload::{CommGroup, Program};

fn tiny(layers: u64, experts: u64) -> LlmModel {
    LlmModel {
        name: "tiny".into(),
        layers,
        hidden: 1024,
        heads: 16,
        kv_heads: 16,
        head_dim: 64,
        latent: None,
        ffn: 4096,
        seq: 1024,
        vocab: 1024,
        experts,
        top_k: experts.min(2),
        shared_ffn: 0,
        shared_expert_gate: false,
        dense_layers: Vec::new(),
        dense_ffn: 4096,
        gated_mlp: false,
        tied_embeddings: true,
        learned_positions: true,
        dropout: true,
        attention_window: None,
        windowed_layers: 0,
        attention_chunk: None,
        chunked_layers: 0,
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
            tp_comm_overlap: false,
            async_tp_allreduce: false,
            overlap_p2p: false,
            attention: Attention::Flash,
            overlap_grad_reduce: true,
            fused_grad_accumulation: true,
            precision: Precision::Bf16,
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
    for (tp, pp, dp, v, sp, async_all_reduce) in [
        (8, 2, 2, 1, false, false),
        (8, 2, 2, 1, false, true),
        (8, 4, 1, 2, true, false),
        (8, 1, 4, 1, true, false),
    ] {
        let mut p = plan(tiny(8, 1), tp, pp, dp, 16);
        p.layout.virtual_stages = v;
        p.layout.sequence_parallel = sp;
        p.layout.async_tp_allreduce = async_all_reduce;
        let program = pipeline::program(&p);
        let npus = topology.active_npus();
        let fast =
            crate::workload::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
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
            crate::workload::execute(&topology, &full_program, &npus, &options(), &mut ()).unwrap();
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
    p.layout.precision = Precision::Fp16;
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

/// Bytes of rank 0's collectives of `kind` in `group`, every repeat counted.
fn group_bytes(program: &Program, group: CommGroup, kind: CollectiveKind) -> u64 {
    program.ranks[0]
        .iter()
        .filter_map(|n| match &n.task {
            crate::workload::Task::Collective {
                kind: k,
                bytes,
                group: g,
                times,
                ..
            } if *k == kind && *g == group => Some(*bytes * *times as u64),
            _ => None,
        })
        .sum()
}

/// Seconds of compute in rank 0's program.
fn compute_secs(program: &Program) -> f64 {
    compute_secs_of(program, 0)
}

/// Seconds of compute in `rank`'s program.
fn compute_secs_of(program: &Program, rank: usize) -> f64 {
    program.ranks[rank]
        .iter()
        .map(|n| match n.task {
            crate::workload::Task::Compute { duration, .. } => duration.as_secs_f64(),
            _ => 0.0,
        })
        .sum()
}

/// A sequence-parallel layer pass moves its activations in 6 all-gathers and 4 reduce-scatters a
/// micro-batch, whether Megatron-core places its collectives itself or Transformer Engine's
/// userbuffers overlap them (`--tp-comm-overlap`): the forward's 2 + 2, and a backward that
/// gathers its output gradients and its inputs again (4 + 2). The userbuffers compute what
/// Megatron's own computes plus what the 16 SMs of their pipelined reduce-scatters cost the
/// forward's attention-output and MLP-down products (the backward's bulk overlaps are
/// Megatron's own), and hide the forward's collectives behind its products: less exposed
/// tensor communication and a shorter step.
#[test]
fn overlapped_tensor_collectives_hide_behind_the_products() {
    let run = OverlapRun::new(true, |p| p.layout.tp_comm_overlap = true);
    for program in [&run.before.1, &run.after.1] {
        assert_eq!(
            group_bytes(program, CommGroup::Tensor, CollectiveKind::AllGather),
            OverlapRun::PASSES * 6 * run.activation
        );
        assert_eq!(
            group_bytes(program, CommGroup::Tensor, CollectiveKind::ReduceScatter),
            OverlapRun::PASSES * 4 * run.activation
        );
    }
    let (all, rest) = (&run.parts.linear, &run.parts.linear_reserved);
    run.costs_and_gains(rest[1].forward - all[1].forward + rest[3].forward - all[3].forward);
}

/// Without sequence parallelism a layer pass all-reduces its activations twice forward and its
/// input gradients twice backward either way; Megatron-core runs the backward's beside the
/// query-key-value and MLP-up weight-gradient products (`--async-tensor-model-parallel-allreduce`):
/// it computes exactly what those products lose to the all-reduce kernel's 16 SMs more, and
/// exposes less tensor time in a shorter step.
#[test]
fn async_all_reduces_hide_behind_the_weight_gradients() {
    let run = OverlapRun::new(false, |p| p.layout.async_tp_allreduce = true);
    // And the vocabulary-parallel embedding's all-reduce of each of the 4 micro-batches.
    for program in [&run.before.1, &run.after.1] {
        assert_eq!(
            group_bytes(program, CommGroup::Tensor, CollectiveKind::AllReduce),
            (OverlapRun::PASSES * 4 + 4) * run.activation
        );
    }
    let (all, rest) = (&run.parts.linear, &run.parts.linear_reserved);
    run.costs_and_gains(
        rest[0].weight_gradient - all[0].weight_gradient + rest[2].weight_gradient
            - all[2].weight_gradient,
    );
    let mut p = run.plan;
    p.layout.sequence_parallel = true;
    assert!(p
        .check(8)
        .unwrap_err()
        .to_string()
        .contains("without --sequence-parallel"));
}

/// A layer of a 13B-size model (products long enough to hide a collective behind) on one DGX
/// A100 box, tensor parallelism 8, 4 micro-batches of one sequence, no recomputation: simulated
/// without and with an overlap of its tensor collectives.
struct OverlapRun {
    plan: Plan,
    /// The outcome and program without the overlap, and with it.
    before: (Outcome, Program),
    after: (Outcome, Program),
    /// A layer's parts with 16 SMs reserved, and one sequence's activations in bytes.
    parts: compute::LayerParts,
    activation: u64,
}

impl OverlapRun {
    /// 4 layers x 4 micro-batches.
    const PASSES: u64 = 16;

    fn new(sequence_parallel: bool, overlap: impl Fn(&mut Plan)) -> OverlapRun {
        let topology = TopologyOptions::new("dgx-a100:1").build().unwrap();
        let model = LlmModel {
            hidden: 5120,
            heads: 40,
            kv_heads: 40,
            head_dim: 128,
            ffn: 20480,
            seq: 2048,
            ..tiny(4, 1)
        };
        let mut p = plan(model.clone(), 8, 1, 1, 4);
        p.layout.sequence_parallel = sequence_parallel;
        p.layout.recompute = Recompute::None;
        let run = |p: &Plan| {
            let outcome = simulate(p, &topology, &options(), &mut ()).unwrap();
            (outcome, pipeline::program(p))
        };
        let before = run(&p);
        overlap(&mut p);
        let after = run(&p);
        let work = compute::Work {
            tp: 8,
            cp: 1,
            micro_batch: 1,
            sequence_parallel,
            recompute: Recompute::None,
            attention: Attention::Flash,
            fp8: false,
        };
        OverlapRun {
            parts: compute::layer_parts(&model, &p.gpu, &work, 16),
            activation: model.seq * model.hidden * 2,
            plan: p,
            before,
            after,
        }
    }

    /// The overlap computes exactly `margin` seconds a layer pass more (the products beside its
    /// kernels on fewer SMs), and exposes less tensor time in a shorter step.
    fn costs_and_gains(&self, margin: f64) {
        assert!(margin > 0.0);
        let added = compute_secs(&self.after.1) - compute_secs(&self.before.1);
        let expected = Self::PASSES as f64 * margin;
        assert!(
            (added - expected).abs() < 1e-9 * 200.0,
            "{added} s added, {expected} s expected"
        );
        let (before, after) = (&self.before.0, &self.after.0);
        assert!(
            after.exposed[0].1 < before.exposed[0].1,
            "{:?} against {:?}",
            after.exposed[0].1,
            before.exposed[0].1
        );
        assert!(after.step_time < before.step_time);
    }
}

/// Megatron-core's interleaved schedule overlaps its sends with the next step's compute
/// (`overlap_p2p_comm`): with stages in different boxes, a step is shorter and exposes less
/// pipeline communication than when each send is waited for; without interleaving Megatron
/// waits for them either way.
#[test]
fn interleaved_sends_leave_while_the_next_step_computes() {
    let topology = TopologyOptions::new("dgx-a100:4").build().unwrap();
    let mut p = plan(tiny(8, 1), 8, 4, 1, 8);
    p.layout.virtual_stages = 2;
    let waited = simulate(&p, &topology, &options(), &mut ()).unwrap();
    p.layout.overlap_p2p = true;
    let overlapped = simulate(&p, &topology, &options(), &mut ()).unwrap();
    assert!(overlapped.step_time < waited.step_time);
    let pipeline = |o: &Outcome| o.exposed[1].1;
    assert!(pipeline(&overlapped) < pipeline(&waited));
    p.layout.virtual_stages = 1;
    let asked = simulate(&p, &topology, &options(), &mut ()).unwrap();
    p.layout.overlap_p2p = false;
    let not_asked = simulate(&p, &topology, &options(), &mut ()).unwrap();
    assert_eq!(asked.step_time, not_asked.step_time);
}

/// Weights, gradients and optimizer state per weight as Megatron-LM's guide tabulates
/// them: 20 bytes with FP16 gradients, 18 with FP32 ones; the distributed optimizer 4 +
/// 16/d and 6 + 12/d (d the data times context ranks); ZeRO-3 the ZeRO paper's 16, all
/// sharded, and two layers whole (their norms with them).
#[test]
fn state_memory_follows_megatrons_bytes_per_weight() {
    let model = tiny(4, 1);
    let mut p = plan(model.clone(), 1, 1, 4, 8);
    let weights = p.params_per_gpu();
    for (precision, zero, per_weight) in [
        (Precision::Fp16, ZeroStage::None, 20.0),
        (Precision::Bf16, ZeroStage::None, 18.0),
        (Precision::Fp16, ZeroStage::Optimizer, 4.0 + 16.0 / 4.0),
        (Precision::Bf16, ZeroStage::Optimizer, 6.0 + 12.0 / 4.0),
        (Precision::Bf16, ZeroStage::Gradients, 2.0 + 16.0 / 4.0),
        // FP8 training: BF16's, and each weight's FP8 copy and its transpose.
        (Precision::Fp8, ZeroStage::Optimizer, 2.0 + 6.0 + 12.0 / 4.0),
    ] {
        p.layout.precision = precision;
        p.layout.zero = zero;
        assert!(
            (p.state_bytes() / (weights * per_weight) - 1.0).abs() < 1e-12,
            "{precision:?}, {zero:?}"
        );
    }
    p.layout.precision = Precision::Bf16;
    p.layout.zero = ZeroStage::Parameters;
    let layer = (model.attention_params() + model.mlp_params() + 4 * model.hidden) as f64;
    assert!((p.state_bytes() - (weights * 16.0 / 4.0 + 4.0 * layer)).abs() < 1.0);
    // Context-parallel ranks hold the same weights: the distributed optimizer shards over
    // data times context parallelism (here 4 x 2).
    p.layout.zero = ZeroStage::Optimizer;
    p.layout.cp = 2;
    assert!((p.state_bytes() / (weights * (6.0 + 12.0 / 8.0)) - 1.0).abs() < 1e-12);
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
    for (precision, bf16_reduce, width) in [
        (Precision::Bf16, false, 4),
        (Precision::Bf16, true, 2),
        (Precision::Fp16, false, 2),
    ] {
        p.layout.precision = precision;
        p.layout.grad_reduce_in_bf16 = bf16_reduce;
        let reduced = group_bytes(
            &pipeline::program(&p),
            CommGroup::Data,
            CollectiveKind::ReduceScatter,
        );
        assert_eq!(
            reduced,
            width * weights,
            "{precision:?}, bf16 reduce {bf16_reduce}"
        );
        let gathered = group_bytes(
            &pipeline::program(&p),
            CommGroup::Data,
            CollectiveKind::AllGather,
        );
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
            .filter(|n| n.name == "F0.0" && n.deps.iter().any(|&d| gathers.contains(&(d as u64))))
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
        let run =
            crate::workload::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
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

/// With pipeline stages of equal work and small messages (8 layers a stage), the first stage
/// waits on the pipeline (the bubble, and its messages' own time) for (p - 1) forward-backward
/// steps of m + p - 1 (1F1B's bubble), the data-parallel reduction after them aside.
#[test]
fn the_bubble_is_one_f_one_bs() {
    let topology = TopologyOptions::new("dgx-a100:1").build().unwrap();
    let mut model = tiny(32, 1);
    model.vocab = 16;
    let (p, m) = (4, 12);
    let outcome = simulate(&plan(model, 1, p, 2, 2 * m), &topology, &options(), &mut ()).unwrap();
    let expected = (p - 1) as f64 / (m + p - 1) as f64;
    let r = outcome.slowest_rank();
    let group = |name: &str| {
        r.exposed_by_group
            .iter()
            .find(|(g, _)| *g == name)
            .map_or(0.0, |(_, t)| t.as_secs_f64())
    };
    let schedule = outcome.step_time.as_secs_f64() - group("data");
    let waiting = (r.bubble.as_secs_f64() + group("pipeline")) / schedule;
    assert!(
        (waiting / expected - 1.0).abs() < 0.03,
        "{waiting} vs {expected}"
    );
    // The messages are small beside the compute: nearly all of the wait is the bubble.
    assert!(outcome.bubble_fraction > 0.9 * expected);
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

/// A model mixing dense and expert layers runs each layer as its kind: with its first two
/// layers dense on a two-stage pipeline, the first stage's ranks compute what the dense model
/// computes there and exchange no tokens in the expert group, and the second stage's compute
/// and all-to-alls are those of the model with experts everywhere.
#[test]
fn dense_layers_run_as_dense_ones_among_expert_layers() {
    let mixed = LlmModel {
        dense_layers: vec![0, 1],
        ..tiny(4, 16)
    };
    assert_eq!(mixed.dense_layer_model(), tiny(4, 1));
    let program = |model: LlmModel| {
        let mut p = plan(model, 1, 2, 8, 16);
        p.layout.ep = 8;
        pipeline::program(&p)
    };
    let (mixed, dense, experts) = (program(mixed), program(tiny(4, 1)), program(tiny(4, 16)));
    let expert_tasks = |program: &Program, rank: usize| {
        program.ranks[rank]
            .iter()
            .filter(|n| {
                matches!(n.task, crate::workload::Task::Collective { group, .. } if group == CommGroup::Expert)
            })
            .count()
    };
    // Rank 0 holds the first stage, rank 8 (past the 8 data-parallel ranks) the second.
    assert_eq!(expert_tasks(&mixed, 0), 0);
    assert_eq!(compute_secs_of(&mixed, 0), compute_secs_of(&dense, 0));
    assert!(expert_tasks(&mixed, 8) > 0);
    assert_eq!(expert_tasks(&mixed, 8), expert_tasks(&experts, 8));
    assert_eq!(compute_secs_of(&mixed, 8), compute_secs_of(&experts, 8));
    assert!(compute_secs_of(&mixed, 0) != compute_secs_of(&experts, 0));
}

/// Latent attention's tensor group moves its latents where a GPT layer moves the hidden state
/// into (and the gradient out of) its query-key-value products: latents of 256 + 128 + 32
/// where the hidden state is 1024 wide, on one collective a layer and micro-batch without
/// sequence parallelism (the backward's all-reduce of that input gradient) and on four with
/// it and full recomputation (the forward's gather, the recomputed forward's, the backward's
/// gather again and reduce-scatter), whatever the overlap; nothing else changes.
#[test]
fn latent_attention_gathers_its_latents_in_the_tensor_group() {
    let latent = LlmModel {
        head_dim: 64 + 32,
        latent: Some(crate::llm::model::Latent {
            q_rank: Some(256),
            kv_rank: 128,
            rope: 32,
            value: 64,
        }),
        ..tiny(4, 1)
    };
    assert_eq!(latent.attention_input_width(), 256 + 128 + 32);
    let (layers, micro_batches, tokens) = (4, 2, 1024);
    let tensor_bytes = |model: LlmModel, sequence_parallel: bool, overlap: bool| {
        let mut p = plan(model, 2, 1, 4, 8);
        p.layout.sequence_parallel = sequence_parallel;
        p.layout.tp_comm_overlap = overlap;
        let program = pipeline::program(&p);
        [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ]
        .map(|kind| group_bytes(&program, CommGroup::Tensor, kind))
        .iter()
        .sum::<u64>()
    };
    for (sequence_parallel, overlap, per_layer) in
        [(false, false, 1), (true, false, 4), (true, true, 4)]
    {
        let narrower = per_layer * layers * micro_batches * tokens * (1024 - 416) * 2;
        assert_eq!(
            tensor_bytes(latent.clone(), sequence_parallel, overlap),
            tensor_bytes(tiny(4, 1), sequence_parallel, overlap) - narrower,
            "sequence parallel {sequence_parallel}, overlap {overlap}"
        );
    }
}

/// ZeRO-3 gathers every layer's weights before its forward and its backward and reduces
/// its gradients after, every micro-batch, on one data-parallel stream; it needs less
/// memory than ZeRO-1, and it refuses pipeline parallelism.
#[test]
fn zero_3_gathers_each_layer_twice_and_reduces_it_once_per_micro_batch() {
    let topology = TopologyOptions::new("dgx-a100:2").build().unwrap();
    let mut p = plan(tiny(6, 1), 1, 1, 16, 32);
    p.layout.zero = ZeroStage::Parameters;
    let program = sharded::program(&p);
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
    let fast = crate::workload::execute(&topology, &program, &npus, &options(), &mut ()).unwrap();
    let full = Program {
        serial_communicators: Default::default(),
        ..program
    };
    let full = crate::workload::execute(&topology, &full, &npus, &options(), &mut ()).unwrap();
    for (a, b) in fast.ranks.iter().zip(&full.ranks) {
        assert_eq!(a.breakdown.total, b.breakdown.total, "rank {}", a.rank);
    }
    // Half the tokens a rank: less compute than the same micro-batch without the split.
    let mut whole = p.clone();
    (whole.layout.cp, whole.layout.dp) = (1, 4);
    let (split, unsplit) = (
        pipeline::layer_time_of(&p, &p.model),
        pipeline::layer_time_of(&whole, &whole.model),
    );
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
    let mut overlapped = plan(model.clone(), 2, 1, 1, 8);
    overlapped.layout.tp_comm_overlap = true;
    refuse(overlapped.clone(), 2, "needs --sequence-parallel");
    overlapped.layout.sequence_parallel = true;
    assert!(overlapped.check(2).is_ok());
    let mut huge = plan(model, 1, 1, 1, 8);
    huge.model.hidden = 65536;
    huge.model.heads = 64;
    huge.model.head_dim = 1024;
    huge.model.ffn = 4 * 65536;
    refuse(huge, 1, "more than the A100's 80 GB");
}

/// Meta trained Llama 3 405B on 8K sequences in TP 8, PP 16 without activation
/// checkpointing ("The Llama 3 Herd of Models", section 3.3.2 and Table 4); with the
/// activations counted for its own shape (grouped-query keys and values, SwiGLU, no dropout)
/// the layout fits an 80 GB H100; the same layer with dropout's masks would not (nor did GPT's
/// constants, 34 s b h / t a layer, which the estimate used before).
#[test]
fn llama_3_405b_fits_where_meta_trained_it() {
    let model = crate::llm::model::shipped("llama3_405b.yaml");
    assert!(!model.dropout);
    let mut p = plan(model, 8, 16, 64, 2048);
    p.gpu = Gpu::parse("h100").unwrap();
    p.layout.zero = ZeroStage::Optimizer;
    p.layout.recompute = Recompute::None;
    p.layout.sequence_parallel = true;
    p.layout.first_stage_layers = Some(7);
    p.layout.last_stage_layers = Some(7);
    assert!(p.check(8192).is_ok());
    let h100 = p.gpu.memory_bytes;
    assert!(p.memory_per_gpu() <= h100, "{}", p.memory_per_gpu() / 1e9);
    p.model.dropout = true;
    assert!(p.memory_per_gpu() > h100, "{}", p.memory_per_gpu() / 1e9);
}

/// FP8 training runs the transformer layers' linear products at the GPU's measured FP8 rate
/// (an H100's 1402.6 against 794.5 TFLOP/s: products bound by their FLOPs take 794.5 / 1402.6
/// of their BF16 time, each of the three a linear layer runs) and adds Transformer Engine's
/// casts at the memory rate; the attention core is untouched; the linear layers' inputs are
/// kept for the backward in FP8. The A100, which has no FP8 rate, is refused.
#[test]
fn fp8_runs_the_linear_products_at_the_fp8_rate_and_pays_for_its_casts() {
    let mut model = tiny(1, 1);
    (
        model.hidden,
        model.ffn,
        model.heads,
        model.kv_heads,
        model.head_dim,
        model.seq,
    ) = (8192, 32768, 64, 64, 128, 4096);
    let h100 = Gpu::parse("h100").unwrap();
    let work = |fp8| compute::Work {
        tp: 1,
        cp: 1,
        micro_batch: 1,
        sequence_parallel: false,
        recompute: Recompute::None,
        attention: Attention::Flash,
        fp8,
    };
    let bf16 = compute::layer_parts(&model, &h100, &work(false), 0);
    let fp8 = compute::layer_parts(&model, &h100, &work(true), 0);
    let ratio = 794.5 / 1402.6;
    for (b, f) in bf16.linear.iter().zip(&fp8.linear) {
        for (slow, fast) in [
            (b.forward, f.forward),
            (b.input_gradient, f.input_gradient),
            (b.weight_gradient, f.weight_gradient),
        ] {
            assert!((fast / slow / ratio - 1.0).abs() < 1e-9, "{fast} / {slow}");
        }
    }
    assert_eq!(bf16.core, fp8.core);
    let (s, h, ffn) = (4096.0, 8192.0, 32768.0);
    let rate = h100.memory_bandwidth * 0.9;
    // Forward: the transposed copies of the query-key-value, MLP-up and MLP-down inputs; the
    // attention output cast and transposed.
    let forward = s * h + s * h + s * ffn + 4.0 * s * h;
    // Backward: each product's output gradient cast and transposed.
    let backward = 4.0 * (s * 3.0 * h + s * h + s * ffn + s * h);
    let added = |b: f64, f: f64| (f - b) * rate;
    assert!((added(bf16.elementwise.0, fp8.elementwise.0) / forward - 1.0).abs() < 1e-9);
    assert!((added(bf16.elementwise.1, fp8.elementwise.1) / backward - 1.0).abs() < 1e-9);

    // Kept for the backward: the linear layers' inputs in one byte, not two.
    let (kept, kept_fp8) = (
        model.layer_activations(),
        model.layer_activations_in(Precision::Fp8),
    );
    assert_eq!(kept.replicated - kept_fp8.replicated, h + h);
    assert_eq!(kept.split - kept_fp8.split, h + ffn);
    assert_eq!(kept.per_score, kept_fp8.per_score);

    let mut p = plan(model, 1, 1, 1, 1);
    p.layout.precision = Precision::Fp8;
    let refused = p.check(1).unwrap_err().to_string();
    assert!(refused.contains("--precision fp8") && refused.contains("A100"));
    p.gpu = h100;
    p.check(1).unwrap();
}
