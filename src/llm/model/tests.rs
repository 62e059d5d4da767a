//! What a model file gives: its checks, its derived counts against published ones.

use super::file::ModelFile;
use super::shape::{Latent, LlmModel, Recompute};

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
        (flops(&named) - flops(&experts) - 2.0 * (per_layer(&dense) - per_layer(&experts))).abs()
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
        e.contains(
            "8 windowed and 8 chunked layers are more than the 8 layers (give 'windowed_layers'"
        ),
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
