//! The master loop, on the master beside its node loop: long-poll the
//! master queue (more receives at once while it has a backlog), feed each
//! message to [`MasterState`], carry out the effects it asks for
//! ([`super::effects`]), save the state after every turn so a restarted
//! agent resumes where it was ([`super::state_file`]), and only then delete
//! the messages it handled. With an idle guard, the master's own reading
//! ([`Guard::own`]) is fed to the state at the top of every turn, before
//! the messages and the tick.

use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use node_contract::NodeConfig;
use node_contract::clock::Clock;
use node_contract::formation::FormingMark;
use node_contract::idle::Activity;
use node_contract::message::{self, MasterInbound, Register};
use tracing::{debug, info, warn};

use super::Ports;
use super::boot::prepare_marker;
use super::effects::execute;
use super::retry::{LONG_POLL, retry};
use super::state_file::{SentMark, StateFile, master_state_path};
use crate::cluster::MasterState;
use crate::cluster::master::idle::IdleSettings;
use crate::files;
use crate::ports::{Formation, GroupSize, MAX_BATCH, PortError, Power, Queue, Received, StackSignals, WorkerGroup};

/// The idle guard, as the master loop runs it.
pub(super) struct Guard {
    /// Its settings; `None`: no guard.
    pub settings: Option<IdleSettings>,
    /// The master's own readings ([`super::activity_loop::own_loop`]).
    pub own: tokio::sync::watch::Receiver<Option<Activity>>,
}

/// Runs the master loop under `root`; it ends only when the master's state
/// cannot be saved, or the worker group's size cannot be read for good.
#[allow(clippy::too_many_arguments)]
pub(super) async fn master_loop<Q: Queue + Clone + 'static, G: WorkerGroup, S: StackSignals, P: Power>(
    root: &Path,
    config: &NodeConfig,
    me: Register,
    key: &files::cluster_key::ClusterKey,
    master_queue: &Q,
    worker_queue: &Q,
    ports: Ports<'_, G, S, P>,
    mut guard: Guard,
    clock: Clock,
) -> anyhow::Result<()> {
    let (group, signals) = (ports.group, ports.signals);
    let master_id = me.instance_id.clone();
    let path = master_state_path(root);
    let resumed = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<MasterState>(&text) {
            Ok(s) => {
                info!("resuming formation state from {}", path.display());
                Some(s)
            }
            Err(e) => {
                warn!("ignoring unreadable master state {}: {e}", path.display());
                None
            }
        },
        Err(_) => None,
    };
    let mut state = match resumed {
        Some(s) => s,
        None => {
            let size = group_size(&master_id, group, signals).await?;
            info!(requested = size.requested, min = size.min, "the worker group's size");
            MasterState::new(config, size, me, key.public_openssh.clone(), clock())
        }
    };
    state.start_idle(guard.settings);
    let mut state_file = StateFile::new(path);
    let mut sent = SentMark::load(root);
    let effects = state.start(clock(), sent.through);
    execute(root, &master_id, config, &mut state, &mut sent, effects, worker_queue, &ports, clock).await?;
    state_file.save(&state)?;
    let mut forming = FormingTag::default();
    forming.write(state.forming(clock()), group).await;
    // Receives in flight per turn: 1 (a long poll), more while the queue
    // has a backlog ([`next_fan_out`]).
    let mut fan_out = 1;
    // Freed heap goes back to the system after busy turns (crate::memory).
    let mut trimmer = crate::memory::Trimmer::new(Duration::from_secs(1));
    // The previous turn's deletes, still running while this turn receives.
    let mut deleting: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let wait = state
            .next_deadline()
            .map(|d| Duration::from_millis(d.saturating_sub(clock())))
            .unwrap_or(LONG_POLL)
            .min(LONG_POLL);
        let started = std::time::Instant::now();
        let received = receive_turn(master_queue, fan_out, wait).await;
        fan_out = next_fan_out(fan_out, received.len());
        let read = started.elapsed();
        let mut effects = Vec::new();
        if guard.own.has_changed().unwrap_or(false)
            && let Some(own) = guard.own.borrow_and_update().clone()
        {
            effects.extend(state.on_inbound(MasterInbound::Activity(own), clock(), &|_| true));
        }
        for r in &received {
            match message::parse_master_queue(&r.body) {
                Ok(inbound) => {
                    let prepared = |ip: &str| prepare_marker(root, config, ip).exists();
                    effects.extend(state.on_inbound(inbound, clock(), &prepared));
                }
                Err(e) => warn!("dropped a master queue message: {e}"),
            }
        }
        effects.extend(state.on_tick(clock()));
        execute(root, &master_id, config, &mut state, &mut sent, effects, worker_queue, &ports, clock).await?;
        forming.write(state.forming(clock()), group).await;
        let handled = started.elapsed();
        state_file.save(&state)?;
        if received.is_empty() {
            trimmer.idle();
        } else {
            trimmer.after_work();
        }
        debug!(
            messages = received.len(),
            receive_ms = read.as_millis() as u64,
            handle_ms = (handled - read).as_millis() as u64,
            save_ms = (started.elapsed() - handled).as_millis() as u64,
            "master turn"
        );
        // Delete only after the effects are out and the state is on disk: a
        // crash before this point redelivers the messages instead of losing
        // them. The deletes (one batch call per receive: at most MAX_BATCH each)
        // run while the next turn receives; one turn's at a time.
        if let Some(previous) = deleting.take() {
            let _ = previous.await;
        }
        if !received.is_empty() {
            let queue = master_queue.clone();
            deleting = Some(tokio::spawn(async move {
                let chunks = received.chunks(MAX_BATCH).map(|chunk| {
                    let receipts: Vec<&str> = chunk.iter().map(|r| r.receipt.as_str()).collect();
                    let queue = &queue;
                    async move { queue.delete_batch(&receipts).await }
                });
                for result in join_all(chunks).await {
                    match result {
                        Ok(0) => {}
                        Ok(n) => debug!("{n} handled message(s) not deleted (they will come back and be ignored)"),
                        Err(e) => {
                            debug!("cannot delete the handled messages (they will come back and be ignored): {e}")
                        }
                    }
                }
            }));
        }
    }
}

/// The formation's count on the worker group's tag
/// ([`node_contract::formation::FORMATION_TAG`]), for `synth deploy`'s live
/// line: written when the count changed, at most once every
/// [`FormingTag::EVERY_MS`] (a 1,000-node formation changes it a thousand
/// times), one attempt each (the next change writes it again; a tag that
/// could not be written costs the live line only).
#[derive(Debug, Default)]
struct FormingTag {
    last: Option<FormingMark>,
    warned: bool,
}

impl FormingTag {
    /// The least time between two writes.
    const EVERY_MS: u64 = 5_000;

    /// Whether `now` is worth writing after `last`.
    fn due(last: Option<&FormingMark>, now: &FormingMark) -> bool {
        last.is_none_or(|last| now.differs(last) && now.at_ms >= last.at_ms + Self::EVERY_MS)
    }

    async fn write<G: WorkerGroup>(&mut self, now: Option<FormingMark>, group: &G) {
        let Some(now) = now else { return };
        if !Self::due(self.last.as_ref(), &now) {
            return;
        }
        self.last = Some(now);
        let (tag, value) = (node_contract::formation::FORMATION_TAG, now.to_tag());
        match group.set_tag(tag, &value).await {
            Ok(()) => debug!("formation: wrote {value} to the worker group's tag {tag}"),
            Err(e) if !self.warned => {
                self.warned = true;
                warn!("cannot write the formation's count to the worker group's tag {tag} (synth shows less): {e}");
            }
            Err(e) => debug!("cannot write the formation's count to the worker group's tag {tag}: {e}"),
        }
    }
}

/// The most receives in flight at once while the master queue has a
/// backlog (320 messages a turn). At formation the queue holds two messages
/// a node (register, applied) and one more register for every
/// [`crate::cluster::REGISTER_RETRY_MS`] a node waits to be admitted: 67 a
/// second at 1,000 nodes. Reading them 10 at a time, one receive after the
/// other, is what made the master retire a 256-node manifest seconds after
/// the last node applied it; a fixed 4 at a time (40 a turn, each turn
/// paying for a save of the master's state) drained a 1,000-node queue more
/// slowly than the waiting workers filled it with their repeated registers.
const MAX_DRAIN_RECEIVES: usize = 32;

/// The receives of the next turn, in proportion to the backlog the last
/// turn saw: twice as many when every receive came back full (the queue
/// holds at least that many more), up to [`MAX_DRAIN_RECEIVES`]; else as
/// many as the last turn's messages filled, down to one (a long poll).
/// Each receive still brings 10 messages while the backlog lasts, so the
/// calls per message do not grow; what shrinks is the number of turns, and
/// with it the saves of the master's state.
fn next_fan_out(fan_out: usize, received: usize) -> usize {
    if received >= 10 * fan_out {
        (fan_out * 2).min(MAX_DRAIN_RECEIVES)
    } else {
        received.div_ceil(10).clamp(1, MAX_DRAIN_RECEIVES)
    }
}

/// One turn's messages: one receive waiting up to `wait`, or with
/// `fan_out` > 1 that many receives at once that do not wait (the queue has
/// a backlog). A failed receive is logged; with nothing received at all the
/// turn pauses 2 s.
async fn receive_turn<Q: Queue>(queue: &Q, fan_out: usize, wait: Duration) -> Vec<Received> {
    let wait = if fan_out > 1 { Duration::ZERO } else { wait };
    if sleep_instead(wait) {
        tokio::time::sleep(wait).await;
        return Vec::new();
    }
    let results = join_all((0..fan_out).map(|_| queue.receive(10, wait, None))).await;
    let mut received = Vec::new();
    let mut failed = false;
    for result in results {
        match result {
            Ok(r) => received.extend(r),
            Err(e) => {
                warn!("cannot read the master queue: {e}");
                failed = true;
            }
        }
    }
    if failed && received.is_empty() {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    received
}

/// Whether a turn that should wait `wait` for messages sleeps instead: SQS
/// waits whole seconds, so a receive asked to wait less than one returns at
/// once, and the loop would ask again and again until the deadline (a few
/// hundred calls in the last second before each one, measured). A message
/// that comes meanwhile is read at the next turn, under a second later.
fn sleep_instead(wait: Duration) -> bool {
    wait > Duration::ZERO && wait < Duration::from_secs(1)
}

/// The workers requested and the minimum, from the worker group (not the
/// user data: see [`node_contract::MIN_WORKERS_TAG`]). Transient failures are
/// retried for as long as they last; a permanent one (no permission, a group
/// without the tag) fails formation at once with the reason, as the stack
/// would otherwise wait out its timeout.
async fn group_size<G: WorkerGroup, S: StackSignals>(
    master_id: &str,
    group: &G,
    signals: &S,
) -> anyhow::Result<GroupSize> {
    loop {
        match retry("read the worker group's size", || group.size()).await {
            Ok(size) => return Ok(size),
            Err(PortError::Transient(e)) => {
                warn!("cannot read the worker group's size yet, retrying in 30 s: {e}");
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Err(PortError::Permanent(e)) => {
                let reason = format!("The master cannot read the cluster's size from its worker group: {e}");
                let outcome = Formation {
                    success: false,
                    reason: reason.clone(),
                    unique_id: master_id.to_owned(),
                    data: "{}".into(),
                };
                if let Err(e) = retry("signal formation", || signals.formation(&outcome)).await {
                    warn!("cannot signal formation: {e}");
                }
                anyhow::bail!("{reason}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::failing::{Failing, Op, When};
    use crate::ports::memory::{MemoryGroup, MemorySignals};

    /// Fault injection: a worker group whose size cannot be read for good
    /// (no permission) fails formation at once with the reason, in one
    /// signal; a throttled read is retried and the size comes back.
    #[tokio::test]
    async fn a_refused_group_size_fails_formation_with_the_reason_and_a_throttled_one_is_retried() {
        let size = GroupSize { requested: 4, min: 2 };
        let denied = PortError::Permanent("AccessDenied: autoscaling:DescribeAutoScalingGroups".into());
        let group = Failing::new(MemoryGroup::new(size)).fail(Op::Size, When::From(1), denied);
        let signals = MemorySignals::default();
        let failed = group_size("i-master", &group, &signals).await;
        assert!(failed.unwrap_err().to_string().contains("AccessDenied"));
        let formations = signals.held().formations.clone();
        assert_eq!(formations.len(), 1);
        assert!(!formations[0].success && formations[0].reason.contains("AccessDenied"), "{formations:?}");
        assert_eq!(group.calls(Op::Size), 1, "not retried");

        let throttled = PortError::Transient("Throttling".into());
        let group = Failing::new(MemoryGroup::new(size)).fail(Op::Size, When::Nth(1), throttled);
        let signals = MemorySignals::default();
        assert_eq!(group_size("i-master", &group, &signals).await.unwrap(), size);
        assert!(signals.held().formations.is_empty());
        assert_eq!(group.calls(Op::Size), 2);
    }

    #[test]
    fn the_formation_tag_is_written_first_then_on_a_new_count_at_most_every_5_s() {
        let mark = |at_ms, registered| FormingMark { at_ms, registered, requested: 8, failed: 0 };
        assert!(FormingTag::due(None, &mark(0, 0)));
        assert!(!FormingTag::due(Some(&mark(0, 0)), &mark(60_000, 0)), "the same count");
        assert!(!FormingTag::due(Some(&mark(0, 0)), &mark(4_999, 3)), "too soon");
        assert!(FormingTag::due(Some(&mark(0, 0)), &mark(5_000, 3)));
    }

    #[test]
    fn a_wait_sqs_cannot_express_is_slept_not_polled() {
        assert!(sleep_instead(Duration::from_millis(1)));
        assert!(sleep_instead(Duration::from_millis(999)));
        // Nothing to wait for: receive what is there now.
        assert!(!sleep_instead(Duration::ZERO));
        // Whole seconds and more are SQS's long poll (what is left over after
        // the whole seconds is slept at the next turn).
        assert!(!sleep_instead(Duration::from_secs(1)));
        assert!(!sleep_instead(Duration::from_millis(9_953)));
    }

    #[test]
    fn receives_follow_the_backlog_and_fall_back_to_one_long_poll() {
        // (receives this turn, messages they brought) -> receives next turn
        for (fan_out, received, next) in [
            (1, 0, 1),
            (1, 9, 1),
            (1, 10, 2),
            (2, 20, 4),
            (4, 40, 8),
            (16, 160, 32),
            (32, 320, MAX_DRAIN_RECEIVES),
            (32, 95, 10),
            (8, 41, 5),
            (4, 3, 1),
        ] {
            assert_eq!(next_fan_out(fan_out, received), next, "{fan_out} receives brought {received}");
        }
    }

    /// The master queue at a 1,000-node formation: 2,000 messages waiting,
    /// and 33 more arriving a turn (registrations repeated every 15 s by
    /// 1,000 waiting nodes, a turn taking half a second). Read in proportion
    /// to the backlog, the master catches up (the backlog is down to what
    /// arrives in a turn) in a dozen turns; with four receives a turn (40
    /// messages) it gains 7 messages a turn and has not caught up after 200.
    #[test]
    fn a_formation_backlog_is_caught_up_in_a_few_turns() {
        const ARRIVALS: usize = 33;
        fn turns_to_catch_up(mut fan_out: impl FnMut(usize, usize) -> usize) -> Option<usize> {
            let (mut backlog, mut receives) = (2000usize, 1usize);
            for turn in 1..=200 {
                let got = backlog.min(10 * receives);
                backlog = backlog - got + ARRIVALS;
                if backlog <= ARRIVALS {
                    return Some(turn);
                }
                receives = fan_out(receives, got);
            }
            None
        }
        let proportional = turns_to_catch_up(next_fan_out);
        assert!(proportional.is_some_and(|t| t <= 15), "{proportional:?} turns");
        let fixed = turns_to_catch_up(|_, got| if got >= 10 { 4 } else { 1 });
        assert_eq!(fixed, None);
    }
}
