//! `train --model`: language-model layouts end to end: the shipped model files against their
//! published parameter counts, the summary's columns, layout searches and refusals.

mod common;

use std::path::Path;

use collsim::llm::LlmModel;
use common::{collsim, column, llm_model as model, refused, scratch, stdout_of, Table};

/// `train` of `model` on one H100 box at TP 8, micro-batch 1, with `extra` arguments: its step
/// time and what it wrote to stderr.
fn step_on_one_h100_box(model: &str, extra: &[&str]) -> (f64, String) {
    let mut args = vec![
        "train",
        "--model",
        model,
        "--topology",
        "hgx-h100:1",
        "--tp",
        "8",
        "--micro-batch",
        "1",
        "--format",
        "csv",
    ];
    args.extend_from_slice(extra);
    let out = collsim(&args);
    assert!(out.status.success(), "{out:?}");
    let step = column(&String::from_utf8_lossy(&out.stdout), "step_time_s");
    (step, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Every shipped model loads, and those with a published parameter count match it.
#[test]
fn shipped_models_have_their_published_sizes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/llm");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        LlmModel::load(&entry.unwrap().path()).unwrap();
        files += 1;
    }
    assert!(files >= 10);
    // Meta's model cards: 8.03B, 70.6B, 405.9B; Mistral's: 46.7B; OpenAI: 175B.
    for (file, billions) in [
        ("llama3_8b.yaml", 8.03),
        ("llama3_70b.yaml", 70.6),
        ("llama3_405b.yaml", 405.9),
        ("mixtral_8x7b.yaml", 46.7),
        // DeepSeek-AI's: 16.4B (shared experts and a dense first layer).
        ("deepseek_moe_16b.yaml", 16.4),
        // DeepSeek-AI's: 671B (multi-head latent attention, without the prediction module).
        ("deepseek_v3.yaml", 671.0),
        ("gpt3_175b.yaml", 175.0),
        // Megatron-LM's benchmark table, its sizes as it rounds them.
        ("mcore_1.7b.yaml", 1.7),
        ("mcore_7.1b.yaml", 7.1),
        ("mcore_16b.yaml", 16.0),
        ("mcore_32b.yaml", 32.0),
        ("mcore_70b.yaml", 70.0),
        ("mcore_119b.yaml", 119.0),
        ("mcore_177b.yaml", 177.0),
        ("mcore_314b.yaml", 314.0),
        ("mcore_462b.yaml", 462.0),
        // Megatron-LM's Table 1 (Narayanan et al., SC'21), to the paper's 0.1 billion.
        ("gpt_1.7b.yaml", 1.7),
        ("gpt_3.6b.yaml", 3.6),
        ("gpt_7.5b.yaml", 7.5),
        ("gpt_18.4b.yaml", 18.4),
        ("gpt_39.1b.yaml", 39.1),
        ("gpt_76.1b.yaml", 76.1),
        ("gpt_145.6b.yaml", 145.6),
        ("gpt_310.1b.yaml", 310.1),
        ("gpt_529.6b.yaml", 529.6),
        ("gpt_1008b.yaml", 1008.0),
        // Korthikanti et al.'s 22B (arXiv 2205.05198, Table 3).
        ("gpt_22b.yaml", 22.0),
        // BigScience's 176,247,271,424 less the biases and embedding norm collsim leaves out.
        ("bloom_176b.yaml", 176.238211072),
    ] {
        let tolerance = if file.starts_with("mcore") {
            0.03
        } else if file.starts_with("gpt_") {
            0.05 / billions + 0.001
        } else if file.starts_with("bloom") {
            1e-12
        } else {
            0.005
        };
        let p = LlmModel::load(Path::new(&model(file))).unwrap().params() as f64 / 1e9;
        assert!(
            (p / billions - 1.0).abs() < tolerance,
            "{file}: {p} vs {billions}"
        );
    }
}

/// The CSV summary has the issue's columns, and its figures agree with one another: FLOP/s
/// per GPU from the paper's count over the step, MFU against the A100's 312 TFLOP/s.
#[test]
fn the_summary_is_consistent() {
    let out = stdout_of(&[
        "train",
        "--model",
        &model("gpt_1.7b.yaml"),
        "--topology",
        "dgx-a100:2",
        "--tp",
        "2",
        "--pp",
        "2",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--virtual-stages",
        "1",
        "--format",
        "csv",
    ]);
    let get = |name: &str| column(&out, name);
    for column in [
        "exposed_tp_s",
        "exposed_pp_s",
        "exposed_dp_s",
        "exposed_ep_s",
        "exposed_cp_s",
    ] {
        assert!(get(column) >= 0.0);
    }
    let (step, tflops, mfu) = (get("step_time_s"), get("tflops_per_gpu"), get("mfu"));
    // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with B 16, s 2048, l 24, h 2304, V 51200.
    let (b, s, l, h, v) = (16.0, 2048.0, 24.0, 2304.0, 51200.0);
    let flops = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
    assert!((flops / step / 16.0 / 1e12 / tflops - 1.0).abs() < 1e-3);
    assert!((tflops / 312.0 / mfu - 1.0).abs() < 1e-2);
    // Without the recomputed forward: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    let model_flops = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
    let mfu_no_recompute = model_flops / step / 16.0 / 312e12;
    assert!((get("mfu_no_recompute") / mfu_no_recompute - 1.0).abs() < 1e-2);
    assert!(get("bubble_fraction") > 0.0 && get("bubble_fraction") < 1.0);
    assert_eq!(get("dp"), 4.0);
    assert!(get("memory_gb") > 0.0);
}

/// Lists search every layout and name the fastest; --out keeps every row and the timeline.
#[test]
fn a_search_names_the_fastest_layout() {
    let dir = scratch("collsim-llm", "search");
    let out = stdout_of(&[
        "train",
        "--model",
        &model("gpt_1.7b.yaml"),
        "--topology",
        "dgx-a100:1",
        "--tp",
        "1,2,4",
        "--pp",
        "1,2",
        "--dp",
        "2",
        "--global-batch",
        "8",
        "--micro-batch",
        "1,2",
        "--virtual-stages",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    // tp x pp x 2 = 8: (4, 1) and (2, 2), each with 2 micro-batch sizes.
    assert!(out.contains("4 layouts tried"), "{out}");
    assert!(out.contains("fastest:"), "{out}");
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 5, "{summary}");
    for file in ["timeline.json", "ranks.csv", "links.csv", "breakdown.png"] {
        assert!(dir.join(file).exists(), "{file}");
    }
    // The links carried what the iteration sent: every NVLink of the box was used.
    let links = std::fs::read_to_string(dir.join("links.csv")).unwrap();
    let bytes = Table::parse(&links).numbers("bytes");
    assert_eq!(bytes.iter().filter(|&&b| b > 0.0).count(), 16, "{links}");
}

/// `--tp auto --pp auto` tries every tensor size that divides a box's GPUs and the heads, and
/// every pipeline size up to the layers that divides the GPUs, kept where the layers split over
/// it; when none fits, the refusal is the most parallel layout's.
#[test]
fn auto_sizes_search_every_layout_megatron_accepts() {
    let dir = scratch("collsim-llm", "auto");
    // 1.7B: 24 heads, 24 layers; two boxes of 8: TP 1, 2, 4, 8 (dividing 8 and 24) and PP 1, 2,
    // 4, 8 (dividing 24 and 16; 16 does not split 24 layers), every pair whose product divides
    // 16.
    stdout_of(&[
        "train",
        "--model",
        &model("gpt_1.7b.yaml"),
        "--topology",
        "dgx-a100:2",
        "--tp",
        "auto",
        "--pp",
        "auto",
        "--global-batch",
        "32",
        "--micro-batch",
        "1",
        "--virtual-stages",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let summary = Table::parse(&std::fs::read_to_string(dir.join("summary.csv")).unwrap());
    let mut tried: Vec<(u64, u64)> = (0..summary.rows.len())
        .map(|r| {
            (
                summary.number(r, "tp") as u64,
                summary.number(r, "pp") as u64,
            )
        })
        .collect();
    tried.sort();
    let mut expected = Vec::new();
    for tp in [1, 2, 4, 8] {
        for pp in [1, 2, 4, 8] {
            if 16 % (tp * pp) == 0 {
                expected.push((tp, pp));
            }
        }
    }
    assert_eq!(tried, expected);
    // Pipeline sizes that do not divide the layers run where the first and last stages take
    // the rest: 10 layers on 8 GPUs, one on each end stage, split only over 4 stages (4 each
    // in the middle two).
    let uneven = dir.join("uneven.yaml");
    std::fs::write(
        &uneven,
        "layers: 10\nhidden: 256\nheads: 4\nseq: 128\nvocab: 1000\n",
    )
    .unwrap();
    let out = stdout_of(&[
        "train",
        "--model",
        uneven.to_str().unwrap(),
        "--topology",
        "dgx-a100:1",
        "--tp",
        "1",
        "--pp",
        "auto",
        "--first-stage-layers",
        "1",
        "--last-stage-layers",
        "1",
        "--global-batch",
        "8",
        "--micro-batch",
        "1",
        "--virtual-stages",
        "1",
        "--format",
        "csv",
    ]);
    assert_eq!(column(&out, "pp"), 4.0);
    // GPT-3 175B fits no layout of one box: the refusal names the widest one tried.
    let out = collsim(&[
        "train",
        "--model",
        &model("gpt3_175b.yaml"),
        "--topology",
        "dgx-a100:1",
        "--tp",
        "auto",
        "--pp",
        "auto",
        "--global-batch",
        "8",
    ]);
    let err = refused(&out);
    assert!(
        err.contains("layouts tried") && err.contains("x DP 1") && err.contains("GB a GPU"),
        "{err}"
    );
}

/// A Hugging Face config.json trains as the model file it describes: the same step as the
/// shipped Llama 3 8B, with a note that its context length stood in for the training length,
/// which `--seq` sets instead (a shorter sequence, a shorter step).
#[test]
fn a_hugging_face_config_trains_like_the_shipped_file() {
    let dir = scratch("collsim-llm", "hf");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["LlamaForCausalLM"], "attention_dropout": 0.0,
        "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 500000.0,
        "tie_word_embeddings": false, "vocab_size": 128256}"#,
    )
    .unwrap();
    let run = |model: &str, seq: Option<&str>| {
        let mut extra = vec!["--global-batch", "8"];
        if let Some(s) = seq {
            extra.extend(["--seq", s]);
        }
        step_on_one_h100_box(model, &extra)
    };
    let (shipped, _) = run(&model("llama3_8b.yaml"), None);
    let (from_config, note) = run(config.to_str().unwrap(), None);
    assert_eq!(shipped, from_config);
    assert!(note.contains("note:") && note.contains("--seq"), "{note}");
    let (shorter, note) = run(config.to_str().unwrap(), Some("2048"));
    assert!(shorter < 0.5 * from_config, "{shorter} vs {from_config}");
    assert!(!note.contains("note:"), "{note}");
}

/// Mistral 7B v0.1's published config windows every layer's attention at 4096 tokens: trained
/// on 16K sequences, FlashAttention's step is shorter than the same config's without the window
/// and scores kept in memory (`--attention standard`) take as long either way; a note says so.
#[test]
fn a_sliding_window_shortens_flash_attention_steps() {
    let dir = scratch("collsim-llm", "window");
    let config = |window: &str| {
        let path = dir.join(format!("mistral_{window}.json"));
        std::fs::write(
            &path,
            format!(
                r#"{{"architectures": ["MistralForCausalLM"], "hidden_act": "silu",
                "hidden_size": 4096, "intermediate_size": 14336,
                "max_position_embeddings": 32768, "model_type": "mistral",
                "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                "sliding_window": {window}, "tie_word_embeddings": false, "vocab_size": 32000}}"#
            ),
        )
        .unwrap();
        path
    };
    let (windowed, full) = (config("4096"), config("null"));
    let run = |model: &std::path::Path, attention: &str| {
        let extra = [
            "--seq",
            "16384",
            "--attention",
            attention,
            "--global-batch",
            "4",
        ];
        step_on_one_h100_box(model.to_str().unwrap(), &extra)
    };
    let ((flash_windowed, note), (flash_full, none)) =
        (run(&windowed, "flash"), run(&full, "flash"));
    assert!(
        flash_windowed < 0.95 * flash_full,
        "{flash_windowed} vs {flash_full}"
    );
    assert!(
        note.contains("4096 tokens in 32 of the 32 layers"),
        "{note}"
    );
    assert!(!none.contains("sliding-window"), "{none}");
    assert_eq!(run(&windowed, "standard").0, run(&full, "standard").0);
}

/// A model file in Megatron's key names with shared experts
/// (`moe_shared_expert_intermediate_size`) trains slower and holds more than the same experts
/// without them: every token also runs the shared MLP.
#[test]
fn shared_experts_lengthen_the_step() {
    let dir = scratch("collsim-llm", "shared");
    let file = |shared: &str| {
        let path = dir.join(format!("moe{}.yaml", shared.len()));
        std::fs::write(
            &path,
            format!(
                "num_layers: 16\nhidden_size: 2048\nnum_attention_heads: 16\n\
                 ffn_hidden_size: 1408\nseq_length: 4096\npadded_vocab_size: 151936\n\
                 num_experts: 64\nmoe_router_topk: 4\ngated_mlp: true\n{shared}"
            ),
        )
        .unwrap();
        path
    };
    let shared = file("moe_shared_expert_intermediate_size: 5632\n");
    let routed = file("");
    let run = |path: &Path| {
        let out = collsim(&[
            "train",
            "--model",
            path.to_str().unwrap(),
            "--topology",
            "hgx-h100:1",
            "--tp",
            "2",
            "--ep",
            "4",
            "--micro-batch",
            "1",
            "--global-batch",
            "8",
            "--format",
            "csv",
        ]);
        assert!(out.status.success(), "{out:?}");
        let csv = String::from_utf8_lossy(&out.stdout).into_owned();
        (column(&csv, "step_time_s"), column(&csv, "memory_gb"))
    };
    let ((step, memory), (routed_step, routed_memory)) = (run(&shared), run(&routed));
    assert!(step > 1.05 * routed_step, "{step} vs {routed_step}");
    assert!(memory > routed_memory, "{memory} vs {routed_memory}");
}

/// DeepSeek-V3's Hugging Face config and the shipped file in Megatron-core's key names train
/// alike, number for number. Its first stage holds the dense layers, exchanges no tokens and is
/// the slowest rank: the summary's expert column (the slowest rank's) is zero, and the text's
/// all-to-all line reads the stage where they are longest.
#[test]
fn deepseek_v3_trains_alike_from_its_config_and_megatron_keys() {
    let dir = scratch("collsim-llm", "deepseek");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
        "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "tie_word_embeddings": false, "v_head_dim": 128,
        "vocab_size": 129280}"#,
    )
    .unwrap();
    let shipped = model("deepseek_v3.yaml");
    let run = |path: &str, format: &str| {
        let out = collsim(&[
            "train",
            "--model",
            path,
            "--seq",
            "4096",
            "--topology",
            "hgx-h100:32",
            "--pp",
            "16",
            "--first-stage-layers",
            "3",
            "--last-stage-layers",
            "2",
            "--ep",
            "16",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--virtual-stages",
            "1",
            "--zero",
            "1",
            "--format",
            format,
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let without_name = |csv: String| {
        let mut lines = csv.lines().map(String::from).collect::<Vec<_>>();
        let row = &mut lines[1];
        *row = row.split_once(',').unwrap().1.to_string();
        lines
    };
    let ours = run(&shipped, "csv");
    assert_eq!(
        without_name(run(config.to_str().unwrap(), "csv")),
        without_name(ours.clone())
    );
    assert_eq!(column(&ours, "exposed_ep_s"), 0.0);
    let text = run(&shipped, "text");
    assert!(
        text.contains("ms exposed per expert layer and micro-batch"),
        "{text}"
    );
}

/// Layouts that cannot run end with exit status 2 and one line naming the constraint.
#[test]
fn bad_layouts_exit_2_naming_the_constraint() {
    let base = ["train"];
    for (extra, words) in [
        (vec!["--tp", "2", "--pp", "2", "--dp", "4"], "= 16 GPUs"),
        (
            vec!["--tp", "16", "--dp", "1", "--topology", "dgx-a100:2"],
            "heads",
        ),
        (
            vec!["--pp", "16", "--dp", "1", "--topology", "dgx-a100:2"],
            "24 layers",
        ),
        (
            vec!["--dp", "8", "--global-batch", "12"],
            "--global-batch 12",
        ),
        (
            vec![
                "--dp",
                "8",
                "--model-file",
                "gpt_145.6b",
                "--recompute",
                "none",
            ],
            "GB a GPU",
        ),
        (vec!["--tp", "0"], "at least 1"),
        (
            vec![
                "--cp",
                "3",
                "--dp",
                "1",
                "--tp",
                "1",
                "--topology",
                "pcie:3",
            ],
            "--cp 3",
        ),
        (vec!["--zero", "3", "--pp", "2"], "--zero 3 with --pp 2"),
        (
            vec![
                "--pp",
                "16",
                "--dp",
                "1",
                "--topology",
                "dgx-a100:2",
                "--first-stage-layers",
                "2",
            ],
            "22 layers left",
        ),
        (vec!["--zero", "4"], "--zero 4"),
        (
            vec!["--tp", "8", "--dp", "1", "--tp-comm-overlap"],
            "--sequence-parallel",
        ),
        (vec!["--precision", "fp8"], "no measured FP8"),
        (vec!["--precision", "fp4"], "--precision 'fp4'"),
    ] {
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        let mut file = "gpt_1.7b".to_string();
        if !extra.contains(&"--global-batch") {
            args.extend(["--global-batch".to_string(), "8".to_string()]);
        }
        if !extra.contains(&"--topology") {
            args.extend(["--topology".to_string(), "dgx-a100:1".to_string()]);
        }
        let mut i = 0;
        while i < extra.len() {
            if extra[i] == "--model-file" {
                file = extra[i + 1].to_string();
                i += 2;
                continue;
            }
            args.push(extra[i].to_string());
            i += 1;
        }
        args.push("--model".into());
        args.push(model(&format!("{file}.yaml")));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = collsim(&refs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{refs:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("error:") && err.contains(words),
            "{words}: {err}"
        );
    }
}

/// FP8 training (`--precision fp8`) on an H100 box: faster than BF16, by less than the ratio of
/// the measured FP8 and BF16 matmul rates (1402.6 / 794.5: attention, the logit layer and the
/// element-wise work stay in BF16, and the casts cost memory passes), with the same FLOPs
/// counted, and a larger memory estimate for the FP8 weight copies.
#[test]
fn fp8_trains_faster_but_not_by_the_matmul_ratio() {
    let run = |precision: &str| {
        let out = stdout_of(&[
            "train",
            "--model",
            &model("llama3_8b.yaml"),
            "--topology",
            "hgx-h100:1",
            "--tp",
            "2",
            "--global-batch",
            "16",
            "--micro-batch",
            "1",
            "--recompute",
            "none",
            "--zero",
            "1",
            "--precision",
            precision,
            "--format",
            "csv",
        ]);
        (column(&out, "step_time_s"), column(&out, "memory_gb"))
    };
    let ((bf16, bf16_memory), (fp8, fp8_memory)) = (run("bf16"), run("fp8"));
    let speedup = bf16 / fp8;
    assert!(
        speedup > 1.2 && speedup < 1402.6 / 794.5,
        "FP8 {fp8} s against BF16 {bf16} s"
    );
    assert!(fp8_memory > bf16_memory);
}

/// Measured layer times replace the compute model: doubling them adds exactly the layers'
/// compute to a step with nothing to overlap it; a layout without a row is refused naming it,
/// and so is the tensor overlap, which splits a layer at its products.
#[test]
fn measured_layer_times_replace_the_roofline() {
    let dir = scratch("collsim-llm", "times");
    let write = |name: &str, f: f64| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "tp,micro_batch,forward_ms,backward_ms\n1,1,{f},{}\n",
                3.0 * f
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let (one, two) = (write("one.csv", 10.0), write("two.csv", 20.0));
    let step = |times: &str| -> f64 {
        let out = stdout_of(&[
            "train",
            "--model",
            &model("gpt_1.7b.yaml"),
            "--topology",
            "dgx-a100:1",
            "--dp",
            "8",
            "--global-batch",
            "16",
            "--micro-batch",
            "1",
            "--grad-reduce",
            "after",
            "--layer-times",
            times,
            "--format",
            "csv",
        ]);
        column(&out, "step_time_s")
    };
    // 24 layers x 2 micro-batches x (10 + 30) ms more.
    let added = step(&two) - step(&one);
    assert!((added - 24.0 * 2.0 * 0.040).abs() < 1e-5, "{added}");
    // Two tensor ranks with the one-rank times, and `extra` flags.
    let model_path = model("gpt_1.7b.yaml");
    let on_two_ranks = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--model",
            &model_path,
            "--topology",
            "dgx-a100:1",
            "--tp",
            "2",
            "--global-batch",
            "16",
            "--micro-batch",
            "1",
            "--layer-times",
            &one,
        ];
        args.extend_from_slice(extra);
        collsim(&args)
    };
    let err = refused(&on_two_ranks(&[]));
    assert!(err.contains("no row for tp 2, micro_batch 1"), "{err}");
    // Whole measured layers cannot be split at their products for the tensor overlap.
    let err = refused(&on_two_ranks(&["--sequence-parallel", "--tp-comm-overlap"]));
    assert!(err.contains("--tp-comm-overlap"), "{err}");
    let err = refused(&on_two_ranks(&["--async-tensor-model-parallel-allreduce"]));
    assert!(
        err.contains("--async-tensor-model-parallel-allreduce"),
        "{err}"
    );
    // Sequence parallelism's collectives are placed as Megatron-core places them already.
    let err = refused(&on_two_ranks(&[
        "--sequence-parallel",
        "--async-tensor-model-parallel-allreduce",
    ]));
    assert!(err.contains("--sequence-parallel"), "{err}");
    // One kind of layer measured cannot time a model that mixes dense and expert layers.
    let err = refused(&collsim(&[
        "train",
        "--model",
        &model("deepseek_moe_16b.yaml"),
        "--topology",
        "hgx-h100:1",
        "--global-batch",
        "8",
        "--micro-batch",
        "1",
        "--layer-times",
        &one,
    ]));
    assert!(
        err.contains("mixes dense layers with expert layers"),
        "{err}"
    );
}

/// Megatron's uneven split runs when asked: 24 layers on 16 stages as 3, 1 x 14, 7.
#[test]
fn uneven_pipeline_stages_run_when_asked() {
    let out = stdout_of(&[
        "train",
        "--model",
        &model("gpt_1.7b.yaml"),
        "--topology",
        "dgx-a100:2",
        "--tp",
        "1",
        "--pp",
        "16",
        "--dp",
        "1",
        "--micro-batch",
        "1",
        "--virtual-stages",
        "1",
        "--global-batch",
        "32",
        "--first-stage-layers",
        "3",
        "--last-stage-layers",
        "7",
        "--format",
        "csv",
    ]);
    assert_eq!(column(&out, "pp"), 16.0);
    assert!(column(&out, "step_time_s") > 0.0);
}

/// A GPU system's NICs are replaced the same way on `train` as on `nccl-tests`: by `--nic`, or
/// by a GPU-system file with the same figure, which give the same step; fewer, slower NICs
/// expose more of the data-parallel reduction across boxes. A topology that is no GPU system
/// has no NICs to replace.
#[test]
fn train_takes_a_gpu_systems_overrides_as_flags_or_file() {
    let dir = scratch("collsim-llm", "nic");
    let file = dir.join("two_slow_nics.yml");
    std::fs::write(
        &file,
        "gpu_system:\n  base: dgx-a100\n  boxes: 2\n  nic: 2x25Gb\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let model_path = model("gpt_1.7b.yaml");
    let run = |topology: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--model",
            &model_path,
            "--topology",
            topology,
            "--dp",
            "16",
            "--global-batch",
            "16",
            "--micro-batch",
            "1",
            "--grad-reduce",
            "after",
            "--format",
            "csv",
        ];
        args.extend_from_slice(extra);
        collsim(&args)
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let by_flag = ok(run("dgx-a100:2", &["--nic", "2x25Gb"]));
    let by_file = ok(run(&file, &[]));
    let default = ok(run("dgx-a100:2", &[]));
    // The same step, the topology column saying how each was named.
    assert!(by_flag.contains(",dgx-a100:2 (nic 2x25Gb),"), "{by_flag}");
    assert_eq!(
        by_flag.replace("dgx-a100:2 (nic 2x25Gb)", "T"),
        by_file.replace(&file, "T")
    );
    let (slow, fast) = (
        column(&by_flag, "exposed_dp_s"),
        column(&default, "exposed_dp_s"),
    );
    // 8 HDR NICs (25 GB/s each) against 2 of 3.125 GB/s: 32 times the NIC bandwidth.
    assert!(slow > 10.0 * fast, "{slow} vs {fast}");
    let err = refused(&run("switch:16", &["--nic", "2x25Gb"]));
    assert!(err.contains("--nic") && err.contains("switch:16"), "{err}");
}

/// The collectives a step times alone run on every thread; the result does not depend on how
/// many: one thread and the default give the same summary, byte for byte.
#[test]
fn a_step_does_not_depend_on_the_thread_count() {
    let path = model("gpt_1.7b.yaml");
    let args = [
        "train",
        "--model",
        &path,
        "--topology",
        "dgx-a100:2",
        "--tp",
        "4",
        "--pp",
        "2",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--format",
        "csv",
    ];
    let run = |threads: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"));
        command.args(args);
        if let Some(n) = threads {
            command.env("RAYON_NUM_THREADS", n);
        }
        let out = command.output().expect("collsim runs");
        assert!(out.status.success());
        out.stdout
    };
    assert_eq!(run(Some("1")), run(None));
    assert_eq!(run(Some("1")), run(Some("3")));
}
