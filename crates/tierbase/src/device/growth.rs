//! Growth ahead of need on a device that may be full.
//!
//! Owns: the one rule every growing file follows (logs, page files, regions): ask for the
//! step ahead, and when the device has no room for it, ask for what is needed now. Must not
//! touch: how a file grows (`block`, `region`) or how big a step is (each store's policy).

use crate::error::{Error, Result};

/// Grows to `preferred` bytes (`required` plus the caller's step ahead) by calling `grow`,
/// or, when there is no room for that (the device is full, [`Error::DeviceFull`], or a
/// region's reservation ends first, [`Error::RegionLimit`]), to `required` alone, so that a
/// store uses its space to the end instead of failing with a step's worth of room left.
/// Returns the length grown to. No room even for `required` returns that error.
pub(crate) fn grow_toward(
    required: u64,
    preferred: u64,
    mut grow: impl FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let preferred = preferred.max(required);
    match grow(preferred) {
        Ok(()) => Ok(preferred),
        Err(Error::DeviceFull { .. } | Error::RegionLimit { .. }) if preferred > required => {
            grow(required)?;
            Ok(required)
        }
        Err(e) => Err(e),
    }
}

/// Makes a write past the process's file-size limit (the shell's `ulimit -f`,
/// `RLIMIT_FSIZE`) fail with `EFBIG`, which the device layer reports as
/// [`Error::DeviceFull`], instead of killing the process with `SIGXFSZ` — whose default
/// action ends it mid-write with no error line (a server dies with every client cut off).
/// For programs (the command line, the server); a library leaves signals to its host.
pub fn report_file_size_limit_as_full() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler (no code runs
    // in signal context); `signal` only changes process-wide state that nothing else in
    // this process relies on for SIGXFSZ.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(requested: u64) -> Error {
        Error::DeviceFull {
            path: None,
            requested,
        }
    }

    #[test]
    fn a_full_device_gets_asked_for_the_need_alone() {
        let mut asked = Vec::new();
        let got = grow_toward(10, 100, |len| {
            asked.push(len);
            if len > 50 { Err(full(len)) } else { Ok(()) }
        })
        .unwrap();
        assert_eq!((got, asked), (10, vec![100, 10]));
        // The end of a region's reservation alike.
        let got = grow_toward(10, 100, |len| {
            if len > 50 {
                Err(Error::RegionLimit {
                    requested: len,
                    limit: 50,
                })
            } else {
                Ok(())
            }
        });
        assert_eq!(got.unwrap(), 10);
    }

    #[test]
    fn room_for_the_step_takes_it_and_other_errors_pass_through() {
        let mut asked = Vec::new();
        let grown = grow_toward(10, 100, |l| {
            asked.push(l);
            Ok(())
        });
        assert_eq!(grown.unwrap(), 100);
        assert_eq!(asked, vec![100]);
        // Not a full device: no second try.
        let mut tries = 0;
        let err = grow_toward(10, 100, |_| {
            tries += 1;
            Err(Error::InvalidArgument("x".into()))
        })
        .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)) && tries == 1);
        // Full even for the need: that error.
        let err = grow_toward(10, 100, |l| Err(full(l))).unwrap_err();
        assert!(
            matches!(err, Error::DeviceFull { requested: 10, .. }),
            "{err}"
        );
        // A step no larger than the need is asked for once.
        let mut tries = 0;
        assert!(
            grow_toward(10, 5, |l| {
                tries += 1;
                Err(full(l))
            })
            .is_err()
        );
        assert_eq!(tries, 1);
    }
}
