//! collsim's model file (YAML, with Megatron-LM's argument names as aliases) and the checks
//! that turn one into a model: every count in range, the shape's parts consistent.

use serde::Deserialize;
use serde_yaml::Value;

use super::shape::{Latent, LlmModel};

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
    /// The model a file describes, named by its `name` or else by `stem`; the error names the
    /// key that is wrong.
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
}
