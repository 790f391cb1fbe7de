//! Cluster job control: run any training command on every host of the
//! cluster, watch it, and leave nothing behind.
//!
//! - [`launch`]: `trainer launch -- CMD...` on the master starts one remote
//!   [`supervise`] per rank through the system `ssh` client (host key
//!   checking on, the agent's known hosts), prefixes and logs every line, and
//!   stops every rank on every host when one fails, on Ctrl-C/SIGTERM, or
//!   when a connection drops; `--elastic` follows the agent's membership.
//! - [`supervise`]: the hidden remote half: owns CMD's process group and
//!   kills it when its parent (the ssh session) goes away.
//! - [`kill`]: `trainer kill` stops a job's leftovers on every host from the
//!   pid files the supervisors keep.
//! - [`doctor`]: `trainer doctor` checks every host is ready for a job;
//!   [`install_check`]: `trainer doctor --local` checks this host's install
//!   (agent, unit, ssh client) with no SSH and no cluster, for image builds.
//! - [`hosts`] (the hosts file and ranks), [`ssh`] (the client's options),
//!   [`process`] (process groups and signals), [`profile`] (the agent's
//!   `/etc/profile.d/deeplearning.sh`), [`torchrun`] (the environment every
//!   rank gets), [`error_file`] (a failed rank's `@record` error file),
//!   [`open_files`] (the descriptor limit checked before reaching hundreds of
//!   hosts), [`stall`] (the launcher's report of a job whose ranks all went
//!   silent while one host's GPUs stay busy): what the commands above share.
//!
//! Nothing here is used by [`crate::train`].

pub(crate) mod doctor;
pub(crate) mod doctor_gpu;
pub(crate) mod error_file;
pub(crate) mod hosts;
pub(crate) mod install_check;
pub(crate) mod kill;
pub(crate) mod launch;
pub(crate) mod open_files;
pub(crate) mod process;
pub(crate) mod profile;
pub(crate) mod ssh;
pub(crate) mod stall;
pub(crate) mod supervise;
pub(crate) mod torchrun;
