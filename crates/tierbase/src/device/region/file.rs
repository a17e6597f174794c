//! Files behind regions: the exclusive lock that keeps a second handle out.

use super::*;

/// Takes an exclusive, non-blocking `flock` on a store file, so that no second handle — in
/// this process or another — maps it while this one lives (released when the file closes).
pub(crate) fn lock_file(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(Error::io("lock", Some(path), err));
    }
    let holder = std::os::unix::fs::MetadataExt::ino(
        &file
            .metadata()
            .map_err(|e| Error::io("stat", Some(path), e))?,
    );
    Err(Error::Locked {
        path: path.to_path_buf(),
        holder: lock_holder(holder).unwrap_or_else(|| "another open handle".to_string()),
    })
}

/// Who holds a `flock` on inode `ino`, from `/proc/locks` ("process 1234").
fn lock_holder(ino: u64) -> Option<String> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, id) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let lock_ino: u64 = id.rsplit(':').next()?.parse().ok()?;
        (*kind == "FLOCK" && lock_ino == ino).then(|| {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            if name.is_empty() {
                format!("process {pid}")
            } else {
                format!("process {pid} ({name})")
            }
        })
    })
}
