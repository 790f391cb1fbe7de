//! What makes a file an agent package, checked before anything is uploaded
//! (`synth stage`, `synth deploy --agent-package`): a file that is not one
//! would be staged and the nodes that download it could not boot.
//!
//! The two kinds `packaging/build` makes:
//! - a Debian package: an `ar` archive whose first member is
//!   `debian-binary` (`2.x`), then `control.tar[.gz|.xz|.zst]` and
//!   `data.tar[...]`, each member within the file. When the control member
//!   is gzip (`dpkg-deb -Zgzip`) its `control` file must name the package
//!   `deeplearning-agent`; cargo-deb writes xz, which synth does not
//!   decompress (no xz decoder is built), so there the structure is what is
//!   checked;
//! - the tarball (gzip of a tar): it must hold `<dir>/bin/agent`, a
//!   non-empty regular file, as `packaging/build` lays it out.
//!
//! Nothing here touches the network; the bytes are already read.

use std::io::Read;

use node_contract::PackageFormat;

/// The name every agent package's control file gives (cargo-deb's, from
/// `agent/Cargo.toml`).
const PACKAGE_NAME: &str = "deeplearning-agent";
/// Decompressed bytes read at most while looking for the agent in a
/// tarball (the debug build's tarball is under 300 MB unpacked).
const MAX_UNPACKED: u64 = 2 << 30;

/// The kind of agent package `bytes` (read from `shown`) is, or why it is
/// none.
pub fn check(bytes: &[u8], shown: &str) -> Result<PackageFormat, String> {
    let none = |why: String| {
        format!(
            "{shown} is not an agent package: {why}; it must be the Debian package (.deb) or the .tar.gz \
             that `packaging/build` makes"
        )
    };
    if bytes.starts_with(b"!<arch>\n") {
        deb(bytes).map(|()| PackageFormat::Deb).map_err(none)
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        tarball(bytes).map(|()| PackageFormat::Tarball).map_err(none)
    } else {
        Err(none(format!("it is {} and is neither an ar archive nor gzip", size(bytes.len()))))
    }
}

fn size(n: usize) -> String {
    if n == 1 { "1 byte long".to_owned() } else { format!("{n} bytes long") }
}

/// One member of an `ar` archive: its name and content.
fn ar_members(bytes: &[u8]) -> Result<Vec<(String, &[u8])>, String> {
    let mut members = Vec::new();
    let mut at = 8;
    while at < bytes.len() {
        let header = bytes.get(at..at + 60).ok_or("the ar archive ends inside a member's header")?;
        if &header[58..60] != b"`\n" {
            return Err("a member header of the ar archive is damaged".to_owned());
        }
        let name = String::from_utf8_lossy(&header[..16]).trim_end().trim_end_matches('/').to_owned();
        let size: usize = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("the ar member {name:?} has no valid size"))?;
        let start = at + 60;
        let content = start
            .checked_add(size)
            .and_then(|end| bytes.get(start..end))
            .ok_or_else(|| format!("the ar member {name:?} runs past the end of the file (cut short?)"))?;
        members.push((name, content));
        at = start + size + size % 2;
    }
    Ok(members)
}

fn deb(bytes: &[u8]) -> Result<(), String> {
    let members = ar_members(bytes)?;
    match members.first() {
        Some((name, content)) if name == "debian-binary" && content.starts_with(b"2.") => {}
        _ => return Err("it is an ar archive, but not a Debian package (no `debian-binary` 2.x first)".to_owned()),
    }
    let find = |prefix: &str| members.iter().find(|(n, _)| n.starts_with(prefix));
    let Some((control_name, control)) = find("control.tar") else {
        return Err("the Debian package has no control member".to_owned());
    };
    if find("data.tar").is_none() {
        return Err("the Debian package has no data member".to_owned());
    }
    if control_name.ends_with(".gz") {
        let control = tar_file(control, |path| path.trim_start_matches("./") == "control", 1 << 20)?
            .ok_or("the Debian package's control member has no control file")?;
        let text = String::from_utf8_lossy(&control);
        let package = text.lines().find_map(|l| l.strip_prefix("Package:")).map(str::trim);
        if package != Some(PACKAGE_NAME) {
            return Err(format!(
                "it is the Debian package {}, not {PACKAGE_NAME}",
                package.map_or_else(|| "with no name".to_owned(), |p| format!("`{p}`"))
            ));
        }
    }
    Ok(())
}

fn tarball(bytes: &[u8]) -> Result<(), String> {
    let agent = |path: &str| {
        let path = path.trim_start_matches("./");
        path.split_once('/').is_some_and(|(_, rest)| rest == "bin/agent")
    };
    match tar_file(bytes, agent, MAX_UNPACKED)? {
        Some(content) if !content.is_empty() => Ok(()),
        Some(_) => Err("its bin/agent is empty".to_owned()),
        None => Err("the .tar.gz holds no <dir>/bin/agent".to_owned()),
    }
}

/// The content of the first regular file of the gzipped tar `gz` whose
/// path `wanted` accepts, reading at most `limit` unpacked bytes.
fn tar_file(gz: &[u8], wanted: impl Fn(&str) -> bool, limit: u64) -> Result<Option<Vec<u8>>, String> {
    let mut tar = flate2::read::GzDecoder::new(gz).take(limit);
    let mut header = [0u8; 512];
    loop {
        if let Err(e) = tar.read_exact(&mut header) {
            return match e.kind() {
                // A tar without its two zero blocks, or cut at the limit.
                std::io::ErrorKind::UnexpectedEof => Ok(None),
                _ => Err(format!("its gzip data is damaged ({e})")),
            };
        }
        if header.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let text = |range: std::ops::Range<usize>| {
            let field = &header[range];
            let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
            String::from_utf8_lossy(&field[..end]).into_owned()
        };
        let size = u64::from_str_radix(text(124..136).trim(), 8).map_err(|_| "it is not a tar archive".to_owned())?;
        let (name, prefix) = (text(0..100), text(345..500));
        let path = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let regular = matches!(header[156], b'0' | 0);
        let padded = size.div_ceil(512) * 512;
        if regular && wanted(&path) {
            let mut content = Vec::new();
            (&mut tar).take(size).read_to_end(&mut content).map_err(|e| format!("its gzip data is damaged ({e})"))?;
            return Ok(Some(content));
        }
        let skipped = std::io::copy(&mut (&mut tar).take(padded), &mut std::io::sink())
            .map_err(|e| format!("its gzip data is damaged ({e})"))?;
        if skipped < padded {
            return Ok(None);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// A tar of `files` (path, content), gzipped.
    pub(crate) fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut tar = Vec::new();
        for (path, content) in files {
            let mut header = [0u8; 512];
            header[..path.len()].copy_from_slice(path.as_bytes());
            header[100..107].copy_from_slice(b"0000755");
            header[124..135].copy_from_slice(format!("{:011o}", content.len()).as_bytes());
            header[156] = b'0';
            header[148..156].copy_from_slice(b"        ");
            let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
            header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
            tar.extend_from_slice(&header);
            tar.extend_from_slice(content);
            tar.resize(tar.len().div_ceil(512) * 512, 0);
        }
        tar.extend_from_slice(&[0; 1024]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    /// An ar archive of `members`.
    pub(crate) fn ar(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = b"!<arch>\n".to_vec();
        for (name, content) in members {
            out.extend_from_slice(
                format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", name, 0, 0, 0, 100644, content.len()).as_bytes(),
            );
            out.extend_from_slice(content);
            if content.len() % 2 == 1 {
                out.push(b'\n');
            }
        }
        out
    }

    /// A Debian package named `name`, with a gzip control member.
    pub(crate) fn deb_named(name: &str) -> Vec<u8> {
        let control = format!("Package: {name}\nVersion: 0.1.0-1\nArchitecture: amd64\n");
        let control = tar_gz(&[("./control", control.as_bytes())]);
        ar(&[("debian-binary", b"2.0\n"), ("control.tar.gz", &control), ("data.tar.xz", b"\xfd7zXZ\0 data")])
    }

    #[test]
    fn the_packages_packaging_build_makes_pass() {
        assert_eq!(check(&deb_named("deeplearning-agent"), "a.deb"), Ok(PackageFormat::Deb));
        // cargo-deb's xz members are checked for their structure only.
        let xz = ar(&[("debian-binary", b"2.0\n"), ("control.tar.xz", b"\xfd7zXZ"), ("data.tar.xz", b"\xfd7zXZ")]);
        assert_eq!(check(&xz, "a.deb"), Ok(PackageFormat::Deb));
        let tarball = tar_gz(&[
            ("deeplearning-agent-0.1.0-x86_64/install.sh", b"#!/bin/sh\n"),
            ("deeplearning-agent-0.1.0-x86_64/bin/agent", b"\x7fELF..."),
        ]);
        assert_eq!(check(&tarball, "a.tar.gz"), Ok(PackageFormat::Tarball));
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        let refused = |bytes: &[u8]| check(bytes, "x").unwrap_err();
        let e = refused(b"abc");
        assert!(e.starts_with("x is not an agent package: it is 3 bytes long and is neither"), "{e}");
        assert!(refused(b"root:x:0:0:root:/root:/bin/bash\n").contains("neither an ar archive nor gzip"));
        assert!(refused(&deb_named("curl")).contains("it is the Debian package `curl`, not deeplearning-agent"));
        let cut = deb_named("deeplearning-agent");
        assert!(refused(&cut[..cut.len() - 5]).contains("runs past the end of the file"));
        assert!(refused(&ar(&[("hello.o", b"x")])).contains("not a Debian package"));
        assert!(refused(&ar(&[("debian-binary", b"2.0\n"), ("data.tar.xz", b"x")])).contains("no control member"));
        let no_agent = tar_gz(&[("d/bin/trainer", b"x")]);
        assert!(refused(&no_agent).contains("holds no <dir>/bin/agent"));
        assert!(refused(&tar_gz(&[("d/bin/agent", b"")])).contains("bin/agent is empty"));
        assert!(refused(&[0x1f, 0x8b, 0, 0]).starts_with("x is not an agent package: "));
    }
}
