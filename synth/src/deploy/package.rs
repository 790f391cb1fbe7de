//! What makes a file an agent package, checked before anything is uploaded
//! (`synth stage`, `synth deploy --agent-package`): a file that is not one
//! would be staged and the nodes that download it could not boot.
//!
//! The two kinds `packaging/build` makes:
//! - a Debian package: an `ar` archive whose first member is
//!   `debian-binary` (`2.x`), then `control.tar[.gz|.xz|.zst]` and
//!   `data.tar[...]`, each member within the file. The control member's
//!   `control` file must name the package `deeplearning-agent`: read when
//!   it is gzip (`dpkg-deb -Zgzip`) or xz (cargo-deb's and dpkg-deb's
//!   default); a zstd one (Ubuntu's dpkg-deb default) is checked for its
//!   structure only (no zstd decoder is built);
//! - the tarball (gzip of a tar): it must hold `<dir>/bin/agent`, a
//!   non-empty regular file, as `packaging/build` lays it out.
//!
//! Nothing here touches the network; the bytes are already read. The tar
//! archives are read by the `tar` crate, xz by `lzma-rs` (pure Rust), gzip
//! by `flate2`; every read is bounded.

use std::io::Read;

use node_contract::PackageFormat;

/// The name every agent package's control file gives (cargo-deb's, from
/// `agent/Cargo.toml`).
const PACKAGE_NAME: &str = "deeplearning-agent";
/// Decompressed bytes read at most while looking for the agent in a
/// tarball (the debug build's tarball is under 300 MB unpacked).
const MAX_UNPACKED: u64 = 2 << 30;
/// Decompressed bytes of a Debian package's control member read at most
/// (cargo-deb's is a few KiB).
const MAX_CONTROL: u64 = 1 << 20;

/// The kind of agent package `bytes` (read from `shown`) is, or why it is
/// none.
pub(crate) fn check(bytes: &[u8], shown: &str) -> Result<PackageFormat, String> {
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
    let is_control = |path: &str| path.trim_start_matches("./") == "control";
    let control = match control_name.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "gz" => tar_file(flate2::read::GzDecoder::new(*control), "gzip", is_control, MAX_CONTROL)?,
        "xz" => {
            let tar = unxz(control, MAX_CONTROL).map_err(|e| format!("its {control_name} is damaged ({e})"))?;
            tar_file(&tar[..], "xz", is_control, MAX_CONTROL)?
        }
        // zstd: the structure above is what is checked.
        _ => return Ok(()),
    };
    let control = control.ok_or("the Debian package's control member has no control file")?;
    let text = String::from_utf8_lossy(&control);
    let package = text.lines().find_map(|l| l.strip_prefix("Package:")).map(str::trim);
    if package != Some(PACKAGE_NAME) {
        return Err(format!(
            "it is the Debian package {}, not {PACKAGE_NAME}",
            package.map_or_else(|| "with no name".to_owned(), |p| format!("`{p}`"))
        ));
    }
    Ok(())
}

/// The xz stream `xz` decompressed, at most `limit` bytes of it.
fn unxz(xz: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    /// A sink that refuses to grow past its limit (so a small member that
    /// unpacks to gigabytes costs no memory).
    struct Bounded(Vec<u8>, u64);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() as u64 + buf.len() as u64 > self.1 {
                return Err(std::io::Error::other(format!("it unpacks to more than {} bytes", self.1)));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new(), limit);
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(xz), &mut out).map_err(|e| e.to_string())?;
    Ok(out.0)
}

fn tarball(bytes: &[u8]) -> Result<(), String> {
    let agent = |path: &str| {
        let path = path.trim_start_matches("./");
        path.split_once('/').is_some_and(|(_, rest)| rest == "bin/agent")
    };
    match tar_file(flate2::read::GzDecoder::new(bytes), "gzip", agent, MAX_UNPACKED)? {
        Some(content) if !content.is_empty() => Ok(()),
        Some(_) => Err("its bin/agent is empty".to_owned()),
        None => Err("the .tar.gz holds no <dir>/bin/agent".to_owned()),
    }
}

/// The content of the first regular file of the tar read from `unpacked`
/// (a decoder of `format`) whose path `wanted` accepts, reading at most
/// `limit` unpacked bytes; `None` when there is none within them.
fn tar_file(
    unpacked: impl Read,
    format: &str,
    wanted: impl Fn(&str) -> bool,
    limit: u64,
) -> Result<Option<Vec<u8>>, String> {
    let damaged = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
            format!("its {format} data is damaged ({e})")
        }
        _ => format!("it is not a tar archive ({e})"),
    };
    let mut archive = tar::Archive::new(unpacked.take(limit));
    let entries = archive.entries().map_err(damaged)?;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            // Cut at the limit, or a tar without its closing blocks.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(damaged(e)),
        };
        let path = entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        if entry.header().entry_type().is_file() && wanted(&path) {
            let mut content = Vec::new();
            entry.read_to_end(&mut content).map_err(damaged)?;
            return Ok(Some(content));
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// A tar of `files` (path, content).
    fn tar(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            builder.append_data(&mut header, path, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    /// A tar of `files` (path, content), gzipped.
    pub(crate) fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar(files)).unwrap();
        gz.finish().unwrap()
    }

    /// `bytes` as an xz stream.
    fn xz(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut std::io::BufReader::new(bytes), &mut out).unwrap();
        out
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

    fn control(name: &str) -> String {
        format!("Package: {name}\nVersion: 0.1.0-1\nArchitecture: amd64\n")
    }

    /// A Debian package named `name`, with a gzip control member.
    pub(crate) fn deb_named(name: &str) -> Vec<u8> {
        let control = tar_gz(&[("./control", control(name).as_bytes())]);
        ar(&[("debian-binary", b"2.0\n"), ("control.tar.gz", &control), ("data.tar.xz", b"\xfd7zXZ\0 data")])
    }

    /// A Debian package named `name` as cargo-deb writes one: xz members.
    fn deb_xz_named(name: &str) -> Vec<u8> {
        let control = xz(&tar(&[("./control", control(name).as_bytes()), ("./md5sums", b"")]));
        let data = xz(&tar(&[("./usr/bin/agent", b"\x7fELF...")]));
        ar(&[("debian-binary", b"2.0\n"), ("control.tar.xz", &control), ("data.tar.xz", &data)])
    }

    #[test]
    fn the_packages_packaging_build_makes_pass() {
        assert_eq!(check(&deb_named("deeplearning-agent"), "a.deb"), Ok(PackageFormat::Deb));
        assert_eq!(check(&deb_xz_named("deeplearning-agent"), "a.deb"), Ok(PackageFormat::Deb));
        // A zstd control member (Ubuntu's dpkg-deb): its structure only.
        let zst = ar(&[("debian-binary", b"2.0\n"), ("control.tar.zst", b"\x28\xb5\x2f\xfd"), ("data.tar.zst", b"x")]);
        assert_eq!(check(&zst, "a.deb"), Ok(PackageFormat::Deb));
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
        let e = refused(&deb_xz_named("curl"));
        assert!(e.contains("it is the Debian package `curl`, not deeplearning-agent"), "{e}");
        let junk_xz = ar(&[("debian-binary", b"2.0\n"), ("control.tar.xz", b"\xfd7zXZ\0 junk"), ("data.tar.xz", b"x")]);
        let e = refused(&junk_xz);
        assert!(e.contains("its control.tar.xz is damaged"), "{e}");
        // A control member that unpacks past its bound is refused, not read on.
        let big = xz(&vec![0u8; (MAX_CONTROL + 1) as usize]);
        let e = refused(&ar(&[("debian-binary", b"2.0\n"), ("control.tar.xz", &big), ("data.tar.xz", b"x")]));
        assert!(e.contains("unpacks to more than"), "{e}");
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
