//! Shared by the fuzz targets: files for the parsers that read paths, and the one-line check.
// Each target uses part of this module.
#![allow(dead_code)]

use std::path::PathBuf;

/// Writes `data` to a file named `name` in this process's scratch folder.
pub fn file_with(name: &str, data: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collsim-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    path
}

/// Ok, or an error of one line: anything else is a finding.
pub fn one_line<T>(result: Result<T, collsim::Error>) {
    if let Err(e) = result {
        let message = e.to_string();
        assert!(!message.contains('\n'), "multi-line error: {message}");
    }
}
