//! A decoder-only transformer's shape, and what follows from the shape alone: widths,
//! parameters, the activations a layer keeps, and FLOPs.

use crate::Error;

/// Multi-head latent attention's compression (DeepSeek-V2, section 2.1): keys and values (and
/// queries, where `q_rank` is set) are projected down to a latent, normalised, and projected up
/// per head; a rotary part of `rope` per head is computed beside the keys' latent and shared by
/// every head. Megatron-core's down projections are duplicated on every tensor rank (`TELinear`,
/// `parallel_mode='duplicated'`, megatron/core/transformer/multi_latent_attention.py), the up
/// projections split by heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latent {
    pub q_rank: Option<u64>,
    pub kv_rank: u64,
    pub rope: u64,
    /// A head's value width.
    pub value: u64,
}

/// A decoder-only transformer.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmModel {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    /// Key-value heads (grouped-query attention); `heads` when absent.
    pub kv_heads: u64,
    /// Query-key width of one attention head: hidden / heads unless the file says otherwise
    /// (Gemma); with latent attention, its part without positions and its rotary part.
    pub head_dim: u64,
    /// Multi-head latent attention's compression, where the attention is latent.
    pub latent: Option<Latent>,
    /// MLP width (of one expert); 4 x hidden when absent.
    pub ffn: u64,
    pub seq: u64,
    pub vocab: u64,
    /// Experts per MoE layer (1: a dense model) and experts each token is routed to.
    pub experts: u64,
    pub top_k: u64,
    /// Shared experts' MLP width, all together (0: none), and whether a gate scales their output.
    pub shared_ffn: u64,
    pub shared_expert_gate: bool,
    /// Layers (from 0, ascending) whose MLP is dense, `dense_ffn` wide, in a model of experts.
    pub dense_layers: Vec<u64>,
    pub dense_ffn: u64,
    pub gated_mlp: bool,
    pub tied_embeddings: bool,
    /// Learned position embeddings (seq x hidden weights); false for rotary ones.
    pub learned_positions: bool,
    /// Dropout in training (masks kept for the backward pass, a kernel's work).
    pub dropout: bool,
    /// Sliding-window attention's window, tokens, and how many layers use it (0: none).
    pub attention_window: Option<u64>,
    pub windowed_layers: u64,
    /// Chunked attention's chunk, tokens, and how many layers use it (0: none).
    pub attention_chunk: Option<u64>,
    pub chunked_layers: u64,
}

/// Bytes one layer keeps for its backward pass, per token of a micro-batch, as Korthikanti et
/// al. ("Reducing Activation Recomputation in Large Transformer Models", MLSys'23, section 4.1)
/// count them for GPT, applied to the model's own shape: grouped-query attention keeps smaller
/// keys and values, a gated MLP both its up projections' outputs, each of the top_k experts a
/// token visits its own copy of the MLP's, and a model without dropout neither masks nor a
/// dropped copy of the attention probabilities. For GPT this is the paper's s b h (10 + 24/t) +
/// 5 a s^2 b / t.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerActivations {
    /// Kept whole by every tensor rank unless sequence parallelism splits it: the two norms'
    /// inputs, the inputs of the query-key-value and MLP up projections, the two dropout masks.
    pub replicated: f64,
    /// Split over the tensor ranks: queries, keys, values, the attention output (the output
    /// projection's input), the MLP's hidden activations.
    pub split: f64,
    /// Per element of the attention scores (scores kept in memory only, not FlashAttention):
    /// the softmax output, and with dropout its one-byte mask and the dropped copy.
    pub per_score: f64,
}

/// The number formats a step trains in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// BF16 weights and products (the default).
    Bf16,
    /// FP16 with loss scaling (Megatron-LM's `--fp16`, as the SC'21 scripts train): the
    /// optimizer also unscales the gradients and checks them for overflow.
    Fp16,
    /// BF16 training whose transformer layers run their linear products in FP8: Transformer
    /// Engine's recipe (E4M3 forward, E5M2 gradients: Megatron-core's `--fp8-format hybrid`).
    Fp8,
}

impl Precision {
    pub fn parse(text: &str) -> Result<Precision, Error> {
        match text {
            "bf16" => Ok(Precision::Bf16),
            "fp16" => Ok(Precision::Fp16),
            "fp8" => Ok(Precision::Fp8),
            _ => Err(Error::input(format!(
                "--precision '{text}': expected bf16, fp16 or fp8"
            ))),
        }
    }
}

/// How much of the forward pass the backward pass runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recompute {
    /// Every layer's forward again (Megatron's full activation recomputation).
    Full,
    /// The attention core only (softmax and its two batched products).
    Selective,
    None,
}

impl Recompute {
    pub fn parse(text: &str) -> Result<Recompute, Error> {
        match text {
            "full" => Ok(Recompute::Full),
            "selective" => Ok(Recompute::Selective),
            "none" => Ok(Recompute::None),
            _ => Err(Error::input(format!(
                "--recompute '{text}': expected full, selective or none"
            ))),
        }
    }
}

impl LlmModel {
    pub fn head_dim(&self) -> u64 {
        self.head_dim
    }

    /// Width of the queries: heads x head_dim, the hidden size but where heads are set wider or
    /// narrower.
    pub fn query_width(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Value width of one attention head: `head_dim`, but latent attention's own.
    pub fn value_dim(&self) -> u64 {
        self.latent.map_or(self.head_dim, |l| l.value)
    }

    /// Width of the keys: one head_dim a key-value head.
    pub fn key_width(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    /// Width of the values: one value_dim a key-value head.
    pub fn value_width(&self) -> u64 {
        self.kv_heads * self.value_dim()
    }

    /// Width of what the query-key-value products read across the tensor group, and of the
    /// gradient that comes back: the hidden state, or with latent attention its latents, which
    /// Megatron-core gathers (and whose gradients it reduces) in place of the hidden state: the
    /// queries' (the hidden state where queries are not compressed), the keys' and values', and
    /// the rotary key every head shares.
    pub fn attention_input_width(&self) -> u64 {
        self.latent.map_or(self.hidden, |l| {
            l.q_rank.unwrap_or(self.hidden) + l.kv_rank + l.rope
        })
    }

    /// Width of the attention's output (the output projection's input): one value_dim a head.
    pub fn output_width(&self) -> u64 {
        self.heads * self.value_dim()
    }

    /// What one layer keeps for its backward pass (see [`LayerActivations`]).
    pub fn layer_activations(&self) -> LayerActivations {
        self.layer_activations_in(Precision::Bf16)
    }

    /// [`Self::layer_activations`] in `precision`: FP8 training keeps the four linear layers'
    /// inputs in FP8 (Transformer Engine saves each as the transposed FP8 copy its weight
    /// gradient reads), one byte an element where BF16 keeps two.
    pub fn layer_activations_in(&self, precision: Precision) -> LayerActivations {
        const HALF: f64 = 2.0;
        let input = if precision == Precision::Fp8 {
            1.0
        } else {
            HALF
        };
        let h = self.hidden as f64;
        let q = self.query_width() as f64;
        let keys_values = (self.key_width() + self.value_width()) as f64;
        let out = self.output_width() as f64;
        // Latent attention keeps its latents, before their norms and after (the up
        // projections' inputs).
        let latents = self
            .latent
            .map_or(0.0, |l| (l.q_rank.unwrap_or(0) + l.kv_rank) as f64);
        let (ffn, experts) = (self.ffn as f64, self.top_k as f64);
        // Shared experts keep their own up projections' input (the routed experts keep their
        // permuted copies) and their hidden activations.
        let (shared_input, shared) = match self.shared_ffn {
            0 => (0.0, 0.0),
            width => (h, width as f64),
        };
        let up = if self.gated_mlp { 2.0 } else { 1.0 };
        let masks = if self.dropout { 1.0 } else { 0.0 };
        // Linear inputs: query-key-value and MLP-up (replicated), attention output and MLP-down
        // (split).
        let mlp = experts * ffn + shared;
        LayerActivations {
            replicated: HALF * (2.0 * h + latents)
                + input * (h + latents + experts * h + shared_input)
                + 2.0 * masks * h,
            split: HALF * (q + keys_values + up * mlp) + input * (out + mlp),
            per_score: HALF + 3.0 * masks,
        }
    }

    /// Attention weights of one layer: Q, K, V and the output projection; with latent
    /// attention, the down projections (queries', and keys' and values' with the rotary key),
    /// the up projections and the output projection.
    pub fn attention_params(&self) -> u64 {
        let (h, q, out) = (self.hidden, self.query_width(), self.output_width());
        match self.latent {
            None => h * (q + self.key_width() + self.value_width()) + out * h,
            Some(latent) => {
                let queries = latent.q_rank.map_or(h * q, |r| r * q);
                let keys_values = latent.kv_rank * (q - self.heads * latent.rope + out);
                self.duplicated_attention_params() + queries + keys_values + out * h
            }
        }
    }

    /// Attention weights every tensor rank holds whole: latent attention's down projections
    /// (Megatron-core duplicates them); none otherwise.
    pub fn duplicated_attention_params(&self) -> u64 {
        self.latent.map_or(0, |l| {
            self.hidden * (l.q_rank.unwrap_or(0) + l.kv_rank + l.rope)
        })
    }

    /// Weights of one layer's norms, held whole by every tensor rank: two layer norms (weight
    /// and bias each), and latent attention's RMSNorms of its latents (a weight each).
    pub fn norm_params(&self) -> u64 {
        4 * self.hidden + self.latent.map_or(0, |l| l.q_rank.unwrap_or(0) + l.kv_rank)
    }

    /// MLP weights of one expert (of the layer's MLP when dense).
    pub fn mlp_params(&self) -> u64 {
        self.mlp_params_of(self.ffn)
    }

    /// Weights of an MLP `width` wide, of this model's kind (gated or not).
    fn mlp_params_of(&self, width: u64) -> u64 {
        let matrices = if self.gated_mlp { 3 } else { 2 };
        matrices * self.hidden * width
    }

    /// Weights of the shared experts, with their gate: every token meets them.
    pub fn shared_expert_params(&self) -> u64 {
        let gate = if self.shared_expert_gate {
            self.hidden
        } else {
            0
        };
        self.mlp_params_of(self.shared_ffn) + gate
    }

    /// Weights of one layer (every expert, the shared ones, the router, two layer norms).
    pub fn layer_params(&self) -> u64 {
        let router = if self.experts > 1 {
            self.hidden * self.experts
        } else {
            0
        };
        self.attention_params()
            + self.experts * self.mlp_params()
            + self.shared_expert_params()
            + router
            + self.norm_params()
    }

    /// Weights of one layer a rank holds with `tp` tensor and `ep` expert ranks: its share of
    /// the attention, of its experts and of the shared experts, and the norms and latent
    /// attention's down projections whole (the router left out, as the gradient buckets and
    /// memory estimate leave it).
    pub fn rank_layer_params(&self, tp: u64, ep: u64) -> u64 {
        let experts = if self.experts > 1 {
            self.experts / ep
        } else {
            1
        };
        let duplicated = self.duplicated_attention_params();
        (self.attention_params() - duplicated
            + experts * self.mlp_params()
            + self.shared_expert_params())
            / tp
            + duplicated
            + self.norm_params()
    }

    /// Every weight: layers, the token embedding (and the output layer when untied), learned
    /// position embeddings, final norm.
    pub fn params(&self) -> u64 {
        let embeddings = if self.tied_embeddings { 1 } else { 2 };
        let positions = if self.learned_positions { self.seq } else { 0 };
        let dense = self.dense_layers.len() as u64;
        (self.layers - dense) * self.layer_params()
            + dense * self.dense_layer_model().layer_params()
            + embeddings * self.vocab * self.hidden
            + positions * self.hidden
            + 2 * self.hidden
    }

    /// Forward FLOPs of one layer for one sequence: 2 per multiply-add of each weight a token
    /// meets (top_k experts' MLPs and the shared experts) and the attention scores and their use
    /// (4 s^2 h).
    pub fn layer_forward_flops(&self) -> f64 {
        let s = self.seq as f64;
        let weights = (self.attention_params()
            + self.top_k * self.mlp_params()
            + self.shared_expert_params()) as f64;
        2.0 * s * weights + self.attention_core_flops()
    }

    /// FLOPs of the attention core (scores over the query-key width and their use over the
    /// value width) of one layer, one sequence, forward.
    pub fn attention_core_flops(&self) -> f64 {
        let s = self.seq as f64;
        2.0 * s * self.attended_keys() * (self.query_width() + self.output_width()) as f64
    }

    /// Keys a query's scores are counted over, on average over the layers: the whole sequence
    /// (the s x s scores of Narayanan et al.'s count, which does not halve for the causal mask),
    /// or in a windowed layer that count shrunk by the window as the causal triangle's area
    /// shrinks to the band's. With a window `w` below the sequence `s` a query attends to
    /// `w - w^2 / (2 s)` keys on average against the triangle's `s / 2`, so the count is
    /// `2 w - w^2 / s`, which is `s` at `w = s`. A chunked layer's query attends within its
    /// chunk: chunks of `c` (and a last one of the remainder `r`) cover `((s - r) c + r^2) / 2`
    /// of the triangle's `s^2 / 2`, so the count is `((s - r) c + r^2) / s`: `c` where chunks
    /// divide the sequence, `s` where one chunk holds it.
    pub fn attended_keys(&self) -> f64 {
        let s = self.seq as f64;
        let windowed = match self.attention_window {
            Some(w) if (w as f64) < s => {
                let w = w as f64;
                2.0 * w - w * w / s
            }
            _ => s,
        };
        let chunked = self.attention_chunk.map_or(s, |c| {
            let r = (self.seq % c) as f64;
            ((s - r) * c as f64 + r * r) / s
        });
        let layers = self.layers as f64;
        let (window_share, chunk_share) = (
            self.windowed_layers as f64 / layers,
            self.chunked_layers as f64 / layers,
        );
        window_share * windowed + chunk_share * chunked + (1.0 - window_share - chunk_share) * s
    }

    /// FLOPs of one training iteration over `batch` sequences, counted as Narayanan et al.
    /// (SC'21) count them in their Eq. (3): forward, backward (twice the forward) and the
    /// recomputed forward, plus the logit layer's forward and backward. For a dense GPT with
    /// full recomputation this is exactly 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
    pub fn iteration_flops(&self, batch: u64, recompute: Recompute) -> f64 {
        let per_layer = |model: &LlmModel| {
            let layer = model.layer_forward_flops();
            match recompute {
                Recompute::Full => 4.0 * layer,
                Recompute::Selective => 3.0 * layer + model.attention_core_flops(),
                Recompute::None => 3.0 * layer,
            }
        };
        let dense = self.dense_layers.len() as f64;
        let layers = (self.layers as f64 - dense) * per_layer(self)
            + dense * per_layer(&self.dense_layer_model());
        let logits = 6.0 * (self.seq * self.hidden * self.vocab) as f64;
        batch as f64 * (layers + logits)
    }

    /// Whether layer `i` (from 0) has a dense MLP: every layer of a dense model, the
    /// `dense_layers` of a model of experts.
    pub fn is_dense_layer(&self, i: u64) -> bool {
        self.experts == 1 || self.dense_layers.binary_search(&i).is_ok()
    }

    /// The model as its dense layers are: no experts, the MLP `dense_ffn` wide (itself for a
    /// dense model), so that every per-layer count applies to them.
    pub fn dense_layer_model(&self) -> LlmModel {
        if self.experts == 1 {
            return self.clone();
        }
        LlmModel {
            experts: 1,
            top_k: 1,
            shared_ffn: 0,
            shared_expert_gate: false,
            dense_layers: Vec::new(),
            ffn: self.dense_ffn,
            ..self.clone()
        }
    }

    /// Layers `range` as runs of one kind, in order: (dense, how many).
    pub fn layer_runs(&self, range: std::ops::Range<u64>) -> Vec<(bool, u64)> {
        let mut runs: Vec<(bool, u64)> = Vec::new();
        for i in range {
            let dense = self.is_dense_layer(i);
            match runs.last_mut() {
                Some((kind, n)) if *kind == dense => *n += 1,
                _ => runs.push((dense, 1)),
            }
        }
        runs
    }
}
