//! The image a stack keeps: the AMI id its nodes were created with,
//! passed unchanged on every update unless the user asks for the newest.
//!
//! With an image given as an SSM parameter (the default, AWS's Deep
//! Learning AMI parameter), CloudFormation resolves the parameter again at
//! every update, so once AWS publishes a newer image any update (a resize a
//! week later) would change the master's launch template and replace the
//! master. The template records the AMI it resolved in an output
//! ([`IMAGE_OUTPUT`], `Ref ImageId`, which AWS and the local AWS both give
//! as the resolved id); the next deploy reads it from the stack and sends
//! the update with `ImageId` as that plain AMI id (the parameter's type
//! made `AWS::EC2::Image::Id`), which resolves to what the master runs:
//! the launch template does not change. `--update-image` sends the SSM
//! parameter as compiled, so the master boots the image it names now,
//! which replaces it.

use std::borrow::Cow;

use serde_json::Value as Json;

use super::port::Stack;
use super::prepare::Prepared;
pub(crate) use crate::stack::IMAGE_OUTPUT;

/// The stack parameter that holds the image.
const IMAGE_PARAMETER: &str = "ImageId";

/// Whether the template's image is an SSM parameter, which CloudFormation
/// resolves again at every update.
pub(crate) fn is_ssm(template: &Json) -> bool {
    template
        .pointer("/Parameters/ImageId/Type")
        .and_then(Json::as_str)
        .is_some_and(|t| t.starts_with("AWS::SSM::Parameter::Value"))
}

/// The AMI id the stack recorded at create (or at the last update).
pub(crate) fn recorded(stack: &Stack) -> Option<&str> {
    stack.outputs.iter().find(|o| o.key == IMAGE_OUTPUT).map(|o| o.value.as_str()).filter(|v| v.starts_with("ami-"))
}

/// What an update of `existing` sends: `p`, or `p` with the image the
/// stack was created with ([`keep`]) unless [`Prepared::update_image`];
/// the AMI kept, if one was.
pub(crate) fn for_update<'a>(p: &'a Prepared, existing: &Stack) -> (Cow<'a, Prepared>, Option<String>) {
    match keep(p, existing).filter(|_| !p.update_image) {
        Some((kept, ami)) => (Cow::Owned(kept), Some(ami)),
        None => (Cow::Borrowed(p), None),
    }
}

/// `p` for an update of `existing` that keeps its image: when the image is
/// an SSM parameter (compiled, or a path passed as `--parameter ImageId=`)
/// and the stack recorded the AMI it resolved, the template's `ImageId`
/// becomes that AMI id. `None` when there is nothing to keep: an image
/// that is an AMI id already, an explicit `ImageId=ami-...`, or a stack
/// from a synth that did not record its image.
pub(crate) fn keep(p: &Prepared, existing: &Stack) -> Option<(Prepared, String)> {
    let ami = recorded(existing)?;
    if !is_ssm(&p.template) || p.parameters.get(IMAGE_PARAMETER).is_some_and(|v| v.starts_with("ami-")) {
        return None;
    }
    let mut template = p.template.clone();
    let parameter = template.pointer_mut("/Parameters/ImageId").and_then(Json::as_object_mut)?;
    parameter.insert("Type".into(), "AWS::EC2::Image::Id".into());
    parameter.insert("Default".into(), ami.into());
    parameter.insert(
        "Description".into(),
        format!(
            "AMI id every node boots: the image the stack was created with, kept by synth deploy \
             (synth deploy --update-image takes the one the SSM parameter names now). {}",
            parameter.get("Description").and_then(Json::as_str).unwrap_or_default()
        )
        .trim_end()
        .into(),
    );
    let mut parameters = p.parameters.clone();
    parameters.insert(IMAGE_PARAMETER.to_owned(), ami.to_owned());
    let mut kept = Prepared::new(&p.stack, template, parameters);
    kept.update_image = p.update_image;
    Some((kept, ami.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::deploy::port::Output;

    fn prepared(parameters: &[(&str, &str)]) -> Prepared {
        let spec = crate::stack::tests::sample();
        let template = serde_json::from_str(&crate::stack::compile(&spec).render().unwrap().json).unwrap();
        let parameters: BTreeMap<String, String> =
            parameters.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Prepared::new("demo", template, parameters)
    }

    fn stack(image: Option<&str>) -> Stack {
        let outputs = image
            .map(|v| Output { key: IMAGE_OUTPUT.into(), value: v.into(), description: None })
            .into_iter()
            .collect();
        Stack { name: "demo".into(), outputs, ..Stack::default() }
    }

    /// The compiled template's SSM image (or a path passed as a parameter)
    /// becomes the AMI the stack recorded; the template's output still
    /// records it (`Ref ImageId`), so the next update keeps it too.
    #[test]
    fn an_update_keeps_the_recorded_ami() {
        for given in [&[][..], &[("ImageId", "/my/ssm/parameter")][..]] {
            let p = prepared(given);
            assert!(is_ssm(&p.template));
            let (kept, ami) = keep(&p, &stack(Some("ami-0aaa"))).expect("kept");
            assert_eq!(ami, "ami-0aaa");
            assert!(!is_ssm(&kept.template));
            assert_eq!(kept.template["Parameters"]["ImageId"]["Type"], "AWS::EC2::Image::Id");
            assert_eq!(kept.template["Parameters"]["ImageId"]["Default"], "ami-0aaa");
            assert_eq!(kept.parameters["ImageId"], "ami-0aaa");
            assert_eq!(kept.template["Outputs"][IMAGE_OUTPUT]["Value"], serde_json::json!({"Ref": "ImageId"}));
            assert!(kept.compact.contains("\"ami-0aaa\""), "what is sent is the kept template");
        }
    }

    /// Nothing to keep: no recorded image (an older stack), an explicit
    /// AMI id, or an image that is not an SSM parameter.
    #[test]
    fn an_explicit_ami_or_an_unrecorded_stack_is_left_alone() {
        assert!(keep(&prepared(&[]), &stack(None)).is_none());
        assert!(keep(&prepared(&[]), &stack(Some("/not/an/ami"))).is_none());
        assert!(keep(&prepared(&[("ImageId", "ami-0bbb")]), &stack(Some("ami-0aaa"))).is_none());
        let (kept, _) = keep(&prepared(&[]), &stack(Some("ami-0aaa"))).unwrap();
        assert!(keep(&kept, &stack(Some("ami-0aaa"))).is_none(), "its image is an AMI id already");
    }
}
