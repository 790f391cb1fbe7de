//! The idle guard (blueprint `idle`, node config version 4): what makes a
//! node busy, the `activity` message a worker sends the master, and the
//! line the master leaves on the worker group for `synth status`
//! (docs/ARCHITECTURE.md, "The idle guard").
//!
//! A node is busy while a job started by `trainer launch` runs on it (a
//! live supervisor behind a pid file under [`JOBS_RUN_DIR`]), while an SSH
//! connection to it is open, or while any of its GPUs is at least
//! [`BUSY_GPU_PERCENT`] % utilised. The cluster is idle when no node is
//! busy; after [`Idle::after_minutes`] of that the master acts.

use serde::{Deserialize, Serialize};

/// The shortest idle time a blueprint may give, minutes.
pub const MIN_MINUTES: u32 = 5;

/// The longest idle time a blueprint may give, minutes (a week).
pub const MAX_MINUTES: u32 = 10_080;

/// A GPU at or above this utilisation (percent of the last sample period,
/// as NVML reports it) makes its node busy.
pub const BUSY_GPU_PERCENT: u32 = 5;

/// Where `trainer supervise` keeps one pid file per rank
/// (`<dir>/<job>/<rank>.pid`: the supervisor's pid and its command's
/// process group), under the node's filesystem root. Written by `trainer`,
/// read by `trainer kill` and by the agent's busy probe.
pub const JOBS_RUN_DIR: &str = "/run/deeplearning-trainer";

/// The extension of a pid file under [`JOBS_RUN_DIR`]: what `trainer kill`
/// and the agent's busy probe look for in a job's directory.
pub const PID_FILE_EXTENSION: &str = "pid";

/// The pid file of `rank` of `job`, as a node path:
/// `<JOBS_RUN_DIR>/<job>/<rank>.pid`.
pub fn pid_file(job: &str, rank: u32) -> String {
    format!("{JOBS_RUN_DIR}/{job}/{rank}.{PID_FILE_EXTENSION}")
}

/// A pid file's text, as `trainer supervise` writes it: the supervisor's
/// pid and its command's process group; [`parse_pid_file`] reads it back.
pub fn pid_file_text(supervisor: u32, pgid: i32) -> String {
    format!("{supervisor} {pgid}\n")
}

/// A pid file's text under [`JOBS_RUN_DIR`] read as the supervisor's pid and
/// its command's process group (the first two numbers); `None` when it does
/// not hold both. The one reader of the format, for `trainer kill` and the
/// agent's busy probe.
pub fn parse_pid_file(text: &str) -> Option<(i32, i32)> {
    let mut numbers = text.split_whitespace().filter_map(|w| w.parse::<i32>().ok());
    Some((numbers.next()?, numbers.next()?))
}

/// The tag on the worker Auto Scaling group where the master leaves the
/// idle guard's state for `synth status` ([`IdleMark`]). The group is
/// already described by `synth status`, and a tag needs no new resource.
pub const IDLE_TAG: &str = "deeplearning:idle";

/// The file the master leaves, under the node's filesystem root, while the
/// idle guard has the workers scaled down ([`ScaledDown`]): written when
/// the guard acts, removed when workers join again (a `synth resume`) or
/// a new idle stretch starts. `trainer launch` reads it to say that the
/// workers are gone and how to bring them back.
pub const SCALED_DOWN_PATH: &str = "/var/lib/deeplearning/scaled-down";

/// What [`SCALED_DOWN_PATH`] holds: one line, `stack=<name> ` and the
/// [`IdleMark`]'s tag text (the guard has acted, so it has `acted=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaledDown {
    /// The cluster's stack (what `synth resume` takes).
    pub stack: String,
    /// When the cluster went idle and when the guard acted.
    pub mark: IdleMark,
}

impl ScaledDown {
    /// The file's text.
    pub fn to_text(&self) -> String {
        format!("stack={} {}\n", self.stack, self.mark.to_tag())
    }

    /// Reads the file's text; `None` for anything else.
    pub fn parse(text: &str) -> Option<ScaledDown> {
        let rest = text.trim().strip_prefix("stack=")?;
        let (stack, mark) = rest.split_once(' ')?;
        Some(ScaledDown { stack: stack.to_owned(), mark: IdleMark::from_tag(mark)? })
    }

    /// What a command about to use the workers says: when they were scaled
    /// down and the one command that brings them back.
    pub fn advice(&self, now_ms: u64) -> String {
        let ago = |ms: u64| {
            let minutes = now_ms.saturating_sub(ms) / 60_000;
            if minutes == 0 { "less than a minute ago".to_owned() } else { format!("{minutes} min ago") }
        };
        let (when, what) = match self.mark {
            IdleMark::Idle { since_ms, acted_ms, action, .. } => (
                format!(" {} (idle since {})", acted_ms.map_or_else(|| "earlier".to_owned(), ago), ago(since_ms)),
                match action {
                    IdleAction::ScaleWorkers => "scaled the workers to 0",
                    IdleAction::Stop => "scaled the workers to 0 and stopped the master",
                },
            ),
            IdleMark::Busy => (String::new(), "scaled the workers to 0"),
        };
        format!("the idle guard {what}{when}; run `synth resume {}` where you run synth to bring them back", self.stack)
    }
}

/// What the master does once the cluster has been idle for the time given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    /// Set the worker group's desired capacity to its minimum (0): the
    /// workers terminate, the master, EFS and the stack stay.
    ScaleWorkers,
    /// As `scale_workers`, then power the master off (an EBS-backed
    /// instance whose shutdown behaviour is `stop` stops; `synth resume`
    /// starts it again).
    Stop,
}

impl IdleAction {
    /// The names a blueprint may use, in order.
    pub const NAMES: [&'static str; 2] = ["scale_workers", "stop"];

    /// The action a blueprint's name stands for.
    pub fn from_name(name: &str) -> Option<IdleAction> {
        [IdleAction::ScaleWorkers, IdleAction::Stop].into_iter().find(|a| a.name() == name)
    }

    /// The blueprint's name of it.
    pub fn name(self) -> &'static str {
        match self {
            IdleAction::ScaleWorkers => "scale_workers",
            IdleAction::Stop => "stop",
        }
    }
}

/// The idle guard's settings (node config `idle`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Idle {
    /// Minutes the cluster must be idle before the action,
    /// [`MIN_MINUTES`] to [`MAX_MINUTES`].
    pub after_minutes: u32,
    /// What to do then.
    pub action: IdleAction,
}

/// What keeps a node busy, as its probes saw it: the body of an `activity`
/// message (node to master, message version 9), and the master's own
/// reading of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Activity {
    /// `i-...`
    pub instance_id: String,
    /// Ranks of `trainer launch` jobs running on the node.
    pub job_ranks: u32,
    /// Open inbound SSH connections.
    pub ssh_sessions: u32,
    /// The busiest GPU's utilisation, percent; `None`: no GPU signal (no
    /// driver, no GPU, or NVML could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_percent: Option<u32>,
}

impl Activity {
    /// Whether anything keeps the node busy.
    pub fn busy(&self) -> bool {
        self.job_ranks > 0 || self.ssh_sessions > 0 || self.gpu_percent.is_some_and(|p| p >= BUSY_GPU_PERCENT)
    }

    /// What keeps it busy, for a log line ("1 job rank, 2 SSH sessions");
    /// "idle" when nothing does.
    pub fn describe(&self) -> String {
        let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let mut parts = Vec::new();
        if self.job_ranks > 0 {
            parts.push(plural(self.job_ranks, "job rank"));
        }
        if self.ssh_sessions > 0 {
            parts.push(plural(self.ssh_sessions, "SSH session"));
        }
        if let Some(p) = self.gpu_percent.filter(|p| *p >= BUSY_GPU_PERCENT) {
            parts.push(format!("a GPU at {p} %"));
        }
        if parts.is_empty() { "idle".to_owned() } else { parts.join(", ") }
    }
}

/// The idle guard's state as the worker group's [`IDLE_TAG`] holds it.
///
/// On the wire (a tag value, at most 256 characters): `busy`, or
/// `idle since=<unix ms> until=<unix ms> action=<name>`, with
/// ` acted=<unix ms>` once the action was taken. `until` is when the
/// action is due (`since` plus the idle time), so a reader needs no clock
/// but its own to say how long is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleMark {
    /// The cluster is in use.
    Busy,
    /// No node has been busy since `since_ms`.
    Idle {
        /// When the master last saw a busy node (or formed), unix ms.
        since_ms: u64,
        /// When the action is due, unix ms.
        until_ms: u64,
        /// The action.
        action: IdleAction,
        /// When it was taken, unix ms; `None`: not yet.
        acted_ms: Option<u64>,
    },
}

impl IdleMark {
    /// The tag value.
    pub fn to_tag(&self) -> String {
        match self {
            IdleMark::Busy => "busy".to_owned(),
            IdleMark::Idle { since_ms, until_ms, action, acted_ms } => {
                let acted = acted_ms.map(|a| format!(" acted={a}")).unwrap_or_default();
                format!("idle since={since_ms} until={until_ms} action={}{acted}", action.name())
            }
        }
    }

    /// Reads a tag value; `None` for anything else (a tag edited by hand).
    pub fn from_tag(value: &str) -> Option<IdleMark> {
        let value = value.trim();
        if value == "busy" {
            return Some(IdleMark::Busy);
        }
        let rest = value.strip_prefix("idle ")?;
        let (mut since_ms, mut until_ms, mut action, mut acted_ms) = (None, None, None, None);
        for field in rest.split_whitespace() {
            let (key, v) = field.split_once('=')?;
            match key {
                "since" => since_ms = Some(v.parse().ok()?),
                "until" => until_ms = Some(v.parse().ok()?),
                "action" => action = Some(IdleAction::from_name(v)?),
                "acted" => acted_ms = Some(v.parse().ok()?),
                _ => return None,
            }
        }
        Some(IdleMark::Idle { since_ms: since_ms?, until_ms: until_ms?, action: action?, acted_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_reads_back() {
        assert_eq!(pid_file("resnet", 3), "/run/deeplearning-trainer/resnet/3.pid");
        for (pid, pgid) in [(1, 1), (4120, 4121), (u32::try_from(i32::MAX).unwrap(), i32::MAX)] {
            assert_eq!(parse_pid_file(&pid_file_text(pid, pgid)), Some((pid as i32, pgid)));
        }
        assert_eq!(parse_pid_file("4120\n"), None);
    }

    #[test]
    fn a_node_is_busy_with_a_job_a_session_or_a_working_gpu() {
        let idle = Activity { instance_id: "i-1".into(), ..Activity::default() };
        assert!(!idle.busy());
        assert_eq!(idle.describe(), "idle");
        assert!(Activity { job_ranks: 1, ..idle.clone() }.busy());
        assert!(Activity { ssh_sessions: 1, ..idle.clone() }.busy());
        assert!(!Activity { gpu_percent: Some(4), ..idle.clone() }.busy());
        let gpu = Activity { gpu_percent: Some(5), ..idle.clone() };
        assert!(gpu.busy());
        assert_eq!(gpu.describe(), "a GPU at 5 %");
        let both = Activity { job_ranks: 2, ssh_sessions: 1, ..idle };
        assert_eq!(both.describe(), "2 job ranks, 1 SSH session");
    }

    #[test]
    fn the_mark_round_trips_through_its_tag_and_refuses_anything_else() {
        let marks = [
            IdleMark::Busy,
            IdleMark::Idle { since_ms: 1_000, until_ms: 301_000, action: IdleAction::ScaleWorkers, acted_ms: None },
            IdleMark::Idle { since_ms: 1_000, until_ms: 301_000, action: IdleAction::Stop, acted_ms: Some(302_000) },
        ];
        for mark in marks {
            let tag = mark.to_tag();
            assert!(tag.len() <= 256, "{tag}");
            assert_eq!(IdleMark::from_tag(&tag), Some(mark), "{tag}");
        }
        assert_eq!(
            IdleMark::Idle { since_ms: 1, until_ms: 2, action: IdleAction::Stop, acted_ms: Some(3) }.to_tag(),
            "idle since=1 until=2 action=stop acted=3"
        );
        for bad in [
            "",
            "idle",
            "idle since=1",
            "idle since=x until=2 action=stop",
            "idle since=1 until=2 action=nap",
            "sleepy",
        ] {
            assert_eq!(IdleMark::from_tag(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_scaled_down_file_reads_back_and_names_synth_resume() {
        let mark = IdleMark::Idle {
            since_ms: 0,
            until_ms: 300_000,
            action: IdleAction::ScaleWorkers,
            acted_ms: Some(300_000),
        };
        let file = ScaledDown { stack: "resnet".into(), mark };
        assert_eq!(file.to_text(), "stack=resnet idle since=0 until=300000 action=scale_workers acted=300000\n");
        assert_eq!(ScaledDown::parse(&file.to_text()), Some(file.clone()));
        assert_eq!(ScaledDown::parse("stack=x bogus"), None);
        assert_eq!(
            file.advice(20 * 60_000),
            "the idle guard scaled the workers to 0 15 min ago (idle since 20 min ago); run `synth resume resnet` \
             where you run synth to bring them back"
        );
    }
}
