//! A decoder-only language model's shape (GPT, Llama, mixture-of-experts), read from YAML, and
//! what follows from the shape alone: parameters and FLOPs.

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use crate::Error;

/// The model file's keys (`workloads/llm/*.yaml`); Megatron-LM's argument names are taken
/// too (`num_layers`, `hidden_size`, `num_attention_heads`, `num_query_groups`,
/// `kv_channels`, `ffn_hidden_size`, `seq_length`, `padded_vocab_size`, `num_experts`,
/// `moe_router_topk`, `moe_shared_expert_intermediate_size`, and multi-head latent attention's
/// `q_lora_rank`, `kv_lora_rank`, `qk_head_dim`, `qk_pos_emb_head_dim`, `v_head_dim`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelFile {
    pub name: Option<String>,
    #[serde(alias = "num_layers")]
    pub layers: u64,
    #[serde(alias = "hidden_size")]
    pub hidden: u64,
    #[serde(alias = "num_attention_heads")]
    pub heads: u64,
    #[serde(alias = "num_query_groups")]
    pub kv_heads: Option<u64>,
    /// Width of one attention head; hidden / heads when absent.
    #[serde(alias = "kv_channels")]
    pub head_dim: Option<u64>,
    #[serde(alias = "ffn_hidden_size")]
    pub ffn: Option<u64>,
    #[serde(alias = "seq_length")]
    pub seq: u64,
    #[serde(alias = "padded_vocab_size", alias = "vocab_size")]
    pub vocab: u64,
    #[serde(alias = "num_experts")]
    pub experts: Option<u64>,
    #[serde(alias = "moe_router_topk")]
    pub top_k: Option<u64>,
    /// Shared experts' MLP width, all of them together: a dense MLP every token meets beside
    /// the experts it is routed to (Qwen-MoE, DeepSeekMoE, Llama 4).
    #[serde(alias = "moe_shared_expert_intermediate_size")]
    pub shared_ffn: Option<u64>,
    /// Whether a sigmoid gate (one weight a hidden unit) scales the shared experts' output
    /// (Qwen-MoE's `shared_expert_gate`).
    pub shared_expert_gate: Option<bool>,
    /// Layers (from 0) whose MLP is dense in a model of experts (DeepSeek's first layers).
    pub dense_layers: Option<Vec<u64>>,
    /// Megatron's `moe_layer_freq`: one expert layer every N layers (layer i when i mod N is
    /// 0), or a list of 1 (experts) and 0 (dense), a layer each.
    pub moe_layer_freq: Option<Value>,
    /// The dense layers' MLP width; `ffn` when absent.
    pub dense_ffn: Option<u64>,
    /// Gated MLP (SwiGLU: three matrices) as Llama has; GPT's is two.
    pub gated_mlp: Option<bool>,
    /// Whether the output layer shares the token embedding's weights (GPT: yes, Llama: no).
    pub tied_embeddings: Option<bool>,
    /// Learned position embeddings (GPT) or rotary ones without weights (Llama).
    pub position_embeddings: Option<String>,
    /// Whether training drops out attention probabilities and block outputs (Megatron's GPT
    /// default, 0.1 each) or not (Llama, Mixtral).
    pub dropout: Option<bool>,
    /// Sliding-window attention: each query attends to at most this many tokens, itself and
    /// those before it (Mistral 7B v0.1's 4096, Gemma 2's local layers).
    #[serde(alias = "sliding_window")]
    pub attention_window: Option<u64>,
    /// How many of the layers attend through the window (the rest attend to the whole
    /// sequence); every layer when absent.
    pub windowed_layers: Option<u64>,
    /// Chunked attention: the sequence cut into chunks of this many tokens, each query
    /// attending to those before it in its own chunk only (Llama 4's `attention_chunk_size`).
    #[serde(alias = "attention_chunk_size")]
    pub attention_chunk: Option<u64>,
    /// How many of the layers attend by chunks (other than those a window takes); every layer
    /// when absent.
    pub chunked_layers: Option<u64>,
    /// Megatron's `--multi-latent-attention`: on where `kv_lora_rank` is given.
    pub multi_latent_attention: Option<bool>,
    /// Multi-head latent attention (DeepSeek-V2/V3): the width keys and values are compressed
    /// to; its presence makes the attention latent.
    pub kv_lora_rank: Option<u64>,
    /// The width queries are compressed to; queries projected from the hidden state directly
    /// when absent (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u64>,
    /// A head's query-key width without positions (Megatron's default 128).
    #[serde(alias = "qk_nope_head_dim")]
    pub qk_head_dim: Option<u64>,
    /// A head's query-key width carrying rotary positions, its keys' part shared by the heads
    /// (Megatron's default 64).
    #[serde(alias = "qk_rope_head_dim")]
    pub qk_pos_emb_head_dim: Option<u64>,
    /// A head's value width (Megatron's default 128).
    pub v_head_dim: Option<u64>,
}

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

/// The dense layers a model file names, directly (`dense_layers`) or by Megatron's
/// `moe_layer_freq`, ascending.
fn dense_layers(file: &ModelFile) -> Result<Vec<u64>, String> {
    let layers = file.layers;
    let mut dense = match (&file.dense_layers, &file.moe_layer_freq) {
        (Some(_), Some(_)) => {
            return Err("give 'dense_layers' or 'moe_layer_freq', not both".into());
        }
        (Some(list), None) => list.clone(),
        (None, None) => Vec::new(),
        (None, Some(Value::Number(n))) => match n.as_u64() {
            Some(every) if every > 0 => (0..layers).filter(|i| !i.is_multiple_of(every)).collect(),
            _ => {
                return Err(format!(
                    "'moe_layer_freq' {n}: expected a count of at least 1"
                ))
            }
        },
        (None, Some(Value::Sequence(kinds))) => {
            if kinds.len() as u64 != layers {
                return Err(format!(
                    "'moe_layer_freq' lists {} layers; the model has {layers}",
                    kinds.len()
                ));
            }
            let mut dense = Vec::new();
            for (i, kind) in kinds.iter().enumerate() {
                match kind.as_u64() {
                    Some(0) => dense.push(i as u64),
                    Some(1) => {}
                    _ => {
                        return Err(format!(
                            "'moe_layer_freq' entry {i}: expected 1 (experts) or 0 (dense)"
                        ))
                    }
                }
            }
            dense
        }
        (None, Some(_)) => {
            return Err("'moe_layer_freq': expected a count or a list of 0 and 1".into());
        }
    };
    dense.sort_unstable();
    dense.dedup();
    if let Some(&beyond) = dense.iter().find(|&&i| i >= layers) {
        return Err(format!(
            "dense layer {beyond} is beyond the {layers} layers (numbered from 0)"
        ));
    }
    Ok(dense)
}

/// Multi-head latent attention as a model file gives it, widths checked by `positive`: its
/// compression (with a head's value width) and a head's query-key width (without and with
/// positions); absent defaults are Megatron's (`--qk-head-dim` 128, `--qk-pos-emb-head-dim`
/// 64, `--v-head-dim` 128, no query compression).
fn latent_attention(
    file: &ModelFile,
    positive: &dyn Fn(&str, u64) -> Result<u64, String>,
) -> Result<Option<(Latent, u64)>, String> {
    let widths = [
        ("q_lora_rank", file.q_lora_rank),
        ("qk_head_dim", file.qk_head_dim),
        ("qk_pos_emb_head_dim", file.qk_pos_emb_head_dim),
        ("v_head_dim", file.v_head_dim),
    ];
    let Some(kv_rank) = file.kv_lora_rank else {
        return if file.multi_latent_attention == Some(true) {
            Err("'multi_latent_attention' without a 'kv_lora_rank'".into())
        } else if let Some((key, _)) = widths.iter().find(|(_, v)| v.is_some()) {
            Err(format!(
                "'{key}' without a 'kv_lora_rank' (multi-head latent attention)"
            ))
        } else {
            Ok(None)
        };
    };
    if file.multi_latent_attention == Some(false) {
        return Err("'kv_lora_rank' with 'multi_latent_attention' false".into());
    }
    if file.head_dim.is_some() {
        return Err(
            "'head_dim' with latent attention: a head's widths are 'qk_head_dim', \
                    'qk_pos_emb_head_dim' and 'v_head_dim'"
                .into(),
        );
    }
    if let Some(kv) = file.kv_heads.filter(|&kv| kv != file.heads) {
        return Err(format!(
            "kv_heads {kv} with latent attention, whose every head has its own key and value \
             (heads {})",
            file.heads
        ));
    }
    let width =
        |key: &str, value: Option<u64>, default: u64| positive(key, value.unwrap_or(default));
    let latent = Latent {
        q_rank: file
            .q_lora_rank
            .map(|r| positive("q_lora_rank", r))
            .transpose()?,
        kv_rank: positive("kv_lora_rank", kv_rank)?,
        rope: width("qk_pos_emb_head_dim", file.qk_pos_emb_head_dim, 64)?,
        value: width("v_head_dim", file.v_head_dim, 128)?,
    };
    let nope = width("qk_head_dim", file.qk_head_dim, 128)?;
    Ok(Some((latent, nope + latent.rope)))
}

/// How many layers attend locally (by a window or by chunks): `layers` of them given, every
/// layer by default, none without the span (whose absence makes a count an error).
fn local_layers(
    (span_key, span): (&str, Option<u64>),
    (count_key, count): (&str, Option<u64>),
    layers: u64,
) -> Result<u64, String> {
    match (span, count) {
        (None, Some(_)) => Err(format!("'{count_key}' without an '{span_key}'")),
        (None, None) => Ok(0),
        (Some(_), None) => Ok(layers),
        (Some(_), Some(n)) if n > layers => Err(format!(
            "'{count_key}' {n} is more than the {layers} layers"
        )),
        (Some(_), Some(n)) => Ok(n),
    }
}

impl LlmModel {
    /// Reads a model file, naming the file and the key that is wrong.
    pub fn load(path: &Path) -> Result<LlmModel, Error> {
        Ok(LlmModel::load_with_seq(path, None)?.0)
    }

    /// [`Self::load`], trained on sequences of `seq` tokens where given (Megatron's
    /// `--seq-length`) instead of the file's; also reads a Hugging Face `config.json` (a file
    /// with a `model_type` key), which gives no training length: without `seq` its context
    /// length stands in. The notes returned say what was read that the user did not write:
    /// that stand-in, a config's sliding window or chunked attention, and what a config holds
    /// that collsim leaves out (DeepSeek-V3's multi-token prediction).
    pub fn load_with_seq(path: &Path, seq: Option<u64>) -> Result<(LlmModel, Vec<String>), Error> {
        let shown = path.display().to_string();
        let text = crate::read_text(path, "cannot read model file")?;
        let stem = path
            .file_stem()
            .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        let (mut file, context, left_out) =
            match super::hf_config::read(&shown, &text, seq.is_some()) {
                Some(config) => {
                    let config = config?;
                    (config.file, Some(config.context), config.left_out)
                }
                None => (
                    crate::yaml::from_str::<ModelFile>(&shown, &text)?,
                    None,
                    Vec::new(),
                ),
            };
        let from_config = context.is_some();
        let mut notes: Vec<String> = match seq {
            Some(seq) => {
                file.seq = seq;
                Vec::new()
            }
            None => context.into_iter().collect(),
        };
        notes.extend(left_out);
        let model = LlmModel::new(file, stem).map_err(|e| Error::input(format!("{shown}: {e}")))?;
        if let (true, Some(window)) = (from_config, model.attention_window) {
            notes.push(format!(
                "{shown}: sliding-window attention of {window} tokens in {} of the {} layers \
                 (FlashAttention's time and the model FLOPs count the window's keys)",
                model.windowed_layers, model.layers
            ));
        }
        if let (true, Some(chunk)) = (from_config, model.attention_chunk) {
            notes.push(format!(
                "{shown}: chunked attention of {chunk} tokens in {} of the {} layers \
                 (FlashAttention's time and the model FLOPs count each chunk's keys)",
                model.chunked_layers, model.layers
            ));
        }
        Ok((model, notes))
    }

    pub(super) fn new(file: ModelFile, stem: String) -> Result<LlmModel, String> {
        // Bounds far above any model trained, so that no count of weights, FLOPs or bytes
        // overflows.
        let limit = |name: &str| match name {
            "layers" => 1 << 12,
            "hidden" => 1 << 17,
            "ffn" | "shared_ffn" => 1 << 19,
            "experts" => 1 << 9,
            _ => 1 << 22,
        };
        let positive = |name: &str, v: u64| {
            if v == 0 {
                Err(format!("'{name}' must be at least 1"))
            } else if v > limit(name) {
                Err(format!(
                    "'{name}' {v} is beyond the largest supported ({})",
                    limit(name)
                ))
            } else {
                Ok(v)
            }
        };
        if file.head_dim.is_none()
            && file.kv_lora_rank.is_none()
            && file.heads > 0
            && !file.hidden.is_multiple_of(file.heads)
        {
            return Err(format!(
                "hidden {} is not a multiple of heads {} (or give head_dim)",
                file.hidden, file.heads
            ));
        }
        let file_dense_ffn = file.dense_ffn.is_some();
        let dense = dense_layers(&file)?;
        // The shape's sizes first, so that an absurd one is named before what follows from it.
        let (layers, hidden, heads) = (
            positive("layers", file.layers)?,
            positive("hidden", file.hidden)?,
            positive("heads", file.heads)?,
        );
        let latent = latent_attention(&file, &positive)?;
        let head_dim = match latent {
            Some((_, qk)) => qk,
            None => positive(
                "head_dim",
                file.head_dim.unwrap_or(file.hidden / file.heads.max(1)),
            )?,
        };
        let model = LlmModel {
            name: file.name.unwrap_or(stem),
            layers,
            hidden,
            heads,
            kv_heads: positive("kv_heads", file.kv_heads.unwrap_or(file.heads))?,
            head_dim,
            latent: latent.map(|(l, _)| l),
            ffn: positive("ffn", file.ffn.unwrap_or(4 * file.hidden))?,
            seq: positive("seq", file.seq)?,
            vocab: positive("vocab", file.vocab)?,
            experts: positive("experts", file.experts.unwrap_or(1))?,
            top_k: positive("top_k", file.top_k.unwrap_or(1))?,
            shared_ffn: file
                .shared_ffn
                .map(|w| positive("shared_ffn", w))
                .transpose()?
                .unwrap_or(0),
            shared_expert_gate: file.shared_expert_gate.unwrap_or(false),
            dense_layers: dense,
            dense_ffn: positive(
                "dense_ffn",
                file.dense_ffn.or(file.ffn).unwrap_or(4 * file.hidden),
            )?,
            gated_mlp: file.gated_mlp.unwrap_or(false),
            tied_embeddings: file.tied_embeddings.unwrap_or(true),
            dropout: file.dropout.unwrap_or(true),
            attention_window: file
                .attention_window
                .map(|v| positive("attention_window", v))
                .transpose()?,
            windowed_layers: local_layers(
                ("attention_window", file.attention_window),
                ("windowed_layers", file.windowed_layers),
                file.layers,
            )?,
            attention_chunk: file
                .attention_chunk
                .map(|v| positive("attention_chunk", v))
                .transpose()?,
            chunked_layers: local_layers(
                ("attention_chunk", file.attention_chunk),
                ("chunked_layers", file.chunked_layers),
                file.layers,
            )?,
            learned_positions: match file.position_embeddings.as_deref() {
                None | Some("learned") => true,
                Some("rotary") => false,
                Some(other) => {
                    return Err(format!(
                        "position_embeddings '{other}': expected learned or rotary"
                    ))
                }
            },
        };
        if !model.heads.is_multiple_of(model.kv_heads) {
            return Err(format!(
                "heads {} is not a multiple of kv_heads {}",
                model.heads, model.kv_heads
            ));
        }
        if model.windowed_layers + model.chunked_layers > model.layers {
            return Err(format!(
                "{} windowed and {} chunked layers are more than the {} layers (give \
                 'windowed_layers' and 'chunked_layers')",
                model.windowed_layers, model.chunked_layers, model.layers
            ));
        }
        if model.experts == 1 && (model.shared_ffn > 0 || model.shared_expert_gate) {
            return Err("'shared_ffn' or 'shared_expert_gate' in a model without experts".into());
        }
        if model.experts == 1 && !model.dense_layers.is_empty() {
            return Err("dense layers named in a model without experts".into());
        }
        if model.dense_layers.len() as u64 == model.layers && model.experts > 1 {
            return Err("every layer is dense: a model with experts needs an expert layer".into());
        }
        if file_dense_ffn && model.dense_layers.is_empty() {
            return Err(
                "'dense_ffn' without dense layers ('dense_layers', 'moe_layer_freq')".into(),
            );
        }
        if model.shared_expert_gate && model.shared_ffn == 0 {
            return Err("'shared_expert_gate' without a 'shared_ffn'".into());
        }
        if model.top_k > model.experts {
            return Err(format!(
                "top_k {} exceeds experts {}",
                model.top_k, model.experts
            ));
        }
        Ok(model)
    }

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

/// A model file shipped in `workloads/llm/`, for tests.
#[cfg(test)]
pub(crate) fn shipped(name: &str) -> LlmModel {
    let path = format!("{}/workloads/llm/{name}", env!("CARGO_MANIFEST_DIR"));
    LlmModel::load(Path::new(&path)).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPT model file: sequence 2048, vocabulary 51,200, every optional key absent.
    fn gpt_file(layers: u64, hidden: u64, heads: u64) -> ModelFile {
        ModelFile {
            name: None,
            layers,
            hidden,
            heads,
            kv_heads: None,
            head_dim: None,
            ffn: None,
            seq: 2048,
            vocab: 51200,
            experts: None,
            top_k: None,
            shared_ffn: None,
            shared_expert_gate: None,
            dense_layers: None,
            moe_layer_freq: None,
            dense_ffn: None,
            gated_mlp: None,
            tied_embeddings: None,
            position_embeddings: None,
            dropout: None,
            attention_window: None,
            windowed_layers: None,
            attention_chunk: None,
            chunked_layers: None,
            multi_latent_attention: None,
            kv_lora_rank: None,
            q_lora_rank: None,
            qk_head_dim: None,
            qk_pos_emb_head_dim: None,
            v_head_dim: None,
        }
    }

    /// Latent attention is asked for by its keys' and values' latent: its other keys (or
    /// Megatron's switch) without it, a head width or fewer key-value heads beside it, are
    /// refused naming the key. Its absent widths are Megatron's defaults, and its down
    /// projections are held whole by every tensor rank.
    #[test]
    fn latent_attention_needs_its_latent() {
        let new = |file: ModelFile| LlmModel::new(file, "m".into());
        let gpt = || gpt_file(2, 1024, 16);
        let latent = || ModelFile {
            kv_lora_rank: Some(128),
            ..gpt()
        };
        for (file, expected) in [
            (
                ModelFile {
                    multi_latent_attention: Some(true),
                    ..gpt()
                },
                "'multi_latent_attention' without a 'kv_lora_rank'",
            ),
            (
                ModelFile {
                    v_head_dim: Some(64),
                    ..gpt()
                },
                "'v_head_dim' without a 'kv_lora_rank' (multi-head latent attention)",
            ),
            (
                ModelFile {
                    multi_latent_attention: Some(false),
                    ..latent()
                },
                "'kv_lora_rank' with 'multi_latent_attention' false",
            ),
            (
                ModelFile {
                    head_dim: Some(64),
                    ..latent()
                },
                "'head_dim' with latent attention",
            ),
            (
                ModelFile {
                    kv_heads: Some(4),
                    ..latent()
                },
                "kv_heads 4 with latent attention",
            ),
            (
                ModelFile {
                    kv_lora_rank: Some(0),
                    ..gpt()
                },
                "'kv_lora_rank' must be at least 1",
            ),
        ] {
            let e = new(file).unwrap_err();
            assert!(e.contains(expected), "{e}");
        }
        let m = new(latent()).unwrap();
        let expected = Latent {
            q_rank: None,
            kv_rank: 128,
            rope: 64,
            value: 128,
        };
        assert_eq!(
            (m.head_dim, m.value_dim(), m.latent),
            (192, 128, Some(expected))
        );
        let duplicated = 1024 * (128 + 64);
        assert_eq!(m.duplicated_attention_params(), duplicated);
        assert_eq!(
            m.attention_params(),
            duplicated + 1024 * 16 * 192 + 128 * 16 * (128 + 128) + 16 * 128 * 1024
        );
        assert_eq!(
            m.rank_layer_params(4, 1),
            (m.attention_params() - duplicated + m.mlp_params()) / 4 + duplicated + 4 * 1024 + 128
        );
    }

    /// Shared experts belong to a mixture of experts; their gate to shared experts.
    #[test]
    fn shared_experts_need_experts() {
        let new = |experts, shared_ffn, shared_expert_gate| {
            LlmModel::new(
                ModelFile {
                    experts,
                    top_k: experts.map(|_| 2),
                    shared_ffn,
                    shared_expert_gate,
                    ..gpt_file(2, 1024, 16)
                },
                "m".into(),
            )
        };
        let e = new(None, Some(1024), None).unwrap_err();
        assert!(e.contains("without experts"), "{e}");
        let e = new(Some(8), None, Some(true)).unwrap_err();
        assert!(e.contains("without a 'shared_ffn'"), "{e}");
        let m = new(Some(8), Some(1024), Some(true)).unwrap();
        let dense_mlp = 2 * 1024 * 1024;
        assert_eq!(m.shared_expert_params(), dense_mlp + 1024);
        assert_eq!(
            m.layer_forward_flops() - new(Some(8), None, None).unwrap().layer_forward_flops(),
            2.0 * 2048.0 * (dense_mlp + 1024) as f64
        );
    }

    /// Dense layers in a model of experts, named or by Megatron's `moe_layer_freq` (a count:
    /// experts in every N-th layer from the first, layer 0; or a list of 1 and 0): their weights and
    /// FLOPs are a dense model's of `dense_ffn`, the others the experts'.
    #[test]
    fn dense_layers_count_as_dense_models_do() {
        let new = |dense_layers: Option<Vec<u64>>, freq: Option<&str>, dense_ffn| {
            LlmModel::new(
                ModelFile {
                    experts: Some(8),
                    top_k: Some(2),
                    dense_layers,
                    moe_layer_freq: freq.map(|f| serde_yaml::from_str(f).unwrap()),
                    dense_ffn,
                    ..gpt_file(4, 1024, 16)
                },
                "m".into(),
            )
        };
        let named = new(Some(vec![3, 1]), None, Some(8192)).unwrap();
        assert_eq!(named.dense_layers, vec![1, 3]);
        assert_eq!(new(None, Some("2"), Some(8192)).unwrap(), named);
        assert_eq!(new(None, Some("[1, 0, 1, 0]"), Some(8192)).unwrap(), named);
        assert_eq!(
            named.layer_runs(0..4),
            vec![(false, 1), (true, 1), (false, 1), (true, 1)]
        );
        let experts = new(None, None, None).unwrap();
        let dense = named.dense_layer_model();
        assert_eq!((dense.experts, dense.ffn, dense.top_k), (1, 8192, 1));
        assert_eq!(
            named.params() - 2 * dense.layer_params(),
            experts.params() - 2 * experts.layer_params()
        );
        let flops = |m: &LlmModel| m.iteration_flops(1, Recompute::None);
        let per_layer = |m: &LlmModel| 3.0 * m.layer_forward_flops();
        assert!(
            (flops(&named) - flops(&experts) - 2.0 * (per_layer(&dense) - per_layer(&experts)))
                .abs()
                < 1.0
        );
        for (layers, freq, dense_ffn, error) in [
            (Some(vec![4]), None, None, "beyond the 4 layers"),
            (Some(vec![0, 1, 2, 3]), None, None, "every layer is dense"),
            (Some(vec![0]), Some("2"), None, "not both"),
            (None, Some("[1, 0]"), None, "lists 2 layers"),
            (None, Some("[1, 2, 1, 1]"), None, "entry 1"),
            (None, Some("0"), None, "at least 1"),
            (None, None, Some(8192), "'dense_ffn' without dense layers"),
        ] {
            let e = new(layers, freq, dense_ffn).unwrap_err();
            assert!(e.contains(error), "{e}");
        }
    }

    fn gpt(layers: u64, hidden: u64, heads: u64) -> LlmModel {
        LlmModel::new(gpt_file(layers, hidden, heads), "gpt".into()).unwrap()
    }

    /// Korthikanti et al.'s count for GPT, s b h (10 + 24/t) + 5 a s^2 b / t bytes a layer:
    /// 10 h bytes a token kept whole, 24 h split, 5 a score. A Llama 3 8B layer (hidden 4096,
    /// 8 key-value heads of 128, a gated MLP of 14336, no dropout) keeps its two norms' and two
    /// projections' inputs (8 h), queries, keys, values and attention output (2 (2 h + 2 x
    /// 1024)) and the gate, up and down inputs (2 x 3 x 14336), and only the softmax output
    /// of the scores; two experts a token (Mixtral's top-2) double what the MLP keeps.
    #[test]
    fn layer_activations_are_korthikantis_count_for_the_models_shape() {
        let h = 4096.0;
        let g = gpt(2, 4096, 32).layer_activations();
        assert_eq!(
            (g.replicated, g.split, g.per_score),
            (10.0 * h, 24.0 * h, 5.0)
        );
        let llama = |top_k| {
            LlmModel::new(
                ModelFile {
                    kv_heads: Some(8),
                    ffn: Some(14336),
                    seq: 8192,
                    vocab: 128256,
                    experts: Some(8),
                    top_k: Some(top_k),
                    gated_mlp: Some(true),
                    tied_embeddings: Some(false),
                    position_embeddings: Some("rotary".into()),
                    dropout: Some(false),
                    ..gpt_file(32, 4096, 32)
                },
                "llama".into(),
            )
            .unwrap()
            .layer_activations()
        };
        let one = llama(1);
        assert_eq!(one.replicated, 8.0 * h);
        assert_eq!(one.split, 2.0 * (2.0 * h + 2048.0) + 2.0 * 3.0 * 14336.0);
        assert_eq!(one.per_score, 2.0);
        let two = llama(2);
        assert_eq!(two.replicated - one.replicated, 2.0 * h);
        assert_eq!(two.split - one.split, 2.0 * 3.0 * 14336.0);
    }

    /// A window at or beyond the sequence changes nothing; below it a windowed layer's scores
    /// count `2 w - w^2 / s` keys a query (the band's area against the causal triangle's,
    /// scaled to the s x s convention), and layers without the window count `s`: the count is
    /// the layers' mean, and the attention FLOPs follow it.
    #[test]
    fn a_sliding_window_shrinks_the_attended_keys() {
        let with = |window: Option<u64>, windowed: Option<u64>| {
            let file = ModelFile {
                attention_window: window,
                windowed_layers: windowed,
                ..gpt_file(8, 1024, 16)
            };
            LlmModel::new(file, "w".into())
        };
        let full = with(None, None).unwrap();
        assert_eq!(full.attended_keys(), 2048.0);
        assert_eq!(with(Some(4096), None).unwrap().attended_keys(), 2048.0);
        let band = 2.0 * 512.0 - 512.0 * 512.0 / 2048.0;
        let all = with(Some(512), None).unwrap();
        assert_eq!((all.windowed_layers, all.attended_keys()), (8, band));
        let half = with(Some(512), Some(4)).unwrap();
        assert_eq!(half.attended_keys(), (band + 2048.0) / 2.0);
        let ratio = half.attention_core_flops() / full.attention_core_flops();
        assert!((ratio - half.attended_keys() / 2048.0).abs() < 1e-12);
        assert!(with(None, Some(4))
            .unwrap_err()
            .contains("without an 'attention_window'"));
        assert!(with(Some(512), Some(9))
            .unwrap_err()
            .contains("more than the 8 layers"));
        assert!(with(Some(0), None)
            .unwrap_err()
            .contains("'attention_window' must be"));
    }

    /// A chunked layer's query attends within its chunk: `c` keys where chunks divide the
    /// sequence, `((s - r) c + r^2) / s` with a remainder `r`, the sequence where one chunk
    /// holds it; windowed, chunked and full layers average by their counts.
    #[test]
    fn chunked_attention_counts_each_chunks_keys() {
        let with = |window, windowed, chunk, chunked| {
            let file = ModelFile {
                attention_window: window,
                windowed_layers: windowed,
                attention_chunk: chunk,
                chunked_layers: chunked,
                ..gpt_file(8, 1024, 16)
            };
            LlmModel::new(file, "c".into())
        };
        assert_eq!(
            with(None, None, Some(512), None).unwrap().attended_keys(),
            512.0
        );
        let r = 2048.0 - 3.0 * 600.0;
        assert_eq!(
            with(None, None, Some(600), None).unwrap().attended_keys(),
            (3.0 * 600.0 * 600.0 + r * r) / 2048.0
        );
        assert_eq!(
            with(None, None, Some(4096), None).unwrap().attended_keys(),
            2048.0
        );
        let band = 2.0 * 256.0 - 256.0 * 256.0 / 2048.0;
        let mixed = with(Some(256), Some(2), Some(512), Some(4)).unwrap();
        assert_eq!(
            mixed.attended_keys(),
            (2.0 * band + 4.0 * 512.0 + 2.0 * 2048.0) / 8.0
        );
        let e = with(Some(256), None, Some(512), None).unwrap_err();
        assert!(
            e.contains("8 windowed and 8 chunked layers are more than the 8 layers (give 'windowed_layers'"),
            "{e}"
        );
        let e = with(None, None, None, Some(2)).unwrap_err();
        assert!(
            e.contains("'chunked_layers' without an 'attention_chunk'"),
            "{e}"
        );
    }

    #[test]
    fn flops_are_the_papers_equation_3() {
        // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), GPT-3 175B at batch 1536.
        let m = gpt(96, 12288, 96);
        let (b, s, l, h, v) = (1536.0, 2048.0, 96.0, 12288.0, 51200.0);
        let paper = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
        let ours = m.iteration_flops(1536, Recompute::Full);
        assert!((ours / paper - 1.0).abs() < 1e-12, "{ours} vs {paper}");
    }

    #[test]
    fn parameter_counts_match_the_papers_table_1() {
        // The paper counts P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h)) and rounds it in
        // Table 1 to 1.7B, 18.4B, 145.6B and 1008B.
        for (l, h, a, billions) in [
            (24, 2304, 24, 1.7),
            (40, 6144, 48, 18.4),
            (80, 12288, 96, 145.6),
            (128, 25600, 160, 1008.0),
        ] {
            let ours = gpt(l, h, a).params() as f64;
            let (lf, hf) = (l as f64, h as f64);
            let paper = 12.0
                * lf
                * hf
                * hf
                * (1.0 + 13.0 / (12.0 * hf) + (51200.0 + 2048.0) / (12.0 * lf * hf));
            assert!((ours / paper - 1.0).abs() < 1e-3, "{ours} vs {paper}");
            assert!(
                (ours / 1e9 / billions - 1.0).abs() < 0.03,
                "{ours} vs {billions}B"
            );
        }
    }

    /// Megatron-LM's argument names read as the model file's own keys.
    #[test]
    fn megatron_argument_names_are_keys() {
        let text = "num_layers: 96\nhidden_size: 12288\nnum_attention_heads: 96\n\
                    seq_length: 2048\npadded_vocab_size: 51200\n";
        let file: ModelFile = crate::yaml::from_str("m.yaml", text).unwrap();
        let m = LlmModel::new(file, "gpt".into()).unwrap();
        assert_eq!(m, gpt(96, 12288, 96));
    }

    #[test]
    fn bad_shapes_are_refused_by_name() {
        let e = LlmModel::new(
            ModelFile {
                seq: 8,
                vocab: 8,
                ..gpt_file(2, 100, 3)
            },
            "m".into(),
        );
        assert!(e.unwrap_err().contains("heads 3"));
        let huge = LlmModel::new(
            ModelFile {
                ffn: Some(8),
                seq: 8,
                vocab: 8,
                ..gpt_file(2, 4_000_000_000, 1)
            },
            "m".into(),
        );
        assert!(huge.unwrap_err().contains("'hidden' 4000000000"));
    }
}
