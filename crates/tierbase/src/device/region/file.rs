//! Files behind regions: the exclusive lock that keeps a second handle out.

use super::*;

/// Takes an exclusive, non-blocking `flock` on a store file, so that no second handle — in
/// this process or another — maps it while this one lives (released when the file closes);
/// `shared` (a read-only open): a shared lock, which other read-only opens share and a writer
/// cannot take.
pub(crate) fn lock_file(file: &File, path: &Path, shared: bool) -> Result<()> {
    let how = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    // A lock whose holder no process lists any more is being released: the kernel closes a
    // killed process's io_uring files in a worker, moments after the process is gone. Wait
    // for that (up to a second) instead of refusing a restart right after a crash.
    const STALE_RETRIES: u32 = 200;
    let mut retries = 0;
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::io("lock", Some(path), err));
        }
        let ino = std::os::unix::fs::MetadataExt::ino(
            &file
                .metadata()
                .map_err(|e| Error::io("stat", Some(path), e))?,
        );
        match lock_holder(ino) {
            Some(holder) => {
                return Err(Error::Locked {
                    path: path.to_path_buf(),
                    holder,
                });
            }
            None if retries < STALE_RETRIES => {
                retries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            None => {
                return Err(Error::Locked {
                    path: path.to_path_buf(),
                    holder: "another open handle".to_string(),
                });
            }
        }
    }
}

/// Who holds a `flock` on inode `ino`, from `/proc/locks` ("process 1234 (name)"): `None`
/// if no live process is listed (the lock is being released, or `/proc` is unreadable).
fn lock_holder(ino: u64) -> Option<String> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, id) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let lock_ino: u64 = id.rsplit(':').next()?.parse().ok()?;
        if *kind != "FLOCK" || lock_ino != ino {
            return None;
        }
        // A listed process that is gone left the lock to a kernel worker finishing its files.
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        Some(format!("process {pid} ({})", name.trim()))
    })
}
