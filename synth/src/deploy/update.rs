//! An update of an existing stack, up to the moment it is executed: the
//! change set made and waited for, previewed against the two templates,
//! refused when it would destroy data, confirmed; and `synth diff`, which
//! shows the same preview and deletes the change set.
//!
//! A change set that is not executed is deleted on every way out, Ctrl-C
//! included ([`unless_interrupted`]): nothing changes until the user said
//! yes.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use serde_json::Value as Json;

use super::change::{Preview, preview};
use super::console::{Answer, Console, Display, confirm, fail};
use super::image;
use super::monitor::region_flag;
use super::port::{ChangeSet, Cloud, CloudResult, Stack, StackRequest, TemplateSource};
use super::prepare::{Prepared, create_plan, resource_count};
use super::staging;
use super::template::{Pseudo, parameter_values};
use super::time::now_ms;
use crate::exit::{ExitCode, printed};

/// Why a stack in this status cannot be updated, and what to do.
pub(crate) fn not_updatable(stack: &Stack, flag: &str) -> Option<String> {
    let name = &stack.name;
    match stack.status.as_str() {
        "ROLLBACK_COMPLETE" | "ROLLBACK_FAILED" | "CREATE_FAILED" | "DELETE_FAILED" => Some(format!(
            "stack {name} is {} (a create that failed, or a delete that did): it cannot be updated. \
             Delete it with `synth delete {name} {flag}`, then deploy again",
            stack.status
        )),
        s if s.ends_with("_IN_PROGRESS") => Some(format!(
            "stack {name} is busy ({s}). Wait for it (`synth events {name} {flag} --follow`), then deploy again"
        )),
        _ => None,
    }
}

/// The change set of an update, once CloudFormation has computed it.
/// Its id goes into `created` at once, so an interruption can delete it.
pub(crate) async fn change_set<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    request: &StackRequest,
    created: &RefCell<Option<String>>,
) -> Result<ChangeSet, ExitCode> {
    let name = format!("synth-{}", now_ms() / 1000);
    let id = cloud.create_change_set(request, &name).await.map_err(|e| fail(console, e))?;
    *created.borrow_mut() = Some(id.clone());
    let deadline = now_ms() + 10 * 60 * 1000;
    loop {
        let set = cloud.change_set(&id).await.map_err(|e| fail(console, e))?;
        if !matches!(set.status.as_str(), "CREATE_PENDING" | "CREATE_IN_PROGRESS") || now_ms() > deadline {
            return Ok(set);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Runs `work`, which may create a change set and record its id in
/// `created`, unless the console is interrupted (Ctrl-C) first: then that
/// change set, never executed, is deleted (or the user is told how to
/// delete it), and the exit is 130. Nothing else has changed at that point.
pub(crate) async fn unless_interrupted<K: Console, C: Cloud, T>(
    console: &K,
    cloud: &C,
    created: &RefCell<Option<String>>,
    work: impl Future<Output = Result<T, ExitCode>>,
) -> Result<T, ExitCode> {
    tokio::select! {
        result = work => {
            // A way out short of executing it (an AWS call that failed
            // after the change set was made): the change set goes too.
            if result.is_err() {
                let _ = discard(cloud, created).await;
            }
            result
        }
        _ = console.interrupted() => {
            console.note("\n");
            let id = created.borrow().clone();
            match id {
                None => console.noteln("Interrupted: nothing was changed."),
                Some(id) => match discard(cloud, created).await {
                    Ok(()) => console.noteln("Interrupted: nothing was changed (the change set was deleted)."),
                    Err(e) => console.noteln(&format!(
                        "Interrupted: nothing was changed, but the change set is left ({e}); it is never \
                         executed. Remove it with `aws cloudformation delete-change-set --change-set-name {id}`"
                    )),
                },
            }
            Err(ExitCode::Interrupted)
        }
    }
}

/// Deletes the change set recorded in `created`, if one is, and forgets
/// it, so that no way out deletes it twice.
async fn discard<C: Cloud>(cloud: &C, created: &RefCell<Option<String>>) -> CloudResult<()> {
    let id = created.borrow_mut().take();
    match id {
        Some(id) => cloud.delete_change_set(&id).await,
        None => Ok(()),
    }
}

/// How the update is decided.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Decision<'a> {
    /// The blueprint's name in messages.
    pub blueprint: &'a str,
    /// Apply even what replaces or deletes data.
    pub allow_replacement: bool,
    /// Do not ask.
    pub yes: bool,
}

/// An update to decide on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Update<'a> {
    /// The stack as it is.
    pub stack: &'a Stack,
    /// The template it would get.
    pub prepared: &'a Prepared,
    /// The change set's request.
    pub request: &'a StackRequest,
}

/// The update's change set, previewed, checked and confirmed: `None` when
/// there is nothing to change; an error (the change set deleted) when it
/// cannot be made, is refused or is not confirmed.
pub(crate) async fn decide_update<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    update: Update<'_>,
    how: Decision<'_>,
    display: &Display,
    created: &RefCell<Option<String>>,
) -> Result<Option<(ChangeSet, Preview)>, ExitCode> {
    let Update { stack, prepared: p, request } = update;
    let set = change_set(console, cloud, request, created).await?;
    if no_changes(&set) {
        let _ = discard(cloud, created).await;
        display.finish();
        console.noteln(&format!("No changes: stack {} is up to date with {}.", stack.name, how.blueprint));
        return Ok(None);
    }
    if set.status == "FAILED" {
        let _ = discard(cloud, created).await;
        display.finish();
        return Err(fail(
            console,
            format!(
                "CloudFormation cannot make the change set: {}",
                set.reason.as_deref().unwrap_or("no reason given")
            ),
        ));
    }
    let preview = preview_update(console, cloud, stack, p, &set).await?;
    if unchanged(&set, &preview) {
        let _ = discard(cloud, created).await;
        display.finish();
        console.noteln(&format!("No changes: stack {} is up to date with {}.", stack.name, how.blueprint));
        return Ok(None);
    }
    display.finish();
    console.note(&preview.render(&stack.name));
    let refusals = preview.refusals();
    if !refusals.is_empty() && !how.allow_replacement {
        for r in &refusals {
            console.noteln(&format!("error: refused: {}", r.render()));
        }
        if refusals.iter().any(|r| r.resource_type == "AWS::EC2::Instance") && image::is_ssm(&p.template) {
            console.noteln(if p.update_image {
                "  = note: --update-image boots the master from the image the ImageId SSM parameter \
                 names now, which replaces it; without --update-image the update keeps the image the \
                 stack was created with"
            } else {
                "  = note: the master's launch template holds the image, the agent package's URL and \
                 SHA-256, the instance type, root volume size and key pair. If you changed none of \
                 them, AWS has published a newer image under the ImageId SSM parameter (resolved \
                 again at every update; this stack does not record the image it was created with, \
                 as stacks from an older synth do not): pin the image with `image.ami` to keep the master"
            });
        }
        let _ = discard(cloud, created).await;
        console.noteln(
            "Nothing was changed (the change set was deleted). To apply it anyway, losing that data, \
             run `synth deploy --allow-replacement`.",
        );
        return Err(ExitCode::Invalid);
    }
    // Not confirmed, or nobody could be asked (standard input is not a
    // terminal): the change set goes either way.
    let answer = confirm(console, &format!("Apply these changes to stack {}?", stack.name), how.yes).await;
    if answer != Ok(Answer::Yes) {
        let _ = discard(cloud, created).await;
        console.noteln("Nothing was changed (the change set was deleted).");
        return Err(answer.err().unwrap_or(ExitCode::Invalid));
    }
    // From here the change set is executed, not deleted, whatever happens.
    created.borrow_mut().take();
    Ok(Some((set, preview)))
}

/// Whether a change set that CloudFormation could make changes no
/// resource, by its account and by the two templates: the template text
/// differs only where no resource reads it (the image parameter's type,
/// when an update keeps the image the stack was created with). Nothing is
/// executed for it.
fn unchanged(set: &ChangeSet, preview: &Preview) -> bool {
    set.changes.is_empty() && preview.changes.is_empty()
}

/// Whether a failed change set only says there is nothing to change.
pub(crate) fn no_changes(set: &ChangeSet) -> bool {
    set.status == "FAILED"
        && set.reason.as_deref().is_some_and(|r| r.contains("didn't contain changes") || r.contains("No updates"))
}

/// The preview of an update: the change set checked against the two templates.
pub(crate) async fn preview_update<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    existing: &Stack,
    p: &Prepared,
    set: &ChangeSet,
) -> Result<Preview, ExitCode> {
    let old_text = cloud.template(&existing.name).await.map_err(|e| fail(console, e))?;
    let old: Json = serde_json::from_str(&old_text).unwrap_or(Json::Null);
    let mut old_params = parameter_values(&old, &existing.parameters);
    let new_params = parameter_values(&p.template, &p.parameters);
    // The image the stack runs is the one it recorded: an SSM parameter's
    // name (what AWS reports as its value) says nothing of it.
    let recorded = image::recorded(existing);
    if let Some(ami) = recorded {
        old_params.insert("ImageId".to_owned(), ami.to_owned());
    }
    // An SSM parameter's value may come back resolved (an AMI id), or not at
    // all, rather than as the parameter's name (the local AWS does both):
    // compare only names the stack reports.
    if let Some(params) = p.template.get("Parameters").and_then(Json::as_object) {
        for (name, def) in params {
            let ssm =
                def.get("Type").and_then(Json::as_str).is_some_and(|t| t.starts_with("AWS::SSM::Parameter::Value"));
            if ssm
                && !(name == "ImageId" && recorded.is_some())
                && !existing.parameters.get(name).is_some_and(|v| v.starts_with('/'))
                && let Some(v) = new_params.get(name)
            {
                old_params.insert(name.clone(), v.clone());
            }
        }
    }
    let pseudo = Pseudo { region: cloud.region().to_owned(), stack_name: existing.name.clone(), account_id: None };
    Ok(preview((&old, &old_params), (&p.template, &new_params), &pseudo, &set.changes))
}

/// `synth diff`: what `deploy` would change, on stdout, from a change set
/// that is deleted afterwards; nothing is executed and nothing is uploaded.
pub(crate) async fn diff<K: Console, C: Cloud>(console: &K, cloud: &C, p: &Prepared) -> Result<ExitCode, ExitCode> {
    let flag = region_flag(cloud);
    let Some(existing) = cloud.stack(&p.stack).await.map_err(|e| fail(console, e))? else {
        let count = resource_count(p, &create_plan(p, cloud.region()));
        let text = format!(
            "Stack {} does not exist in {}: `synth deploy` would create it ({count}).\n",
            p.stack,
            cloud.region()
        );
        return Ok(printed(console.print(&text), "the preview", ExitCode::Success));
    };
    if let Some(why) = not_updatable(&existing, &flag) {
        return Err(fail(console, why));
    }
    let (p, kept) = image::for_update(p, &existing);
    let p = p.as_ref();
    if let Some(ami) = kept {
        console.noteln(&format!(
            "Keeping image {ami}, the one stack {} was created with (--update-image takes the newest).",
            p.stack
        ));
    }
    if p.compact.len() > staging::INLINE_TEMPLATE_LIMIT {
        return Err(fail(
            console,
            format!(
                "the template is {} bytes, over the inline limit; `synth diff` uploads nothing, so run \
                 `synth deploy` (it stages the template and previews the same change set before applying it)",
                p.compact.len()
            ),
        ));
    }
    let request = StackRequest {
        name: p.stack.clone(),
        template: TemplateSource::Body(p.compact.clone()),
        parameters: p.parameters.clone(),
        keep_on_failure: false,
    };
    let created = RefCell::new(None);
    let set = unless_interrupted(console, cloud, &created, change_set(console, cloud, &request, &created)).await?;
    let deleted = discard(cloud, &created).await;
    if no_changes(&set) {
        return Ok(printed(
            console.print(&format!("Stack {}: no changes.\n", p.stack)),
            "the preview",
            ExitCode::Success,
        ));
    }
    if set.status == "FAILED" {
        return Err(fail(
            console,
            format!(
                "CloudFormation cannot make the change set: {}",
                set.reason.as_deref().unwrap_or("no reason given")
            ),
        ));
    }
    let preview = preview_update(console, cloud, &existing, p, &set).await?;
    if unchanged(&set, &preview) {
        return Ok(printed(
            console.print(&format!("Stack {}: no changes.\n", p.stack)),
            "the preview",
            ExitCode::Success,
        ));
    }
    let mut text = preview.render(&p.stack);
    for r in preview.refusals() {
        text.push_str(&format!("would be refused: {}\n", r.render()));
    }
    let code = printed(console.print(&text), "the preview", ExitCode::Success);
    if let Err(e) = deleted {
        console.noteln(&format!("warning: the preview's change set could not be deleted ({e}); it is never executed"));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_from_ssm_is_resolved_again_at_every_update_and_an_ami_map_is_not() {
        let template = |spec: &crate::spec::ClusterSpec| -> Json {
            serde_json::from_str(&crate::stack::compile(spec).render().unwrap().json).unwrap()
        };
        let mut spec = crate::stack::tests::sample();
        assert!(matches!(spec.image.source, crate::spec::ImageSource::SsmParameter(_)));
        assert!(image::is_ssm(&template(&spec)));
        spec.image.source = crate::spec::ImageSource::AmiMap(
            crate::region::Region::ALL.iter().map(|r| (*r, "ami-0123456789abcdef0".to_owned())).collect(),
        );
        assert!(!image::is_ssm(&template(&spec)));
    }

    #[test]
    fn failed_creates_and_busy_stacks_cannot_be_updated() {
        let stack = |status: &str| Stack { name: "demo".into(), status: status.into(), ..Stack::default() };
        assert!(
            not_updatable(&stack("ROLLBACK_COMPLETE"), "--region us-east-1")
                .unwrap()
                .contains("synth delete demo --region us-east-1")
        );
        assert!(not_updatable(&stack("UPDATE_IN_PROGRESS"), "").unwrap().contains("busy"));
        assert!(not_updatable(&stack("UPDATE_ROLLBACK_COMPLETE"), "").is_none());
        assert!(not_updatable(&stack("CREATE_COMPLETE"), "").is_none());
    }

    /// Fault injection: `synth diff` whose change set cannot be read once
    /// made: exit 2 naming the call, and the change set is deleted, not
    /// left behind; nothing is printed on stdout.
    #[tokio::test(start_paused = true)]
    async fn a_diff_whose_change_set_cannot_be_read_deletes_it() {
        use crate::deploy::failing::{Failing, Fault, Op};
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let fake = FakeCloud::default();
        let stack =
            Stack { name: "demo".into(), id: "demo-id".into(), status: "CREATE_COMPLETE".into(), ..Stack::default() };
        fake.stacks.lock().unwrap().insert("demo".into(), stack);
        let cloud = Failing::new(fake).fail(Op::ChangeSet, 1, Fault::Throttled);
        let console = FakeConsole::default();
        let spec = crate::stack::tests::sample();
        let template: Json = serde_json::from_str(&crate::stack::compile(&spec).render().unwrap().json).unwrap();
        let p = Prepared::new("demo", template, Default::default());
        assert_eq!(diff(&console, &cloud, &p).await, Err(ExitCode::Error));
        let err = console.stderr();
        assert!(err.starts_with("error: CloudFormation DescribeChangeSet synth-"), "{err}");
        assert!(err.contains("AWS throttled the call"), "{err}");
        assert_eq!(cloud.inner().calls_named("create_change_set"), 1);
        assert_eq!(cloud.inner().calls_named("delete_change_set"), 1);
        assert!(cloud.inner().open_change_sets.lock().unwrap().is_empty());
        assert_eq!(cloud.inner().calls_named("execute_change_set"), 0);
        assert_eq!(console.stdout(), "");
    }
}
