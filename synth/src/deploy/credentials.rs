//! Credential, profile and region problems, whether found here (no
//! credentials, a profile the files do not have, a region synth does not
//! support) or answered by AWS (a key it does not know, a secret that does
//! not match, an expired session), turned into one message each, in one
//! place: what was wrong, which credentials synth used (`--profile`, the
//! environment's keys, `AWS_PROFILE`, SSO) and what to check.
//!
//! [`classify`] turns an AWS error answer into the port's error for the
//! SDK's calls ([`super::sdk`]) and the two signed by hand ([`super::ec2`],
//! [`super::service_quotas`]); what kind of answer it is (credentials
//! first: AWS answers an unknown key with HTTP 403, which is not a missing
//! permission; then throttles, outages, refusals, invalid requests) is
//! decided by `aws_errors`, the one classifier the agent shares.

use std::sync::OnceLock;

use aws_errors::Kind;

use super::policy::action_of;
use super::port::CloudError;
use crate::region::{Region, UnknownRegion};

/// An AWS error answer to the call `what` (HTTP `status`, error `code`,
/// `message` already `code: text`) as the port's error, by the kind
/// `aws_errors::classify` (the classifier the agent shares) gives it.
/// Something not there stays [`CloudError::Invalid`]: synth's callers tell
/// a missing thing by its code in the message, as they tell CloudFormation's
/// missing stack (a `ValidationError`, not a code of its own).
pub(crate) fn classify(what: &str, status: u16, code: &str, message: String) -> CloudError {
    let what = what.to_owned();
    match aws_errors::classify(status, code) {
        Kind::Credentials => {
            let said = rejected(&what, code, &message);
            CloudError::Rejected { what, code: code.to_owned(), said }
        }
        Kind::Denied => CloudError::Denied { action: action_of(&what).map(str::to_owned), what, message },
        Kind::Throttled => CloudError::Throttled { what, message },
        Kind::Transient => CloudError::Unavailable { what, message },
        Kind::NotFound | Kind::Invalid => CloudError::Invalid { what, message },
    }
}

/// Where the credentials synth uses come from, as aws-config's chain picks
/// them (and `--profile` overrides it, as the AWS CLI does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A named profile: its name, what named it (`--profile`,
    /// `AWS_PROFILE`), and whether it signs in through SSO.
    Profile { name: String, named_by: &'static str, sso: bool },
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// The default profile, else the rest of the chain (web identity, the
    /// container's or the instance's role).
    Default { sso: bool },
}

impl Source {
    /// The source for `--profile` (`profile`) and the environment (`env`
    /// reads a variable); `sso` says whether a profile signs in through SSO.
    pub(crate) fn find(
        profile: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
        sso: impl Fn(&str) -> bool,
    ) -> Source {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        if let Some(name) = profile {
            return Source::Profile { name: name.to_owned(), named_by: "--profile", sso: sso(name) };
        }
        if set("AWS_ACCESS_KEY_ID").is_some() {
            return Source::Environment;
        }
        match set("AWS_PROFILE") {
            Some(name) => Source::Profile { sso: sso(&name), name, named_by: "AWS_PROFILE" },
            None => Source::Default { sso: sso("default") },
        }
    }

    /// The profile to name in a command (`aws sso login --profile NAME`).
    fn profile_flag(&self) -> String {
        match self {
            Source::Profile { name, .. } => format!(" --profile {name}"),
            _ => String::new(),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Profile { name, named_by, sso: true } => {
                write!(f, "the SSO sign-in of the profile {name} (named by {named_by})")
            }
            Source::Profile { name, named_by, sso: false } => write!(f, "the profile {name} (named by {named_by})"),
            Source::Environment => f.write_str("the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
            Source::Default { sso: true } => f.write_str("the SSO sign-in of the default profile"),
            Source::Default { sso: false } => {
                f.write_str("the default profile (or, without one, the instance's or container's role)")
            }
        }
    }
}

/// The credentials this run uses, once connected: what [`rejected`] names.
static USED: OnceLock<(Source, String)> = OnceLock::new();

/// Records the credentials this run uses: their source and access key id.
pub(crate) fn record(source: Source, key_id: &str) {
    let _ = USED.set((source, key_id.to_owned()));
}

/// An access key id as `aws configure list` shows it: its last four characters.
fn masked(key_id: &str) -> String {
    let tail: String = key_id.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    format!("****{tail}")
}

/// What to say when AWS did not accept the credentials for `what`
/// (`code`, `message`): which credentials, and what to check.
pub(crate) fn rejected(what: &str, code: &str, message: &str) -> String {
    let (used, flag) = match USED.get() {
        Some((source, key)) => (format!("{source}, access key {}", masked(key)), source.profile_flag()),
        None => ("the credentials of the standard chain".to_owned(), String::new()),
    };
    let check = match code {
        "ExpiredToken" | "ExpiredTokenException" | "TokenRefreshRequired" | "InvalidToken" => {
            format!("the session has expired: sign in again (`aws sso login{flag}` for SSO) or get new session keys")
        }
        "SignatureDoesNotMatch" | "IncompleteSignature" => {
            "the secret access key does not match the access key id: check that both are copied whole, \
             and that this computer's clock is right"
                .to_owned()
        }
        "RequestExpired" => "this computer's clock is off: set it right, then try again".to_owned(),
        _ => format!(
            "AWS does not know this access key (deleted, deactivated or mistyped, or a session key without \
             its AWS_SESSION_TOKEN): `aws sts get-caller-identity{flag}` checks the same credentials"
        ),
    };
    format!("{what}: AWS did not accept the credentials ({message}); they were {used}: {check}")
}

/// Why connecting failed before any call: the local checks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectError {
    /// No region anywhere in the chain.
    #[error("no AWS region: pass --region, or set AWS_REGION (or a region in your AWS profile)")]
    NoRegion,
    /// The region the environment or the profile gives is not supported
    /// (`--region` is checked by its parser, with the same words).
    #[error("{region} (from {from}); pass --region, or change {from}")]
    UnsupportedRegion {
        /// The region's complaint.
        region: UnknownRegion,
        /// Where it came from.
        from: &'static str,
    },
    /// `--profile` or `AWS_PROFILE` names a profile the AWS config files do
    /// not have.
    #[error(
        "no AWS profile named {profile} in your AWS config files ({named_by} names it; the files are ~/.aws/config \
         and ~/.aws/credentials, or those AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE name); {}",
        known_profiles(.profile, .known)
    )]
    NoProfile {
        /// The name.
        profile: String,
        /// `--profile` or `AWS_PROFILE`.
        named_by: &'static str,
        /// The profiles the files define.
        known: Vec<String>,
    },
    /// No credentials, or the chain failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

fn known_profiles(profile: &str, known: &[String]) -> String {
    if known.is_empty() {
        format!("they define none: create it with `aws configure --profile {profile}`")
    } else {
        format!("the profiles there are {}", known.join(", "))
    }
}

/// Checks the region the chain found (`region`) the way `--region` is
/// checked; `env` reads a variable, to say where it came from.
pub(crate) fn check_region(region: &str, env: impl Fn(&str) -> Option<String>) -> Result<Region, ConnectError> {
    region.parse::<Region>().map_err(|e| {
        let from = if env("AWS_REGION").is_some_and(|r| r == region) {
            "AWS_REGION"
        } else if env("AWS_DEFAULT_REGION").is_some_and(|r| r == region) {
            "AWS_DEFAULT_REGION"
        } else {
            "your AWS profile's region"
        };
        ConnectError::UnsupportedRegion { region: e, from }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn credential_codes_come_before_refusals() {
        // AWS answers an unknown key with HTTP 403: not a policy problem.
        for code in ["InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidAccessKeyId"] {
            let e = classify("CloudFormation DescribeStacks on stack x", 403, code, format!("{code}: no"));
            assert!(matches!(e, CloudError::Rejected { .. }), "{code}: {e:?}");
            let text = e.to_string();
            assert!(text.contains("did not accept the credentials"), "{text}");
            assert!(!text.contains("synth policy"), "{text}");
        }
        let e = classify("CloudFormation CreateStack on stack x", 403, "AccessDenied", "AccessDenied: no".into());
        assert!(matches!(e, CloudError::Denied { .. }));
        assert!(matches!(classify("x", 500, "InternalFailure", "m".into()), CloudError::Unavailable { .. }));
        assert!(matches!(classify("x", 400, "ValidationError", "m".into()), CloudError::Invalid { .. }));
    }

    #[test]
    fn a_throttle_is_reported_as_throttled_never_as_invalid_input() {
        // Before the shared classifier, CloudFormation's `Throttling` (HTTP
        // 400) read "CloudFormation DescribeStacks ...: Throttling: Rate
        // exceeded", an invalid request.
        for (status, code) in [
            (400, "Throttling"),
            (400, "ThrottlingException"),
            (503, "RequestLimitExceeded"),
            (429, "TooManyRequestsException"),
            (503, "SlowDown"),
            (429, ""),
        ] {
            let e =
                classify("CloudFormation DescribeStacks on stack x", status, code, format!("{code}: Rate exceeded"));
            assert!(matches!(e, CloudError::Throttled { .. }), "HTTP {status} {code}: {e:?}");
            let text = e.to_string();
            assert!(text.contains("AWS throttled"), "{text}");
            assert!(text.starts_with("CloudFormation DescribeStacks on stack x: "), "{text}");
        }
    }

    #[test]
    fn the_message_says_what_to_check_for_each_kind() {
        assert!(rejected("w", "ExpiredToken", "m").contains("the session has expired"));
        assert!(rejected("w", "SignatureDoesNotMatch", "m").contains("secret access key does not match"));
        assert!(rejected("w", "InvalidClientTokenId", "m").contains("`aws sts get-caller-identity"));
    }

    #[test]
    fn sources_follow_the_chain_and_the_profile_flag() {
        let no_sso = |_: &str| false;
        let keys = [("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), ("AWS_PROFILE", "dev")];
        assert_eq!(
            Source::find(Some("ops"), env(&keys), no_sso),
            Source::Profile { name: "ops".into(), named_by: "--profile", sso: false }
        );
        assert_eq!(Source::find(None, env(&keys), no_sso), Source::Environment);
        let profile = Source::find(None, env(&keys[1..]), |n| n == "dev");
        assert_eq!(profile.to_string(), "the SSO sign-in of the profile dev (named by AWS_PROFILE)");
        assert_eq!(profile.profile_flag(), " --profile dev");
        assert_eq!(Source::find(None, env(&[]), no_sso), Source::Default { sso: false });
        assert_eq!(masked("AKIDEXAMPLE"), "****MPLE");
    }

    #[test]
    fn a_region_from_the_environment_is_checked_as_the_flag_is() {
        let e = check_region("eu-central-1", env(&[("AWS_REGION", "eu-central-1")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`eu-central-1` is not a supported region; supported: us-east-1, us-east-2, us-west-2, eu-west-1, \
             ap-southeast-2 (from AWS_REGION); pass --region, or change AWS_REGION"
        );
        assert!(check_region("eu-central-1", env(&[])).unwrap_err().to_string().contains("your AWS profile's region"));
        assert_eq!(check_region("us-west-2", env(&[])), Ok(Region::UsWest2));
        let e = ConnectError::NoProfile { profile: "nosuch".into(), named_by: "AWS_PROFILE", known: vec![] };
        assert!(e.to_string().ends_with("create it with `aws configure --profile nosuch`"), "{e}");
    }
}
