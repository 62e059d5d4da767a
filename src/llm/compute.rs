//! How long a GPU computes one pipeline step: every matrix product by a roofline (the larger of
//! its FLOPs at the GPU's achievable matmul rate and its bytes at its memory rate), element-wise
//! work (norms, activations, softmax, dropout, residual adds) by its bytes at the memory rate.
//!
//! One figure per GPU sets the matmul rate: the maximum achievable BF16 matmul FLOPS measured on
//! one GPU by Stas Bekman's `mamf-finder` (github.com/stas00/ml-engineering,
//! compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table", every
//! figure from the one table as it stands since September 2025: the mean of 100 products after
//! 50 warm-up ones at the best shape found), never a figure fitted to training runs. That rate is the best over shapes; a given product loses to
//! dimension quantisation as NVIDIA's "Matrix Multiplication Background User's Guide"
//! (DU-09799-001, sections 2.3 and 3) describes it: cuBLAS computes the output in thread-block
//! tiles (its most efficient, 256 x 128 or 128 x 256), one per SM at a time, so a product runs
//! in waves of as many tiles as the GPU has SMs, and partial tiles and a partial last wave idle
//! their share. Element-wise kernels stream at 90% of the datasheet HBM rate (large copies reach
//! 90-92% of it on current NVIDIA GPUs).
//!
//! FP8 training ([`Precision::Fp8`], Transformer Engine's recipe as Megatron-core runs it) runs
//! the transformer layers' linear products at the same table's FP8 (`float8_e4m3fn`) figure,
//! their inputs one byte an element; attention, the logit layer and everything element-wise
//! stay in BF16, and the casts Transformer Engine adds are charged at the memory rate.

use super::model::{LlmModel, Precision, Recompute};
use crate::topology::GpuSystem;
use crate::Error;

/// A GPU's compute figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub name: &'static str,
    /// Dense BF16 tensor-core peak, FLOP/s (datasheet).
    pub peak_flops: f64,
    /// Maximum achievable BF16 matmul FLOP/s (measured, see the module documentation).
    pub matmul_flops: f64,
    /// Maximum achievable FP8 matmul FLOP/s, where the table has one.
    pub fp8_matmul_flops: Option<f64>,
    /// HBM bandwidth, bytes/s (datasheet).
    pub memory_bandwidth: f64,
    /// HBM capacity, bytes.
    pub memory_bytes: f64,
    /// Streaming multiprocessors (compute units): the tiles of a matrix product that run at once.
    pub sms: u32,
}

/// cuBLAS's most efficient thread-block tiles of a product's output (rows x columns), per the
/// NVIDIA guide cited in the module documentation.
const TILES: [(f64, f64); 2] = [(256.0, 128.0), (128.0, 256.0)];

/// A matrix product `batch x (m x k) . (k x n)`.
#[derive(Clone, Copy, Debug)]
struct Product {
    batch: f64,
    m: f64,
    n: f64,
    k: f64,
    /// Bytes of an input element (the output is BF16).
    element: f64,
}

impl Product {
    fn flops(&self) -> f64 {
        2.0 * self.batch * self.m * self.n * self.k
    }

    /// Bytes moved: inputs and output once.
    fn bytes(&self) -> f64 {
        self.batch * (self.element * (self.m * self.k + self.k * self.n) + HALF * self.m * self.n)
    }
}

/// Fraction of the HBM rate element-wise kernels reach.
const MEMORY_EFFICIENCY: f64 = 0.9;

/// Bytes of one BF16/FP16 value.
const HALF: f64 = 2.0;

impl Gpu {
    /// The presets: `a100`, `h100`, `h200`, `b200`, `mi300x`, and the export parts `a800`,
    /// `h800`.
    pub fn parse(name: &str) -> Result<Gpu, Error> {
        let gpu = |name, peak: f64, mamf: f64, fp8: Option<f64>, tb_s: f64, gb: f64, sms| Gpu {
            name,
            peak_flops: peak * 1e12,
            matmul_flops: mamf * 1e12,
            fp8_matmul_flops: fp8.map(|f| f * 1e12),
            memory_bandwidth: tb_s * 1e12,
            memory_bytes: gb * 1e9,
            sms,
        };
        Ok(match name.to_ascii_lowercase().as_str() {
            // A100 SXM4 80 GB: 312 TFLOP/s, 2.039 TB/s, 108 SMs (datasheet, and the NVIDIA
            // guide's own wave example); MAMF 271.2 (torch 2.6.0+cu126); no FP8 tensor cores.
            "a100" => gpu("A100", 312.0, 271.2, None, 2.039, 80.0, 108),
            // A800 SXM4 80 GB: the A100's chip and datasheet compute and memory (312 TFLOP/s,
            // 2.039 TB/s); it differs in NVLink only, so the A100's figures.
            "a800" => gpu("A800", 312.0, 271.2, None, 2.039, 80.0, 108),
            // H100 SXM5: 989 TFLOP/s, 3.35 TB/s, 80 GB, 132 SMs; MAMF 794.5 (torch
            // 2.7.0+cu126, the table's H100 and H200 row), FP8 1402.6 (torch 2.7.0+cu126).
            "h100" => gpu("H100", 989.0, 794.5, Some(1402.6), 3.35, 80.0, 132),
            // H800 SXM5: the H100 SXM5's chip and datasheet BF16/FP8 tensor rates and memory
            // (80 GB, 3.35 TB/s); it differs in NVLink (and FP64), so the H100's figures.
            "h800" => gpu("H800", 989.0, 794.5, Some(1402.6), 3.35, 80.0, 132),
            // H200 SXM: the H100's compute, 4.8 TB/s, 141 GB; MAMF 794.5, FP8 1453.4 (torch
            // 2.7.1+cu128).
            "h200" => gpu("H200", 989.0, 794.5, Some(1453.4), 4.8, 141.0, 132),
            // B200 SXM (HGX B200): 2250 TFLOP/s, 8 TB/s, 180 GB, 148 SMs; MAMF 1745, FP8
            // 3432.5 (torch 2.7.1+cu128).
            "b200" => gpu("B200", 2250.0, 1745.0, Some(3432.5), 8.0, 180.0, 148),
            // MI300X: 1307 TFLOP/s, 5.3 TB/s, 192 GB, 304 compute units (cuBLAS's tiles assumed
            // for hipBLASLt); MAMF 668.4 (torch 2.5.1, ROCm 6.3, PyTorch's TunableOp on); the
            // table's FP8 row is empty.
            "mi300x" => gpu("MI300X", 1307.0, 668.4, None, 5.3, 192.0, 304),
            _ => {
                return Err(Error::input(format!(
                    "--gpu '{name}': expected a100, a800, h100, h800, h200, b200 or mi300x"
                )))
            }
        })
    }

    /// The GPU of a GPU system (`dgx-a100:N`, `hgx-h100:N`, `hgx-h200:N`, `hgx-b200:N`,
    /// `hgx-a800:N`, `hgx-h800:N`, `mi300x:N`; `pcie:G` holds A100 PCIe cards, modelled as the
    /// A100), else the A100.
    pub fn of_system(system: Option<&GpuSystem>) -> Gpu {
        Gpu::parse(system.map_or("a100", |s| s.gpu)).expect("a preset")
    }

    /// This GPU as a product sees it with `sms` of its SMs running a communication kernel
    /// beside it: fewer tiles a wave, and the achievable rate in proportion (memory
    /// bandwidth unchanged).
    pub fn reserving(&self, sms: u32) -> Gpu {
        let left = self.sms.saturating_sub(sms).max(1);
        Gpu {
            matmul_flops: self.matmul_flops * left as f64 / self.sms as f64,
            sms: left,
            ..self.clone()
        }
    }

    /// This GPU as its FP8 products see it: the FP8 matmul rate in place of the BF16 one.
    pub fn fp8(&self) -> Option<Gpu> {
        self.fp8_matmul_flops.map(|rate| Gpu {
            matmul_flops: rate,
            ..self.clone()
        })
    }

    /// Seconds of work of `flops` at the achievable matmul rate that moves `bytes`.
    fn matmul_rate(&self, flops: f64, bytes: f64) -> f64 {
        (flops / self.matmul_flops).max(bytes / (self.memory_bandwidth * MEMORY_EFFICIENCY))
    }

    /// The share of the achievable rate a product's shape leaves: its useful outputs over the
    /// tile slots of the waves it takes, with the better of cuBLAS's two large tiles. A product
    /// smaller than one wave of them gets smaller tiles or a split of its inner dimension from
    /// cuBLAS, whose rates the guide does not give: it is charged nothing.
    fn quantisation(&self, p: &Product) -> f64 {
        let sms = self.sms as f64;
        TILES
            .iter()
            .map(|&(tm, tn)| {
                let tiles = p.batch * (p.m / tm).ceil() * (p.n / tn).ceil();
                if tiles < sms {
                    return 1.0;
                }
                let waves = (tiles / sms).ceil();
                p.batch * p.m * p.n / (waves * sms * tm * tn)
            })
            .fold(0.0, f64::max)
    }

    /// Seconds of a matrix product: its FLOPs at the achievable rate its shape leaves, or its
    /// bytes at the memory rate, whichever is longer.
    fn matmul(&self, p: Product) -> f64 {
        self.matmul_rate(p.flops() / self.quantisation(&p), p.bytes())
    }

    /// Seconds of element-wise work moving `bytes`.
    fn stream(&self, bytes: f64) -> f64 {
        bytes / (self.memory_bandwidth * MEMORY_EFFICIENCY)
    }
}

/// How attention is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// Scores materialised in memory, softmax and dropout over them (Megatron before 2022).
    Standard,
    /// FlashAttention: one fused kernel at the matmul rate, no score matrix in memory.
    Flash,
}

impl Attention {
    pub fn parse(text: &str) -> Result<Attention, Error> {
        match text {
            "standard" => Ok(Attention::Standard),
            "flash" => Ok(Attention::Flash),
            _ => Err(Error::input(format!(
                "--attention '{text}': expected standard or flash"
            ))),
        }
    }
}

/// What the cost of a step depends on besides the model and the GPU.
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub tp: u64,
    /// Context parallelism: a rank computes 1/cp of each sequence's tokens (its queries against
    /// every key).
    pub cp: u64,
    pub micro_batch: u64,
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    pub attention: Attention,
    /// The linear products in FP8 ([`Precision::Fp8`]).
    pub fp8: bool,
}

/// Seconds one GPU spends on one layer for one micro-batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerTime {
    pub forward: f64,
    /// Backward, including what is recomputed before it.
    pub backward: f64,
}

/// The matrix product `batch x (m x k) . (k x n)` of BF16 inputs.
fn product(batch: f64, m: f64, n: f64, k: f64) -> Product {
    Product {
        batch,
        m,
        n,
        k,
        element: HALF,
    }
}

/// The two products backpropagation runs for `p` (`C = A . B`): the gradient of its left
/// operand, `dA = dC . B^T` (m x k, summing over n), and of its right one, `dB = A^T . dC`
/// (k x n, summing over m). Same FLOPs as `p` each, but their own shapes, so their own waves.
fn gradients(p: Product) -> [Product; 2] {
    [
        Product {
            n: p.k,
            k: p.n,
            ..p
        },
        Product {
            m: p.k,
            k: p.m,
            ..p
        },
    ]
}

/// Seconds of `products` forward, and of their gradients.
fn forward_and_backward(gpu: &Gpu, products: &[Product]) -> (f64, f64) {
    let forward = products.iter().map(|&p| gpu.matmul(p)).sum();
    let backward = products
        .iter()
        .flat_map(|&p| gradients(p))
        .map(|g| gpu.matmul(g))
        .sum();
    (forward, backward)
}

/// Seconds of one linear layer's three products on one GPU for one micro-batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearTime {
    pub forward: f64,
    /// The gradient of its input.
    pub input_gradient: f64,
    /// The gradient of its weight.
    pub weight_gradient: f64,
}

impl std::ops::Add for LinearTime {
    type Output = LinearTime;

    fn add(self, other: LinearTime) -> LinearTime {
        LinearTime {
            forward: self.forward + other.forward,
            input_gradient: self.input_gradient + other.input_gradient,
            weight_gradient: self.weight_gradient + other.weight_gradient,
        }
    }
}

impl LinearTime {
    fn of(gpu: &Gpu, p: Product) -> LinearTime {
        let [input, weight] = gradients(p);
        LinearTime {
            forward: gpu.matmul(p),
            input_gradient: gpu.matmul(input),
            weight_gradient: gpu.matmul(weight),
        }
    }
}

/// One layer's work on one GPU for one micro-batch, in seconds, part by part: what tensor
/// parallelism's overlap of products with communication needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerParts {
    /// The four linear layers in forward order: query-key-value, attention output, MLP up (and
    /// gate), MLP down; a mixture of experts' MLP products are its routed experts' and its
    /// shared experts' together.
    pub linear: [LinearTime; 4],
    /// The same products with `reserved` SMs left to a communication kernel beside them.
    pub linear_reserved: [LinearTime; 4],
    /// The attention core (forward; backward).
    pub core: (f64, f64),
    /// Element-wise work (forward; backward, which moves twice the forward's bytes), with
    /// FP8's casts.
    pub elementwise: (f64, f64),
}

impl LayerParts {
    /// The forward: every product, the attention core and the element-wise work.
    pub fn forward(&self) -> f64 {
        self.linear.iter().map(|l| l.forward).sum::<f64>() + self.core.0 + self.elementwise.0
    }

    /// The backward, without what is recomputed before it.
    pub fn backward(&self) -> f64 {
        self.linear
            .iter()
            .map(|l| l.input_gradient + l.weight_gradient)
            .sum::<f64>()
            + self.core.1
            + self.elementwise.1
    }
}

/// One layer's work, split by part, with `reserved` SMs of the GPU taken by communication
/// kernels for the `linear_reserved` products.
pub fn layer_parts(model: &LlmModel, gpu: &Gpu, w: &Work, reserved: u32) -> LayerParts {
    let t = w.tp as f64;
    let b = w.micro_batch as f64;
    let (s, h) = (model.seq as f64, model.hidden as f64);
    let queries = s / w.cp as f64;
    let tokens = b * queries;
    let heads = model.heads as f64 / t;
    // What every tensor rank holds whole splits over them under sequence parallelism.
    let replicated_share = if w.sequence_parallel { t } else { 1.0 };
    let (dh, dv) = (model.head_dim() as f64, model.value_dim() as f64);
    let queries_width = model.query_width() as f64;
    let keys_values = (model.key_width() + model.value_width()) as f64;
    let output_width = model.output_width() as f64;
    let ffn = model.ffn as f64;
    let up = if model.gated_mlp { 2.0 } else { 1.0 };
    // Tokens each GPU's experts see: top_k per token on average, spread over the experts.
    let expert_tokens = tokens * model.top_k as f64;
    // FP8 products read one-byte inputs at the FP8 rate.
    let (linear_gpu, element) = match (w.fp8, gpu.fp8()) {
        (true, Some(fp8)) => (fp8, 1.0),
        _ => (gpu.clone(), HALF),
    };
    // The query-key-value products: one, or latent attention's down projections (duplicated on
    // every tensor rank, over its share of the tokens under sequence parallelism, all of them
    // otherwise) and its up projections (split by heads).
    let qkv_products: Vec<Product> = match model.latent {
        None => vec![product(1.0, tokens, (queries_width + keys_values) / t, h)],
        Some(latent) => {
            let down_tokens = tokens / replicated_share;
            let kv_rank = latent.kv_rank as f64;
            let rope_keys = model.heads as f64 * latent.rope as f64;
            let mut products = vec![
                product(1.0, down_tokens, kv_rank + latent.rope as f64, h),
                product(
                    1.0,
                    tokens,
                    (queries_width - rope_keys + output_width) / t,
                    kv_rank,
                ),
            ];
            products.extend(match latent.q_rank {
                Some(q_rank) => vec![
                    product(1.0, down_tokens, q_rank as f64, h),
                    product(1.0, tokens, queries_width / t, q_rank as f64),
                ],
                None => vec![product(1.0, tokens, queries_width / t, h)],
            });
            products
        }
    }
    .into_iter()
    .map(|p| Product { element, ..p })
    .collect();
    let products = [
        product(1.0, tokens, h, output_width / t),
        product(1.0, expert_tokens, up * ffn / t, h),
        product(1.0, expert_tokens, h, ffn / t),
    ]
    .map(|p| Product { element, ..p });
    // Shared experts: an MLP every token meets, beside the routed experts' products.
    let shared = model.shared_ffn as f64;
    let shared_products = (shared > 0.0).then(|| {
        [
            product(1.0, tokens, up * shared / t, h),
            product(1.0, tokens, h, shared / t),
        ]
        .map(|p| Product { element, ..p })
    });
    let linear_times = |gpu: &Gpu| {
        let [proj, up_proj, down] = products.map(|p| LinearTime::of(gpu, p));
        let qkv = qkv_products
            .iter()
            .map(|&p| LinearTime::of(gpu, p))
            .reduce(|a, b| a + b)
            .expect("a query-key-value product");
        let mut times = [qkv, proj, up_proj, down];
        if let Some([shared_up, shared_down]) = shared_products {
            times[2] = times[2] + LinearTime::of(gpu, shared_up);
            times[3] = times[3] + LinearTime::of(gpu, shared_down);
        }
        times
    };
    let rest = linear_gpu.reserving(reserved);
    let scores = b * heads * queries * s;
    let core = match w.attention {
        // The whole score matrix, a window's mask or not.
        Attention::Standard => {
            // Scale-mask-softmax reads and writes the scores; dropout, if the model has it,
            // reads them and writes them and a one-byte mask; their backward moves twice as
            // much.
            let (products, gradients) = forward_and_backward(
                gpu,
                &[
                    product(b * heads, queries, s, dh),
                    product(b * heads, queries, dv, s),
                ],
            );
            let dropout = if model.dropout { 2.5 } else { 0.0 };
            let stream = gpu.stream(HALF * (2.0 + dropout) * scores);
            (products + stream, gradients + 2.0 * stream)
        }
        // One kernel: the products at the matmul rate (scores over the query-key width, their
        // use over the value width), Q, K, V and the output read or written once; its
        // backward twice that. A sliding window skips the blocks beyond it (FlashAttention's
        // `window_size`): the scores it counts are the window's.
        Attention::Flash => {
            let scores = b * heads * queries * model.attended_keys();
            let core = gpu.matmul_rate(
                2.0 * scores * (dh + dv),
                HALF * 2.0 * tokens * heads * (dh + dv),
            );
            (core, 2.0 * core)
        }
    };
    // Two layer norms (each reads and writes tokens x hidden), two residual adds (read two,
    // write one; with dropout fused in, a half-size mask written too: PyTorch skips dropout of
    // probability 0), split over the tensor-parallel group under sequence parallelism, and the
    // activation over the MLP's width (read the up projection(s), write the result).
    let norms_and_adds = 10.0 + if model.dropout { 1.0 } else { 0.0 };
    let replicated = norms_and_adds / replicated_share;
    let mlp_width = model.top_k as f64 * ffn + shared;
    // Latent attention's norms of its latents, over the down projections' tokens.
    let latent_norms = model.latent.map_or(0.0, |l| {
        2.0 * (l.q_rank.unwrap_or(0) + l.kv_rank) as f64 / replicated_share
    });
    let elementwise = HALF * tokens * (replicated * h + latent_norms + (up + 1.0) * mlp_width / t);
    // Transformer Engine's FP8 casts. Forward: the norms and the activation write their
    // outputs in FP8 themselves (LayerNormLinear, LayerNormMLP), and each FP8 input's
    // transposed copy for its weight gradient is written (1 byte an element); the attention
    // output is cast and transposed by a kernel of its own (read 2, write 1 + 1). Backward: each
    // product's output gradient is cast and transposed (read 2, write 1 + 1).
    let (cast_forward, cast_backward) = if element < HALF {
        let [proj, up_proj, down] = products;
        let inputs = |p: Product| p.m * p.k;
        let outputs = |p: Product| p.m * p.n;
        let shared = shared_products.as_slice().iter().flatten();
        (
            qkv_products.iter().map(|&p| inputs(p)).sum::<f64>()
                + inputs(up_proj)
                + inputs(down)
                + 4.0 * inputs(proj)
                + shared.clone().map(|&p| inputs(p)).sum::<f64>(),
            4.0 * qkv_products
                .iter()
                .chain(&products)
                .chain(shared)
                .map(|&p| outputs(p))
                .sum::<f64>(),
        )
    } else {
        (0.0, 0.0)
    };
    LayerParts {
        linear: linear_times(&linear_gpu),
        linear_reserved: linear_times(&rest),
        core,
        elementwise: (
            gpu.stream(elementwise + cast_forward),
            gpu.stream(2.0 * elementwise + cast_backward),
        ),
    }
}

/// One layer's time on one GPU for one micro-batch: the backward pass computes the gradients
/// of the forward's products (input and weight gradients, each at its own shape) and moves
/// twice its element-wise bytes; full recomputation runs the forward again first, selective the
/// attention core only.
pub fn layer_time(model: &LlmModel, gpu: &Gpu, w: &Work) -> LayerTime {
    let parts = layer_parts(model, gpu, w, 0);
    let forward = parts.forward();
    let recomputed = match w.recompute {
        Recompute::Full => forward,
        Recompute::Selective => parts.core.0,
        Recompute::None => 0.0,
    };
    LayerTime {
        forward,
        backward: parts.backward() + recomputed,
    }
}

/// The logit layer and the loss on the last stage: the vocabulary product and a softmax
/// cross-entropy over the logits (read and written in FP32 twice).
pub fn head_time(model: &LlmModel, gpu: &Gpu, w: &Work) -> LayerTime {
    let t = w.tp as f64;
    let tokens = (w.micro_batch * model.seq) as f64 / w.cp as f64;
    let (h, v) = (model.hidden as f64, model.vocab as f64);
    let (logits, gradients) = forward_and_backward(gpu, &[product(1.0, tokens, v / t, h)]);
    let loss = gpu.stream(4.0 * 4.0 * tokens * v / t);
    LayerTime {
        forward: logits + loss,
        backward: gradients + 2.0 * loss,
    }
}

/// Bytes the optimizer step moves a weight, as Megatron-LM's mixed-precision optimizer runs it
/// (`Float16OptimizerWithFloat16Params`, megatron/optimizer/optimizer.py, and its distributed
/// successor): Adam over FP32 state (apex's multi-tensor FusedAdam reads the gradient, master
/// weight and two moments and writes the last three: 28), the gradients' global norm for
/// clipping (read: 4; `--clip-grad` is 1.0 by default) and the master weights copied to the
/// half-precision model (read 4, write 2). Gradients accumulated in half precision
/// (`half_gradients`, [`gradient_bytes`]) are copied to FP32 first (read 2, write 4); FP16
/// training (`fp16`) then unscales them and checks them for overflow in place (read 4, write 4:
/// `_unscale_main_grads_and_check_for_nan`). FP8 training casts the updated weights to FP8
/// and transposes them once a step (read 2, write 1 + 1: Megatron hands Transformer Engine
/// `is_first_microbatch`, which keeps them over the step's micro-batches), counted for every
/// weight, the embedding's too.
pub fn optimizer_bytes(half_gradients: bool, precision: Precision) -> f64 {
    let adam = 28.0;
    let norm = 4.0;
    let to_model = 6.0;
    let to_fp32 = if half_gradients { 6.0 } else { 0.0 };
    let unscale = if precision == Precision::Fp16 {
        8.0
    } else {
        0.0
    };
    let to_fp8 = if precision == Precision::Fp8 {
        4.0
    } else {
        0.0
    };
    adam + norm + to_model + to_fp32 + unscale + to_fp8
}

/// Bytes of a weight's gradient as Megatron accumulates it over micro-batches and reduces it
/// over the data-parallel group: FP32 in BF16 training ("bfloat16 requires gradient
/// accumulation and all-reduce to be done in fp32", megatron/training/arguments.py, which sets
/// `accumulate_allreduce_grads_in_fp32`; FP8 training is BF16 training here) unless
/// `--grad-reduce-in-bf16` asks for BF16 (`bf16_reduce`); the half-precision parameters' own
/// type in FP16 training (that flag's default off, Megatron-LM 2021 as the paper ran it).
pub fn gradient_bytes(precision: Precision, bf16_reduce: bool) -> u64 {
    if precision == Precision::Fp16 || bf16_reduce {
        2
    } else {
        4
    }
}

/// The optimizer step over `params` weights held by this GPU, moving `bytes_per_weight`
/// ([`optimizer_bytes`]).
pub fn optimizer_time(gpu: &Gpu, params: f64, bytes_per_weight: f64) -> f64 {
    gpu.stream(bytes_per_weight * params)
}

/// Adding one micro-batch's weight gradients to those of the micro-batches before it, when a
/// kernel of its own does it (PyTorch autograd's accumulation, or Megatron's hook adding
/// `param.grad` into `main_grad`, as Megatron-LM 2021, DDP and FSDP run it): the new
/// half-precision gradient and the accumulated one (of `accumulated_bytes`, [`gradient_bytes`])
/// read, the sum written, for the `params` weights this GPU holds.
pub fn gradient_accumulation_time(gpu: &Gpu, params: f64, accumulated_bytes: u64) -> f64 {
    gpu.stream((HALF + 2.0 * accumulated_bytes as f64) * params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::model::shipped;

    #[test]
    fn a_large_product_runs_at_the_measured_matmul_rate() {
        let a100 = Gpu::parse("a100").unwrap();
        // 27648 x 8192 outputs: 108 x 64 tiles of 256 x 128, whole waves on 108 SMs.
        let p = product(1.0, 27648.0, 8192.0, 8192.0);
        assert!((p.flops() / a100.matmul(p) / 271.2e12 - 1.0).abs() < 1e-12);
        // Attention's scores (k = head dim 128) are bound by memory on an A100.
        let p = product(96.0, 2048.0, 2048.0, 128.0);
        assert!(a100.matmul(p) > p.flops() / a100.matmul_flops);
    }

    /// The NVIDIA guide's wave quantisation: 144 tiles on 108 SMs take two waves, so the
    /// product runs at 144 / 216 of the rate; one more row of tiles costs nothing more.
    #[test]
    fn products_run_in_whole_waves_of_tiles() {
        let a100 = Gpu::parse("a100").unwrap();
        // 2048 x 2304 outputs: 8 x 18 = 144 tiles either way round.
        let p = product(1.0, 2048.0, 2304.0, 8192.0);
        assert!((a100.quantisation(&p) - 144.0 / 216.0).abs() < 1e-12);
        let bigger = product(1.0, 2048.0 + 256.0, 2304.0, 8192.0);
        assert!((a100.matmul(bigger) / a100.matmul(p) - 1.0).abs() < 1e-12);
        // A partial tile idles its unused part: 100 rows fill 100/128 of a row of 128 x 256
        // tiles (one wave of 108).
        let thin = product(1.0, 100.0, 108.0 * 256.0, 8192.0);
        assert!((a100.quantisation(&thin) - 100.0 / 128.0).abs() < 1e-12);
        // Less than a wave of large tiles: cuBLAS's smaller tiles, not charged.
        let small = product(1.0, 1024.0, 16.0, 1024.0);
        assert_eq!(a100.quantisation(&small), 1.0);
    }

    /// Backpropagation's two products have their own shapes: a forward of whole waves (27648 x
    /// 8192 outputs) whose weight gradient (2304 x 8192: 9 x 64 = 576 tiles on 108 SMs) leaves
    /// a wave 1/3 idle takes 1 + 648/576 times the forward, not twice it.
    #[test]
    fn gradients_run_at_their_own_shapes() {
        let a100 = Gpu::parse("a100").unwrap();
        let p = product(1.0, 27648.0, 8192.0, 2304.0);
        for g in gradients(p) {
            assert_eq!(g.flops(), p.flops());
        }
        let (forward, backward) = forward_and_backward(&a100, &[p]);
        assert!((backward / forward - (1.0 + 648.0 / 576.0)).abs() < 1e-12);
    }

    /// FlashAttention's kernel skips the blocks beyond a sliding window: at 32K tokens (its
    /// products compute-bound) its time falls with the keys counted; scores kept in memory are
    /// the whole matrix, window or not; nothing else in the layer changes.
    #[test]
    fn a_window_shortens_flash_attention_only() {
        let full = LlmModel {
            seq: 32768,
            ..shipped("llama3_8b.yaml")
        };
        let windowed = LlmModel {
            attention_window: Some(4096),
            windowed_layers: full.layers,
            ..full.clone()
        };
        let a100 = Gpu::parse("a100").unwrap();
        let work = |attention| Work {
            tp: 8,
            cp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::None,
            attention,
            fp8: false,
        };
        let flash = work(Attention::Flash);
        let (a, b) = (
            layer_parts(&full, &a100, &flash, 0),
            layer_parts(&windowed, &a100, &flash, 0),
        );
        let share = windowed.attended_keys() / 32768.0;
        assert!((b.core.0 / a.core.0 - share).abs() < 1e-12);
        assert!((b.core.1 / a.core.1 - share).abs() < 1e-12);
        assert_eq!((a.linear, a.elementwise), (b.linear, b.elementwise));
        let standard = work(Attention::Standard);
        assert_eq!(
            layer_parts(&full, &a100, &standard, 0),
            layer_parts(&windowed, &a100, &standard, 0)
        );
    }

    /// Latent attention's query-key-value products (DeepSeek-V3's shape, 2 tensor ranks): the
    /// down projections whole on every rank, over its share of the tokens under sequence
    /// parallelism and over every token without it, the up projections split by heads; the
    /// output projection reads the value width. Its core scores over the query-key width (192)
    /// and uses them over the value width (128), as the model's FLOPs count it.
    #[test]
    fn latent_attention_duplicates_its_down_projections() {
        let model = shipped("deepseek_v3.yaml");
        let h100 = Gpu::parse("h100").unwrap();
        let tokens = 4096.0;
        let work = |sequence_parallel| Work {
            tp: 2,
            cp: 1,
            micro_batch: 1,
            sequence_parallel,
            recompute: Recompute::None,
            attention: Attention::Flash,
            fp8: false,
        };
        let qkv = |down_tokens: f64| {
            [
                product(1.0, down_tokens, 512.0 + 64.0, 7168.0),
                product(1.0, tokens, 128.0 * (128.0 + 128.0) / 2.0, 512.0),
                product(1.0, down_tokens, 1536.0, 7168.0),
                product(1.0, tokens, 128.0 * 192.0 / 2.0, 1536.0),
            ]
            .map(|p| LinearTime::of(&h100, p))
            .into_iter()
            .reduce(|a, b| a + b)
            .unwrap()
        };
        let output = LinearTime::of(&h100, product(1.0, tokens, 7168.0, 128.0 * 128.0 / 2.0));
        for (sequence_parallel, down_tokens) in [(true, tokens / 2.0), (false, tokens)] {
            let parts = layer_parts(&model, &h100, &work(sequence_parallel), 0);
            assert_eq!(parts.linear[0], qkv(down_tokens));
            assert_eq!(parts.linear[1], output);
        }
        let core = layer_parts(&model, &h100, &work(true), 0).core.0;
        let scores = 64.0 * tokens * tokens;
        let flops = 2.0 * scores * (192.0 + 128.0);
        assert_eq!(flops, model.attention_core_flops() / 2.0);
        let bytes = HALF * 2.0 * tokens * 64.0 * (192.0 + 128.0);
        assert_eq!(core, h100.matmul_rate(flops, bytes));
    }

    /// Shared experts are a dense MLP every token meets beside the routed experts: a layer's
    /// MLP products with them take their time plus exactly that of a dense model's MLP of the
    /// shared width, and its activation function moves that MLP's bytes too.
    #[test]
    fn shared_experts_add_a_dense_mlp_of_their_width() {
        let routed = shipped("mixtral_8x7b.yaml");
        let shared = LlmModel {
            shared_ffn: 2 * 1408,
            ..routed.clone()
        };
        let dense = LlmModel {
            experts: 1,
            top_k: 1,
            ffn: 2 * 1408,
            ..routed.clone()
        };
        let h100 = Gpu::parse("h100").unwrap();
        let work = Work {
            tp: 2,
            cp: 1,
            micro_batch: 1,
            sequence_parallel: true,
            recompute: Recompute::None,
            attention: Attention::Flash,
            fp8: false,
        };
        let [with, without, alone] =
            [&shared, &routed, &dense].map(|m| layer_parts(m, &h100, &work, 0));
        for i in [2, 3] {
            assert_eq!(with.linear[i], without.linear[i] + alone.linear[i]);
        }
        assert_eq!(with.linear[..2], without.linear[..2]);
        assert_eq!(with.core, without.core);
        let (h, t) = (4096.0, 2.0);
        let activation = HALF * 4096.0 * 3.0 * 2816.0 / t;
        assert!(
            (with.elementwise.0 - without.elementwise.0 - h100.stream(activation)).abs() < 1e-15
        );
        assert!(shared.params() - routed.params() == 32 * 3 * 2816 * h as u64);
    }

    #[test]
    fn gpu_systems_name_their_gpu() {
        let of = |spec| Gpu::of_system(GpuSystem::parse(spec).unwrap().as_ref()).name;
        assert_eq!(of("hgx-h100:4"), "H100");
        assert_eq!(of("hgx-b200:1"), "B200");
        assert_eq!(of("mi300x:2"), "MI300X");
        assert_eq!(of("dgx-a100:2"), "A100");
        assert_eq!(of("ring:8"), "A100");
    }

    #[test]
    fn unknown_gpus_are_refused() {
        assert!(Gpu::parse("v100")
            .unwrap_err()
            .to_string()
            .contains("--gpu"));
    }
}

/// Measured times of one layer, replacing the roofline: per tensor-parallel size and
/// micro-batch, the forward and the backward (with whatever it recomputes) in milliseconds, as
/// a profiler reports them (CSV columns `tp,micro_batch,forward_ms,backward_ms`).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTimes {
    pub file: String,
    rows: Vec<(u64, u64, LayerTime)>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerTimeRow {
    tp: u64,
    micro_batch: u64,
    forward_ms: f64,
    backward_ms: f64,
}

impl LayerTimes {
    /// Reads the CSV, naming the file and line of a bad row.
    pub fn load(path: &std::path::Path) -> Result<LayerTimes, Error> {
        let file = path.display().to_string();
        let mut reader = csv::Reader::from_path(path)
            .map_err(|e| Error::input(format!("{file}: cannot read layer times: {e}")))?;
        let mut rows = Vec::new();
        for (i, row) in reader.deserialize::<LayerTimeRow>().enumerate() {
            let line = i + 2;
            let row = row.map_err(|e| Error::input(format!("{file}: line {line}: {e}")))?;
            let ok = |v: f64| v.is_finite() && v > 0.0;
            if row.tp == 0 || row.micro_batch == 0 || !ok(row.forward_ms) || !ok(row.backward_ms) {
                return Err(Error::input(format!(
                    "{file}: line {line}: tp and micro_batch must be at least 1 and the times \
                     positive"
                )));
            }
            let time = LayerTime {
                forward: row.forward_ms / 1e3,
                backward: row.backward_ms / 1e3,
            };
            rows.push((row.tp, row.micro_batch, time));
        }
        if rows.is_empty() {
            return Err(Error::input(format!("{file}: no layer times")));
        }
        Ok(LayerTimes { file, rows })
    }

    /// The measured layer for tensor parallelism `tp` at micro-batch `b`.
    pub fn get(&self, tp: u64, b: u64) -> Result<LayerTime, Error> {
        self.rows
            .iter()
            .find(|(t, m, _)| *t == tp && *m == b)
            .map(|(_, _, time)| *time)
            .ok_or_else(|| {
                Error::input(format!(
                    "{}: no row for tp {tp}, micro_batch {b}",
                    self.file
                ))
            })
    }
}
