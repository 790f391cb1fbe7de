//! How many GPUs this node has, from the CUDA driver (`libcuda`, loaded at
//! run time by cudarc), never from a list of instance types.
//!
//! No driver, no devices, or any driver error means 0 GPUs, not a crash: the
//! same binary runs on CPU instances. Without the `cuda` cargo feature the
//! count is always 0.

/// The number of CUDA devices the driver reports; 0 when there is no driver or it fails.
pub(crate) fn count() -> u32 {
    #[cfg(feature = "cuda")]
    {
        // Some cudarc calls panic when libcuda is missing (they unwrap the
        // dynamic load); `probe` checks first, and this is the last guard.
        match std::panic::catch_unwind(probe) {
            Ok(count) => count,
            Err(_) => {
                tracing::warn!("the CUDA driver probe panicked; counting 0 GPUs");
                0
            }
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        tracing::debug!("built without the `cuda` feature; counting 0 GPUs");
        0
    }
}

#[cfg(feature = "cuda")]
fn probe() -> u32 {
    use cudarc::driver::{result, sys};

    // SAFETY: this only tries to load the library; it calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        tracing::debug!("no CUDA driver (libcuda) found; counting 0 GPUs");
        return 0;
    }
    if let Err(e) = result::init() {
        tracing::warn!(error = ?e, "the CUDA driver failed to initialise (cuInit); counting 0 GPUs");
        return 0;
    }
    match result::device::get_count() {
        Ok(count) => {
            let count = u32::try_from(count).unwrap_or(0);
            tracing::info!(count, "GPUs found by the CUDA driver");
            count
        }
        Err(e) => {
            tracing::warn!(error = ?e, "the CUDA driver could not count devices (cuDeviceGetCount); counting 0 GPUs");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    /// On this project's machines (no GPU, no libcuda) the count is 0 and nothing panics;
    /// on a machine with a driver and a GPU, the count is at least 1.
    #[test]
    fn count_follows_the_driver() {
        let count = super::count();
        #[cfg(feature = "cuda")]
        let driver = unsafe { cudarc::driver::sys::is_culib_present() };
        #[cfg(not(feature = "cuda"))]
        let driver = false;
        if driver && std::path::Path::new("/dev/nvidia0").exists() {
            assert!(count >= 1, "a GPU device node exists but the driver counted {count}");
        } else if !driver {
            assert_eq!(count, 0);
        }
        // A second call takes the same path (no cached state to trip over).
        assert_eq!(super::count(), count);
    }
}
