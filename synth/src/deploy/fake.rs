//! An in-memory [`Cloud`] for unit tests: buckets and objects kept in
//! maps, stacks, templates and change sets as a test sets them, stack
//! events served from a script, every call counted (its failures are
//! [`super::failing::Failing`]'s, which wraps it). And an in-memory
//! [`Console`]: what a flow prints, kept; the answer at its prompt, or a
//! Ctrl-C there, injected; its standard output failing as a closed pipe or
//! a full disk does.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

use cli_output::Closed;

use super::console::{Answer, Console, Display};
use super::port::*;

/// Records calls; serves scripted events.
#[derive(Default)]
pub(crate) struct FakeCloud {
    pub calls: Mutex<Vec<String>>,
    pub buckets: Mutex<BTreeSet<String>>,
    pub objects: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    /// Each poll of the events pops the next batch (newest first) and adds
    /// it to what the stack has; with none left the stack has what it had.
    pub event_script: Mutex<VecDeque<Vec<Event>>>,
    pub events_so_far: Mutex<Vec<Event>>,
    pub group: Mutex<Option<GroupState>>,
    /// Log groups and their events (in the order they were put).
    pub log_groups: Mutex<BTreeMap<String, Vec<LogEvent>>>,
    /// Events per `log_events` page (0: all in one).
    pub log_page_size: Mutex<usize>,
    /// The stacks there are, by name (found by name or id).
    pub stacks: Mutex<BTreeMap<String, Stack>>,
    /// Each stack's current template (default `{}`).
    pub templates: Mutex<BTreeMap<String, String>>,
    /// Each stack's resources.
    pub resources: Mutex<BTreeMap<String, Vec<Resource>>>,
    /// What `change_set` answers, but for the id (default: complete, no changes).
    pub change_set_answer: Mutex<Option<ChangeSet>>,
    /// The parameters each change set was made with.
    pub change_set_parameters: Mutex<Vec<BTreeMap<String, String>>>,
    /// The change sets made and not yet executed or deleted.
    pub open_change_sets: Mutex<BTreeSet<String>>,
    /// The outputs a stack made by `create_stack` has (it is there at once,
    /// `CREATE_COMPLETE`; the events script tells the story).
    pub outputs_after_create: Mutex<Vec<Output>>,
    /// EC2 instances' states, by id (`start_instance` makes one `running`).
    pub instances: Mutex<BTreeMap<String, String>>,
    /// How many instances Auto Scaling gets in service after a capacity
    /// change (`None`: all it was asked for, at once).
    pub launches: Mutex<Option<u32>>,
    /// Instance types EC2 knows: vCPUs and the zones that offer it.
    pub instance_types: Mutex<BTreeMap<String, (u32, Vec<String>)>>,
    /// Service Quotas' values by quota code (none set: no such quota).
    pub quotas: Mutex<BTreeMap<String, Quota>>,
    /// Capacity Reservations and Blocks by id.
    pub reservations: Mutex<BTreeMap<String, Reservation>>,
    /// The Spot placement score EC2 gives (`None`: none). A refusal, as
    /// any call's failure, is [`super::failing::Failing`]'s.
    pub spot_score: Mutex<Option<u32>>,
    /// The region it answers for (default us-east-1).
    pub region: Option<&'static str>,
}

impl FakeCloud {
    fn call(&self, name: &str) {
        self.calls.lock().unwrap().push(name.to_owned());
    }

    pub(crate) fn calls_named(&self, name: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|c| *c == name).count()
    }
}

impl Cloud for FakeCloud {
    fn region(&self) -> &str {
        self.region.unwrap_or("us-east-1")
    }
    async fn account_id(&self) -> CloudResult<String> {
        self.call("account_id");
        Ok("123456789012".into())
    }
    async fn stack(&self, name: &str) -> CloudResult<Option<Stack>> {
        self.call("stack");
        let stacks = self.stacks.lock().unwrap();
        Ok(stacks.values().find(|s| s.name == name || s.id == name).cloned())
    }
    async fn stacks(&self) -> CloudResult<Vec<Stack>> {
        self.call("stacks");
        Ok(self.stacks.lock().unwrap().values().cloned().collect())
    }
    async fn events(&self, _stack: &str, page: Option<String>) -> CloudResult<EventPage> {
        self.call("events");
        if page.is_none()
            && let Some(batch) = self.event_script.lock().unwrap().pop_front()
        {
            let mut all = self.events_so_far.lock().unwrap();
            let mut next = batch;
            next.extend(all.drain(..));
            *all = next;
        }
        Ok(EventPage { events: self.events_so_far.lock().unwrap().clone(), next: None })
    }
    async fn template(&self, stack: &str) -> CloudResult<String> {
        self.call("template");
        Ok(self.templates.lock().unwrap().get(stack).cloned().unwrap_or_else(|| "{}".into()))
    }
    async fn resources(&self, stack: &str) -> CloudResult<Vec<Resource>> {
        self.call("resources");
        Ok(self.resources.lock().unwrap().get(stack).cloned().unwrap_or_default())
    }
    async fn create_stack(&self, request: &StackRequest) -> CloudResult<String> {
        self.call("create_stack");
        let id = format!("arn:aws:cloudformation:us-east-1:123456789012:stack/{}/1", request.name);
        let outputs = self.outputs_after_create.lock().unwrap().clone();
        let stack = Stack {
            name: request.name.clone(),
            id: id.clone(),
            status: "CREATE_COMPLETE".into(),
            outputs,
            ..Stack::default()
        };
        self.stacks.lock().unwrap().insert(request.name.clone(), stack);
        Ok(id)
    }
    async fn create_change_set(&self, request: &StackRequest, change_set: &str) -> CloudResult<String> {
        self.call("create_change_set");
        self.change_set_parameters.lock().unwrap().push(request.parameters.clone());
        self.open_change_sets.lock().unwrap().insert(change_set.to_owned());
        Ok(change_set.to_owned())
    }
    async fn change_set(&self, id: &str) -> CloudResult<ChangeSet> {
        self.call("change_set");
        let answer = self.change_set_answer.lock().unwrap().clone();
        let answer = answer.unwrap_or(ChangeSet { status: "CREATE_COMPLETE".into(), ..ChangeSet::default() });
        Ok(ChangeSet { id: id.to_owned(), ..answer })
    }
    async fn execute_change_set(&self, id: &str) -> CloudResult<()> {
        self.call("execute_change_set");
        self.open_change_sets.lock().unwrap().remove(id);
        Ok(())
    }
    async fn delete_change_set(&self, id: &str) -> CloudResult<()> {
        self.call("delete_change_set");
        self.open_change_sets.lock().unwrap().remove(id);
        Ok(())
    }
    async fn delete_stack(&self, _name: &str) -> CloudResult<()> {
        self.call("delete_stack");
        Ok(())
    }
    /// Groups made in name order (the fake keeps no creation times).
    async fn log_groups(&self, prefix: &str) -> CloudResult<Vec<LogGroupInfo>> {
        self.call("log_groups");
        let groups = self.log_groups.lock().unwrap();
        let names = groups.keys().filter(|name| name.starts_with(prefix));
        Ok(names.enumerate().map(|(i, name)| LogGroupInfo { name: name.clone(), created_ms: i as i64 }).collect())
    }
    async fn log_streams(&self, group: &str, limit: usize) -> CloudResult<Vec<String>> {
        self.call("log_streams");
        let groups = self.log_groups.lock().unwrap();
        let streams: BTreeSet<String> = groups.get(group).into_iter().flatten().map(|e| e.stream.clone()).collect();
        Ok(streams.into_iter().take(limit).collect())
    }
    /// As `FilterLogEvents`: the selected events in time order (ties in the
    /// order they were put), a page at a time; the token is the offset.
    async fn log_events(&self, query: &LogQuery, page: Option<String>) -> CloudResult<LogPage> {
        self.call("log_events");
        let groups = self.log_groups.lock().unwrap();
        let Some(events) = groups.get(&query.group) else {
            return Err(CloudError::Invalid {
                what: "CloudWatch Logs FilterLogEvents".into(),
                message: "ResourceNotFoundException: The specified log group does not exist.".into(),
            });
        };
        let mut selected: Vec<&LogEvent> = events
            .iter()
            .filter(|e| query.streams.is_empty() || query.streams.contains(&e.stream))
            .filter(|e| query.start_ms.is_none_or(|s| e.at_ms >= s))
            .collect();
        selected.sort_by_key(|e| e.at_ms);
        let from: usize = page.map_or(0, |p| p.parse().unwrap());
        let size = match *self.log_page_size.lock().unwrap() {
            0 => usize::MAX,
            n => n,
        };
        let to = from.saturating_add(size).min(selected.len());
        Ok(LogPage {
            events: selected[from..to].iter().map(|e| (*e).clone()).collect(),
            next: (to < selected.len()).then(|| to.to_string()),
        })
    }
    async fn group(&self, _name: &str) -> CloudResult<Option<GroupState>> {
        self.call("group");
        Ok(self.group.lock().unwrap().clone())
    }
    async fn set_desired_capacity(&self, _group: &str, desired: u32) -> CloudResult<()> {
        self.call("set_desired_capacity");
        let launches = *self.launches.lock().unwrap();
        let mut group = self.group.lock().unwrap();
        let g = group.get_or_insert_with(GroupState::default);
        g.desired = desired;
        g.in_service = launches.map_or(desired, |n| n.min(desired));
        Ok(())
    }
    async fn delete_group_tag(&self, _group: &str, _key: &str) -> CloudResult<()> {
        self.call("delete_group_tag");
        if let Some(g) = self.group.lock().unwrap().as_mut() {
            g.idle = None;
        }
        Ok(())
    }
    async fn instance_state(&self, id: &str) -> CloudResult<Option<String>> {
        self.call("instance_state");
        Ok(self.instances.lock().unwrap().get(id).cloned())
    }
    async fn start_instance(&self, id: &str) -> CloudResult<()> {
        self.call("start_instance");
        self.instances.lock().unwrap().insert(id.to_owned(), "running".to_owned());
        Ok(())
    }
    async fn instance_type_zones(&self, instance_type: &str) -> CloudResult<Vec<String>> {
        self.call("instance_type_zones");
        Ok(self.instance_types.lock().unwrap().get(instance_type).map(|(_, z)| z.clone()).unwrap_or_default())
    }
    async fn instance_vcpus(&self, instance_type: &str) -> CloudResult<Option<u32>> {
        self.call("instance_vcpus");
        Ok(self.instance_types.lock().unwrap().get(instance_type).map(|(v, _)| *v))
    }
    async fn capacity_reservation(&self, id: &str) -> CloudResult<Option<Reservation>> {
        self.call("capacity_reservation");
        Ok(self.reservations.lock().unwrap().get(id).cloned())
    }
    async fn spot_placement_score(&self, _types: &[String], _capacity: u32) -> CloudResult<Option<u32>> {
        self.call("spot_placement_score");
        Ok(*self.spot_score.lock().unwrap())
    }
    async fn service_quota(&self, _service: &str, code: &str) -> CloudResult<Option<Quota>> {
        self.call("service_quota");
        Ok(self.quotas.lock().unwrap().get(code).cloned())
    }
    async fn bucket_exists(&self, bucket: &str) -> CloudResult<bool> {
        self.call("bucket_exists");
        Ok(self.buckets.lock().unwrap().contains(bucket))
    }
    async fn create_staging_bucket(&self, bucket: &str) -> CloudResult<()> {
        self.call("create_staging_bucket");
        self.buckets.lock().unwrap().insert(bucket.to_owned());
        Ok(())
    }
    async fn object_exists(&self, bucket: &str, key: &str) -> CloudResult<bool> {
        self.call("object_exists");
        Ok(self.objects.lock().unwrap().contains_key(&(bucket.to_owned(), key.to_owned())))
    }
    async fn put_object(&self, bucket: &str, key: &str, body: Vec<u8>) -> CloudResult<()> {
        self.call("put_object");
        self.objects.lock().unwrap().insert((bucket.to_owned(), key.to_owned()), body);
        Ok(())
    }
}

/// What the fake console's user does at a prompt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum AtPrompt {
    /// Answers no (or just presses Enter).
    #[default]
    No,
    /// Answers yes.
    Yes,
    /// Presses Ctrl-C instead of answering.
    CtrlC,
}

/// Keeps what a flow prints; answers its prompt as told.
#[derive(Default)]
pub(crate) struct FakeConsole {
    out: Mutex<String>,
    err: Arc<Mutex<String>>,
    /// Standard output fails with this error (a closed pipe, a full disk).
    pub print_fails: Mutex<Option<std::io::ErrorKind>>,
    /// Whether anybody can answer (standard input is a terminal).
    pub terminal: bool,
    /// What the user does at a prompt.
    pub at_prompt: AtPrompt,
    /// The questions asked.
    pub questions: Mutex<Vec<String>>,
    interrupt: tokio::sync::Notify,
}

impl FakeConsole {
    /// A console on a terminal whose user does `at_prompt`.
    pub(crate) fn answering(at_prompt: AtPrompt) -> FakeConsole {
        FakeConsole { terminal: true, at_prompt, ..FakeConsole::default() }
    }

    /// Everything printed on standard output.
    pub(crate) fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Everything written to standard error (progress lines included).
    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Ctrl-C now: the next (or pending) `interrupted` resolves.
    pub(crate) fn interrupt(&self) {
        self.interrupt.notify_one();
    }
}

impl Console for FakeConsole {
    fn print(&self, text: &str) -> Result<(), Closed> {
        match *self.print_fails.lock().unwrap() {
            Some(std::io::ErrorKind::BrokenPipe) => Err(Closed::ReaderGone),
            Some(kind) => Err(Closed::Failed(kind.into())),
            None => {
                self.out.lock().unwrap().push_str(text);
                Ok(())
            }
        }
    }
    fn note(&self, text: &str) {
        self.err.lock().unwrap().push_str(text);
    }
    fn display(&self) -> Display {
        let err = Arc::clone(&self.err);
        Display::plain(move |text| err.lock().unwrap().push_str(text))
    }
    fn can_ask(&self) -> bool {
        self.terminal
    }
    async fn ask(&self, question: &str) -> Answer {
        self.questions.lock().unwrap().push(question.to_owned());
        match self.at_prompt {
            AtPrompt::Yes => Answer::Yes,
            AtPrompt::No => Answer::No,
            AtPrompt::CtrlC => {
                self.interrupt();
                std::future::pending().await
            }
        }
    }
    fn interrupted(&self) -> impl Future<Output = ()> {
        self.interrupt.notified()
    }
}
