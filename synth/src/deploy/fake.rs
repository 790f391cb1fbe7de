//! An in-memory [`Cloud`] for unit tests: buckets and objects kept in
//! maps, stack events served from a script, every call counted.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

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
}

impl FakeCloud {
    fn call(&self, name: &str) {
        self.calls.lock().unwrap().push(name.to_owned());
    }

    pub fn calls_named(&self, name: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|c| *c == name).count()
    }
}

impl Cloud for FakeCloud {
    fn region(&self) -> &str {
        "us-east-1"
    }
    async fn account_id(&self) -> CloudResult<String> {
        self.call("account_id");
        Ok("123456789012".into())
    }
    async fn stack(&self, _name: &str) -> CloudResult<Option<Stack>> {
        self.call("stack");
        Ok(None)
    }
    async fn stacks(&self) -> CloudResult<Vec<Stack>> {
        self.call("stacks");
        Ok(Vec::new())
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
    async fn template(&self, _stack: &str) -> CloudResult<String> {
        self.call("template");
        Ok("{}".into())
    }
    async fn resources(&self, _stack: &str) -> CloudResult<Vec<Resource>> {
        self.call("resources");
        Ok(Vec::new())
    }
    async fn create_stack(&self, request: &StackRequest) -> CloudResult<String> {
        self.call("create_stack");
        Ok(format!("arn:aws:cloudformation:us-east-1:123456789012:stack/{}/1", request.name))
    }
    async fn create_change_set(&self, _request: &StackRequest, change_set: &str) -> CloudResult<String> {
        self.call("create_change_set");
        Ok(change_set.to_owned())
    }
    async fn change_set(&self, id: &str) -> CloudResult<ChangeSet> {
        self.call("change_set");
        Ok(ChangeSet { id: id.to_owned(), status: "CREATE_COMPLETE".into(), ..ChangeSet::default() })
    }
    async fn execute_change_set(&self, _id: &str) -> CloudResult<()> {
        self.call("execute_change_set");
        Ok(())
    }
    async fn delete_change_set(&self, _id: &str) -> CloudResult<()> {
        self.call("delete_change_set");
        Ok(())
    }
    async fn delete_stack(&self, _name: &str) -> CloudResult<()> {
        self.call("delete_stack");
        Ok(())
    }
    async fn group(&self, _name: &str) -> CloudResult<Option<GroupState>> {
        self.call("group");
        Ok(*self.group.lock().unwrap())
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
