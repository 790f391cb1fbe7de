//! `synth deploy` once the template is prepared: a new stack is created;
//! an existing one gets a change set, previewed, checked and confirmed
//! ([`super::update`]) before it is executed; then the operation is watched
//! to the end ([`super::monitor`]), a failure explained by its root cause,
//! and the stack's outputs printed.

use std::borrow::Cow;
use std::cell::RefCell;

use super::cause::diagnose;
use super::console::{Console, Display, fail};
use super::formation;
use super::image;
use super::monitor::{self, Watched, region_flag, report_ending};
use super::port::{Cloud, StackRequest};
use super::prepare::{Prepared, create_plan, resource_count, template_source};
use super::status::{outputs_text, shown_outputs};
use super::time::now_ms;
use super::update::{Decision, Update, decide_update, not_updatable, unless_interrupted};
use super::watch::{Operation, Planned, Watcher, clock};
use crate::exit::{ExitCode, printed};

/// How `synth deploy` was asked to go about it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Options<'a> {
    /// The blueprint's name in messages.
    pub blueprint: &'a str,
    /// Keep what a failed create made (no rollback).
    pub keep_on_failure: bool,
    /// Apply an update even when it replaces or deletes data.
    pub allow_replacement: bool,
    /// Do not ask before applying an update.
    pub yes: bool,
    /// Start the create or the update and return: say how to follow it,
    /// exit 0 (`--no-wait`).
    pub no_wait: bool,
}

/// Creates or updates the stack `p` describes, and watches it (unless
/// `options.no_wait`: then it says how to follow it and returns 0); the exit
/// code says how it ended (everything was said on the console). `display`
/// is the one [`super::prepare::prepare`] showed its progress on. The
/// command line goes through [`attempt`] ([`super::failover`]); the tests
/// take the code alone.
#[cfg(test)]
pub(crate) async fn deploy<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    p: &Prepared,
    options: Options<'_>,
    display: &Display,
) -> ExitCode {
    attempt(console, cloud, p, options, display).await.code
}

/// How one [`deploy`] went, for [`super::failover`]: its exit code,
/// whether it created the stack (an update never fails over), and when
/// the operation failed, its root cause's reason (the master's own words
/// for a formation failure), else the stack's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The exit code.
    pub code: ExitCode,
    /// `CreateStack` was called.
    pub created: bool,
    /// Why the operation failed, when it did.
    pub cause: Option<String>,
}

/// [`deploy`], saying how it went.
pub(crate) async fn attempt<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    p: &Prepared,
    options: Options<'_>,
    display: &Display,
) -> Attempt {
    let mut attempt = Attempt { code: ExitCode::Success, created: false, cause: None };
    attempt.code = match deploy_inner(console, cloud, p, options, display, &mut attempt).await {
        Ok(code) | Err(code) => code,
    };
    attempt
}

async fn deploy_inner<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    p: &Prepared,
    options: Options<'_>,
    display: &Display,
    attempt: &mut Attempt,
) -> Result<ExitCode, ExitCode> {
    let flag = region_flag(cloud);
    let started = now_ms();
    let existing = cloud.stack(&p.stack).await.map_err(|e| fail(console, e))?;
    if let Some(why) = existing.as_ref().and_then(|s| not_updatable(s, &flag)) {
        display.finish();
        return Err(fail(console, why));
    }
    // An update keeps the image the stack was created with (unless
    // --update-image): the template sent says so.
    let (p, kept) = match &existing {
        Some(stack) => image::for_update(p, stack),
        None => (Cow::Borrowed(p), None),
    };
    let p = p.as_ref();
    if let Some(ami) = kept {
        display.line(
            "Keeping",
            &format!("image {ami}, the one stack {} was created with (--update-image takes the newest)", p.stack),
        );
    }
    let request = StackRequest {
        name: p.stack.clone(),
        template: template_source(console, cloud, p, display).await?,
        parameters: p.parameters.clone(),
        keep_on_failure: options.keep_on_failure,
    };
    let (op, id, boundary, plan) = match &existing {
        None => {
            let plan = create_plan(p, cloud.region());
            display.line(
                "Creating",
                &format!(
                    "stack {} in {}: {}{}",
                    p.stack,
                    cloud.region(),
                    resource_count(p, &plan),
                    if options.keep_on_failure { ", kept if it fails" } else { "" }
                ),
            );
            let id = cloud.create_stack(&request).await.map_err(|e| fail(console, e))?;
            attempt.created = true;
            (Operation::Create, id, None, plan)
        }
        Some(stack) => {
            display.line("Previewing", &format!("the update of stack {} in {}", stack.name, cloud.region()));
            let created = RefCell::new(None);
            let how = Decision {
                blueprint: options.blueprint,
                allow_replacement: options.allow_replacement,
                yes: options.yes,
            };
            let update = Update { stack, prepared: p, request: &request };
            let decided = unless_interrupted(
                console,
                cloud,
                &created,
                decide_update(console, cloud, update, how, display, &created),
            )
            .await?;
            let Some((set, preview)) = decided else {
                return Ok(printed(
                    console.print(&outputs_text(&shown_outputs(stack))),
                    "the outputs",
                    ExitCode::Success,
                ));
            };
            let boundary = monitor::newest_event(cloud, &stack.id).await.map_err(|e| fail(console, e))?;
            cloud.execute_change_set(&set.id).await.map_err(|e| fail(console, e))?;
            let plan = preview
                .changes
                .iter()
                .map(|c| {
                    (c.logical_id.clone(), Planned { resource_type: c.resource_type.clone(), optional: !c.reported })
                })
                .collect();
            let display = console.display();
            display.line("Updating", &format!("stack {} in {}", stack.name, cloud.region()));
            display.finish();
            (Operation::Update, stack.id.clone(), boundary, plan)
        }
    };
    if options.no_wait {
        let verb = if op == Operation::Create { "creating" } else { "updating" };
        console.noteln(&format!(
            "{:>12} stack {} is {verb}; follow it with `synth events {} {flag} --follow`, or `synth status {} {flag}`",
            "Started", p.stack, p.stack, p.stack
        ));
        return Ok(ExitCode::Success);
    }
    let display = console.display();
    let mut watcher = Watcher::new(op, plan);
    watcher.set_formation_limit(super::watch::formation_limit(&p.template));
    let ending = monitor::watch(cloud, &id, &mut watcher, boundary.as_deref(), &display, console.interrupted())
        .await
        .map_err(|e| fail(console, e))?;
    if watcher.settled().is_some() && !watcher.succeeded() {
        let diagnosis = diagnose(watcher.events());
        attempt.cause = diagnosis.root.map(|c| c.reason).or(diagnosis.stack_reason);
    }
    let watched = Watched { stack: &p.stack, flag: &flag, kept: options.keep_on_failure, started_ms: started };
    report_ending(console, ending, &watcher, &display, watched)?;
    let stack = cloud.stack(&id).await.map_err(|e| fail(console, e))?.unwrap_or_default();
    console.noteln(&format!("{:>12} stack {} {} in {}", "Finished", p.stack, stack.status, clock(now_ms() - started)));
    // The formation wait condition completed in this operation: the
    // cluster formed if the master's signal says so, with its counts.
    let completed = watcher
        .events()
        .iter()
        .any(|e| e.resource_type == "AWS::CloudFormation::WaitCondition" && e.status.ends_with("_COMPLETE"));
    if completed {
        match formation::signal(&stack.outputs) {
            Some(s) => console.noteln(&format!(
                "{:>12} the cluster: {} nodes, {} of {} workers joined (the master's signal)",
                "Formed", s.nodes, s.joined_workers, s.requested_workers
            )),
            None => console.noteln(&format!(
                "note: the formation wait condition completed, but the stack holds no signal from the master \
                 ({} has no data): that the cluster formed is not confirmed; see `synth logs {} {flag} --node master`",
                formation::FORMATION_DATA_OUTPUT,
                p.stack
            )),
        }
        if let Some(summary) = formation::timeline(&stack.outputs) {
            console.note(&formation::table(&summary, formation::data(&stack.outputs).as_ref()));
        }
    }
    Ok(printed(console.print(&outputs_text(&shown_outputs(&stack))), "the outputs", ExitCode::Success))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::deploy::console::Display;
    use crate::deploy::fake::{AtPrompt, FakeCloud, FakeConsole};
    use crate::deploy::port::{Change, ChangeSet, Output, Stack};
    use crate::deploy::watch::tests::ev;
    use crate::spec::ClusterSpec;

    const ID: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/1";

    fn template(spec: &ClusterSpec) -> serde_json::Value {
        serde_json::from_str(&crate::stack::compile(spec).render().unwrap().json).unwrap()
    }

    /// A cloud where stack `demo` runs the sample spec's template, and
    /// whose next change set has `changes` (none: "didn't contain changes").
    fn running(changes: &[(&str, &str)]) -> FakeCloud {
        let cloud = FakeCloud::default();
        let stack = Stack {
            name: "demo".into(),
            id: ID.into(),
            status: "CREATE_COMPLETE".into(),
            outputs: vec![Output { key: "MasterAddress".into(), value: "10.0.0.5".into(), description: None }],
            ..Stack::default()
        };
        cloud.stacks.lock().unwrap().insert("demo".into(), stack);
        let old = template(&crate::stack::tests::sample()).to_string();
        cloud.templates.lock().unwrap().insert("demo".into(), old);
        let set = if changes.is_empty() {
            ChangeSet {
                status: "FAILED".into(),
                reason: Some("The submitted information didn't contain changes. Submit different information.".into()),
                ..ChangeSet::default()
            }
        } else {
            let changes = changes
                .iter()
                .map(|(id, ty)| Change {
                    action: "Modify".into(),
                    logical_id: (*id).into(),
                    resource_type: (*ty).into(),
                    ..Change::default()
                })
                .collect();
            ChangeSet { status: "CREATE_COMPLETE".into(), changes, ..ChangeSet::default() }
        };
        *cloud.change_set_answer.lock().unwrap() = Some(set);
        cloud
    }

    fn prepared(edit: impl FnOnce(&mut ClusterSpec)) -> Prepared {
        let mut spec = crate::stack::tests::sample();
        edit(&mut spec);
        Prepared::new("demo", template(&spec), BTreeMap::new())
    }

    async fn run(console: &FakeConsole, cloud: &FakeCloud, p: &Prepared, yes: bool) -> ExitCode {
        let options = Options { blueprint: "bp.yaml", yes, ..Options::default() };
        deploy(console, cloud, p, options, &Display::plain(|_| {})).await
    }

    /// A bigger master replaces it, and its root volume with it: refused,
    /// even with --yes, and the change set is deleted, never executed.
    #[tokio::test(start_paused = true)]
    async fn an_update_that_replaces_the_master_is_refused_and_its_change_set_deleted() {
        let cloud =
            running(&[("MasterInstance", "AWS::EC2::Instance"), ("MasterLaunchTemplate", "AWS::EC2::LaunchTemplate")]);
        let console = FakeConsole::answering(AtPrompt::Yes);
        let p = prepared(|s| s.master.instance_type = "p3.8xlarge".into());
        assert_eq!(run(&console, &cloud, &p, true).await, ExitCode::Invalid);
        let err = console.stderr();
        assert!(err.contains("error: refused: MasterInstance (AWS::EC2::Instance) would be replaced"), "{err}");
        assert!(err.contains("pin the image with `image.ami`"), "the SSM image is named as a cause: {err}");
        assert!(err.contains("Nothing was changed (the change set was deleted)"), "{err}");
        assert_eq!(cloud.calls_named("execute_change_set"), 0);
        assert_eq!(cloud.calls_named("delete_change_set"), 1);
        assert!(cloud.open_change_sets.lock().unwrap().is_empty());
        assert!(console.questions.lock().unwrap().is_empty(), "nobody is asked about a refused update");
        assert_eq!(console.stdout(), "");
    }

    /// The same blueprint again: the change set says there is nothing to
    /// change; it is deleted, the outputs are printed, exit 0.
    #[tokio::test(start_paused = true)]
    async fn an_update_without_changes_prints_the_outputs_and_deletes_its_change_set() {
        let cloud = running(&[]);
        let console = FakeConsole::default();
        assert_eq!(run(&console, &cloud, &prepared(|_| {}), false).await, ExitCode::Success);
        assert!(
            console.stderr().contains("No changes: stack demo is up to date with bp.yaml."),
            "{}",
            console.stderr()
        );
        assert_eq!(console.stdout(), "MasterAddress  10.0.0.5\n");
        assert_eq!(cloud.calls_named("execute_change_set"), 0);
        assert!(cloud.open_change_sets.lock().unwrap().is_empty());
        assert_eq!(cloud.calls_named("create_stack"), 0);
    }

    /// Ctrl-C while the update is asked about: the change set is deleted,
    /// nothing is executed, exit 130.
    #[tokio::test(start_paused = true)]
    async fn ctrl_c_at_the_prompt_deletes_the_change_set() {
        let cloud = running(&[("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup")]);
        let console = FakeConsole::answering(AtPrompt::CtrlC);
        let p = prepared(|s| s.workers.count = 6);
        assert_eq!(run(&console, &cloud, &p, false).await, ExitCode::Interrupted);
        assert_eq!(*console.questions.lock().unwrap(), ["Apply these changes to stack demo?"]);
        let err = console.stderr();
        assert!(err.contains("~ WorkerGroup"), "the preview came first: {err}");
        assert!(err.ends_with("\nInterrupted: nothing was changed (the change set was deleted).\n"), "{err}");
        assert_eq!(cloud.calls_named("execute_change_set"), 0);
        assert!(cloud.open_change_sets.lock().unwrap().is_empty());
    }

    /// "No" at the prompt: nothing changes, the change set is deleted, exit 1.
    #[tokio::test(start_paused = true)]
    async fn no_at_the_prompt_deletes_the_change_set() {
        let cloud = running(&[("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup")]);
        let console = FakeConsole::answering(AtPrompt::No);
        assert_eq!(run(&console, &cloud, &prepared(|s| s.workers.count = 6), false).await, ExitCode::Invalid);
        assert!(console.stderr().ends_with("Nothing was changed (the change set was deleted).\n"));
        assert_eq!(cloud.calls_named("execute_change_set"), 0);
        assert!(cloud.open_change_sets.lock().unwrap().is_empty());
    }

    /// Issue 35: there was no `--no-wait`. It creates the stack, says how
    /// to follow it, and exits 0 without reading a single event.
    #[tokio::test(start_paused = true)]
    async fn no_wait_creates_says_how_to_follow_and_exits_0() {
        let cloud = FakeCloud::default();
        let console = FakeConsole::default();
        let options = Options { blueprint: "bp.yaml", yes: true, no_wait: true, ..Options::default() };
        let p = prepared(|_| {});
        assert_eq!(deploy(&console, &cloud, &p, options, &console.display()).await, ExitCode::Success);
        assert_eq!(cloud.calls_named("create_stack"), 1);
        assert_eq!(cloud.calls_named("events"), 0, "nothing is watched");
        let err = console.stderr();
        assert!(
            err.contains(
                "Started stack demo is creating; follow it with `synth events demo --region us-east-1 --follow`, \
                 or `synth status demo --region us-east-1`"
            ),
            "{err}"
        );
    }

    /// A create whose formation wait condition completes: the cluster is
    /// said to have formed only when the stack holds the master's signal,
    /// with its counts (the local AWS completes one nobody signalled).
    #[tokio::test(start_paused = true)]
    async fn a_create_claims_the_formation_only_from_the_masters_signal() {
        let data = r#"{"i-0aa":"{\"generation\":1,\"joined_workers\":3,\"min_workers\":1,\"nodes\":4,\"requested_workers\":3}"}"#;
        for (formation_data, formed) in [("{}", false), (data, true)] {
            let cloud = FakeCloud::default();
            let output = Output { key: "FormationData".into(), value: formation_data.into(), description: None };
            *cloud.outputs_after_create.lock().unwrap() = vec![output];
            let (stack, wait) = ("AWS::CloudFormation::Stack", "AWS::CloudFormation::WaitCondition");
            {
                let mut script = cloud.event_script.lock().unwrap();
                script.push_back(vec![ev(1, 1, "demo", stack, "CREATE_IN_PROGRESS", Some("User Initiated"))]);
                script.push_back(vec![
                    ev(4, 9, "demo", stack, "CREATE_COMPLETE", None),
                    ev(3, 8, "FormationWaitCondition", wait, "CREATE_COMPLETE", None),
                    ev(2, 2, "FormationWaitCondition", wait, "CREATE_IN_PROGRESS", None),
                ]);
            }
            let console = FakeConsole::default();
            let p = prepared(|_| {});
            let display = console.display();
            let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
            assert_eq!(deploy(&console, &cloud, &p, options, &display).await, ExitCode::Success);
            let err = console.stderr();
            let count = resource_count(&p, &create_plan(&p, "us-east-1"));
            assert!(err.contains(&format!("Creating stack demo in us-east-1: {count}\n")), "{err}");
            if formed {
                assert!(
                    err.contains("Formed the cluster: 4 nodes, 3 of 3 workers joined (the master's signal)"),
                    "{err}"
                );
            } else {
                assert!(!err.contains("Formed"), "{err}");
                assert!(err.contains("the stack holds no signal from the master (FormationData has no data)"), "{err}");
            }
            // `synth diff` of a stack that is not there yet says the same count.
            let fresh = (FakeCloud::default(), FakeConsole::default());
            assert_eq!(crate::deploy::update::diff(&fresh.1, &fresh.0, &p).await, Ok(ExitCode::Success));
            assert!(fresh.1.stdout().contains(&format!("would create it ({count}).")), "{}", fresh.1.stdout());
        }
    }

    /// A formation failure names the master's reason first and points to
    /// the nodes' own lines (`synth logs`) as well as the events; exit 1.
    #[tokio::test(start_paused = true)]
    async fn a_formation_failure_points_to_the_nodes_logs() {
        let cloud = FakeCloud::default();
        let (stack, wait) = ("AWS::CloudFormation::Stack", "AWS::CloudFormation::WaitCondition");
        let failed = "WaitCondition received failed message: '1 of 2 workers joined' for uniqueId: i-0aa";
        {
            let mut script = cloud.event_script.lock().unwrap();
            script.push_back(vec![ev(1, 1, "demo", stack, "CREATE_IN_PROGRESS", Some("User Initiated"))]);
            script.push_back(vec![
                ev(4, 9, "demo", stack, "ROLLBACK_COMPLETE", None),
                ev(3, 8, "FormationWaitCondition", wait, "CREATE_FAILED", Some(failed)),
                ev(2, 2, "FormationWaitCondition", wait, "CREATE_IN_PROGRESS", None),
            ]);
        }
        let console = FakeConsole::default();
        let display = console.display();
        let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
        assert_eq!(deploy(&console, &cloud, &prepared(|_| {}), options, &display).await, ExitCode::Invalid);
        let err = console.stderr();
        assert!(err.contains("error: the cluster did not form: 1 of 2 workers joined\n"), "{err}");
        assert!(
            err.contains("(all events: synth events demo --region us-east-1; the nodes' own lines: synth logs demo --region us-east-1)"),
            "{err}"
        );
    }

    /// An update of a stack that recorded its image sends that AMI id as
    /// `ImageId`, says so, and a change set that then changes no resource
    /// is "No changes" (deleted, nothing executed); `--update-image` sends
    /// the SSM parameter as compiled, and the preview says the master is
    /// replaced (refused without --allow-replacement).
    #[tokio::test(start_paused = true)]
    async fn an_update_keeps_the_recorded_image_unless_asked() {
        for update_image in [false, true] {
            let cloud = running(&[]);
            let image = Output { key: crate::stack::IMAGE_OUTPUT.into(), value: "ami-0aaa".into(), description: None };
            cloud.stacks.lock().unwrap().get_mut("demo").unwrap().outputs.push(image);
            *cloud.change_set_answer.lock().unwrap() =
                Some(ChangeSet { status: "CREATE_COMPLETE".into(), ..ChangeSet::default() });
            let console = FakeConsole::default();
            let mut p = prepared(|_| {});
            p.update_image = update_image;
            let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
            let code = deploy(&console, &cloud, &p, options, &console.display()).await;
            let err = console.stderr();
            let sent = cloud.change_set_parameters.lock().unwrap()[0].get("ImageId").cloned();
            if update_image {
                assert_eq!(code, ExitCode::Invalid, "{err}");
                assert_eq!(sent, None, "the template's SSM parameter, as compiled");
                assert!(!err.contains("Keeping image"), "{err}");
                assert!(err.contains("error: refused: MasterInstance (AWS::EC2::Instance) would be replaced"), "{err}");
                assert!(err.contains("--update-image boots the master from the image"), "{err}");
            } else {
                assert_eq!(code, ExitCode::Success, "{err}");
                assert_eq!(sent.as_deref(), Some("ami-0aaa"));
                assert!(err.contains("Keeping image ami-0aaa, the one stack demo was created with"), "{err}");
                assert!(err.contains("No changes: stack demo is up to date with bp.yaml."), "{err}");
            }
            assert_eq!(cloud.calls_named("execute_change_set"), 0);
            assert!(cloud.open_change_sets.lock().unwrap().is_empty());
        }
    }

    /// The count leaves out what the template's conditions leave out, and says so.
    #[test]
    fn the_resource_count_says_what_conditions_leave_out() {
        let mut p = prepared(|_| {});
        let plan = create_plan(&p, "us-east-1");
        let all = p.template["Resources"].as_object().unwrap().len();
        assert_eq!(resource_count(&p, &plan), format!("{} resources", plan.len()));
        assert_eq!(plan.len(), all, "the sample's conditions all hold");
        p.parameters.insert("SshCidr".into(), String::new());
        let fewer = create_plan(&p, "us-east-1");
        let left = all - fewer.len();
        assert!(left > 0, "no SSH rule without a range");
        assert_eq!(
            resource_count(&p, &fewer),
            format!("{} resources (the template's {all}, less {left} its conditions leave out)", fewer.len())
        );
    }

    /// Off a terminal without --yes nobody can answer: exit 2, and the
    /// change set is deleted, not left behind.
    #[tokio::test(start_paused = true)]
    async fn an_update_nobody_can_confirm_deletes_its_change_set() {
        let cloud = running(&[("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup")]);
        let console = FakeConsole::default();
        assert!(!console.can_ask());
        assert_eq!(run(&console, &cloud, &prepared(|s| s.workers.count = 6), false).await, ExitCode::Error);
        let err = console.stderr();
        assert!(err.contains("Standard input is not a terminal, so nobody can answer: pass --yes"), "{err}");
        assert!(err.ends_with("Nothing was changed (the change set was deleted).\n"), "{err}");
        assert_eq!(cloud.calls_named("execute_change_set"), 0);
        assert_eq!(cloud.calls_named("delete_change_set"), 1);
        assert!(cloud.open_change_sets.lock().unwrap().is_empty());
    }

    /// Fault injection: a throttled `CreateStack` is exit 2, the message
    /// names the call, nothing is created and nothing is watched.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_create_names_the_call_and_creates_nothing() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let cloud = Failing::new(FakeCloud::default()).fail(Op::CreateStack, 1, Fault::Throttled);
        let console = FakeConsole::default();
        let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
        let p = prepared(|_| {});
        assert_eq!(deploy(&console, &cloud, &p, options, &console.display()).await, ExitCode::Error);
        let err = console.stderr();
        assert!(
            err.ends_with(
                "error: CloudFormation CreateStack on stack demo: AWS throttled the call (Throttling: Rate \
                 exceeded); wait a minute, then try again\n"
            ),
            "{err}"
        );
        assert!(cloud.inner().stacks.lock().unwrap().is_empty());
        assert_eq!(cloud.inner().calls_named("events"), 0);
        assert_eq!(console.stdout(), "");
    }

    /// Fault injection: an update confirmed whose `ExecuteChangeSet` is
    /// refused: exit 2 naming the IAM action, the stack as it was, nothing
    /// watched.
    #[tokio::test(start_paused = true)]
    async fn a_refused_execute_leaves_the_stack_as_it_was() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let cloud = Failing::new(running(&[("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup")])).fail(
            Op::ExecuteChangeSet,
            1,
            Fault::Denied,
        );
        let console = FakeConsole::default();
        let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
        let p = prepared(|s| s.workers.count = 6);
        assert_eq!(deploy(&console, &cloud, &p, options, &console.display()).await, ExitCode::Error);
        let err = console.stderr();
        assert!(err.contains("error: CloudFormation ExecuteChangeSet "), "{err}");
        assert!(err.contains("AWS refused cloudformation:ExecuteChangeSet"), "{err}");
        assert_eq!(cloud.inner().stacks.lock().unwrap()["demo"].status, "CREATE_COMPLETE");
        assert_eq!(cloud.inner().calls_named("execute_change_set"), 0);
        assert_eq!(cloud.inner().calls_named("events"), 1, "only the boundary before executing");
        assert_eq!(console.stdout(), "");
    }

    /// Fault injection: the events cannot be read in the middle of a
    /// create: exit 2 naming the call; the stack is left to CloudFormation
    /// (not deleted), no outputs are printed.
    #[tokio::test(start_paused = true)]
    async fn events_that_cannot_be_read_while_watching_end_it_and_leave_the_stack() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let fake = FakeCloud::default();
        let stack = "AWS::CloudFormation::Stack";
        fake.event_script.lock().unwrap().push_back(vec![ev(1, 1, "demo", stack, "CREATE_IN_PROGRESS", None)]);
        let cloud = Failing::new(fake).fail_from(Op::Events, 2, Fault::Unavailable);
        let console = FakeConsole::default();
        let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
        assert_eq!(deploy(&console, &cloud, &prepared(|_| {}), options, &console.display()).await, ExitCode::Error);
        let err = console.stderr();
        assert!(err.contains("error: CloudFormation DescribeStackEvents on stack arn:aws:cloudformation:"), "{err}");
        assert!(err.contains("Check the network and the region, then try again"), "{err}");
        assert!(cloud.inner().stacks.lock().unwrap().contains_key("demo"));
        assert_eq!(cloud.inner().calls_named("delete_stack"), 0);
        assert_eq!(console.stdout(), "");
    }

    /// Fault injection: the stack's current template cannot be read for
    /// the preview of an update: exit 2 naming the call; nothing executed.
    #[tokio::test(start_paused = true)]
    async fn a_preview_that_cannot_read_the_template_executes_nothing() {
        use crate::deploy::failing::{Failing, Fault, Op};
        let cloud = Failing::new(running(&[("WorkerGroup", "AWS::AutoScaling::AutoScalingGroup")])).fail(
            Op::Template,
            1,
            Fault::Expired,
        );
        let console = FakeConsole::default();
        let options = Options { blueprint: "bp.yaml", yes: true, ..Options::default() };
        let p = prepared(|s| s.workers.count = 6);
        assert_eq!(deploy(&console, &cloud, &p, options, &console.display()).await, ExitCode::Error);
        let err = console.stderr();
        assert!(
            err.contains("error: CloudFormation GetTemplate on stack demo: the session's credentials expired"),
            "{err}"
        );
        assert_eq!(cloud.inner().calls_named("execute_change_set"), 0);
        assert!(cloud.inner().open_change_sets.lock().unwrap().is_empty(), "the change set is deleted");
    }
}
