//! A decoder-only language model's shape (GPT, Llama, mixture-of-experts) and what follows
//! from the shape alone (parameters and FLOPs, in `shape`), read from collsim's YAML model
//! files or Megatron-LM's argument names (`file`) and from Hugging Face configs (`hf_config`);
//! `load` reads either kind of file.

mod file;
mod hf_config;
mod load;
mod shape;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use load::shipped;
pub use shape::{Latent, LayerActivations, LlmModel, Precision, Recompute};
