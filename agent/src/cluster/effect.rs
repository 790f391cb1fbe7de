//! What the pure membership logic asks the outside world to do: the
//! [`Effect`]s the runner carries out with the ports ([`crate::ports`]).

use node_contract::message::Manifest;

use crate::ports::Formation;

/// Something the runner should do, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Signal the master's creation policy: the master's agent is up.
    SignalMasterUp,
    /// Signal the formation wait condition.
    SignalFormation(Formation),
    /// Send this manifest to the worker queue, as the parts
    /// [`node_contract::parts::split`] makes of it; when a part cannot be
    /// sent, tell [`super::MasterState::on_publish_failed`].
    PublishManifest {
        /// The manifest.
        manifest: Manifest,
        /// Its publication id, which every part carries.
        publication: u64,
    },
    /// Delete manifests with a generation up to and including this one from
    /// the worker queue.
    RetireManifests {
        /// The newest generation to delete.
        through_generation: u64,
    },
    /// Set the worker group's desired capacity.
    SetDesiredCapacity(u32),
    /// Read the worker group's launch failures and instances and pass them
    /// to [`super::MasterState::on_launch_failures`] (an empty list, or no
    /// instances, when reading failed).
    FetchLaunchFailures,
    /// Read the worker group's instances and pass them to
    /// [`super::MasterState::on_group_instances`] (nothing, when reading
    /// failed): a master that starts with members, and the idle guard after
    /// its action, check which members still exist.
    CheckMembers,
    /// Complete an Auto Scaling lifecycle action with `CONTINUE`.
    CompleteLifecycle {
        /// The lifecycle hook's name.
        hook: String,
        /// The lifecycle action token.
        token: String,
        /// The instance.
        instance_id: String,
    },
    /// Terminate this worker in its Auto Scaling group without lowering the
    /// desired capacity, so the group launches another (the network gate's
    /// `replace`).
    TerminateWorker(String),
    /// Mark this worker unhealthy in its Auto Scaling group, which
    /// terminates it and launches another (the GPU gate's `replace`).
    MarkUnhealthy(String),
    /// Write the network gate's verdict (JSON) to
    /// `/var/lib/deeplearning/network-check.json` for `trainer doctor`.
    WriteNetworkCheck(String),
    /// Write the idle guard's state to the worker group's tag
    /// (`node_contract::idle::IDLE_TAG`), where `synth status` reads it.
    MarkIdle(node_contract::idle::IdleMark),
    /// Write the newest stragglers `trainer train` named to the worker
    /// group's tag (`node_contract::straggler::STRAGGLER_TAG`), where
    /// `synth status` reads them.
    MarkStragglers(node_contract::straggler::StragglerMark),
    /// Power the master's instance off (the idle guard's `stop`): an
    /// EBS-backed instance whose shutdown behaviour is `stop` stops.
    PowerOff,
    /// Append this line (no newline) to the host log on EFS.
    AppendHostLog(String),
    /// Worth an info line in the agent's log.
    Log(String),
}
