//! Where one job's shared files live: `$EFS_MOUNT/trainer/<job>/<what>`
//! (`checkpoints`, `tb`), beside the per-rank logs `trainer launch` keeps in
//! `$EFS_MOUNT/trainer/<job>/logs`.
//!
//! Inputs: the environment `trainer supervise` gives every rank: `EFS_MOUNT`
//! (from the agent's profile) and [`JOB_VAR`].
//! Nothing is created here; the writers create what they use.

use std::path::PathBuf;

/// The environment variable naming the job, set by `trainer supervise` for
/// CMD and everything it starts.
pub(crate) const JOB_VAR: &str = "TRAINER_JOB";

/// The job name used when the process was not started by `trainer launch`.
pub(crate) const LOCAL_JOB: &str = "local";

/// `$EFS_MOUNT/trainer/<job>/<what>`; without `EFS_MOUNT` (a run outside the
/// cluster) the same layout under the current directory, and without a job
/// name (not started by `trainer launch`) the job [`LOCAL_JOB`].
pub(crate) fn path(what: &str) -> PathBuf {
    let env = |name: &str| std::env::var(name).ok();
    path_from(env(node_contract::files::profile::EFS_MOUNT_VAR).as_deref(), env(JOB_VAR).as_deref(), what)
}

/// [`path`] from the two variables' values (empty counts as unset).
pub(crate) fn path_from(efs_mount: Option<&str>, job: Option<&str>, what: &str) -> PathBuf {
    let base = PathBuf::from(efs_mount.filter(|v| !v.is_empty()).unwrap_or("."));
    base.join("trainer").join(job.filter(|v| !v.is_empty()).unwrap_or(LOCAL_JOB)).join(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_beside_the_launch_logs() {
        assert_eq!(path_from(Some("/mnt/efs"), Some("j1"), "tb"), PathBuf::from("/mnt/efs/trainer/j1/tb"));
        assert_eq!(path_from(Some(""), None, "checkpoints"), PathBuf::from("./trainer/local/checkpoints"));
        assert_eq!(path_from(None, Some(""), "tb"), PathBuf::from("./trainer/local/tb"));
    }
}
