//! What a command makes for its own use and must not leave behind: temporary files and
//! directories (stores under benchmark, page files, profiler targets), removed when their
//! guard drops, when the process is interrupted (Ctrl-C, SIGTERM) and when the command line
//! exits because its output pipe closed ([`remove_registered`]).
//!
//! Owns: the registry of such paths and the interrupt handler. Must not touch: a path the user
//! named that the command did not create (only registered paths are ever removed).

use std::path::{Path, PathBuf};
use std::sync::Once;

use parking_lot::Mutex;

use crate::{BenchError, Result};

/// A registered path, and whether it is a directory (removed with what it holds).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    path: PathBuf,
    dir: bool,
}

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Removes its path when dropped (and on an interrupt while it lives).
#[derive(Debug)]
pub struct Cleanup {
    entry: Entry,
    keep: bool,
}

impl Cleanup {
    /// The path that will be removed.
    pub fn path(&self) -> &Path {
        &self.entry.path
    }

    /// Keep the path after all (deregisters it; an interrupt no longer removes it either).
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.entry.path.clone()
    }

    /// Removes the path now, reporting a failure (dropping the guard ignores it).
    pub fn remove(mut self) -> Result<()> {
        self.keep = true;
        deregister(&self.entry);
        remove(&self.entry).map_err(|e| BenchError::io("remove", &self.entry.path, e))
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        deregister(&self.entry);
        if !self.keep {
            let _ = remove(&self.entry);
        }
    }
}

fn deregister(entry: &Entry) {
    REGISTRY.lock().retain(|e| e != entry);
}

fn remove(entry: &Entry) -> std::io::Result<()> {
    if entry.dir {
        std::fs::remove_dir_all(&entry.path)
    } else {
        std::fs::remove_file(&entry.path)
    }
}

/// Runs `create` (which must create the file at `path`) and returns its result with a guard
/// that removes the file when dropped. The registry lock is held during creation, so an
/// interrupt cannot slip between creating the file and registering it. If `create` fails,
/// what it left at `path` is removed — unless the path was there before (a file someone else
/// made is never removed).
pub fn create_registered<T>(
    path: &Path,
    create: impl FnOnce() -> Result<T>,
) -> Result<(T, Cleanup)> {
    install_interrupt_handler();
    let entry = Entry {
        path: path.to_path_buf(),
        dir: false,
    };
    let mut reg = REGISTRY.lock();
    let existed = std::fs::symlink_metadata(path).is_ok();
    match create() {
        Ok(v) => {
            reg.push(entry.clone());
            Ok((v, Cleanup { entry, keep: false }))
        }
        Err(e) => {
            if !existed {
                let _ = remove(&entry);
            }
            Err(e)
        }
    }
}

/// A new directory `<parent>/<prefix><random>`, registered: removed with its contents when
/// the guard drops or the process is interrupted.
pub fn temp_dir(prefix: &str, parent: &Path) -> Result<Cleanup> {
    install_interrupt_handler();
    let mut reg = REGISTRY.lock();
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(|e| BenchError::io("create a directory in", parent, e))?;
    let entry = Entry {
        path: dir.keep(),
        dir: true,
    };
    reg.push(entry.clone());
    Ok(Cleanup { entry, keep: false })
}

/// Registers `dir`, which the caller has just created (a directory the user named that must
/// not have existed): removed with its contents when the guard drops or on an interrupt.
pub fn created_dir(dir: &Path) -> Cleanup {
    install_interrupt_handler();
    let entry = Entry {
        path: dir.to_path_buf(),
        dir: true,
    };
    REGISTRY.lock().push(entry.clone());
    Cleanup { entry, keep: false }
}

/// Makes directory `dir` (and its parents) if it is missing. When this call made it and
/// `remove` is set, returns a guard that removes it again (with its contents, also on an
/// interrupt); parents it made stay.
pub fn make_dir(dir: &Path, remove: bool) -> Result<Option<Cleanup>> {
    if dir.is_dir() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("create directory", dir, e))?;
    Ok(remove.then(|| created_dir(dir)))
}

/// Removes every registered path now (the process is about to exit without unwinding: an
/// interrupt, or a closed output pipe); returns the paths removed.
pub fn remove_registered() -> Vec<PathBuf> {
    let reg = REGISTRY.lock();
    reg.iter()
        .filter(|e| {
            // Other threads may still be writing into a directory (ENOTEMPTY): try again.
            (0..5).any(|_| remove(e).is_ok() || std::fs::symlink_metadata(&e.path).is_err())
        })
        .map(|e| e.path.clone())
        .collect()
}

/// Installs (once) the handler of SIGINT and SIGTERM that removes every registered path and
/// exits with status 130. If the process already has a handler, paths are still removed on
/// normal exit and errors, just not on an interrupt.
pub fn install_interrupt_handler() {
    HANDLER.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            for p in remove_registered() {
                eprintln!("tierbase: interrupted; removed {}", p.display());
            }
            std::process::exit(130);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_remove_what_they_registered_and_keep_what_they_are_told_to() {
        let base = tempfile::tempdir().unwrap();
        let d = temp_dir("t-", base.path()).unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let path = d.path().to_path_buf();
        assert!(REGISTRY.lock().iter().any(|e| e.path == path));
        drop(d);
        assert!(!path.exists());
        assert!(!REGISTRY.lock().iter().any(|e| e.path == path));

        let f = base.path().join("file");
        let (_, g) = create_registered(&f, || {
            std::fs::write(&f, b"y").map_err(|e| BenchError::io("write", &f, e))
        })
        .unwrap();
        let kept = g.keep();
        assert!(kept.exists());
        assert!(!REGISTRY.lock().iter().any(|e| e.path == kept));

        let user = base.path().join("named");
        std::fs::create_dir(&user).unwrap();
        std::fs::write(user.join("f"), b"z").unwrap();
        created_dir(&user).remove().unwrap();
        assert!(!user.exists());
    }
}
