//! Reading a model from disk: collsim's model file or a Hugging Face `config.json`.

use std::path::Path;

use super::file::ModelFile;
use super::hf_config;
use super::shape::LlmModel;
use crate::Error;

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
        let (mut file, context, left_out) = match hf_config::read(&shown, &text, seq.is_some()) {
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
}

/// A model file shipped in `workloads/llm/`, for tests.
#[cfg(test)]
pub(crate) fn shipped(name: &str) -> LlmModel {
    let path = format!("{}/workloads/llm/{name}", env!("CARGO_MANIFEST_DIR"));
    LlmModel::load(Path::new(&path)).unwrap()
}
