//! A results folder that is either complete or absent: files written under temporary names and
//! renamed into place when the run succeeds, a lock against a second run writing the same folder,
//! and a manifest of what collsim wrote there, so `--force` removes only that.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Error;

/// A results folder whose files are written under temporary names and renamed into place only when
/// the whole run succeeded, so a failed or interrupted run never leaves a folder that looks
/// complete, and a `--force` rerun that fails leaves the previous results as they were. It is
/// prepared before the run, so a folder that cannot be written (or that another run is writing)
/// is found at once.
pub struct OutputDir {
    dir: PathBuf,
    pending: Vec<(PathBuf, PathBuf)>,
    /// What the previous run listed in the manifest (with `--force`): removed at the commit.
    previous: Vec<PathBuf>,
    lock: PathBuf,
    /// The folder did not exist before: a run that fails removes it again (when empty).
    created: bool,
    committed: bool,
}

/// The file in a results folder listing what collsim wrote there, so `--force` removes exactly
/// that before writing again.
pub const MANIFEST: &str = ".collsim-manifest";

/// The file that marks a results folder as being written by a run (its process id inside).
pub const LOCK: &str = ".collsim-lock";

/// Temporary files and locks of every open [`OutputDir`], removed on Ctrl-C, SIGTERM or SIGHUP.
static PENDING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// On Ctrl-C, SIGTERM or SIGHUP (what Slurm sends at a time limit, what a closed terminal sends),
/// removes the temporary files and locks of unfinished outputs and exits with 130.
pub fn remove_partial_outputs_on_interrupt() {
    // A second handler cannot be installed (tests run many commands in one process): the first
    // one already does this.
    let _ = ctrlc::set_handler(|| {
        remove_pending_outputs();
        eprintln!("error: interrupted; unfinished output files removed");
        std::process::exit(130);
    });
}

/// Removes the temporary files and locks of outputs not yet moved into place (a run ending early).
pub fn remove_pending_outputs() {
    let pending = PENDING.lock().map(|p| p.clone()).unwrap_or_default();
    for path in pending {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether a file name is one of collsim's temporary names (`.name.partial.ext`, `.name.partial`).
fn is_partial(name: &str) -> bool {
    name.starts_with('.') && (name.contains(".partial.") || name.ends_with(".partial"))
}

impl OutputDir {
    /// Checks that `dir` can take the results before anything runs: it must be a folder (made if
    /// missing), writable, not being written by another run, and empty unless `force`. With
    /// `force` what collsim wrote there before is replaced when this run's results are complete.
    pub fn prepare(dir: &Path, force: bool) -> Result<OutputDir, Error> {
        let shown = dir.display();
        if dir.exists() && !dir.is_dir() {
            return Err(Error::input(format!(
                "{shown}: is a file; --out names the folder the results go to"
            )));
        }
        let created = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| Error::io(&shown, e))?;
        let lock = take_lock(dir)?;
        let mut out = OutputDir {
            dir: dir.to_path_buf(),
            pending: Vec::new(),
            previous: Vec::new(),
            lock,
            created,
            committed: false,
        };
        // Temporary files of a run that was killed: no run is writing now (the lock says so).
        remove_stale_partials(dir);
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::io(&shown, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != LOCK)
            .count();
        if entries > 0 {
            if !force {
                return Err(Error::input(format!(
                    "{shown}: the folder is not empty; give --force to replace what collsim \
                     wrote there, or another folder"
                )));
            }
            out.previous = previous_outputs(dir);
        }
        let probe = dir.join(".collsim-write-test");
        std::fs::write(&probe, b"").map_err(|e| Error::io(&shown, e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(out)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Refuses to go on when `input`, which this run reads, is a result of an earlier run that
    /// `--force` would replace.
    pub fn keep_input(&self, input: &Path, flag: &str) -> Result<(), Error> {
        let (Ok(input), Ok(dir)) = (input.canonicalize(), self.dir.canonicalize()) else {
            return Ok(());
        };
        let Ok(relative) = input.strip_prefix(&dir) else {
            return Ok(());
        };
        if self.previous.iter().any(|p| p == relative) {
            return Err(Error::input(format!(
                "{flag} {}: --force would replace it, as a result of an earlier run in {}; \
                 copy it elsewhere or write the results to another folder",
                input.display(),
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// A path to write `name` to; it appears under its real name at [`OutputDir::commit`]. The
    /// temporary name keeps the extension last (`.heatmap.partial.png`): image encoders go by it.
    pub fn file(&mut self, name: &str) -> PathBuf {
        let real = self.dir.join(name);
        let parent = real.parent().unwrap_or(&self.dir).to_path_buf();
        // A folder that cannot be made shows up as the writer's error on the file itself.
        let _ = std::fs::create_dir_all(&parent);
        let file = real
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = match file.rsplit_once('.') {
            Some((stem, ext)) => parent.join(format!(".{stem}.partial.{ext}")),
            None => parent.join(format!(".{file}.partial")),
        };
        if self.pending.iter().any(|(_, r)| *r == real) {
            return tmp;
        }
        if let Ok(mut pending) = PENDING.lock() {
            pending.push(tmp.clone());
        }
        self.pending.push((tmp.clone(), real));
        tmp
    }

    /// Drops `name` from the files to commit, removing what was written of it.
    pub fn discard(&mut self, name: &str) {
        let real = self.dir.join(name);
        let (dropped, kept) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, r)| *r == real);
        self.pending = kept;
        let dropped: Vec<(PathBuf, PathBuf)> = dropped;
        for (tmp, _) in &dropped {
            let _ = std::fs::remove_file(tmp);
        }
        forget_pending(&dropped);
    }

    /// Replaces the previous run's files by this run's: refuses (changing nothing) where a file
    /// of this run would land on one collsim did not write; removes the previous run's files;
    /// moves every written file into place (summary files last, by call order) and records them
    /// in the manifest.
    pub fn commit(mut self) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending);
        for (_, real) in &pending {
            let ours = real
                .strip_prefix(&self.dir)
                .is_ok_and(|r| self.previous.iter().any(|p| p == r));
            if real.exists() && !ours {
                for (tmp, _) in &pending {
                    let _ = std::fs::remove_file(tmp);
                }
                forget_pending(&pending);
                return Err(Error::input(format!(
                    "{}: is not a file collsim wrote (the folder's manifest does not list it), \
                     so it was left as it was and this run's results were not written; move it \
                     or give another folder",
                    real.display()
                )));
            }
        }
        for relative in std::mem::take(&mut self.previous) {
            let path = self.dir.join(&relative);
            if pending.iter().any(|(_, real)| *real == path) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(path.display(), e)),
            }
            let mut parent = path.parent();
            while let Some(p) = parent.filter(|p| *p != self.dir) {
                if std::fs::remove_dir(p).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
        let mut manifest = String::new();
        for (tmp, real) in &pending {
            std::fs::rename(tmp, real).map_err(|e| Error::io(real.display(), e))?;
            if let Ok(relative) = real.strip_prefix(&self.dir) {
                manifest += &format!("{}\n", relative.display());
            }
        }
        forget_pending(&pending);
        self.committed = true;
        let path = self.dir.join(MANIFEST);
        std::fs::write(&path, manifest).map_err(|e| Error::io(path.display(), e))
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = std::fs::remove_file(tmp);
        }
        forget_pending(&self.pending);
        let _ = std::fs::remove_file(&self.lock);
        if let Ok(mut pending) = PENDING.lock() {
            pending.retain(|p| *p != self.lock);
        }
        if self.created && !self.committed {
            // Only an empty folder goes: a failed run leaves no empty results folder behind.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn forget_pending(files: &[(PathBuf, PathBuf)]) {
    if let Ok(mut pending) = PENDING.lock() {
        pending.retain(|p| !files.iter().any(|(tmp, _)| tmp == p));
    }
}

/// Marks `dir` as written by this process, or names the run that is writing it. A lock whose
/// process is gone (killed outright) is taken over.
fn take_lock(dir: &Path) -> Result<PathBuf, Error> {
    let lock = dir.join(LOCK);
    let me = std::process::id();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut file) => {
                let _ = write!(file, "{me}");
                if let Ok(mut pending) = PENDING.lock() {
                    pending.push(lock.clone());
                }
                return Ok(lock);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner: Option<u32> = std::fs::read_to_string(&lock)
                    .ok()
                    .and_then(|t| t.trim().parse().ok());
                let alive = match owner {
                    Some(pid) if Path::new("/proc/self").exists() => {
                        Path::new(&format!("/proc/{pid}")).exists()
                    }
                    // Without /proc, a lock is taken to be live.
                    _ => true,
                };
                if alive {
                    return Err(Error::input(format!(
                        "{}: another collsim run{} is writing results here; wait for it or give \
                         another folder (if no run is, remove {})",
                        dir.display(),
                        owner.map_or(String::new(), |p| format!(" (process {p})")),
                        lock.display()
                    )));
                }
                let _ = std::fs::remove_file(&lock);
            }
            Err(e) => return Err(Error::io(dir.display(), e)),
        }
    }
    Err(Error::input(format!(
        "{}: cannot take the folder's lock {}",
        dir.display(),
        lock.display()
    )))
}

/// Removes temporary files a killed run left anywhere under `dir`.
fn remove_stale_partials(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            remove_stale_partials(&path);
        } else if is_partial(&name) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The files a previous run listed in `dir`'s manifest, relative to `dir`; only paths inside the
/// folder (a tampered manifest must not reach elsewhere).
fn previous_outputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(dir.join(MANIFEST)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|relative| {
            !relative.is_absolute()
                && relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .collect();
    files.push(PathBuf::from(MANIFEST));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncommitted_output_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("collsim-out-{}", std::process::id()));
        {
            let mut out = OutputDir::prepare(&dir, false).unwrap();
            std::fs::write(out.file("summary.csv"), "x").unwrap();
        }
        // The folder this run made is gone again; one that existed stays, emptied.
        assert!(!dir.exists());
        std::fs::create_dir_all(&dir).unwrap();
        {
            let mut out = OutputDir::prepare(&dir, false).unwrap();
            std::fs::write(out.file("summary.csv"), "x").unwrap();
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_used_folder_needs_force_which_removes_only_what_collsim_wrote() {
        let dir = std::env::temp_dir().join(format!("collsim-force-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut out = OutputDir::prepare(&dir, false).unwrap();
        std::fs::write(out.file("runs/3/link_bytes.csv"), "old").unwrap();
        std::fs::write(out.file("summary.csv"), "old").unwrap();
        out.commit().unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let err = OutputDir::prepare(&dir, false).err().unwrap().to_string();
        assert!(
            err.contains("--force") && err.contains("not empty"),
            "{err}"
        );
        // Replaced only when the new results are complete: a run that fails keeps the old ones.
        let out = OutputDir::prepare(&dir, true).unwrap();
        drop(out);
        assert!(dir.join("summary.csv").exists() && dir.join("runs/3/link_bytes.csv").exists());
        let mut out = OutputDir::prepare(&dir, true).unwrap();
        std::fs::write(out.file("summary.csv"), "new").unwrap();
        out.commit().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("summary.csv")).unwrap(),
            "new"
        );
        assert!(!dir.join("runs").exists());
        assert!(dir.join("notes.txt").exists());
        // A file collsim did not write is never replaced: the run's results are refused.
        let mut out = OutputDir::prepare(&dir, true).unwrap();
        std::fs::write(out.file("notes.txt"), "results").unwrap();
        let err = out.commit().unwrap_err().to_string();
        assert!(err.contains("notes.txt"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
            "mine"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("summary.csv")).unwrap(),
            "new"
        );
        let file = dir.join("notes.txt");
        let err = OutputDir::prepare(&file, true).err().unwrap().to_string();
        assert!(err.contains("is a file"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_folder_another_run_writes_is_refused_and_a_dead_runs_lock_taken_over() {
        let dir = std::env::temp_dir().join(format!("collsim-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = OutputDir::prepare(&dir, false).unwrap();
        let err = OutputDir::prepare(&dir, true).err().unwrap().to_string();
        assert!(err.contains("another collsim run"), "{err}");
        drop(first);
        assert!(!dir.join(LOCK).exists());
        // A killed run: its lock names a process that is gone, its temporary file is left.
        std::fs::write(dir.join(LOCK), "4294967").unwrap();
        std::fs::write(dir.join(".summary.partial.csv"), "half").unwrap();
        let out = OutputDir::prepare(&dir, false).unwrap();
        assert!(!dir.join(".summary.partial.csv").exists());
        drop(out);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
