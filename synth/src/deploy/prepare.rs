//! What `synth deploy` and `synth diff` do before they touch a stack: the
//! blueprint loaded for the region the stack goes to, the stack's name and
//! parameter overrides checked, the agent package staged (uploaded only by
//! `deploy`), the template compiled, and where CloudFormation reads it
//! (inline, or from the staging bucket when it is too large).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};

use node_contract::PackageFormat;
use serde_json::Value as Json;

use super::console::{Console, Display, fail};
use super::port::{Cloud, TemplateSource};
use super::staging::{self, Staging, Upload};
use super::template::{Pseudo, parameter_values, resolve};
use super::watch::Planned;
use crate::blueprint;
use crate::exit::ExitCode;
use crate::region::Region;
use crate::spec::{AgentPackage, ClusterSpec};

/// The blueprint as the user gave it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blueprint<'a> {
    /// Its text.
    pub text: &'a str,
    /// Its name in messages (`<stdin>` for standard input).
    pub path: &'a str,
    /// `--region`, which overrides the blueprint's `region`.
    pub region: Option<Region>,
}

/// What `deploy` and `diff` share besides the blueprint.
#[derive(Clone, Debug, Default)]
pub(crate) struct Target {
    /// The stack's name (default: the blueprint's `name`).
    pub stack: Option<String>,
    /// `KEY=VALUE` overrides of the template's parameters.
    pub parameters: Vec<String>,
    /// The agent package nodes install at boot (default: the one
    /// packaging/build made, when the image needs one).
    pub agent_package: Option<PathBuf>,
    /// An update takes the image the SSM parameter names now ([`Prepared::update_image`]).
    pub update_image: bool,
    /// Run the capacity check ([`super::capacity::preflight`]) before
    /// anything is staged or created (`synth deploy` unless
    /// `--skip-capacity-check`).
    pub capacity_check: bool,
}

/// A template ready to send.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    /// The stack's name.
    pub stack: String,
    /// The template.
    pub template: Json,
    /// The template as sent (compact JSON).
    pub compact: String,
    /// The parameter overrides.
    pub parameters: BTreeMap<String, String>,
    /// An update takes the image the SSM parameter names now, replacing
    /// the master, instead of the one the stack was created with
    /// (`--update-image`, `super::image`).
    pub update_image: bool,
}

impl Prepared {
    /// A prepared `template` for `stack` with `parameters`.
    pub(crate) fn new(stack: &str, template: Json, parameters: BTreeMap<String, String>) -> Prepared {
        let compact = template.to_string();
        Prepared { stack: stack.to_owned(), template, compact, parameters, update_image: false }
    }
}

/// Parses `KEY=VALUE` options.
pub(crate) fn parse_parameters(items: &[String]) -> Result<BTreeMap<String, String>, String> {
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
pub(crate) fn valid_stack_name(name: &str) -> bool {
    name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// What a create of `p` in `region` makes: every resource whose condition
/// holds (or cannot be decided: `optional`) with the parameters given.
pub(crate) fn create_plan(p: &Prepared, region: &str) -> BTreeMap<String, Planned> {
    let values = parameter_values(&p.template, &p.parameters);
    let pseudo = Pseudo { region: region.to_owned(), stack_name: p.stack.clone(), account_id: None };
    resolve(&p.template, &values, &pseudo)
        .resources
        .into_iter()
        .map(|(id, r)| (id, Planned { resource_type: r.resource_type, optional: r.maybe }))
        .collect()
}

/// "42 resources", and when the template has more (`synth validate`
/// counts them all), how many its conditions leave out, so that deploy,
/// diff and validate tell one story.
pub(crate) fn resource_count(p: &Prepared, plan: &BTreeMap<String, Planned>) -> String {
    let all = p.template.get("Resources").and_then(serde_json::Value::as_object).map_or(0, |r| r.len());
    match all.saturating_sub(plan.len()) {
        0 => format!("{} resources", plan.len()),
        left => format!("{} resources (the template's {all}, less {left} its conditions leave out)", plan.len()),
    }
}

/// Loads the blueprint, connects (`connect` gets the region to use, `None`:
/// the standard chain's), stages the agent package (uploading it only when
/// `upload`), and builds the template. Errors are printed.
pub(crate) async fn prepare<K, C, F, Fut>(
    console: &K,
    blueprint: Blueprint<'_>,
    target: &Target,
    upload: bool,
    display: &Display,
    connect: F,
) -> Result<(C, Prepared), ExitCode>
where
    K: Console,
    C: Cloud,
    F: FnOnce(Option<Region>) -> Fut,
    Fut: Future<Output = Result<C, ExitCode>>,
{
    let Blueprint { text, path, region } = blueprint;
    let load = |region: Option<Region>| {
        blueprint::load(text, path, region).map_err(|problems| {
            console.note(&problems.to_string());
            ExitCode::Invalid
        })
    };
    let mut loaded = load(region)?;
    let overrides = parse_parameters(&target.parameters).map_err(|e| fail(console, e))?;
    // Parameter names are the template's whatever the region and the
    // package: checked before any AWS call.
    let compiled = crate::stack::compile(&loaded.spec)
        .render()
        .map_err(|e| fail(console, format!("internal error, please report it: {e}")))?;
    let template: Json = serde_json::from_str(&compiled.json)
        .map_err(|e| fail(console, format!("internal error, please report it: the template is not JSON: {e}")))?;
    check_parameters(console, &template, &overrides)?;
    let region = region.or(loaded.spec.region);
    check_values(console, text, region, &template, &overrides)?;
    let cloud = connect(region).await?;
    if region.is_none() {
        // The template is checked for the region it goes to.
        let r: Region = cloud
            .region()
            .parse()
            .map_err(|e| fail(console, format!("the AWS region {}: {e}; pass --region", cloud.region())))?;
        loaded = load(Some(r))?;
    }
    let stack = target.stack.clone().unwrap_or_else(|| loaded.spec.name.clone());
    if !valid_stack_name(&stack) {
        return Err(fail(
            console,
            format!("{stack:?} is not a stack name: a letter, then letters, digits and hyphens, at most 128"),
        ));
    }
    if target.capacity_check {
        // With the counts the stack will run with (`-p WorkerCount=N`).
        let count = overrides.get(crate::stack::WORKER_COUNT_PARAMETER).and_then(|v| v.parse().ok());
        let max = overrides.get("MaxWorkers").and_then(|v| v.parse().ok());
        let ask = super::capacity::Ask::of(&loaded.spec, count, max);
        super::capacity::preflight(console, &cloud, &ask, display).await?;
    }
    let mut spec = loaded.spec.clone();
    let needs_package = loaded.missing_agent.is_some();
    if needs_package || target.agent_package.is_some() {
        let file = match &target.agent_package {
            Some(f) => f.clone(),
            None => staging::package_dir().join(staging::package_file_name(spec.image.package_format)),
        };
        let format = Some(spec.image.package_format);
        let package =
            stage_package(console, &cloud, &file, format, upload, display, "pass --agent-package FILE").await?;
        install_at_boot(&mut spec, package);
    }
    if !loaded.warnings.is_empty() {
        console.note(&blueprint::render_all(&loaded.warnings, text, path));
    }
    let rendered = crate::stack::compile(&spec)
        .render()
        .map_err(|e| fail(console, format!("internal error, please report it: {e}")))?;
    let template: Json = serde_json::from_str(&rendered.json)
        .map_err(|e| fail(console, format!("internal error, please report it: the template is not JSON: {e}")))?;
    check_parameters(console, &template, &overrides)?;
    let mut prepared = Prepared::new(&stack, template, overrides);
    prepared.update_image = target.update_image;
    Ok((cloud, prepared))
}

/// Refuses an override the template has no parameter for, naming those it has.
fn check_parameters<K: Console>(
    console: &K,
    template: &Json,
    overrides: &BTreeMap<String, String>,
) -> Result<(), ExitCode> {
    let known: Vec<&String> =
        template.get("Parameters").and_then(Json::as_object).map(|m| m.keys().collect()).unwrap_or_default();
    for key in overrides.keys() {
        if !known.contains(&key) {
            let names: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
            return Err(fail(
                console,
                format!("--parameter {key}: the template has no such parameter; it has {}", names.join(", ")),
            ));
        }
    }
    Ok(())
}

/// Refuses an override the blueprint's rules refuse for the field it stands
/// for (`-p WorkerCount=50` past `workers.max`, `-p WorkerCount=lots`),
/// naming the parameter and the field, before any AWS call. The worker
/// counts the stack would run with are checked together: those not set
/// keep the template's defaults, the blueprint's values.
fn check_values<K: Console>(
    console: &K,
    text: &str,
    region: Option<Region>,
    template: &Json,
    overrides: &BTreeMap<String, String>,
) -> Result<(), ExitCode> {
    let default = |name: &str| {
        let value = template.get("Parameters")?.get(name)?.get("Default")?;
        Some(value.as_str().map_or_else(|| value.to_string(), str::to_owned))
    };
    let mut fields: Vec<(&str, String, &str)> = Vec::new();
    for (name, value) in overrides {
        if let Some(field) = crate::stack::blueprint_field(name) {
            fields.push((name, value.clone(), field));
        }
    }
    if fields.is_empty() {
        return Ok(());
    }
    for name in [crate::stack::WORKER_COUNT_PARAMETER, "MinWorkers", "MaxWorkers"] {
        if let (false, Some(value), Some(field)) =
            (overrides.contains_key(name), default(name), crate::stack::blueprint_field(name))
        {
            fields.push((name, value, field));
        }
    }
    let written: Vec<(&str, &str)> = fields.iter().map(|(_, value, field)| (*field, value.as_str())).collect();
    let errors = blueprint::check_overrides(text, region, &written);
    if errors.is_empty() {
        return Ok(());
    }
    let set: Vec<String> = overrides
        .iter()
        .filter(|(n, _)| crate::stack::blueprint_field(n).is_some())
        .map(|(n, v)| format!("-p {n}={v}"))
        .collect();
    for d in &errors {
        let by = fields.iter().find(|(name, _, field)| *field == d.path && overrides.contains_key(*name));
        let head = match by {
            Some((name, value, field)) => format!("-p {name}={value} (the blueprint's {field})"),
            None => format!("with {}: {}", set.join(" "), d.path),
        };
        let mut help = d.help.as_deref().map(|h| format!("\n  = help: {h}")).unwrap_or_default();
        if matches!(d.path.as_str(), "workers.count" | "workers.min" | "workers.max") {
            help.push_str("\n  = help: on the command line, -p MinWorkers, -p WorkerCount and -p MaxWorkers set them");
        }
        console.noteln(&format!("error: {head}: {}{help}", d.message));
    }
    Err(ExitCode::Invalid)
}

/// Reads the agent package `file` and, when `upload`, puts it into the
/// staging bucket (created when missing), saying what it did; returns what
/// the nodes download. Without `upload` (a preview) nothing is written.
/// The file must be an agent package ([`super::package::check`]), of
/// `format` when the image says which; `name_one` says how the command
/// takes another file ("pass --agent-package FILE" for deploy, the
/// argument for `synth stage`). Both are checked before any AWS call.
pub(crate) async fn stage_package<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    file: &Path,
    format: Option<PackageFormat>,
    upload: bool,
    display: &Display,
    name_one: &str,
) -> Result<AgentPackage, ExitCode> {
    let package = staging::read_package(file)
        .and_then(|p| match format {
            Some(wanted) if wanted != p.format => Err(format!(
                "{} is {}, but the blueprint's image installs {}",
                file.display(),
                kind(p.format),
                kind(wanted)
            )),
            _ => Ok(p),
        })
        .map_err(|e| {
            fail(
                console,
                format!(
                    "{e}\n  = help: the image has no agent, so nodes install the package at boot: build it with \
                     `packaging/build`, or {name_one} (or bake an image: see the README)"
                ),
            )
        })?;
    let account = cloud.account_id().await.map_err(|e| fail(console, e))?;
    let key = staging::package_key(&package.sha256, &package.file_name);
    let bucket = if upload {
        let (staging, created) = Staging::ensure(cloud, &account).await.map_err(|e| fail(console, e))?;
        if created {
            display.line("Created", &format!("staging bucket {} (private, encrypted, versioned)", staging.bucket));
        }
        match staging.put_once(cloud, &key, &package.bytes).await.map_err(|e| fail(console, e))? {
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
/// boot (so deploy says nothing of an image without the agent).
pub(crate) fn install_at_boot(spec: &mut ClusterSpec, package: AgentPackage) {
    spec.image.agent_package = Some(package);
}

/// A package format in words.
fn kind(format: PackageFormat) -> &'static str {
    match format {
        PackageFormat::Deb => "the Debian package (.deb, Ubuntu and Debian images)",
        PackageFormat::Tarball => "the .tar.gz (Amazon Linux images)",
    }
}

/// Where CloudFormation reads the template: inline, or from the staging
/// bucket when too large.
pub(crate) async fn template_source<K: Console, C: Cloud>(
    console: &K,
    cloud: &C,
    p: &Prepared,
    display: &Display,
) -> Result<TemplateSource, ExitCode> {
    if p.compact.len() <= staging::INLINE_TEMPLATE_LIMIT {
        return Ok(TemplateSource::Body(p.compact.clone()));
    }
    let account = cloud.account_id().await.map_err(|e| fail(console, e))?;
    let (staging, _) = Staging::ensure(cloud, &account).await.map_err(|e| fail(console, e))?;
    let key = staging::template_key(&p.stack, &staging::sha256_hex(p.compact.as_bytes()));
    staging.put_once(cloud, &key, p.compact.as_bytes()).await.map_err(|e| fail(console, e))?;
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
            let loaded = blueprint::load(&text, &name, Some(Region::UsEast1)).unwrap();
            let mut spec = loaded.spec.clone();
            if loaded.missing_agent.is_some() {
                let url = format!("s3://bucket/agent/{}/pkg", "c".repeat(64));
                install_at_boot(&mut spec, AgentPackage { url, sha256: "c".repeat(64) });
                staged += 1;
            }
            let template = crate::stack::compile(&spec).render().unwrap().json;
            let package = spec.image.agent_package.as_ref().expect("every example installs a package or has one");
            // The user data (`Fn::Base64` of an `Fn::Sub` text) checks exactly that package.
            assert!(template.contains(&format!("echo '{}  '", package.sha256)), "{name}");
        }
        assert_eq!(staged, 11, "the examples on the stock image");
    }

    /// Issue 35: `synth stage /etc/passwd` uploaded it and a 3-byte
    /// `--agent-package` made a stack whose nodes could not boot. A file
    /// that is no agent package, or not the kind the image installs, is
    /// refused before any AWS call; a real one is uploaded.
    #[tokio::test]
    async fn only_an_agent_package_of_the_images_kind_is_staged() {
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        use crate::deploy::package::tests::{deb_named, tar_gz};
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let display = Display::plain(|_| {});
        let tarball = tar_gz(&[("deeplearning-agent-0.1.0-x86_64/bin/agent", b"\x7fELF")]);
        let cases = [
            (write("notapkg.deb", b"abc"), Some(PackageFormat::Deb), "is not an agent package: it is 3 bytes long"),
            (write("passwd", b"root:x:0:0:root:/root:/bin/bash\n"), None, "neither an ar archive nor gzip"),
            (write("curl.deb", &deb_named("curl")), None, "the Debian package `curl`, not deeplearning-agent"),
            (write("a.tar.gz", &tarball), Some(PackageFormat::Deb), "but the blueprint's image installs the Debian"),
        ];
        for (file, format, says) in cases {
            let (console, cloud) = (FakeConsole::default(), FakeCloud::default());
            let staged = stage_package(&console, &cloud, &file, format, true, &display, "name it").await;
            assert_eq!(staged.err(), Some(ExitCode::Error), "{}", file.display());
            assert!(console.stderr().contains(says), "{}", console.stderr());
            assert!(cloud.calls.lock().unwrap().is_empty(), "no AWS call: {:?}", cloud.calls.lock().unwrap());
        }
        let (console, cloud) = (FakeConsole::default(), FakeCloud::default());
        let deb = write("deeplearning-agent_0.1.0-1_amd64.deb", &deb_named("deeplearning-agent"));
        let staged = stage_package(&console, &cloud, &deb, Some(PackageFormat::Deb), true, &display, "name it").await;
        assert!(staged.is_ok(), "{}", console.stderr());
        assert_eq!(cloud.objects.lock().unwrap().len(), 1);
    }

    /// Issue 35: `-p WorkerCount=50` past minimal.yaml's max of 2 and
    /// `-p WorkerCount=lots` previewed as ordinary changes. They are the
    /// blueprint's errors now, naming the parameter and the field, before
    /// any AWS call; values the blueprint allows go on to connect.
    #[tokio::test]
    async fn parameter_values_get_the_blueprints_rules_before_any_aws_call() {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../blueprints/minimal.yaml")).unwrap();
        let run = |parameters: &[&str]| {
            let text = text.clone();
            let parameters: Vec<String> = parameters.iter().map(|p| (*p).to_owned()).collect();
            async move {
                let blueprint = Blueprint { text: &text, path: "minimal.yaml", region: Some(Region::UsEast1) };
                let target = Target { parameters, ..Target::default() };
                let console = crate::deploy::fake::FakeConsole::default();
                let connected = std::cell::Cell::new(false);
                let connect = |_| {
                    connected.set(true);
                    // Refused at once: only whether it was reached matters.
                    std::future::ready(Err::<crate::deploy::fake::FakeCloud, _>(ExitCode::Error))
                };
                let display = Display::plain(|_| {});
                let result = prepare(&console, blueprint, &target, false, &display, connect).await;
                (result.err(), connected.get(), console.stderr())
            }
        };
        let (code, connected, err) = run(&["WorkerCount=50"]).await;
        assert_eq!((code, connected), (Some(ExitCode::Invalid), false), "{err}");
        assert!(
            err.starts_with("error: -p WorkerCount=50 (the blueprint's workers.count): count is 50 but max is 2"),
            "{err}"
        );
        let (code, connected, err) = run(&["WorkerCount=lots"]).await;
        assert_eq!((code, connected), (Some(ExitCode::Invalid), false), "{err}");
        assert!(err.contains("-p WorkerCount=lots (the blueprint's workers.count): expected a whole number"), "{err}");
        let (_, connected, err) = run(&["MasterInstanceType=p9.mega", "SshCidr=0.0.0.0/0"]).await;
        assert!(!connected, "{err}");
        assert!(err.contains("-p MasterInstanceType=p9.mega (the blueprint's master.instance_type): "), "{err}");
        assert!(err.contains("-p SshCidr=0.0.0.0/0 (the blueprint's access.ssh.cidr): "), "{err}");
        for fine in [&["WorkerCount=3", "MaxWorkers=3"][..], &["WorkerCount=1", "MinWorkers=1", "KeyName="]] {
            let (code, connected, err) = run(fine).await;
            assert_eq!((code, connected), (Some(ExitCode::Error), true), "{fine:?}: {err}");
        }
    }

    #[test]
    fn stack_names() {
        assert!(valid_stack_name("resnet-training"));
        for bad in ["", "1abc", "a_b", "a b", &"a".repeat(129)] {
            assert!(!valid_stack_name(bad), "{bad}");
        }
    }

    /// An unknown --parameter is refused before any AWS call: the
    /// connection is never made, nothing is read from S3.
    #[tokio::test]
    async fn an_unknown_parameter_is_refused_before_any_aws_call() {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../blueprints/minimal.yaml")).unwrap();
        let blueprint = Blueprint { text: &text, path: "minimal.yaml", region: Some(Region::UsEast1) };
        let target = Target { parameters: vec!["WorkerCont=8".into()], ..Target::default() };
        let console = crate::deploy::fake::FakeConsole::default();
        let connected = std::cell::Cell::new(false);
        let connect = |_| {
            connected.set(true);
            std::future::ready(Ok(crate::deploy::fake::FakeCloud::default()))
        };
        let display = Display::plain(|_| {});
        let result = prepare(&console, blueprint, &target, true, &display, connect).await;
        assert_eq!(result.err(), Some(ExitCode::Error));
        assert!(!connected.get(), "no connection, so no AWS call");
        let err = console.stderr();
        assert!(err.starts_with("error: --parameter WorkerCont: the template has no such parameter; it has "), "{err}");
        assert!(err.contains("WorkerCount"), "{err}");
    }

    /// Fault injection: the staging upload of the agent package throttled:
    /// exit 2 naming the call; the bucket was made, no object is there, no
    /// stack was touched.
    #[tokio::test]
    async fn a_throttled_package_upload_names_the_call_and_stores_nothing() {
        use crate::deploy::failing::{Failing, Fault, Op};
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        use crate::deploy::package::tests::deb_named;
        let dir = tempfile::tempdir().unwrap();
        let deb = dir.path().join("deeplearning-agent_0.1.0-1_amd64.deb");
        std::fs::write(&deb, deb_named("deeplearning-agent")).unwrap();
        let cloud = Failing::new(FakeCloud::default()).fail(Op::PutObject, 1, Fault::Throttled);
        let console = FakeConsole::default();
        let display = Display::plain(|_| {});
        let staged = stage_package(&console, &cloud, &deb, Some(PackageFormat::Deb), true, &display, "name it").await;
        assert_eq!(staged.err(), Some(ExitCode::Error));
        let err = console.stderr();
        assert!(
            err.starts_with("error: S3 PutObject on s3://deeplearning-cluster-staging-123456789012-us-east-1/agent/"),
            "{err}"
        );
        assert!(err.contains("AWS throttled the call"), "{err}");
        assert!(cloud.inner().objects.lock().unwrap().is_empty());
        assert_eq!(cloud.inner().buckets.lock().unwrap().len(), 1);
        let calls = cloud.inner().calls.lock().unwrap().clone();
        assert!(calls.iter().all(|c| !c.contains("stack")), "{calls:?}");
    }

    /// Fault injection: a template over the inline limit whose staging
    /// bucket cannot be made: exit 2 naming the call; nothing is uploaded.
    #[tokio::test]
    async fn a_large_template_whose_bucket_is_refused_is_not_sent() {
        use crate::deploy::failing::{Failing, Fault, Op};
        use crate::deploy::fake::{FakeCloud, FakeConsole};
        let big = serde_json::json!({ "Description": "x".repeat(staging::INLINE_TEMPLATE_LIMIT) });
        let p = Prepared::new("demo", big, BTreeMap::new());
        let cloud = Failing::new(FakeCloud::default()).fail(Op::CreateStagingBucket, 1, Fault::Denied);
        let console = FakeConsole::default();
        let source = template_source(&console, &cloud, &p, &Display::plain(|_| {})).await;
        assert_eq!(source.err(), Some(ExitCode::Error));
        let err = console.stderr();
        assert!(err.starts_with("error: S3 CreateBucket on bucket deeplearning-cluster-staging-"), "{err}");
        assert!(err.contains("AWS refused s3:CreateBucket"), "{err}");
        assert!(cloud.inner().buckets.lock().unwrap().is_empty());
        assert_eq!(cloud.inner().calls_named("put_object"), 0);
    }
}
