//! The scratch volume made for real, on loop devices standing in for NVMe
//! instance store drives: the agent's own discovery, plan and executor
//! (`agent::scratch::prepare` with the real programs) run against a root
//! whose `/sys/block` is this machine's, except that the test's loop
//! devices carry the instance store's NVMe model ("Amazon EC2 NVMe Instance
//! Storage") and `/proc` is this machine's. The volume is mounted under a
//! temp dir, never on the host's `/scratch`.
//!
//! Needs root (loop devices, mdadm, mount) and mdadm (scripts/test installs
//! it). Striping needs the kernel's md RAID 0 driver: on a kernel without
//! md (no `/proc/mdstat` even after `modprobe raid0`, as on the project's
//! Firecracker build machines) the striping test checks the other side of
//! it instead, that the agent reports mdadm's failure with its stderr and
//! touches nothing, and says so on stderr.
//!
//! Every loop device, mount and array is undone by a `Drop` guard, also
//! when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use agent::scratch::{Outcome, Plan, System, discovery::INSTANCE_STORE_MODEL};
use e2e::netns::run;
use e2e::{Error, TestResult};
use node_contract::data::Scratch;

/// Loop devices over sparse files, the mounts on them and any md array
/// built on them; all undone on drop.
struct Drives {
    dir: tempfile::TempDir,
    loops: Vec<String>,
    mounts: Vec<PathBuf>,
}

impl Drives {
    /// `count` loop devices of `mib` MiB each.
    fn attach(count: usize, mib: u64) -> e2e::Result<Drives> {
        let dir = tempfile::tempdir().map_err(Error::io("creating a temp dir", "/tmp"))?;
        let mut drives = Drives { dir, loops: Vec::new(), mounts: Vec::new() };
        for i in 0..count {
            let file = drives.dir.path().join(format!("drive{i}.img"));
            let f = std::fs::File::create(&file).map_err(Error::io("creating a drive image", &file))?;
            f.set_len(mib * 1024 * 1024).map_err(Error::io("sizing a drive image", &file))?;
            let dev = run("losetup", &["--find", "--show", &file.to_string_lossy()])?.trim().to_owned();
            drives.loops.push(dev);
        }
        Ok(drives)
    }

    fn names(&self) -> Vec<String> {
        self.loops.iter().map(|l| l.trim_start_matches("/dev/").to_owned()).collect()
    }

    /// The arrays built on the loop devices now (their `holders`).
    fn arrays(&self) -> Vec<String> {
        let mut arrays: Vec<String> = self
            .names()
            .iter()
            .flat_map(|n| std::fs::read_dir(format!("/sys/block/{n}/holders")).into_iter().flatten())
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        arrays.sort();
        arrays.dedup();
        arrays
    }
}

impl Drop for Drives {
    fn drop(&mut self) {
        for mount in self.mounts.iter().rev() {
            let _ = run("umount", &[&mount.to_string_lossy()]);
        }
        for array in self.arrays() {
            let _ = run("mdadm", &["--stop", &format!("/dev/{array}")]);
        }
        for dev in &self.loops {
            let _ = run("losetup", &["-d", dev]);
        }
    }
}

/// A root for the agent: `/proc` is this machine's; `/sys/block` mirrors
/// this machine's (links to every device), except the test's loop devices,
/// which get the NVMe instance store model. Made again before every run,
/// so arrays created since are seen.
fn agent_root(root: &Path, drives: &Drives) -> e2e::Result<()> {
    let block = root.join("sys/block");
    let _ = std::fs::remove_dir_all(root.join("sys"));
    std::fs::create_dir_all(&block).map_err(Error::io("creating the fake /sys/block", &block))?;
    if !root.join("proc").exists() {
        std::os::unix::fs::symlink("/proc", root.join("proc")).map_err(Error::io("linking /proc", root))?;
    }
    let ours = drives.names();
    for entry in std::fs::read_dir("/sys/block").map_err(Error::io("reading /sys/block", "/sys/block"))? {
        let name = entry.map_err(Error::io("reading /sys/block", "/sys/block"))?.file_name();
        let name = name.to_string_lossy();
        let real = Path::new("/sys/block").join(&*name);
        let fake = block.join(&*name);
        let io = Error::io("building the fake /sys/block", &fake);
        if !ours.iter().any(|o| *o == name) {
            std::os::unix::fs::symlink(&real, &fake).map_err(io)?;
            continue;
        }
        std::fs::create_dir_all(fake.join("device")).map_err(Error::io("building the fake /sys/block", &fake))?;
        for file in ["dev", "size", "holders", "slaves"] {
            std::os::unix::fs::symlink(real.join(file), fake.join(file))
                .map_err(Error::io("building the fake /sys/block", &fake))?;
        }
        std::fs::write(fake.join("device/model"), format!("{INSTANCE_STORE_MODEL:<40}\n"))
            .map_err(Error::io("building the fake /sys/block", &fake))?;
    }
    std::fs::create_dir_all(root.join("etc")).map_err(Error::io("creating etc", root))?;
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nubuntu:x:4242:4243::/home/ubuntu:/bin/bash\n",
    )
    .map_err(Error::io("writing passwd", root))?;
    Ok(())
}

fn setup() -> e2e::Result<()> {
    e2e::require_root()?;
    if run("mdadm", &["--version"]).is_err() {
        return Err(Error::Setup(
            "the scratch tests need mdadm: apt-get install mdadm (scripts/test installs it)".into(),
        ));
    }
    Ok(())
}

/// The size of the file system mounted at `target`, in bytes.
fn fs_bytes(target: &Path) -> e2e::Result<u64> {
    let out = run("df", &["-B1", "--output=size", &target.to_string_lossy()])?;
    out.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| Error::Unexpected { what: "df".into(), detail: out.clone() })
}

/// Whether this machine's mountinfo lists a mount at `target`.
fn mounted(target: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*target.to_string_lossy()))
}

fn check(what: &str, ok: bool, detail: impl std::fmt::Debug) -> e2e::Result<()> {
    if ok { Ok(()) } else { Err(Error::Unexpected { what: what.into(), detail: format!("{detail:?}") }) }
}

/// One drive: formatted and mounted as it is; a second run keeps it; after
/// an unmount (a reboot that kept the drive) it is mounted again, not
/// formatted, and the file written before is still there.
#[test]
fn a_single_drive_is_formatted_mounted_and_kept() -> TestResult {
    setup()?;
    let root = tempfile::tempdir().map_err(Error::io("creating a temp dir", "/tmp"))?;
    let mut drives = Drives::attach(1, 512)?;
    let scratch = Scratch { mount: "/scratch".into() };
    let target = root.path().join("scratch");
    agent_root(root.path(), &drives)?;
    drives.mounts.push(target.clone());

    let started = Instant::now();
    let (outcome, plan) = agent::scratch::prepare(root.path(), &scratch, "ubuntu", &System).map_err(setup_error)?;
    eprintln!("one 512 MiB loop drive: formatted and mounted in {} ms", started.elapsed().as_millis());
    check("the plan", matches!(&plan, Plan::Assemble { array: None, .. }), &plan)?;
    check("the outcome", matches!(outcome, Outcome::Mounted { .. }), &outcome)?;
    check("the mount", mounted(&target), &target)?;
    let bytes = fs_bytes(&target)?;
    check("the file system's size", bytes > 400 * 1024 * 1024 && bytes <= 512 * 1024 * 1024, bytes)?;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&target).map_err(Error::io("stat", &target))?;
    check("the owner", (meta.uid(), meta.gid(), meta.mode() & 0o7777) == (4242, 4243, 0o755), meta.mode())?;
    std::fs::write(target.join("kept"), "data").map_err(Error::io("writing on scratch", &target))?;

    agent_root(root.path(), &drives)?;
    let (_, again) = agent::scratch::prepare(root.path(), &scratch, "ubuntu", &System).map_err(setup_error)?;
    check("the second plan", matches!(again, Plan::AlreadyMounted { .. }), &again)?;

    run("umount", &[&target.to_string_lossy()])?;
    agent_root(root.path(), &drives)?;
    let (_, after) = agent::scratch::prepare(root.path(), &scratch, "ubuntu", &System).map_err(setup_error)?;
    check("the plan after the unmount", matches!(after, Plan::Assemble { .. }), &after)?;
    let kept = std::fs::read_to_string(target.join("kept")).unwrap_or_default();
    check("the file written before", kept == "data", kept)?;
    Ok(())
}

/// Three drives striped with mdadm RAID 0 into one volume of their summed
/// size; a second run changes nothing and the file written before
/// survives. On a kernel without md: mdadm's failure, with its stderr, and
/// nothing mounted or formatted.
#[test]
fn drives_are_striped_into_one_volume() -> TestResult {
    setup()?;
    let _ = run("modprobe", &["raid0"]);
    let has_md = Path::new("/proc/mdstat").exists();
    let root = tempfile::tempdir().map_err(Error::io("creating a temp dir", "/tmp"))?;
    let mut drives = Drives::attach(3, 512)?;
    let scratch = Scratch { mount: "/scratch".into() };
    let target = root.path().join("scratch");
    agent_root(root.path(), &drives)?;
    drives.mounts.push(target.clone());

    let started = Instant::now();
    let prepared = agent::scratch::prepare(root.path(), &scratch, "ubuntu", &System);
    let millis = started.elapsed().as_millis();
    if !has_md {
        eprintln!(
            "this kernel has no md driver (no /proc/mdstat after `modprobe raid0`): striping is not exercised \
             here; checking that the failure is reported and nothing is touched"
        );
        let error = prepared.err().map(|e| e.to_string()).unwrap_or_default();
        check("mdadm's failure", error.starts_with("`mdadm --create /dev/md") && error.contains("mdadm:"), &error)?;
        check("nothing mounted", !mounted(&target), &target)?;
        for dev in &drives.loops {
            let probe = Command::new("blkid").args(["-p", dev]).output().map_err(Error::io("blkid", dev))?;
            check("an untouched drive", probe.stdout.is_empty(), String::from_utf8_lossy(&probe.stdout))?;
        }
        return Ok(());
    }
    let (outcome, plan) = prepared.map_err(setup_error)?;
    eprintln!("three 512 MiB loop drives: striped (mdadm RAID 0), formatted and mounted in {millis} ms");
    check("the plan", matches!(&plan, Plan::Assemble { array: Some(_), .. }), &plan)?;
    check("the outcome", matches!(outcome, Outcome::Mounted { .. }), &outcome)?;
    check("one array over the three drives", drives.arrays().len() == 1, drives.arrays())?;
    let bytes = fs_bytes(&target)?;
    check("the summed size", bytes > 1300 * 1024 * 1024 && bytes <= 1536 * 1024 * 1024, bytes)?;
    std::fs::write(target.join("kept"), "data").map_err(Error::io("writing on scratch", &target))?;

    agent_root(root.path(), &drives)?;
    let (_, again) = agent::scratch::prepare(root.path(), &scratch, "ubuntu", &System).map_err(setup_error)?;
    check("the second plan", matches!(again, Plan::AlreadyMounted { .. }), &again)?;
    let kept = std::fs::read_to_string(target.join("kept")).unwrap_or_default();
    check("the file written before", kept == "data", kept)?;
    Ok(())
}

fn setup_error(e: agent::scratch::ScratchError) -> Error {
    Error::Setup(format!("the agent could not make the scratch volume: {e}"))
}
