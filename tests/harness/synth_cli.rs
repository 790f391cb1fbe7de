//! `synth`, the program, run as a user runs it, against the local AWS.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::LocalAws;

/// The `synth` binary: `SYNTH_BIN`, else the one next to the test
/// executable's profile directory (`cargo build -p synth` with the same
/// `CARGO_TARGET_DIR`).
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SYNTH_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test executable");
    let bin = exe.parent().and_then(Path::parent).expect("a target dir").join("synth");
    assert!(
        bin.exists(),
        "{} is missing: `cargo build -p synth` (same CARGO_TARGET_DIR), or set SYNTH_BIN",
        bin.display()
    );
    bin
}

/// A `synth` command in the repository root with `aws`'s endpoint, signing
/// as the IAM user `user` (the deploying user, made on first use with an
/// administrator policy: `LocalAws::user`; the launcher logs its calls with
/// `principal` `user/<user>`), and nothing from the user's AWS files.
pub fn command(aws: &LocalAws, user: &str, args: &[&str]) -> Command {
    let key = aws.user(user).unwrap_or_else(|e| panic!("the local AWS makes IAM user {user}: {e}"));
    command_as(aws, &key, args)
}

/// A `synth` command as [`command`] makes it, signing with the access key
/// `key` (id, secret), e.g. of a user made by `LocalAws::user_with_policy`.
pub fn command_as(aws: &LocalAws, (key, secret): &(String, String), args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.current_dir(crate::repo_root()).args(args);
    for (k, v) in aws.env() {
        cmd.env(k, v);
    }
    cmd.env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null());
    cmd
}

/// The bytes of a Debian package as cargo-deb lays one out (`debian-binary`,
/// `control.tar.xz` whose `control` names `deeplearning-agent`,
/// `data.tar.xz`), with a placeholder data member: enough for synth's check
/// of an agent package (which reads the control member, not the data), for
/// the tests whose nodes never install it.
pub fn placeholder_deb() -> Vec<u8> {
    let control = b"Package: deeplearning-agent\nVersion: 0.1.0-1\nArchitecture: amd64\n";
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(control.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, "./control", &control[..]).expect("a tar in memory");
    let tar = tar.into_inner().expect("a tar in memory");
    let mut control_xz = Vec::new();
    lzma_rs::xz_compress(&mut std::io::BufReader::new(&tar[..]), &mut control_xz).expect("xz in memory");
    let mut out = b"!<arch>\n".to_vec();
    let members: [(&str, &[u8]); 3] = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", &control_xz),
        ("data.tar.xz", b"\xfd7zXZ\0 placeholder data, bytes with a checksum"),
    ];
    for (name, content) in members {
        out.extend_from_slice(
            format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, 0, 100644, content.len()).as_bytes(),
        );
        out.extend_from_slice(content);
        if content.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// The placeholder passes synth's own check, as the real package does
    /// (`packaging/test`): the tests that stage it test the upload, not a
    /// refusal.
    #[test]
    fn the_placeholder_deb_passes_synths_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deeplearning-agent_0.1.0-1_amd64.deb");
        std::fs::write(&path, super::placeholder_deb()).unwrap();
        let out = std::process::Command::new(super::bin()).args(["stage", "--check"]).arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("a Debian package (deeplearning-agent)"), "{text}");
    }
}
