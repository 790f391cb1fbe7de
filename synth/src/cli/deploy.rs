//! `synth deploy`: create or update a cluster's stack from its blueprint,
//! with the agent package staged, a preview of an update (refused when it
//! would destroy data), live progress, and the root cause of a failure.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value as Json;

use super::cloud::{self, Answer};
use super::{ExitCode, Input};
use crate::blueprint::{self, Diagnostic, MISSING_AGENT_PATH};
use crate::deploy::change::{Preview, preview};
use crate::deploy::formation;
use crate::deploy::monitor::{self, Display, now_ms};
use crate::deploy::port::{ChangeSet, Cloud, Stack, StackRequest, TemplateSource};
use crate::deploy::staging::{self, Staging, Upload};
use crate::deploy::template::{Pseudo, parameter_values, resolve};
use crate::deploy::watch::{Operation, Planned, Watcher, clock};
use crate::region::Region;
use crate::spec::AgentPackage;

/// Arguments of `synth deploy`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  synth deploy blueprints/gpu-cluster.yaml --region us-east-1
  synth deploy blueprints/gpu-cluster.yaml --parameter KeyName=my-key --parameter SshCidr=198.51.100.7/32
  synth deploy cluster.yaml --yes                    # in a script: no question, updates applied unless refused
  synth deploy cluster.yaml --keep-on-failure        # a failed create keeps its nodes for inspection

A new stack is created; an existing one gets a change set, shown before
anything changes. An update that would replace or delete the master
instance (its root volume), the EFS file system or the VPC its mount
targets are in is refused unless --allow-replacement.

When the image has no agent (the stock Deep Learning AMI) and the blueprint
names no agent_package_url, the package from packaging/build (or
--agent-package FILE) goes to a staging bucket in your account,
deeplearning-cluster-staging-<account>-<region>, created on first use
(private, encrypted, versioned), and every node installs it at boot.

Exit codes: 0 the stack is up to date, 1 the blueprint has problems, the
stack failed or the update was refused, 2 usage, credentials or AWS error,
130 interrupted (Ctrl-C while an update is previewed or asked about deletes
its change set: nothing changes; once the stack is changing, Ctrl-C stops
watching, not the stack).")]
pub struct DeployArgs {
    #[command(flatten)]
    pub(super) input: Input,

    #[command(flatten)]
    pub(super) target: DeployTarget,

    /// Keep what a failed create made (no rollback), for inspection.
    #[arg(long, help_heading = "Safety")]
    keep_on_failure: bool,

    /// Apply an update even when it replaces or deletes the master, the EFS
    /// file system or the VPC under it (their data is lost).
    #[arg(long, help_heading = "Safety")]
    allow_replacement: bool,

    /// Do not ask before applying an update (needed when not on a terminal).
    #[arg(long, short = 'y', help_heading = "Safety")]
    yes: bool,
}

/// What `deploy` and `diff` share besides the blueprint.
#[derive(Debug, clap::Args)]
pub(super) struct DeployTarget {
    /// The stack's name (default: the blueprint's `name`).
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,

    /// The AWS profile to use (default: AWS_PROFILE, else the default profile).
    #[arg(long, value_name = "NAME", help_heading = "AWS")]
    pub profile: Option<String>,

    /// A stack parameter, overriding the blueprint's value (repeatable), e.g.
    /// KeyName=my-key, WorkerCount=8, ImageId=/my/ssm/parameter.
    #[arg(long = "parameter", short = 'p', value_name = "KEY=VALUE")]
    pub parameters: Vec<String>,

    /// The agent package nodes install at boot (default: the one
    /// packaging/build made, when the image needs one).
    #[arg(long, value_name = "FILE")]
    pub agent_package: Option<PathBuf>,
}

/// A template ready to send.
pub(super) struct Prepared {
    pub stack: String,
    pub template: Json,
    pub compact: String,
    pub parameters: BTreeMap<String, String>,
}

/// Parses `KEY=VALUE` options.
fn parse_parameters(items: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--parameter {item:?}: write KEY=VALUE, e.g. --parameter WorkerCount=8"))?;
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// A stack name CloudFormation accepts.
fn valid_stack_name(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Loads the blueprint, connects, stages the agent package (uploading it
/// only when `upload`), and builds the template. Errors are printed.
pub(super) async fn prepare(
    input: &Input,
    target: &DeployTarget,
    upload: bool,
    display: &Display,
) -> Result<(crate::deploy::sdk::SdkCloud, Prepared), ExitCode> {
    let text = input.read().map_err(|e| {
        eprintln!("{e}");
        ExitCode::Error
    })?;
    let path = input.display_path();
    let load = |region: Option<Region>| {
        blueprint::load(&text, &path, region).map_err(|problems| {
            eprint!("{problems}");
            ExitCode::Invalid
        })
    };
    let mut loaded = load(input.region)?;
    let overrides = parse_parameters(&target.parameters).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::Error
    })?;
    let region = input.region.or(loaded.spec.region);
    let cloud = cloud::connect(region, target.profile.as_deref()).await?;
    if region.is_none() {
        // The template is checked for the region it goes to.
        let r: Region = cloud.region().parse().map_err(|e| {
            eprintln!("error: the AWS region {}: {e}; pass --region", cloud.region());
            ExitCode::Error
        })?;
        loaded = load(Some(r))?;
    }
    let stack = target.stack.clone().unwrap_or_else(|| loaded.spec.name.clone());
    if !valid_stack_name(&stack) {
        eprintln!("error: {stack:?} is not a stack name: a letter, then letters, digits and hyphens, at most 128");
        return Err(ExitCode::Error);
    }
    let mut spec = loaded.spec.clone();
    let needs_package = loaded.warnings.iter().any(|w| w.path == MISSING_AGENT_PATH);
    if needs_package || target.agent_package.is_some() {
        let file = match &target.agent_package {
            Some(f) => f.clone(),
            None => staging::package_dir().join(staging::package_file_name(spec.image.package_format)),
        };
        let package = stage_package(&cloud, &file, upload, display).await?;
        install_at_boot(&mut spec, &mut loaded.warnings, package);
    }
    if !loaded.warnings.is_empty() {
        eprint!("{}", blueprint::render_all(&loaded.warnings, &text, &path));
    }
    let rendered = crate::stack::compile(&spec).render().map_err(|e| {
        eprintln!("error: internal error, please report it: {e}");
        ExitCode::Error
    })?;
    let template: Json = serde_json::from_str(&rendered.json).map_err(|e| {
        eprintln!("error: internal error, please report it: the template is not JSON: {e}");
        ExitCode::Error
    })?;
    let known: Vec<&String> =
        template.get("Parameters").and_then(Json::as_object).map(|m| m.keys().collect()).unwrap_or_default();
    for key in overrides.keys() {
        if !known.contains(&key) {
            let names: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
            eprintln!("error: --parameter {key}: the template has no such parameter; it has {}", names.join(", "));
            return Err(ExitCode::Error);
        }
    }
    let compact = template.to_string();
    Ok((cloud, Prepared { stack, template, compact, parameters: overrides }))
}

/// Reads the agent package `file` and, when `upload`, puts it into the
/// staging bucket (created when missing), saying what it did; returns what
/// the nodes download. Without `upload` (a preview) nothing is written.
pub(super) async fn stage_package<C: Cloud>(
    cloud: &C,
    file: &std::path::Path,
    upload: bool,
    display: &Display,
) -> Result<AgentPackage, ExitCode> {
    let package = staging::read_package(file).map_err(|e| {
        eprintln!(
            "error: {e}\n  = help: the image has no agent, so nodes install the package at boot: build it with \
             `packaging/build`, or pass --agent-package FILE (or bake an image: see the README)"
        );
        ExitCode::Error
    })?;
    let account = cloud.account_id().await.map_err(cloud::cloud_error)?;
    let key = staging::package_key(&package.sha256, &package.file_name);
    let bucket = if upload {
        let (staging, created) = Staging::ensure(cloud, &account).await.map_err(cloud::cloud_error)?;
        if created {
            display.line("Created", &format!("staging bucket {} (private, encrypted, versioned)", staging.bucket));
        }
        match staging.put_once(cloud, &key, &package.bytes).await.map_err(cloud::cloud_error)? {
            Upload::Uploaded => display.line(
                "Uploaded",
                &format!(
                    "agent package {} ({} bytes) to {}",
                    package.file_name,
                    package.bytes.len(),
                    staging.s3_url(&key)
                ),
            ),
            Upload::AlreadyThere => display.line("Reusing", &format!("agent package {}", staging.s3_url(&key))),
        }
        staging
    } else {
        Staging { bucket: staging::bucket_name(&account, cloud.region()), region: cloud.region().to_owned() }
    };
    Ok(AgentPackage { url: bucket.s3_url(&key), sha256: package.sha256 })
}

/// The blueprint as deploy builds it: every node installs `package` at
/// boot, so the warning that the image has no agent no longer holds.
fn install_at_boot(spec: &mut crate::spec::ClusterSpec, warnings: &mut Vec<Diagnostic>, package: AgentPackage) {
    spec.image.agent_package = Some(package);
    warnings.retain(|w| w.path != MISSING_AGENT_PATH);
}

/// Where CloudFormation reads the template: inline, or from the staging bucket when too large.
async fn template_source<C: Cloud>(cloud: &C, p: &Prepared, display: &Display) -> Result<TemplateSource, ExitCode> {
    if p.compact.len() <= staging::INLINE_TEMPLATE_LIMIT {
        return Ok(TemplateSource::Body(p.compact.clone()));
    }
    let account = cloud.account_id().await.map_err(cloud::cloud_error)?;
    let (staging, _) = Staging::ensure(cloud, &account).await.map_err(cloud::cloud_error)?;
    let key = staging::template_key(&p.stack, &staging::sha256_hex(p.compact.as_bytes()));
    staging.put_once(cloud, &key, p.compact.as_bytes()).await.map_err(cloud::cloud_error)?;
    display.line(
        "Staged",
        &format!(
            "the template ({} bytes, over the {}-byte inline limit) as {}",
            p.compact.len(),
            staging::INLINE_TEMPLATE_LIMIT,
            staging.s3_url(&key)
        ),
    );
    Ok(TemplateSource::Url(staging::template_url(&staging.bucket, &staging.region, &key)))
}

/// Why a stack in this status cannot be updated, and what to do.
pub(super) fn not_updatable(stack: &Stack, flag: &str) -> Option<String> {
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
pub(super) async fn change_set<C: Cloud>(
    cloud: &C,
    request: &StackRequest,
    created: &RefCell<Option<String>>,
) -> Result<ChangeSet, ExitCode> {
    let name = format!("synth-{}", now_ms() / 1000);
    let id = cloud.create_change_set(request, &name).await.map_err(cloud::cloud_error)?;
    *created.borrow_mut() = Some(id.clone());
    let deadline = now_ms() + 10 * 60 * 1000;
    loop {
        let set = cloud.change_set(&id).await.map_err(cloud::cloud_error)?;
        if !matches!(set.status.as_str(), "CREATE_PENDING" | "CREATE_IN_PROGRESS") || now_ms() > deadline {
            return Ok(set);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Runs `work`, which may create a change set and record its id in
/// `created`, unless Ctrl-C comes first: then that change set, never
/// executed, is deleted (or the user is told how to delete it), and the
/// exit is 130. Nothing else has changed at that point.
pub(super) async fn unless_interrupted<C: Cloud, T>(
    cloud: &C,
    created: &RefCell<Option<String>>,
    work: impl std::future::Future<Output = Result<T, ExitCode>>,
) -> Result<T, ExitCode> {
    tokio::select! {
        result = work => result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!();
            let id = created.borrow_mut().take();
            match id {
                None => eprintln!("Interrupted: nothing was changed."),
                Some(id) => match cloud.delete_change_set(&id).await {
                    Ok(()) => eprintln!("Interrupted: nothing was changed (the change set was deleted)."),
                    Err(e) => eprintln!(
                        "Interrupted: nothing was changed, but the change set is left ({e}); it is never \
                         executed. Remove it with `aws cloudformation delete-change-set --change-set-name {id}`"
                    ),
                },
            }
            Err(ExitCode::Interrupted)
        }
    }
}

/// The update's change set, previewed, checked and confirmed: `None` when
/// there is nothing to change; an error (the change set deleted) when it
/// cannot be made, is refused or is not confirmed.
async fn decide_update<C: Cloud>(
    cloud: &C,
    stack: &Stack,
    p: &Prepared,
    request: &StackRequest,
    args: &DeployArgs,
    display: &Display,
    created: &RefCell<Option<String>>,
) -> Result<Option<(ChangeSet, Preview)>, ExitCode> {
    let set = change_set(cloud, request, created).await?;
    if no_changes(&set) {
        let _ = cloud.delete_change_set(&set.id).await;
        display.finish();
        eprintln!("No changes: stack {} is up to date with {}.", stack.name, args.input.display_path());
        return Ok(None);
    }
    if set.status == "FAILED" {
        let _ = cloud.delete_change_set(&set.id).await;
        display.finish();
        eprintln!(
            "error: CloudFormation cannot make the change set: {}",
            set.reason.as_deref().unwrap_or("no reason given")
        );
        return Err(ExitCode::Error);
    }
    let preview = preview_update(cloud, stack, p, &set).await?;
    display.finish();
    eprint!("{}", preview.render(&stack.name));
    let refusals = preview.refusals();
    if !refusals.is_empty() && !args.allow_replacement {
        for r in &refusals {
            eprintln!("error: refused: {}", r.render());
        }
        if refusals.iter().any(|r| r.resource_type == "AWS::EC2::Instance") && image_is_ssm(&p.template) {
            eprintln!(
                "  = note: the master's launch template holds the image, the agent package's URL and \
                 SHA-256, the instance type, root volume size and key pair. If you changed none of \
                 them, AWS has published a newer image under the ImageId SSM parameter (resolved \
                 again at every update): pin the image with `image.ami` to keep the master"
            );
        }
        let _ = cloud.delete_change_set(&set.id).await;
        eprintln!(
            "Nothing was changed (the change set was deleted). To apply it anyway, losing that data, \
             add --allow-replacement."
        );
        return Err(ExitCode::Invalid);
    }
    if cloud::ask(&format!("Apply these changes to stack {}?", stack.name), args.yes).await? != Answer::Yes {
        let _ = cloud.delete_change_set(&set.id).await;
        eprintln!("Nothing was changed (the change set was deleted).");
        return Err(ExitCode::Invalid);
    }
    // From here the change set is executed, not deleted, whatever happens.
    created.borrow_mut().take();
    Ok(Some((set, preview)))
}

/// Whether a failed change set only says there is nothing to change.
pub(super) fn no_changes(set: &ChangeSet) -> bool {
    set.status == "FAILED"
        && set.reason.as_deref().is_some_and(|r| r.contains("didn't contain changes") || r.contains("No updates"))
}

/// The preview of an update: the change set checked against the two templates.
pub(super) async fn preview_update<C: Cloud>(
    cloud: &C,
    existing: &Stack,
    p: &Prepared,
    set: &ChangeSet,
) -> Result<Preview, ExitCode> {
    let old_text = cloud.template(&existing.name).await.map_err(cloud::cloud_error)?;
    let old: Json = serde_json::from_str(&old_text).unwrap_or(Json::Null);
    let mut old_params = parameter_values(&old, &existing.parameters);
    let new_params = parameter_values(&p.template, &p.parameters);
    // An SSM parameter's value may come back resolved (an AMI id), or not at
    // all, rather than as the parameter's name (the local AWS does both):
    // compare only names the stack reports.
    if let Some(params) = p.template.get("Parameters").and_then(Json::as_object) {
        for (name, def) in params {
            let ssm =
                def.get("Type").and_then(Json::as_str).is_some_and(|t| t.starts_with("AWS::SSM::Parameter::Value"));
            if ssm
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

/// Whether the template's image is an SSM parameter, which CloudFormation
/// resolves again at every update.
fn image_is_ssm(template: &Json) -> bool {
    template
        .pointer("/Parameters/ImageId/Type")
        .and_then(Json::as_str)
        .is_some_and(|t| t.starts_with("AWS::SSM::Parameter::Value"))
}

/// Runs `synth deploy`.
pub(super) fn run(args: &DeployArgs) -> ExitCode {
    cloud::block_on(deploy(args))
}

async fn deploy(args: &DeployArgs) -> ExitCode {
    match deploy_inner(args).await {
        Ok(code) | Err(code) => code,
    }
}

async fn deploy_inner(args: &DeployArgs) -> Result<ExitCode, ExitCode> {
    let display = Display::new();
    let (cloud, p) = prepare(&args.input, &args.target, true, &display).await?;
    let flag = cloud::region_flag(&cloud);
    let started = now_ms();
    let existing = cloud.stack(&p.stack).await.map_err(cloud::cloud_error)?;
    if let Some(why) = existing.as_ref().and_then(|s| not_updatable(s, &flag)) {
        display.finish();
        eprintln!("error: {why}");
        return Err(ExitCode::Error);
    }
    let request = StackRequest {
        name: p.stack.clone(),
        template: template_source(&cloud, &p, &display).await?,
        parameters: p.parameters.clone(),
        keep_on_failure: args.keep_on_failure,
    };
    let (op, id, boundary, plan) = match &existing {
        None => {
            let values = parameter_values(&p.template, &p.parameters);
            let pseudo = Pseudo { region: cloud.region().to_owned(), stack_name: p.stack.clone(), account_id: None };
            let plan: BTreeMap<String, Planned> = resolve(&p.template, &values, &pseudo)
                .resources
                .into_iter()
                .map(|(id, r)| (id, Planned { resource_type: r.resource_type, optional: r.maybe }))
                .collect();
            display.line(
                "Creating",
                &format!(
                    "stack {} in {}: {} resources{}",
                    p.stack,
                    cloud.region(),
                    plan.len(),
                    if args.keep_on_failure { ", kept if it fails" } else { "" }
                ),
            );
            let id = cloud.create_stack(&request).await.map_err(cloud::cloud_error)?;
            (Operation::Create, id, None, plan)
        }
        Some(stack) => {
            display.line("Previewing", &format!("the update of stack {} in {}", stack.name, cloud.region()));
            let created = RefCell::new(None);
            let decided = unless_interrupted(
                &cloud,
                &created,
                decide_update(&cloud, stack, &p, &request, args, &display, &created),
            )
            .await?;
            let Some((set, preview)) = decided else {
                cloud::print_outputs(&stack.outputs);
                return Ok(ExitCode::Success);
            };
            let boundary = monitor::newest_event(&cloud, &stack.id).await.map_err(cloud::cloud_error)?;
            cloud.execute_change_set(&set.id).await.map_err(cloud::cloud_error)?;
            let plan = preview
                .changes
                .iter()
                .map(|c| {
                    (c.logical_id.clone(), Planned { resource_type: c.resource_type.clone(), optional: !c.reported })
                })
                .collect();
            let display = Display::new();
            display.line("Updating", &format!("stack {} in {}", stack.name, cloud.region()));
            display.finish();
            (Operation::Update, stack.id.clone(), boundary, plan)
        }
    };
    let display = Display::new();
    let mut watcher = Watcher::new(op, plan);
    let ending =
        monitor::watch(&cloud, &id, &mut watcher, boundary.as_deref(), &display).await.map_err(cloud::cloud_error)?;
    cloud::report_ending(ending, &watcher, &display, &p.stack, &flag, args.keep_on_failure, started)?;
    let stack = cloud.stack(&id).await.map_err(cloud::cloud_error)?.unwrap_or_default();
    eprintln!("{:>12} stack {} {} in {}", "Finished", p.stack, stack.status, clock(now_ms() - started));
    // The cluster formed in this operation: how long each phase took.
    let formed = watcher
        .events()
        .iter()
        .any(|e| e.resource_type == "AWS::CloudFormation::WaitCondition" && e.status.ends_with("_COMPLETE"));
    if formed && let Some(summary) = formation::timeline(&stack.outputs) {
        eprint!("{}", formation::table(&summary));
    }
    cloud::print_outputs(&stack.outputs);
    Ok(ExitCode::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_key_value() {
        let ok = parse_parameters(&["WorkerCount=8".into(), "SshCidr=1.2.3.4/32".into(), "KeyName=".into()]).unwrap();
        assert_eq!(ok["WorkerCount"], "8");
        assert_eq!(ok["KeyName"], "");
        for bad in ["WorkerCount", "=8"] {
            let e = parse_parameters(&[bad.into()]).unwrap_err();
            assert!(e.contains("KEY=VALUE"), "{e}");
        }
    }

    #[test]
    fn an_image_from_ssm_is_resolved_again_at_every_update_and_an_ami_map_is_not() {
        let template = |spec: &crate::spec::ClusterSpec| -> Json {
            serde_json::from_str(&crate::stack::compile(spec).render().unwrap().json).unwrap()
        };
        let mut spec = crate::stack::tests::sample();
        assert!(matches!(spec.image.source, crate::spec::ImageSource::SsmParameter(_)));
        assert!(image_is_ssm(&template(&spec)));
        spec.image.source = crate::spec::ImageSource::AmiMap(
            crate::region::Region::ALL.iter().map(|r| (*r, "ami-0123456789abcdef0".to_owned())).collect(),
        );
        assert!(!image_is_ssm(&template(&spec)));
    }

    /// The terminal route: every example blueprint, deployed with a staged
    /// package, has no "would fail to form" warning and its nodes' user data
    /// installs that package.
    #[test]
    fn every_example_blueprint_deployed_installs_the_package_and_forms() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../blueprints");
        let mut staged = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let mut loaded = blueprint::load(&text, &name, Some(Region::UsEast1)).unwrap();
            let mut spec = loaded.spec.clone();
            if loaded.warnings.iter().any(|w| w.path == MISSING_AGENT_PATH) {
                let url = format!("s3://bucket/agent/{}/pkg", "c".repeat(64));
                install_at_boot(&mut spec, &mut loaded.warnings, AgentPackage { url, sha256: "c".repeat(64) });
                staged += 1;
            }
            assert!(loaded.warnings.iter().all(|w| w.path != MISSING_AGENT_PATH), "{name}");
            let template = crate::stack::compile(&spec).render().unwrap().json;
            let package = spec.image.agent_package.as_ref().expect("every example installs a package or has one");
            // The user data (`Fn::Base64` of an `Fn::Sub` text) checks exactly that package.
            assert!(template.contains(&format!("echo '{}  '", package.sha256)), "{name}");
        }
        assert_eq!(staged, 7, "the examples on the stock image");
    }

    #[test]
    fn stack_names() {
        assert!(valid_stack_name("resnet-training"));
        for bad in ["", "1abc", "a_b", "a b", &"a".repeat(129)] {
            assert!(!valid_stack_name(bad), "{bad}");
        }
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
}
