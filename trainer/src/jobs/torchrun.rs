//! The environment torchrun gives each worker process, as `trainer launch`
//! gives it to every rank, so a script written for torchrun (and
//! `torch.distributed.is_torchelastic_launched()`, which tests
//! `TORCHELASTIC_RUN_ID`) sees what it expects.
//!
//! Sources, PyTorch's own (`torch/distributed/...` in pytorch/pytorch):
//! - `elastic/agent/server/local_elastic_agent.py`, `LocalElasticAgent._start_workers`:
//!   `RANK`, `GROUP_RANK`, `ROLE_RANK`, `ROLE_NAME`, `LOCAL_WORLD_SIZE`,
//!   `WORLD_SIZE`, `GROUP_WORLD_SIZE`, `ROLE_WORLD_SIZE`, `MASTER_ADDR`,
//!   `MASTER_PORT`, `TORCHELASTIC_RESTART_COUNT`, `TORCHELASTIC_MAX_RESTARTS`,
//!   `TORCHELASTIC_RUN_ID`, `TORCHELASTIC_USE_AGENT_STORE`,
//!   `TORCH_NCCL_ASYNC_ERROR_HANDLING` (the agent's own value, else `1`),
//!   `LOCAL_RANK`, and `OMP_NUM_THREADS` when the agent has it.
//! - `elastic/multiprocessing/api.py`, `DefaultLogsSpecs.reify`:
//!   `TORCHELASTIC_ERROR_FILE`, one `error.json` per worker.
//! - `run.py`, `config_from_args`: when `OMP_NUM_THREADS` is not set and
//!   more than one process runs per node, every worker gets
//!   `OMP_NUM_THREADS=1`, "to avoid your system being overloaded", said
//!   once as a warning.
//!
//! What the values mean here: one worker group per host (`GROUP_RANK`,
//! `GROUP_WORLD_SIZE`), one role (`ROLE_NAME=default`, torchrun's `--role`
//! default, so role ranks are global ranks), the job name as the run id
//! (torchrun's `--rdzv-id`), no restarts (`trainer launch` stops the job
//! when a rank fails; torchrun's `--max-restarts` defaults to 0 too). No
//! agent store: rank 0 hosts the `env://` store itself, which is what
//! `TORCHELASTIC_USE_AGENT_STORE=False` tells `torch.distributed`.
//!
//! The launcher's environment plays the part of torchrun's own:
//! `OMP_NUM_THREADS` and `TORCH_NCCL_ASYNC_ERROR_HANDLING` set where
//! `trainer launch` runs are passed to every rank ([`Inherited`]).

use std::path::Path;

/// torchrun's `--role` default.
pub(crate) const ROLE_NAME: &str = "default";

/// Where one rank sits in the job (what the launcher tells its supervisor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// Global rank.
    pub rank: u32,
    /// Rank on its host.
    pub local_rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// Ranks on its host.
    pub local_world_size: u32,
    /// Its host's index among the job's hosts.
    pub group_rank: u32,
    /// Hosts in the job.
    pub group_world_size: u32,
    /// Rank 0's host.
    pub master_addr: String,
    /// Rank 0's rendezvous port.
    pub master_port: u16,
    /// The job name (torchrun's run id).
    pub run_id: String,
}

/// torchrun's per-worker variables for the rank at `place`;
/// `error_file` becomes `TORCHELASTIC_ERROR_FILE` (none when it could not
/// be prepared: `@record` then only logs).
pub(crate) fn rank_env(place: &Place, error_file: Option<&Path>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("RANK", place.rank.to_string()),
        ("LOCAL_RANK", place.local_rank.to_string()),
        ("WORLD_SIZE", place.world_size.to_string()),
        ("LOCAL_WORLD_SIZE", place.local_world_size.to_string()),
        ("GROUP_RANK", place.group_rank.to_string()),
        ("GROUP_WORLD_SIZE", place.group_world_size.to_string()),
        ("ROLE_NAME", ROLE_NAME.to_owned()),
        // One role: its ranks and size are the job's.
        ("ROLE_RANK", place.rank.to_string()),
        ("ROLE_WORLD_SIZE", place.world_size.to_string()),
        ("MASTER_ADDR", place.master_addr.clone()),
        ("MASTER_PORT", place.master_port.to_string()),
        ("TORCHELASTIC_RUN_ID", place.run_id.clone()),
        ("TORCHELASTIC_RESTART_COUNT", "0".to_owned()),
        ("TORCHELASTIC_MAX_RESTARTS", "0".to_owned()),
        // Python's `str(False)`, as torchrun writes it.
        ("TORCHELASTIC_USE_AGENT_STORE", "False".to_owned()),
    ];
    if let Some(file) = error_file {
        env.push(("TORCHELASTIC_ERROR_FILE", file.display().to_string()));
    }
    env
}

/// The variables torchrun takes from its own environment, taken from the
/// launcher's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inherited {
    /// `OMP_NUM_THREADS` where `trainer launch` runs, if set.
    pub omp_num_threads: Option<String>,
    /// `TORCH_NCCL_ASYNC_ERROR_HANDLING` where `trainer launch` runs, else `1`.
    pub nccl_async_error_handling: String,
}

impl Inherited {
    /// From an environment lookup (`std::env::var(..).ok()` in the launcher).
    pub(crate) fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            omp_num_threads: var("OMP_NUM_THREADS"),
            nccl_async_error_handling: var("TORCH_NCCL_ASYNC_ERROR_HANDLING").unwrap_or_else(|| "1".to_owned()),
        }
    }

    /// What a rank on a host with `local_world_size` ranks gets:
    /// `TORCH_NCCL_ASYNC_ERROR_HANDLING`, and `OMP_NUM_THREADS` (the
    /// launcher's, else 1 when its host runs more than one rank).
    pub(crate) fn for_rank(&self, local_world_size: u32) -> Vec<(&'static str, String)> {
        let mut env = vec![("TORCH_NCCL_ASYNC_ERROR_HANDLING", self.nccl_async_error_handling.clone())];
        match &self.omp_num_threads {
            Some(n) => env.push(("OMP_NUM_THREADS", n.clone())),
            None if local_world_size > 1 => env.push(("OMP_NUM_THREADS", "1".to_owned())),
            None => {}
        }
        env
    }

    /// The note the launcher prints once when it sets `OMP_NUM_THREADS=1`
    /// for ranks on hosts with `max_local_world_size` ranks or fewer.
    pub(crate) fn omp_note(&self, max_local_world_size: u32) -> Option<String> {
        (self.omp_num_threads.is_none() && max_local_world_size > 1).then(|| {
            "OMP_NUM_THREADS=1 for every rank on a host with more than one rank (torchrun's default, so the ranks \
             do not overload the host's cores); set OMP_NUM_THREADS where you run `trainer launch` to choose"
                .to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place {
        Place {
            rank: 5,
            local_rank: 1,
            world_size: 8,
            local_world_size: 2,
            group_rank: 2,
            group_world_size: 4,
            master_addr: "deeplearning-master".into(),
            master_port: 29500,
            run_id: "resnet".into(),
        }
    }

    #[test]
    fn every_torchrun_variable_with_torchruns_meaning() {
        let env = rank_env(&place(), Some(Path::new("/efs/trainer/resnet/logs/rank-5.error.json")));
        let get = |k: &str| env.iter().find(|(name, _)| *name == k).map(|(_, v)| v.as_str());
        for (k, v) in [
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "2"),
            ("GROUP_WORLD_SIZE", "4"),
            ("ROLE_NAME", "default"),
            ("ROLE_RANK", "5"),
            ("ROLE_WORLD_SIZE", "8"),
            ("MASTER_ADDR", "deeplearning-master"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "resnet"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
            ("TORCHELASTIC_MAX_RESTARTS", "0"),
            ("TORCHELASTIC_USE_AGENT_STORE", "False"),
            ("TORCHELASTIC_ERROR_FILE", "/efs/trainer/resnet/logs/rank-5.error.json"),
        ] {
            assert_eq!(get(k), Some(v), "{k}");
        }
        assert!(rank_env(&place(), None).iter().all(|(k, _)| *k != "TORCHELASTIC_ERROR_FILE"));
    }

    #[test]
    fn omp_threads_default_to_1_only_with_several_ranks_per_host_and_none_set() {
        let unset = Inherited::from_env(|_| None);
        assert_eq!(
            unset.for_rank(2),
            [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into()), ("OMP_NUM_THREADS", "1".into())]
        );
        assert_eq!(unset.for_rank(1), [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into())]);
        assert!(unset.omp_note(2).is_some() && unset.omp_note(1).is_none());
        let set = Inherited::from_env(|k| match k {
            "OMP_NUM_THREADS" => Some("6".into()),
            "TORCH_NCCL_ASYNC_ERROR_HANDLING" => Some("3".into()),
            _ => None,
        });
        assert_eq!(set.for_rank(1), [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3".into()), ("OMP_NUM_THREADS", "6".into())]);
        assert!(set.omp_note(8).is_none());
    }
}
