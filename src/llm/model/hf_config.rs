//! Hugging Face `config.json` files, the shape every model on the Hub is published with, read
//! as collsim's model files: layers, width, heads and key-value heads, the MLP's width, the
//! vocabulary, experts and the experts a token visits, by the keys and defaults of the
//! `transformers` library's configuration classes (`LlamaConfig`, `MixtralConfig`,
//! `GPT2Config`, ...). What the keys leave open follows the family: a gated MLP where the
//! activation is SiLU (Llama, Mistral, Qwen) or the family is Gemma's, learned position
//! embeddings for GPT-2, GPT-Neo, BigCode and OPT (rotary or ALiBi, without weights, for the
//! rest), tied embeddings unless `tie_word_embeddings` is false (the library's default),
//! dropout where any of the dropout probabilities is above 0, and a sliding window where
//! `sliding_window` is set and not switched off (`use_sliding_window`, false by default for
//! Qwen), in the layers `layer_types` names `sliding_attention`, else as the family's
//! configuration class lays them out: all but every `sliding_window_pattern`-th (Gemma 3),
//! every other from the first (Gemma 2), those from `max_window_layers` on (Qwen 2), every
//! layer (Mistral); chunked attention where `attention_chunk_size` is set (Llama 4), in the
//! layers `layer_types` names `chunked_attention`, else those with rotary positions; shared
//! experts as Qwen-MoE, DeepSeekMoE and Llama 4 give them.

use serde::Deserialize;
use serde_yaml::Value;

use super::file::ModelFile;
use crate::Error;

/// The keys read, under the names the families give them.
#[derive(Deserialize)]
struct HfConfig {
    model_type: String,
    #[serde(rename = "_name_or_path")]
    name_or_path: Option<String>,
    num_hidden_layers: Option<u64>,
    n_layer: Option<u64>,
    hidden_size: Option<u64>,
    n_embd: Option<u64>,
    num_attention_heads: Option<u64>,
    n_head: Option<u64>,
    num_key_value_heads: Option<u64>,
    num_kv_heads: Option<u64>,
    multi_query: Option<bool>,
    intermediate_size: Option<u64>,
    moe_intermediate_size: Option<u64>,
    n_inner: Option<u64>,
    ffn_dim: Option<u64>,
    max_position_embeddings: Option<u64>,
    n_positions: Option<u64>,
    seq_length: Option<u64>,
    vocab_size: Option<u64>,
    num_local_experts: Option<u64>,
    num_experts: Option<u64>,
    n_routed_experts: Option<u64>,
    num_experts_per_tok: Option<u64>,
    tie_word_embeddings: Option<bool>,
    hidden_act: Option<String>,
    activation_function: Option<String>,
    head_dim: Option<u64>,
    kv_lora_rank: Option<u64>,
    q_lora_rank: Option<u64>,
    qk_nope_head_dim: Option<u64>,
    qk_rope_head_dim: Option<u64>,
    v_head_dim: Option<u64>,
    num_nextn_predict_layers: Option<u64>,
    shared_expert_intermediate_size: Option<u64>,
    n_shared_experts: Option<u64>,
    first_k_dense_replace: Option<u64>,
    moe_layer_freq: Option<u64>,
    decoder_sparse_step: Option<u64>,
    interleave_moe_layer_step: Option<u64>,
    intermediate_size_mlp: Option<u64>,
    #[serde(default)]
    mlp_only_layers: Vec<u64>,
    #[serde(default)]
    sliding_window: Value,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<u64>,
    sliding_window_pattern: Option<u64>,
    #[serde(default)]
    layer_types: Vec<Value>,
    attention_chunk_size: Option<u64>,
    #[serde(default)]
    no_rope_layers: Vec<Value>,
    no_rope_layer_interval: Option<u64>,
    #[serde(default)]
    attention_dropout: Value,
    #[serde(default)]
    attn_pdrop: Value,
    #[serde(default)]
    resid_pdrop: Value,
    #[serde(default)]
    hidden_dropout: Value,
    #[serde(default)]
    dropout: Value,
}

/// A Hugging Face configuration read as a model file.
pub(super) struct Config {
    pub(super) file: ModelFile,
    /// A note of what stood in for the training sequence length.
    pub(super) context: String,
    /// Notes of what the configuration holds that collsim leaves out.
    pub(super) left_out: Vec<String>,
}

/// A model file read as a Hugging Face configuration, if it is one (a mapping with a
/// `model_type` key; a JSON file naming `"model_type"` counts even where it does not parse, so
/// that its error is reported): the model file it describes, a note of what stood in for the
/// training sequence length (unless `seq_given`, when the caller replaces it), and notes of
/// what the config holds that collsim leaves out.
pub(super) fn read(file: &str, text: &str, seq_given: bool) -> Option<Result<Config, Error>> {
    if !text.contains("model_type") {
        return None;
    }
    match crate::yaml::from_str::<Value>(file, text) {
        Ok(whole) if whole.get("model_type").is_some() => Some(describe(file, whole, seq_given)),
        Err(e) if text.contains("\"model_type\"") => Some(Err(e)),
        _ => None,
    }
}

/// [`read`] of a parsed configuration.
fn describe(file: &str, whole: Value, seq_given: bool) -> Result<Config, Error> {
    let bad = |e: serde_yaml::Error| Error::input(format!("{file}: a Hugging Face config: {e}"));
    // A multimodal model's language decoder is its `text_config`.
    let decoder = match whole.get("text_config") {
        Some(text) if !text.is_mapping() => {
            return Err(Error::input(format!(
                "{file}: text_config is not a mapping of the decoder's keys"
            )))
        }
        Some(text) if whole.get("hidden_size").is_none() => {
            let mut text = text.clone();
            if let (Value::Mapping(m), Some(kind)) = (&mut text, whole.get("model_type")) {
                m.entry("model_type".into()).or_insert(kind.clone());
            }
            text
        }
        _ => whole,
    };
    let c: HfConfig = serde_yaml::from_value(decoder).map_err(bad)?;
    let kind = c.model_type.as_str();
    let refuse = |why: String| Error::input(format!("{file}: model_type '{kind}': {why}"));
    let need = |value: Option<u64>, keys: &str| {
        value.ok_or_else(|| refuse(format!("no {keys} key: not a decoder collsim can read")))
    };
    let hidden = need(c.hidden_size.or(c.n_embd), "hidden_size (n_embd)")?;
    let heads = need(
        c.num_attention_heads.or(c.n_head),
        "num_attention_heads (n_head)",
    )?;
    let experts = c
        .num_local_experts
        .or(c.num_experts)
        .or(c.n_routed_experts)
        .filter(|&e| e > 1);
    let context = [
        (c.max_position_embeddings, "max_position_embeddings"),
        (c.n_positions, "n_positions"),
        (c.seq_length, "seq_length"),
    ]
    .into_iter()
    .find_map(|(value, key)| value.map(|v| (v, key)));
    let seq = match (context, seq_given) {
        (Some((s, _)), _) => s,
        (None, true) => 1,
        (None, false) => {
            return Err(refuse(
                "no context length (max_position_embeddings, n_positions): give the length \
                 trained on with --seq"
                    .into(),
            ))
        }
    };
    let activation = c
        .hidden_act
        .or(c.activation_function)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let gated =
        matches!(activation.as_str(), "silu" | "swish" | "swiglu") || kind.starts_with("gemma");
    let learned = matches!(kind, "gpt2" | "gpt_neo" | "gpt_bigcode" | "opt");
    let dropout = [
        &c.attention_dropout,
        &c.attn_pdrop,
        &c.resid_pdrop,
        &c.hidden_dropout,
        &c.dropout,
    ]
    .iter()
    .any(|v| v.as_f64().is_some_and(|p| p > 0.0));
    let ffn = match experts {
        Some(_) => c.moe_intermediate_size.or(c.intermediate_size),
        None => c.intermediate_size.or(c.ffn_dim).or(c.n_inner),
    };
    let layers = need(
        c.num_hidden_layers.or(c.n_layer),
        "num_hidden_layers (n_layer)",
    )?;
    // Shared experts: Qwen-MoE's one of its own width, with a gate; DeepSeekMoE's
    // `n_shared_experts` of the routed ones' width; Llama 4's one of `intermediate_size`.
    let shared_ffn = match experts {
        Some(_) if kind.starts_with("llama4") => c.intermediate_size,
        Some(_) => c.shared_expert_intermediate_size.filter(|&w| w > 0).or(c
            .n_shared_experts
            .filter(|&n| n > 0)
            .zip(ffn)
            .map(|(n, width)| n * width)),
        None => None,
    };
    let shared_expert_gate =
        shared_ffn.is_some() && c.shared_expert_intermediate_size.is_some_and(|w| w > 0);
    // Dense layers among the expert ones, as each family's decoder picks them: DeepSeek's
    // first `first_k_dense_replace` and those off `moe_layer_freq`; Qwen-MoE's
    // `mlp_only_layers` and those off `decoder_sparse_step` (layer i sparse when i + 1 is a
    // multiple); Llama 4's off `interleave_moe_layer_step` (the same rule). Their MLP is
    // `intermediate_size` wide (Llama 4: `intermediate_size_mlp`).
    let dense_layers: Vec<u64> = match experts {
        Some(_) => (0..layers)
            .filter(|&i| {
                let off =
                    |step: Option<u64>, i: u64| step.is_some_and(|n| n > 1 && !i.is_multiple_of(n));
                i < c.first_k_dense_replace.unwrap_or(0)
                    || off(c.moe_layer_freq, i)
                    || off(c.decoder_sparse_step, i + 1)
                    || off(c.interleave_moe_layer_step, i + 1)
                    || c.mlp_only_layers.contains(&i)
            })
            .collect(),
        None => Vec::new(),
    };
    let dense_ffn = if kind.starts_with("llama4") {
        c.intermediate_size_mlp
    } else {
        c.intermediate_size
    };
    // Qwen's configuration classes keep a window in the file but switch it off by default.
    let windowing = c.use_sliding_window.unwrap_or(!kind.starts_with("qwen"));
    let window = c.sliding_window.as_u64().filter(|_| windowing);
    // Layers `layer_types` names of a kind.
    let named = |kind: &str| {
        c.layer_types
            .iter()
            .filter(|t| t.as_str() == Some(kind))
            .count() as u64
    };
    let windowed_layers = window.map(|_| {
        if !c.layer_types.is_empty() {
            named("sliding_attention")
        } else if let Some(every) = c.sliding_window_pattern.filter(|&p| p > 0) {
            layers - layers / every
        } else if kind == "gemma2" {
            layers.div_ceil(2)
        } else {
            layers - c.max_window_layers.unwrap_or(0).min(layers)
        }
    });
    // Llama 4's chunked attention: in the layers `layer_types` names `chunked_attention`, else
    // in those with rotary positions (`no_rope_layers` 1; by default all but every
    // `no_rope_layer_interval`-th, 4), the others attending to the whole sequence.
    let chunked_layers = c.attention_chunk_size.map(|_| {
        if !c.layer_types.is_empty() {
            named("chunked_attention")
        } else if !c.no_rope_layers.is_empty() {
            c.no_rope_layers
                .iter()
                .filter(|r| r.as_u64() == Some(1))
                .count() as u64
        } else {
            let every = c.no_rope_layer_interval.filter(|&n| n > 0).unwrap_or(4);
            layers - layers / every
        }
    });
    let latent = c.kv_lora_rank.is_some();
    let model = ModelFile {
        // The Hub's name where the config keeps it; a bare `config.json` by its family.
        name: c.name_or_path.filter(|n| !n.is_empty()).or_else(|| {
            std::path::Path::new(file)
                .file_stem()
                .is_some_and(|s| s == "config")
                .then(|| kind.to_string())
        }),
        layers,
        hidden,
        heads,
        // Latent attention gives every head its own key and value whatever the key-value
        // heads say (DeepSeek's decoder does not read them).
        kv_heads: c
            .num_key_value_heads
            .or(c.num_kv_heads)
            .or(c.multi_query.filter(|&m| m).map(|_| 1))
            .filter(|_| !latent),
        head_dim: c.head_dim.filter(|_| !latent),
        ffn,
        seq,
        vocab: need(c.vocab_size, "vocab_size")?,
        experts,
        top_k: experts.and(c.num_experts_per_tok),
        shared_ffn,
        shared_expert_gate: Some(shared_expert_gate),
        gated_mlp: Some(gated),
        tied_embeddings: Some(c.tie_word_embeddings.unwrap_or(true)),
        position_embeddings: Some(if learned { "learned" } else { "rotary" }.into()),
        dropout: Some(dropout),
        attention_window: window,
        windowed_layers,
        attention_chunk: c.attention_chunk_size,
        chunked_layers,
        dense_ffn: dense_ffn.filter(|_| !dense_layers.is_empty()),
        dense_layers: Some(dense_layers),
        moe_layer_freq: None,
        multi_latent_attention: None,
        kv_lora_rank: c.kv_lora_rank,
        q_lora_rank: c.q_lora_rank,
        qk_head_dim: c.qk_nope_head_dim,
        qk_pos_emb_head_dim: c.qk_rope_head_dim,
        v_head_dim: c.v_head_dim,
    };
    let key = context.map_or("--seq", |(_, key)| key);
    let note = format!(
        "{file}: a Hugging Face config ({kind}); seq {seq} is its context length ({key}), not \
         necessarily the length it was trained on: --seq sets that"
    );
    let left_out = c
        .num_nextn_predict_layers
        .filter(|&n| n > 0)
        .map(|n| {
            format!(
                "{file}: its {n} multi-token prediction module(s) (num_nextn_predict_layers) \
                 are not modelled"
            )
        })
        .into_iter()
        .collect();
    Ok(Config {
        file: model,
        context: note,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use crate::llm::model::shipped;
    use crate::llm::LlmModel;

    fn load(json: &str, seq: Option<u64>) -> Result<(LlmModel, Vec<String>), crate::Error> {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), json).unwrap();
        LlmModel::load_with_seq(f.path(), seq)
    }

    /// Meta-Llama-3-8B's config.json as the Hub publishes it gives the shipped Llama 3 8B file,
    /// weight for weight; its context length stands in for seq, with a note.
    #[test]
    fn llama_3_8b_config_is_the_shipped_model() {
        let json = r#"{"architectures": ["LlamaForCausalLM"], "attention_bias": false,
            "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
            "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
            "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
            "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256}"#;
        let (model, note) = load(json, None).unwrap();
        let ours = shipped("llama3_8b.yaml");
        assert_eq!(
            LlmModel {
                name: ours.name.clone(),
                ..model
            },
            ours
        );
        let [note] = &note[..] else {
            panic!("{note:?}")
        };
        assert!(
            note.contains("seq 8192 is its context length (max_position_embeddings)"),
            "{note}"
        );
        let (longer, note) = load(json, Some(2048)).unwrap();
        assert_eq!((longer.seq, note), (2048, vec![]));
    }

    /// Mixtral-8x7B's config: 8 local experts, two a token, each expert the MLP's width.
    #[test]
    fn mixtral_config_is_the_shipped_model() {
        let json = r#"{"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
            "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
            "max_position_embeddings": 32768, "model_type": "mixtral",
            "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
            "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
            "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 32000}"#;
        let (model, _) = load(json, Some(4096)).unwrap();
        let ours = shipped("mixtral_8x7b.yaml");
        assert_eq!(
            LlmModel {
                name: ours.name.clone(),
                ..model
            },
            ours
        );
    }

    /// GPT-2's config (its own key names): learned positions, tied embeddings, dropout, a
    /// plain MLP of 4 x hidden; 124,356,864 weights, the published 124,439,808 less the 82,944
    /// biases collsim does not count.
    #[test]
    fn gpt2_config_reads_its_own_key_names() {
        let json = r#"{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
            "attn_pdrop": 0.1, "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
            "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": null,
            "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}"#;
        let (m, _) = load(json, None).unwrap();
        assert_eq!(
            (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn),
            (12, 768, 12, 12, 3072)
        );
        assert!(m.learned_positions && m.tied_embeddings && m.dropout && !m.gated_mlp);
        assert_eq!(m.params(), 124_439_808 - 82_944);
    }

    /// DeepSeek-V3's published config (its routing keys left out: collsim routes to the top
    /// k whatever the groups): 61 layers of multi-head latent attention (queries compressed to
    /// 1536, keys and values to 512, a head's query-key width 128 + 64 rotary, values 128), 3
    /// dense layers of 18432, then 256 experts of 2048 with one shared, 8 a token. Its weights
    /// as `transformers` builds the model, 671,026,419,200 (the report's 671B), less the
    /// routers' score-correction biases collsim leaves out (256 a layer of experts) and plus
    /// the biases of the two RMSNorms a layer and the final one it counts (7168 each):
    /// exactly. Its multi-token prediction module is not modelled, and a note says so.
    #[test]
    fn deepseek_v3_config_reads_its_latent_attention() {
        let json = r#"{"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
            "attention_dropout": 0.0, "first_k_dense_replace": 3, "hidden_act": "silu",
            "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
            "max_position_embeddings": 163840, "model_type": "deepseek_v3",
            "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
            "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
            "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
            "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
            "tie_word_embeddings": false, "topk_group": 4, "v_head_dim": 128,
            "vocab_size": 129280}"#;
        let (m, notes) = load(json, Some(4096)).unwrap();
        let latent = m.latent.expect("latent attention");
        assert_eq!(
            (
                latent.q_rank,
                latent.kv_rank,
                latent.rope,
                m.head_dim,
                m.value_dim()
            ),
            (Some(1536), 512, 64, 192, 128)
        );
        assert_eq!(
            (m.kv_heads, m.dense_layers.len(), m.dense_ffn),
            (128, 3, 18432)
        );
        assert_eq!(experts_of(&m), (256, 8, 2048, 2048, false));
        assert_eq!(
            m.params(),
            671_026_419_200 - 58 * 256 + 61 * 2 * 7168 + 7168
        );
        let [note] = &notes[..] else {
            panic!("{notes:?}")
        };
        assert!(
            note.contains("1 multi-token prediction module(s)"),
            "{note}"
        );
    }

    /// DeepSeek-V2-Lite's published config: queries projected from the hidden state directly
    /// (`q_lora_rank` null), keys and values through a latent of 512. Its weights by the
    /// architecture (27 layers: per layer the query projection 2048 x 16 x 192, the key-value
    /// down projection 2048 x 576, its norm 512, the up projection 512 x 16 x 256, the output
    /// projection 2048 x 2048, two RMSNorms; a dense first layer of 10944, then 64 experts of
    /// 1408, two shared, the router; untied embeddings of 102,400 x 2048; the final norm) are
    /// 15,706,484,224, the published 15.7B; collsim counts the same plus the RMSNorms' biases.
    #[test]
    fn deepseek_v2_lite_projects_queries_directly() {
        let json = r#"{"model_type": "deepseek_v2", "first_k_dense_replace": 1,
            "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944,
            "kv_lora_rank": 512, "max_position_embeddings": 163840,
            "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_routed_experts": 64,
            "n_shared_experts": 2, "num_attention_heads": 16, "num_experts_per_tok": 6,
            "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": null,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": false,
            "v_head_dim": 128, "vocab_size": 102400}"#;
        let (m, _) = load(json, Some(4096)).unwrap();
        assert_eq!(m.latent.and_then(|l| l.q_rank), None);
        assert_eq!(
            m.attention_params(),
            2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 2048 * 2048
        );
        assert_eq!(m.params(), 15_706_484_224 + 27 * 2 * 2048 + 2048);
    }

    /// What collsim cannot model is refused naming the file and the key.
    #[test]
    fn configs_beyond_the_model_are_refused() {
        let no_context = r#"{"model_type": "bloom", "n_layer": 70, "hidden_size": 14336,
            "n_head": 112, "vocab_size": 250880}"#;
        let e = load(no_context, None).unwrap_err().to_string();
        assert!(e.contains("--seq"), "{e}");
        let (bloom, _) = load(no_context, Some(2048)).unwrap();
        assert_eq!((bloom.seq, bloom.ffn), (2048, 4 * 14336));
    }

    /// Dense layers among the expert ones, as each family's decoder picks them: Qwen-MoE's
    /// sparse step (layer i has experts when i + 1 is a multiple of it) and `mlp_only_layers`,
    /// Llama 4's interleaving (the same rule, its dense MLP `intermediate_size_mlp` wide),
    /// DeepSeek's first layers and `moe_layer_freq`.
    #[test]
    fn dense_layers_between_experts_are_read_as_the_families_place_them() {
        let dense = |keys: &str| {
            let json = format!(
                r#"{{{keys}, "hidden_act": "silu", "hidden_size": 1024,
                "num_attention_heads": 16, "num_hidden_layers": 8, "vocab_size": 1000,
                "max_position_embeddings": 4096, "intermediate_size": 4096}}"#
            );
            let m = load(&json, None).unwrap().0;
            (m.dense_layers, m.dense_ffn)
        };
        let odd_sparse = vec![0, 2, 4, 6];
        for (keys, expected) in [
            (
                r#""model_type": "qwen2_moe", "num_experts": 8, "decoder_sparse_step": 2"#,
                (odd_sparse.clone(), 4096),
            ),
            (
                r#""model_type": "qwen3_moe", "num_experts": 8, "mlp_only_layers": [3, 5]"#,
                (vec![3, 5], 4096),
            ),
            (
                r#""model_type": "llama4_text", "num_local_experts": 8,
                "interleave_moe_layer_step": 2, "intermediate_size_mlp": 8192"#,
                (odd_sparse, 8192),
            ),
            (
                r#""model_type": "deepseek_v3", "n_routed_experts": 8,
                "first_k_dense_replace": 3, "moe_layer_freq": 1"#,
                (vec![0, 1, 2], 4096),
            ),
            (
                r#""model_type": "qwen2_moe", "num_experts": 8, "decoder_sparse_step": 1"#,
                (vec![], 4096),
            ),
        ] {
            assert_eq!(dense(keys), expected, "{keys}");
        }
    }

    /// A model's experts: how many, a token's, their width, the shared ones' and their gate.
    fn experts_of(m: &LlmModel) -> (u64, u64, u64, u64, bool) {
        (
            m.experts,
            m.top_k,
            m.ffn,
            m.shared_ffn,
            m.shared_expert_gate,
        )
    }

    /// Qwen1.5-MoE-A2.7B's published config: 60 experts of 1408, four a token, and a shared
    /// expert of 5632 with its gate. Its weights as `transformers` builds the model,
    /// 14,315,784,192 (the model card's 14.3B: 24 layers of attention with query, key and
    /// value biases, 60 experts, the router, the shared expert and its gate, two RMSNorms;
    /// untied embeddings of 151,936 x 2048; the final norm), less the
    /// biases collsim leaves out (3 x 2048 a layer) and plus the RMSNorm biases it counts (2 x
    /// 2048 a layer, 2048 at the end): exactly. DeepSeekMoE's shared experts are
    /// `n_shared_experts` of the routed ones' width, without a gate.
    #[test]
    fn shared_experts_are_read_as_the_families_give_them() {
        let qwen = r#"{"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
            "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
            "max_position_embeddings": 8192, "max_window_layers": 21,
            "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24,
            "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
            "sliding_window": 32768, "tie_word_embeddings": false, "use_sliding_window": false,
            "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
            "num_experts": 60, "norm_topk_prob": false}"#;
        let (m, _) = load(qwen, None).unwrap();
        assert_eq!(experts_of(&m), (60, 4, 1408, 5632, true));
        assert_eq!(
            m.params(),
            14_315_784_192 - 24 * 3 * 2048 + 24 * 2 * 2048 + 2048
        );
        let deepseek = |first_dense: u64| {
            format!(
                r#"{{"model_type": "deepseek", "hidden_act": "silu", "hidden_size": 2048,
                "intermediate_size": 10944, "moe_intermediate_size": 1408,
                "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                "first_k_dense_replace": {first_dense}, "num_attention_heads": 16,
                "num_hidden_layers": 28, "vocab_size": 102400, "tie_word_embeddings": false,
                "max_position_embeddings": 4096}}"#
            )
        };
        let (m, _) = load(&deepseek(0), None).unwrap();
        assert_eq!(experts_of(&m), (64, 6, 1408, 2 * 1408, false));
        // DeepSeekMoE 16B: its first layer dense (10,944 wide); 16.4B weights as published.
        let (m, _) = load(&deepseek(1), None).unwrap();
        assert_eq!((m.dense_layers.clone(), m.dense_ffn), (vec![0], 10944));
        assert!(
            (m.params() as f64 / 16.4e9 - 1.0).abs() < 0.003,
            "{}",
            m.params()
        );
    }

    /// Gemma 7B's heads are wider than its hidden size (16 of 256 against 3072): its config
    /// gives the paper's 8,538,074,112 weights, less collsim's count of RMSNorm (a bias beside
    /// each norm's weight: 2 x 3072 a layer and 3072 at the end, 175,104) and the paper's
    /// embedding padded to 256,128 rows (393,216): exactly.
    #[test]
    fn gemma_heads_wider_than_the_model() {
        let json = r#"{"architectures": ["GemmaForCausalLM"], "attention_dropout": 0.0,
            "head_dim": 256, "hidden_act": "gelu", "hidden_size": 3072,
            "intermediate_size": 24576, "max_position_embeddings": 8192, "model_type": "gemma",
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16,
            "rope_theta": 10000.0, "vocab_size": 256000}"#;
        let (m, _) = load(json, None).unwrap();
        assert_eq!(
            (m.query_width(), m.gated_mlp, m.tied_embeddings),
            (4096, true, true)
        );
        assert_eq!(m.params(), 8_538_074_112 + 175_104 - 393_216);
    }

    /// Sliding windows as the families lay them out: Mistral 7B v0.1 (its published config;
    /// 7,241,732,096 weights, plus collsim's RMSNorm biases) in every layer; Qwen 2's window
    /// switched off by `use_sliding_window` (and by default); Gemma 2 every other layer from the first; Gemma 3
    /// all but every sixth; `layer_types` counted where the config lists them.
    #[test]
    fn sliding_windows_are_read_as_the_families_lay_them_out() {
        let mistral = r#"{"architectures": ["MistralForCausalLM"], "bos_token_id": 1,
            "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
            "initializer_range": 0.02, "intermediate_size": 14336,
            "max_position_embeddings": 32768, "model_type": "mistral",
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
            "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
            "vocab_size": 32000}"#;
        let (m, notes) = load(mistral, None).unwrap();
        assert_eq!((m.attention_window, m.windowed_layers), (Some(4096), 32));
        assert!(
            notes[1].contains("sliding-window attention of 4096 tokens in 32 of the 32 layers"),
            "{notes:?}"
        );
        assert_eq!(m.params(), 7_241_732_096 + 2 * 4096 * 32 + 4096);
        assert_eq!(m.attended_keys(), 2.0 * 4096.0 - 4096.0 * 4096.0 / 32768.0);
        let (short, notes) = load(mistral, Some(4096)).unwrap();
        assert_eq!(short.attended_keys(), 4096.0);
        assert_eq!(notes.len(), 1, "the window's note stays: {notes:?}");
        let windows = |json: &str| {
            let m = load(json, None).unwrap().0;
            (m.attention_window, m.windowed_layers)
        };
        let common = r#""hidden_size": 2048, "num_attention_heads": 16,
            "num_hidden_layers": 12, "vocab_size": 1000, "max_position_embeddings": 8192"#;
        for (keys, expected) in [
            (
                r#""model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": false"#,
                (None, 0),
            ),
            (
                r#""model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 8"#,
                (Some(4096), 4),
            ),
            (
                r#""model_type": "qwen3", "sliding_window": 4096"#,
                (None, 0),
            ),
            (
                r#""model_type": "gemma2", "sliding_window": 4096"#,
                (Some(4096), 6),
            ),
            (
                r#""model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6"#,
                (Some(1024), 10),
            ),
            (
                r#""model_type": "x", "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]"#,
                (Some(128), 2),
            ),
            (
                r#""model_type": "mixtral", "sliding_window": null"#,
                (None, 0),
            ),
        ] {
            assert_eq!(
                windows(&format!("{{{keys}, {common}}}")),
                expected,
                "{keys}"
            );
        }
    }

    /// Llama 4 Scout's decoder (its `text_config`): 16 experts of 8192, one a token, a shared
    /// expert of the same width, and chunks of 8192 tokens in the 36 layers with rotary
    /// positions (all but every fourth, the configuration class's default); `layer_types`
    /// names the chunked layers where a config lists them.
    #[test]
    fn llama4_chunks_its_attention_and_shares_an_expert() {
        let scout = r#"{"model_type": "llama4", "vision_config": {"hidden_size": 1408},
            "text_config": {"attention_chunk_size": 8192, "head_dim": 128,
            "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 8192,
            "intermediate_size_mlp": 16384, "interleave_moe_layer_step": 1,
            "max_position_embeddings": 10485760, "model_type": "llama4_text",
            "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
            "num_key_value_heads": 8, "num_local_experts": 16, "tie_word_embeddings": false,
            "vocab_size": 202048}}"#;
        let (m, notes) = load(scout, Some(32768)).unwrap();
        assert_eq!(experts_of(&m), (16, 1, 8192, 8192, false));
        assert_eq!((m.attention_chunk, m.chunked_layers), (Some(8192), 36));
        assert_eq!(m.attended_keys(), (36.0 * 8192.0 + 12.0 * 32768.0) / 48.0);
        assert!(
            notes[0].contains("chunked attention of 8192 tokens in 36 of the 48 layers"),
            "{notes:?}"
        );
        let listed = r#"{"model_type": "x", "attention_chunk_size": 1024, "layer_types":
            ["chunked_attention", "full_attention", "chunked_attention"], "hidden_size": 2048,
            "num_attention_heads": 16, "num_hidden_layers": 3, "vocab_size": 1000,
            "max_position_embeddings": 8192}"#;
        assert_eq!(load(listed, None).unwrap().0.chunked_layers, 2);
    }

    /// A multimodal model's decoder is read from its text_config.
    #[test]
    fn the_decoder_of_a_multimodal_config_is_its_text_config() {
        let json = r#"{"model_type": "llava", "vision_config": {"hidden_size": 1024},
            "text_config": {"hidden_act": "silu", "hidden_size": 4096,
            "intermediate_size": 14336, "max_position_embeddings": 8192,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "tie_word_embeddings": false, "vocab_size": 128256}}"#;
        let (m, _) = load(json, None).unwrap();
        assert_eq!(m.params(), shipped("llama3_8b.yaml").params());
    }
}
