//! The `synth` binary end to end: exit codes, stdout versus stderr, and that
//! a failed build writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .expect("synth runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("synth-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn build_prints_a_template_on_stdout_only() {
    let o = synth(&["build", "blueprints/minimal.yaml", "--region", "eu-west-1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let template: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is the JSON template");
    assert_eq!(template["AWSTemplateFormatVersion"], "2010-09-09");
    assert!(template["Rules"]["SupportedRegion"].to_string().contains("eu-west-1"));
}

#[test]
fn an_invalid_blueprint_exits_1_and_prints_nothing_on_stdout() {
    let dir = temp_dir("invalid");
    let bp = dir.join("bad.yaml");
    std::fs::write(
        &bp,
        "name: Bad_Name\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 2, cuont: 3}\n",
    )
    .unwrap();
    let o = synth(&["build", bp.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty(), "no partial output: {}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("bad.yaml:1:7"), "names the line and column: {err}");
    assert!(err.contains("cuont") && err.contains("count"), "did you mean: {err}");
    let v = synth(&["validate", bp.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(1));
    assert_eq!(stderr(&v), err, "validate reports the same problems");
}

#[test]
fn a_failed_build_leaves_the_output_file_untouched() {
    let dir = temp_dir("untouched");
    let out = dir.join("stack.json");
    std::fs::write(&out, "previous").unwrap();
    let bp = dir.join("bad.yaml");
    std::fs::write(
        &bp,
        "name: ok\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 5, max: 2}\n",
    )
    .unwrap();
    let o = synth(&["build", bp.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 2, "no temporary files left: {leftovers:?}");

    let o = synth(&["build", "blueprints/minimal.yaml", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(written["Resources"]["MasterInstance"].is_object());
}

#[test]
fn usage_and_io_errors_exit_2() {
    let o = synth(&["build", "no/such/blueprint.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read the blueprint no/such/blueprint.yaml"), "{}", stderr(&o));
    let o = synth(&["build", "blueprints/minimal.yaml", "--region", "mars-north-1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("us-east-1, us-east-2, us-west-2, eu-west-1, ap-southeast-2"), "{}", stderr(&o));
    let o = synth(&["build", "blueprints/minimal.yaml", "-o", "/nonexistent-dir/stack.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot write the template to /nonexistent-dir/stack.json"), "{}", stderr(&o));
    let o = synth(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn validate_schema_and_regions() {
    let o = synth(&["validate", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "validate prints nothing on stdout: {}", stdout(&o));
    assert!(
        stderr(&o)
            .contains("ok: blueprints/gpu-cluster.yaml builds a template for all five supported regions: us-east-1,"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("fsx:"), "no FSx line without FSx: {}", stderr(&o));
    // FSx for Lustre: the summary says which zone the file system is in.
    let o = synth(&["validate", "blueprints/fsx-imagenet.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "    fsx: 2400 GiB FSx for Lustre PERSISTENT_2, linked to s3://my-imagenet-data/ilsvrc2012/, mounted at \
             /fsx, in the nodes' one Availability Zone\n"
        ),
        "{}",
        stderr(&o)
    );

    let o = synth(&["schema"]);
    assert_eq!(o.status.code(), Some(0));
    let schema: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let props = schema["properties"].as_object().expect("an object schema");
    for field in
        ["name", "region", "image", "master", "workers", "storage", "network", "access", "elastic", "timeouts", "tags"]
    {
        assert!(props.contains_key(field), "schema lacks {field}");
    }

    let o = synth(&["regions"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).lines().count(), 5);
    assert!(stdout(&o).contains("ap-southeast-2  Asia Pacific (Sydney)"));

    let o = synth(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Exit codes"));
}

/// `synth policy`: each part is one IAM policy document on stdout, scoped
/// by the options; a prefix that could widen an ARN is refused (exit 2,
/// nothing printed); `--help` says how to attach it.
#[test]
fn policy_prints_each_document_and_refuses_a_widening_prefix() {
    for part in ["calls", "resources"] {
        let o = synth(&["policy", "--part", part, "--stack-name-prefix", "ml", "--region", "eu-west-1"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(o.stderr.is_empty(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(doc["Version"], "2012-10-17");
        let statements = doc["Statement"].as_array().unwrap();
        assert!(statements.iter().all(|s| s["Effect"] == "Allow" && s["Sid"].is_string()), "{doc}");
        assert!(!stdout(&o).contains("stack/*/*"), "scoped to the prefix: {doc}");
    }
    let o = synth(&["policy", "--part", "calls", "--stack-name-prefix", "ml*"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(stderr(&o).contains("--stack-name-prefix \"ml*\": a stack name starts with a letter"), "{}", stderr(&o));
    let o = synth(&["policy"]);
    assert_eq!(o.status.code(), Some(2), "--part is required");
    let o = synth(&["policy", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("aws iam create-policy") && stdout(&o).contains("attach-user-policy"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_blueprint_on_stdin() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(["build", "-", "--region", "us-west-2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"name: piped\nmaster: {instance_type: c5.xlarge}\nworkers: {instance_type: c5.xlarge, count: 1}\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"AWSTemplateFormatVersion\""));
}

#[test]
fn image_prints_the_image_builder_template_without_the_missing_agent_warning() {
    let o = synth(&["image", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let template: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is the JSON template");
    assert_eq!(template["Resources"]["Pipeline"]["Type"], "AWS::ImageBuilder::ImagePipeline");
    assert!(!stderr(&o).contains("no deeplearning agent"), "{}", stderr(&o));
    // The same blueprint, as a cluster: the stock image cannot hold the agent.
    let o = synth(&["validate", "blueprints/gpu-cluster.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("`synth deploy` stages the agent package"), "{}", stderr(&o));
    let o = synth(&["validate", "blueprints/install-at-boot.yaml"]);
    assert!(!stderr(&o).contains("no deeplearning agent"), "{}", stderr(&o));
}

/// Issue 35: `synth build` warned on 7 of the 8 examples that the cluster
/// "would fail to form", labelled with `image.agent_package_url:` (a field
/// the file does not have) and a caret on `name:`. It is one note in the
/// words of building a template for the console, with the next step; no
/// warning names a field the file lacks.
#[test]
fn build_says_once_what_a_console_template_needs_without_a_field_label() {
    let o = synth(&["build", "blueprints/minimal.yaml", "--region", "us-east-1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.matches("no deeplearning agent").count(), 1, "{err}");
    assert!(err.starts_with("note: this template's nodes boot the default image"), "{err}");
    assert!(err.contains("\n    packaging/build && synth stage --region us-east-1\n"), "{err}");
    assert!(err.contains("`synth deploy` stages the package by itself"), "{err}");
    assert!(!err.contains("warning:") && !err.contains("agent_package_url") && !err.contains("-->"), "{err}");
    // Without a region, the command names where it goes.
    let o = synth(&["build", "blueprints/minimal.yaml"]);
    assert!(stderr(&o).contains("synth stage --region REGION"), "{}", stderr(&o));
}

/// Every flag and `synth <command>` that synth's own words name (its
/// `--help` texts, and the messages and warnings in its source) exists in
/// the command tree clap builds: advice naming a flag synth does not have
/// (the `--template-url` the over-51,200-byte warning once gave) fails here.
mod named_flags_exist {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use clap::CommandFactory;

    /// Each subcommand's long flags (`""`: the top level); help and
    /// version included.
    fn tree() -> BTreeMap<String, BTreeSet<String>> {
        let root = synth::cli::Cli::command();
        let flags = |c: &clap::Command| -> BTreeSet<String> {
            let mut set: BTreeSet<String> = c.get_arguments().filter_map(|a| a.get_long().map(str::to_owned)).collect();
            set.extend(["help".to_owned(), "version".to_owned()]);
            set
        };
        let mut tree = BTreeMap::from([(String::new(), flags(&root))]);
        for sub in root.get_subcommands() {
            tree.insert(sub.get_name().to_owned(), flags(sub));
        }
        tree
    }

    /// Every text clap shows: about, long about, after help, each argument's help.
    fn help_texts() -> Vec<(String, String)> {
        let root = synth::cli::Cli::command();
        let mut texts = Vec::new();
        let mut add = |owner: &str, c: &clap::Command| {
            let mut push = |t: Option<&clap::builder::StyledStr>| {
                if let Some(t) = t {
                    texts.push((owner.to_owned(), t.to_string()));
                }
            };
            push(c.get_about());
            push(c.get_long_about());
            push(c.get_after_help());
            push(c.get_after_long_help());
            push(c.get_before_help());
            for a in c.get_arguments() {
                push(a.get_help());
                push(a.get_long_help());
            }
        };
        add("", &root);
        for sub in root.get_subcommands() {
            add(sub.get_name(), sub);
        }
        texts
    }

    /// Words after "synth " that are prose, not a command.
    const PROSE: &[&str] = &[
        "a", "adds", "and", "any", "as", "by", "can", "cannot", "checked", "checks", "command", "commands", "compiles",
        "creates", "do", "does", "gives", "has", "is", "itself", "knows", "made", "makes", "may", "needs", "of", "or",
        "prints", "reads", "run", "runs", "says", "sees", "sets", "the", "to", "uses", "was", "will", "would",
        "writes",
    ];

    /// The problems in one text: `synth X` where X is no command, and
    /// `--flag`s that the command they follow (or, outside a `synth X`
    /// command line, any command) does not have. Flags of other programs'
    /// command lines (`aws ...`, `ssh ...`) are theirs. A line ending in
    /// `\` (a string continued in the source) goes on with the next.
    fn problems(owner: &str, text: &str, tree: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
        let all: BTreeSet<&String> = tree.values().flatten().collect();
        problems_for(owner, text, tree, &|flag: &str| all.iter().any(|f| *f == flag))
    }

    /// [`problems`] where a flag outside a `synth X` command line must
    /// satisfy `known`: the commands the text belongs to have it.
    fn problems_for(
        owner: &str,
        text: &str,
        tree: &BTreeMap<String, BTreeSet<String>>,
        known: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut found = Vec::new();
        // The command line a flag belongs to: synth's (which
        // subcommand), another program's, or none yet.
        let mut current: Option<Option<String>> = None;
        let mut continued = false;
        for line in text.lines() {
            if !continued {
                current = None;
            }
            continued = line.trim_end().ends_with('\\');
            let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || "`'\"(),;[]{}".contains(c)).collect();
            // Where each word starts, to tell a command line (`agent render`,
            // a line that starts with it) from prose ("the image has no agent").
            let mut starts = Vec::with_capacity(words.len());
            let mut at = 0;
            for word in &words {
                starts.push(at);
                at += word.len() + line[at + word.len()..].chars().next().map_or(0, char::len_utf8);
            }
            let commandish = |i: usize| {
                let before = line[..starts[i]].trim_end_matches(' ');
                before.ends_with(['`', '$', '(', '\'', '"', '-', ':']) || before.trim_start().is_empty()
            };
            for (i, word) in words.iter().enumerate() {
                match *word {
                    "synth" => {
                        let next = words.get(i + 1).copied().unwrap_or("");
                        if next.chars().all(|c| c.is_ascii_lowercase()) && !next.is_empty() {
                            if tree.contains_key(next) {
                                current = Some(Some(next.to_owned()));
                            } else if !PROSE.contains(&next) {
                                found.push(format!("{owner}: `synth {next}` is no command: {line}"));
                            }
                        }
                    }
                    "aws" | "ssh" | "cargo" | "journalctl" | "sh" | "scp" | "rsync" | "curl" | "trainer" | "agent"
                        if commandish(i) =>
                    {
                        current = Some(None)
                    }
                    _ => {}
                }
                let Some(flag) = word.strip_prefix("--") else { continue };
                let flag: String = flag.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                if !flag.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    continue;
                }
                let ok = match &current {
                    Some(Some(command)) => tree[command].contains(&flag),
                    Some(None) => true,
                    // Outside a `synth X` command line, a flag belongs to
                    // the commands the text is shown by.
                    None => known(&flag),
                };
                if !ok {
                    found.push(format!("{owner}: --{flag} is no flag of {current:?}: {line}"));
                }
            }
        }
        found
    }

    #[test]
    fn every_help_text_names_flags_and_commands_that_exist() {
        let tree = tree();
        // A command's help may name another command's flag in prose (`diff`
        // says what deploy's --allow-replacement does).
        let found: Vec<String> = help_texts().iter().flat_map(|(owner, text)| problems(owner, text, &tree)).collect();
        assert!(found.is_empty(), "{}", found.join("\n"));
        // The check can fail: a flag synth does not have is found, a flag
        // of another command after `synth X`, a command that is not there.
        assert_eq!(problems("build", "or pass --template-url", &tree).len(), 1);
        assert_eq!(problems("", "run `synth delete x --follow`", &tree).len(), 1);
        assert_eq!(problems("", "see `synth logz x`", &tree).len(), 1);
        assert_eq!(problems("", "`synth events x \\\n --follow`, `aws logs tail --follow`", &tree).len(), 0);
    }

    /// Every example command line in `--help` (a line that starts with
    /// `synth `, a `$ ` prompt or a continuation) fits an 80-column terminal,
    /// so clap, which wraps help to the terminal's width, never breaks a
    /// command in the middle.
    #[test]
    fn help_examples_fit_80_columns() {
        let mut wide = Vec::new();
        for (owner, text) in help_texts() {
            for line in text.lines() {
                let command = line.trim_start();
                let example =
                    command.starts_with("synth ") || command.starts_with("packaging/") || command.starts_with("--");
                if example && line.chars().count() > 80 {
                    wide.push(format!("{owner}: {} columns: {line}", line.chars().count()));
                }
            }
        }
        assert!(wide.is_empty(), "{}", wide.join("\n"));
    }

    /// The ports every command imports for their traits and types: their
    /// messages belong to whichever flow calls them (the prompt's `--yes`
    /// to deploy's and delete's), so a flag there need only exist on some
    /// command.
    const PORTS: &[&str] = &["console", "port"];

    /// The text of every `use` statement of a command's file.
    fn uses(text: &str) -> String {
        let mut out = String::new();
        let mut inside = false;
        for line in text.lines() {
            let t = line.trim_start();
            inside |= t.starts_with("use ") || t.starts_with("pub use ") || t.starts_with("pub(super) use ");
            if inside {
                out.push_str(t);
                out.push(' ');
                inside = !t.trim_end().ends_with(';');
            }
        }
        out
    }

    /// The commands that show a message written in the function `function`
    /// of the source file `path`: `cli/X.rs`'s are command X's; another
    /// module's are those of every command whose `cli/X.rs` imports that
    /// function, the module itself, or a type of it (`synth stage`
    /// imports only `prepare::stage_package`, so `prepare`'s other
    /// functions are deploy's). A module no command imports (the pure core,
    /// reached through the flows) and the [`PORTS`] give `None`: a flag
    /// there need only exist on some command.
    fn commands_of(path: &Path, function: &str, cli: &BTreeMap<String, String>) -> Option<Vec<String>> {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let in_cli = path.parent().and_then(|p| p.file_name()).is_some_and(|d| d == "cli");
        if in_cli && cli.contains_key(stem) {
            return Some(vec![stem.to_owned()]);
        }
        if PORTS.contains(&stem) {
            return None;
        }
        let module = std::fs::read_to_string(path).unwrap_or_default();
        let is_function =
            |item: &str| module.contains(&format!("fn {item}(")) || module.contains(&format!("fn {item}<"));
        let mut commands = Vec::new();
        for (command, text) in cli {
            let uses = uses(text);
            // What the file imports from the module: `self` for the module.
            let mut items: Vec<&str> = Vec::new();
            for (i, _) in uses.match_indices(&format!("::{stem}")) {
                let rest = &uses[i + 2 + stem.len()..];
                if rest.starts_with([';', ',', '}', ' ']) {
                    items.push("self");
                } else if let Some(rest) = rest.strip_prefix("::{") {
                    items.extend(rest.split('}').next().unwrap_or_default().split(',').map(str::trim));
                } else if let Some(rest) = rest.strip_prefix("::") {
                    items.push(rest.split([';', ',', '}', ' ']).next().unwrap_or_default());
                }
            }
            if items.iter().any(|item| *item == "self" || *item == function || !is_function(item)) {
                commands.push(command.clone());
            }
        }
        (!commands.is_empty()).then_some(commands)
    }

    /// `text` without its `#[cfg(test)]` modules (test code prints nothing
    /// to users), each line with the function it is in.
    fn lines_by_function(text: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut function = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let t = line.trim_start();
            if let Some(rest) = t.split_once("fn ").filter(|(before, _)| {
                before.is_empty() || before.ends_with("pub ") || before.ends_with(") ") || before.ends_with("async ")
            }) {
                function = rest.1.split(['(', '<']).next().unwrap_or_default().to_owned();
            }
            out.push((function.clone(), line.to_owned()));
        }
        out
    }

    /// The messages and warnings synth prints are string literals in its
    /// source; every line of them (comments left out) is checked, each
    /// flag against the commands that show the message ([`commands_of`]):
    /// `synth stage`'s missing-package message once said "pass
    /// --agent-package FILE", a flag of deploy's that stage does not have.
    #[test]
    fn every_message_in_the_source_names_flags_and_commands_that_exist() {
        let tree = tree();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let cli: BTreeMap<String, String> = tree
            .keys()
            .filter_map(|c| Some((c.clone(), std::fs::read_to_string(src.join("cli").join(format!("{c}.rs"))).ok()?)))
            .collect();
        let mut found = Vec::new();
        let mut files = vec![src.clone()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let all: BTreeSet<&String> = tree.values().flatten().collect();
            // The lines of each function together (a message continued over
            // lines stays one text).
            let mut by_function: Vec<(String, String)> = Vec::new();
            for (function, line) in lines_by_function(&text) {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                match by_function.last_mut() {
                    Some((f, code)) if *f == function => {
                        code.push_str(&line);
                        code.push('\n');
                    }
                    _ => by_function.push((function, format!("{line}\n"))),
                }
            }
            for (function, code) in by_function {
                let commands = commands_of(&path, &function, &cli);
                let known = |flag: &str| match &commands {
                    None => all.iter().any(|f| *f == flag),
                    Some(commands) => commands.iter().all(|c| tree[c].contains(flag)),
                };
                let owner = format!("{} (fn {function}, {commands:?})", path.display());
                found.extend(problems_for(&owner, &code, &tree, &known));
            }
        }
        assert!(found.is_empty(), "{}", found.join("\n"));
        // The check can fail: stage's old advice, in the module stage and
        // deploy both use, names a flag stage does not have.
        let prepare = src.join("deploy/prepare.rs");
        let commands = commands_of(&prepare, "stage_package", &cli).unwrap_or_default();
        assert!(commands.contains(&"stage".to_owned()) && commands.contains(&"deploy".to_owned()), "{commands:?}");
        assert_eq!(commands_of(&prepare, "check_parameters", &cli), Some(vec!["deploy".to_owned()]));
        let known = |flag: &str| commands.iter().all(|c| tree[c].contains(flag));
        assert_eq!(problems_for("prepare", "\"or pass --agent-package FILE\"", &tree, &known).len(), 1);
        let code: String = lines_by_function(&std::fs::read_to_string(&prepare).unwrap())
            .into_iter()
            .filter(|(f, _)| f == "stage_package")
            .map(|(_, l)| l + "\n")
            .collect();
        assert_eq!(problems_for("prepare", &code, &tree, &known), Vec::<String>::new());
    }
}

/// `synth` with only the environment given (no inherited AWS variables),
/// HOME an empty directory unless `home` has config files.
fn synth_env(args: &[&str], env: &[(&str, &str)], home: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_synth"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env.iter().copied())
        .output()
        .expect("synth runs")
}

/// No credentials, no region, a profile that does not exist: each is one
/// clean paragraph on stderr (the SDK's own `WARN ... ProviderError` dumps
/// only with SYNTH_LOG=debug), exit 2; a named profile that does not exist
/// is an error naming it, also when the environment has keys.
#[test]
fn credentials_region_and_profile_errors_are_one_paragraph() {
    let home = temp_dir("aws-home");
    // An instance metadata endpoint that refuses every request, as one
    // off EC2 may: each provider of the chain fails, and the SDK warns.
    let imds = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", imds.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut stream in imds.incoming().flatten() {
            let _ = stream.read(&mut [0; 4096]);
            let _ = stream.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    let imds = ("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str());
    let keys = [("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "secret")];
    let no_region = "error: no AWS region: pass --region, or set AWS_REGION (or a region in your AWS profile)\n";
    // The arguments, the environment, what the one line says.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 2] = [
        (&["status", "--region", "us-east-1"], &[imds], "error: no AWS credentials: set AWS_PROFILE"),
        (&["status"], &[imds, keys[0], keys[1]], no_region),
    ];
    for (args, env, says) in cases {
        let o = synth_env(args, env, &home);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one line, no SDK dump: {err}");
        assert!(err.starts_with(says), "{err}");
        // The check can fail: the SDK's warnings are there to be shown.
        let mut loud = env.to_vec();
        loud.push(("SYNTH_LOG", "warn"));
        assert!(stderr(&synth_env(args, &loud, &home)).contains(" WARN aws_config"), "{args:?}");
    }
    let debug = synth_env(&["status", "--region", "us-east-1"], &[imds, ("SYNTH_LOG", "debug")], &home);
    assert!(stderr(&debug).contains("no credentials from the standard chain"), "{}", stderr(&debug));

    for env in [&keys[..], &[]] {
        let o = synth_env(&["status", "--region", "us-east-1", "--profile", "nosuch"], env, &home);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: no AWS profile named nosuch in your AWS config files"), "{err}");
    }
    // AWS_PROFILE is checked as --profile is, keys in the environment or
    // not, and the advice names the profile.
    for env in [&keys[..], &[]] {
        let mut env = env.to_vec();
        env.push(("AWS_PROFILE", "nosuch"));
        let o = synth_env(&["status", "--region", "us-east-1"], &env, &home);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("error: no AWS profile named nosuch in your AWS config files (AWS_PROFILE names it"));
        assert!(err.ends_with("create it with `aws configure --profile nosuch`\n"), "{err}");
    }
    // A region from the environment is checked as --region is.
    let o = synth_env(&["status"], &[keys[0], keys[1], ("AWS_REGION", "eu-central-1")], &home);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: `eu-central-1` is not a supported region"), "{}", stderr(&o));
    assert!(stderr(&o).contains("(from AWS_REGION)"), "{}", stderr(&o));
    let flag = synth_env(&["status", "--region", "eu-central-1"], &keys, &home);
    assert_eq!(flag.status.code(), Some(2));
    assert!(stderr(&flag).contains("`eu-central-1` is not a supported region"), "{}", stderr(&flag));

    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/config"), "[profile dev]\nregion = us-east-1\n[default]\n").unwrap();
    let o = synth_env(&["status", "--profile", "nosuch"], &keys, &home);
    assert!(stderr(&o).ends_with("; the profiles there are default, dev\n"), "{}", stderr(&o));
}

/// Keys AWS does not know are a credentials problem, not a policy one: the
/// message names the credentials used and what to check (issue 35). The
/// endpoint answers every call as AWS answers an unknown access key.
#[test]
fn credentials_aws_rejects_are_named_with_their_source() {
    let home = temp_dir("aws-home-rejected");
    let aws = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", aws.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let body = "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidClientTokenId</Code>\
                    <Message>The security token included in the request is invalid.</Message></Error>\
                    <RequestId>1</RequestId></ErrorResponse>";
        for mut stream in aws.incoming().flatten() {
            let _ = stream.read(&mut [0; 65536]);
            let head = format!(
                "HTTP/1.1 403 Forbidden\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(format!("{head}{body}").as_bytes());
        }
    });
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDUNKNOWN1234"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_MAX_ATTEMPTS", "1"),
    ];
    let o = synth_env(&["status", "demo", "--region", "us-east-1"], &env, &home);
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("AWS did not accept the credentials (InvalidClientTokenId"), "{err}");
    assert!(err.contains("they were the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, access key ****1234"));
    assert!(err.contains("`aws sts get-caller-identity`"), "{err}");
    assert!(!err.contains("policy"), "{err}");
}
