//! `image`: the AMI the nodes boot (an SSM parameter, by default the Deep
//! Learning AMI's, or an AMI per region), the agent package nodes install
//! at boot when the image has no agent, and the root volume the image needs;
//! and a warning when the GPU image goes on nodes without NVIDIA GPUs.

use super::super::model::ImageFamily;
use super::super::source_map::SourceMap;
use super::super::suggestion::{backticked, did_you_mean};
use super::{At, Checker, is_aws_id, ticked};
use crate::catalog::{Accelerator, InstanceType};
use crate::region::Region;
use crate::spec::{AgentPackage, ImageSource, ImageSpec};
use node_contract::{PackageFormat, is_login_name};
use std::collections::BTreeMap;

/// The AWS Deep Learning Base AMI (Ubuntu 22.04, NVIDIA driver), through the
/// public SSM parameter AWS keeps pointing at the newest build:
/// <https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html>
pub const DEFAULT_SSM_PARAMETER: &str =
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id";

/// A CPU image to suggest for CPU-only clusters: Canonical's Ubuntu 22.04
/// parameter (<https://documentation.ubuntu.com/aws/en/latest/aws-how-to/instances/find-ubuntu-images/>).
const CPU_SSM_PARAMETER: &str = "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id";

/// Root volumes below this are too small for a Deep Learning AMI: its
/// snapshot alone is around 100 GiB, and the launch fails with a smaller volume.
const DLAMI_MIN_ROOT_GB: u32 = 100;

/// The image, in words, when it is a stock one (the default Deep Learning
/// AMI, or any public `/aws/service/` parameter) with no agent package:
/// without one to install at boot, formation fails at once ("the image has
/// no deeplearning agent"). Not a warning on a field: what it means depends
/// on what the user does (`synth deploy` stages the package itself, a
/// template for the console needs `synth stage`'s lines), so each command
/// says it in its own words ([`super::Loaded::missing_agent`]). The caller
/// asks only once the blueprint is otherwise right.
pub(crate) fn missing_agent(image: &ImageSpec, map: &SourceMap) -> Option<String> {
    const SSM: &str = "image.ssm_parameter";
    if image.agent_package.is_some() {
        return None;
    }
    let ImageSource::SsmParameter(p) = &image.source else {
        return None;
    };
    if !p.starts_with("/aws/service/") {
        return None;
    }
    Some(if map.contains(SSM) {
        format!("the stock public image {}", ticked(p))
    } else {
        "the default image (the stock Deep Learning AMI)".to_owned()
    })
}

/// What is wrong with an agent package URL, if anything.
fn package_url_problem(url: &str) -> Option<String> {
    if let Some(rest) = url.strip_prefix("s3://") {
        match rest.split_once('/') {
            Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
                let bucket_ok = (3..=63).contains(&bucket.len())
                    && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
                (!bucket_ok).then(|| format!("{} is not an S3 bucket name", ticked(bucket)))
            }
            _ => Some(format!("{} does not name an object: write `s3://BUCKET/KEY`", ticked(url))),
        }
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest.is_empty() || rest.starts_with('/')).then(|| format!("{} has no host", ticked(url)))
    } else {
        Some(format!("{} is neither an `s3://` nor an `https://` URL", ticked(url)))
    }
    .or_else(|| {
        url.chars()
            .any(|c| c.is_whitespace() || c.is_control() || "'\"`$\\".contains(c))
            .then(|| format!("{} has spaces, quotes, `$` or backslashes, which a URL does not need", ticked(url)))
    })
}

/// The OS family an SSM parameter path names, if it names one.
fn family_of(path: &str) -> Option<ImageFamily> {
    let p = path.to_ascii_lowercase();
    if p.contains("ubuntu") {
        Some(ImageFamily::Ubuntu)
    } else if p.contains("amazon-linux") || p.contains("al2") {
        Some(ImageFamily::AmazonLinux)
    } else {
        None
    }
}

impl Checker<'_> {
    /// The image; also whether it is the NVIDIA GPU Deep Learning AMI.
    pub(super) fn image(
        &mut self,
        image: Option<super::super::model::Image>,
        region: Option<Region>,
        targets: &[Region],
    ) -> (ImageSpec, bool) {
        let image = image.unwrap_or_default();
        if image.ssm_parameter.is_some() && image.ami.is_some() {
            self.error(
                "image",
                At::Key,
                "both `ssm_parameter` and `ami` are set; the image must come from one of them",
                "keep `ssm_parameter` to follow the newest image, or `ami` to pin exact AMI ids",
            );
        }
        let (source, inferred) = match (image.ssm_parameter, image.ami) {
            (Some(p), _) => {
                self.ssm_parameter(&p);
                let inferred = family_of(&p);
                (ImageSource::SsmParameter(p), inferred)
            }
            (None, Some(amis)) => (ImageSource::AmiMap(self.ami_map(amis, region, targets)), Some(ImageFamily::Ubuntu)),
            (None, None) => (ImageSource::SsmParameter(DEFAULT_SSM_PARAMETER.to_owned()), Some(ImageFamily::Ubuntu)),
        };
        let family = match (image.family, inferred) {
            (Some(f), _) | (None, Some(f)) => f,
            (None, None) => {
                if image.user.is_none() || image.root_device.is_none() {
                    self.warning(
                        "image.ssm_parameter",
                        At::Value,
                        "cannot tell the image's operating system from this parameter's path; assuming Ubuntu (user `ubuntu`, root device `/dev/sda1`)",
                        "set `image.family: amazon-linux` (or `ubuntu`) to say which it is",
                    );
                }
                ImageFamily::Ubuntu
            }
        };
        let (default_user, default_device) = match family {
            ImageFamily::Ubuntu => ("ubuntu", "/dev/sda1"),
            ImageFamily::AmazonLinux => ("ec2-user", "/dev/xvda"),
        };
        let user = image.user.unwrap_or_else(|| default_user.to_owned());
        if !is_login_name(&user) {
            self.error(
                "image.user",
                At::Value,
                format!("{} is not a valid login user name", ticked(&user)),
                "a Linux user name: lower-case letters, digits, `_` and `-`, starting with a letter or `_`, at most 32 characters (usually `ubuntu` or `ec2-user`)",
            );
        }
        let root_device = image.root_device.unwrap_or_else(|| default_device.to_owned());
        let device_ok = root_device
            .strip_prefix("/dev/")
            .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        if !device_ok {
            self.error(
                "image.root_device",
                At::Value,
                format!("{} is not a device name", ticked(&root_device)),
                "write the AMI's root device as shown by `aws ec2 describe-images`, for example `/dev/sda1` or `/dev/xvda`",
            );
        }
        let gpu_dlami = matches!(&source, ImageSource::SsmParameter(p)
            if p.contains("/deeplearning/") && (p.contains("gpu") || p.contains("nvidia")));
        let agent_package = self.agent_package(image.agent_package_url, image.agent_package_sha256);
        let package_format = match family {
            ImageFamily::Ubuntu => PackageFormat::Deb,
            ImageFamily::AmazonLinux => PackageFormat::Tarball,
        };
        (ImageSpec { source, user, root_device, package_format, agent_package }, gpu_dlami)
    }

    /// `agent_package_url` and `agent_package_sha256`: both or neither.
    fn agent_package(&mut self, url: Option<String>, sha256: Option<String>) -> Option<AgentPackage> {
        const URL: &str = "image.agent_package_url";
        const SHA: &str = "image.agent_package_sha256";
        // Whether each is absent or well-formed; a malformed one is reported here.
        let url_ok = match url.as_deref().and_then(package_url_problem) {
            Some(problem) => {
                self.error(URL, At::Value, problem, "write `s3://BUCKET/KEY` (the nodes may read exactly that object) or an `https://` URL of the package that `packaging/build` made");
                false
            }
            None => true,
        };
        let sha_ok = match sha256.as_deref() {
            Some(h) if !(h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit())) => {
                self.error(
                    SHA,
                    At::Value,
                    format!("{} is not a SHA-256 checksum ({} characters; it needs 64 hex digits)", ticked(h), h.chars().count()),
                    "copy the package's line from the SHA256SUMS that `packaging/build` writes, or run `sha256sum PACKAGE`",
                );
                false
            }
            _ => true,
        };
        match (url, sha256) {
            (Some(_), None) => {
                self.error(URL, At::Key, "`agent_package_url` is set without `agent_package_sha256`", "add `agent_package_sha256:` with the package's SHA-256 (`sha256sum PACKAGE`): nodes install only a package whose checksum matches");
                None
            }
            (None, Some(_)) => {
                self.error(SHA, At::Key, "`agent_package_sha256` is set without `agent_package_url`", "add `agent_package_url:` (s3:// or https://) with where nodes download the package, or remove the checksum");
                None
            }
            (Some(url), Some(sha256)) if url_ok && sha_ok => {
                Some(AgentPackage { url, sha256: sha256.to_ascii_lowercase() })
            }
            _ => None,
        }
    }

    fn ssm_parameter(&mut self, p: &str) {
        if !p.starts_with('/') || p.len() < 2 || p.chars().any(char::is_whitespace) {
            let help = if !p.starts_with('/') && !p.is_empty() && !p.chars().any(char::is_whitespace) {
                format!("a parameter path starts with `/`: write `/{p}`")
            } else {
                format!("a parameter path starts with `/` and has no spaces, for example `{DEFAULT_SSM_PARAMETER}`")
            };
            self.error("image.ssm_parameter", At::Value, format!("{} is not an SSM parameter path", ticked(p)), help);
        }
    }

    /// Checks every entry; returns the entries for the template's regions.
    fn ami_map(
        &mut self,
        amis: BTreeMap<String, String>,
        region: Option<Region>,
        targets: &[Region],
    ) -> BTreeMap<Region, String> {
        let mut out = BTreeMap::new();
        for (key, id) in &amis {
            let path = format!("image.ami.{key}");
            match key.parse::<Region>() {
                Ok(r) => {
                    if targets.contains(&r) {
                        out.insert(r, id.clone());
                    }
                }
                Err(_) => {
                    let codes = Region::ALL.map(Region::code);
                    let help = match did_you_mean(key, codes) {
                        Some(close) => format!("did you mean `{close}`?"),
                        None => format!("the keys of `image.ami` are region codes: {}", backticked(codes)),
                    };
                    self.error(&path, At::Key, format!("{} is not a supported region", ticked(key)), help);
                }
            }
            if !is_aws_id(id, "ami-") {
                self.error(
                    &path,
                    At::Value,
                    format!("{} is not an AMI id", ticked(id)),
                    "an AMI id is `ami-` followed by 8 or 17 lower-case hex digits, for example `ami-0123456789abcdef0`",
                );
            }
        }
        let missing: Vec<&str> = targets.iter().filter(|r| !out.contains_key(r)).map(|r| r.code()).collect();
        if !missing.is_empty() {
            let help = match region {
                Some(r) => format!("add `{r}: ami-...` under `image.ami`, or use `image.ssm_parameter`"),
                None => "AMI ids differ per region: add an id for each of them, pin one region with `region:`, or use `image.ssm_parameter`, which resolves in every region".to_owned(),
            };
            let message = if region.is_some() {
                format!("has no AMI for {}, the region the template is for", backticked(missing))
            } else {
                format!(
                    "has no AMI for {}; without `region:`, the template needs one for each of the five regions",
                    backticked(missing)
                )
            };
            self.error("image.ami", At::Key, message, help);
        }
        out
    }

    pub(super) fn root_volume(&mut self, written: Option<u32>, image: &ImageSpec) -> u32 {
        let gb = written.unwrap_or(200);
        if !(8..=16384).contains(&gb) {
            self.error(
                "storage.root_volume_gb",
                At::Value,
                format!("{gb} GiB is outside the allowed 8 to 16384"),
                "gp3 volumes are 1 to 16384 GiB and no Linux AMI fits in less than 8; the default is 200",
            );
        } else if gb < DLAMI_MIN_ROOT_GB
            && matches!(&image.source, ImageSource::SsmParameter(p) if p.contains("/deeplearning/"))
        {
            self.warning(
                "storage.root_volume_gb",
                At::Value,
                format!("{gb} GiB is likely smaller than the Deep Learning AMI's snapshot (about {DLAMI_MIN_ROOT_GB} GiB), and EC2 refuses to launch an instance whose root volume is smaller than its snapshot"),
                format!("set `root_volume_gb` to {DLAMI_MIN_ROOT_GB} or more, or use a smaller image"),
            );
        }
        gb
    }

    /// The default image is the NVIDIA GPU Deep Learning AMI: wasted (and
    /// large) on a cluster with no GPU, and wrong for Neuron accelerators.
    pub(super) fn gpu_image_on_cpus(
        &mut self,
        gpu_dlami: bool,
        master: Option<&InstanceType>,
        workers: Option<&InstanceType>,
    ) {
        let (Some(m), Some(w)) = (master, workers) else {
            return;
        };
        if !gpu_dlami {
            return;
        }
        const PATH: &str = "image.ssm_parameter";
        if !m.has_nvidia_gpus() && !w.has_nvidia_gpus() {
            let types = if m.name == w.name {
                format!("the master and workers (`{}`) have no NVIDIA GPU", m.name)
            } else {
                format!("neither `{}` nor `{}` has an NVIDIA GPU", m.name, w.name)
            };
            self.warning_near(
                PATH,
                "workers.instance_type",
                format!("the image is the NVIDIA GPU Deep Learning AMI, but {types}"),
                format!("for a CPU-only cluster, set `image.ssm_parameter: {CPU_SSM_PARAMETER}`, or choose GPU instance types"),
            );
        } else if let Some(t) = [w, m].into_iter().find(|t| t.accelerator == Accelerator::Neuron) {
            self.warning_near(
                PATH,
                "workers.instance_type",
                format!("the image is the NVIDIA GPU Deep Learning AMI, but `{}` has AWS Neuron accelerators, which need the Neuron SDK", t.name),
                "use a Neuron Deep Learning AMI through `image.ssm_parameter` (see https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{checked, fake};
    use super::*;
    use crate::catalog::Accelerator;

    #[test]
    fn families_are_inferred_from_parameter_paths() {
        assert_eq!(family_of(DEFAULT_SSM_PARAMETER), Some(ImageFamily::Ubuntu));
        assert_eq!(
            family_of("/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"),
            Some(ImageFamily::AmazonLinux)
        );
        assert_eq!(family_of("/my/images/latest"), None);
    }

    #[test]
    fn neuron_types_warn_about_the_nvidia_image() {
        let neuron = fake("trn1.test", true, true, Accelerator::Neuron);
        let gpu = fake("p3.test", false, true, Accelerator::Nvidia);
        let d =
            checked("workers:\n  instance_type: trn1.test\n", |c| c.gpu_image_on_cpus(true, Some(&gpu), Some(&neuron)));
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("Neuron"), "{}", d[0].message);
        assert_eq!(d[0].line, 2);
    }
}
