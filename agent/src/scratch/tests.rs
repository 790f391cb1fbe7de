//! Discovery, planning and execution on block device trees of real
//! instance types, written under a temp root as `/sys/block` and
//! `/proc/self/mountinfo`.
//!
//! Honesty about the fixtures: they were not recorded on running
//! instances. They are reconstructed from AWS's documentation (the drive
//! counts and sizes of ac.html's instance store table; NVMe model strings
//! "Amazon EC2 NVMe Instance Storage" and "Amazon Elastic Block Store" from
//! the EC2 user guide's NVMe pages; EBS root as an NVMe drive with
//! partitions) and from what the Deep Learning AMI documents it does at
//! boot (the instance store drives in one LVM volume, mounted at
//! `/opt/dlami/nvme`). Drive sizes in bytes are those the kernel reports for
//! drives AWS sells as 1000 GB (1,000,204,886,016) and 3.84 TB
//! (3,840,755,982,336). The layout of `/sys/block` (`dev`, `size` in
//! 512-byte sectors, `device/model`, `holders/`, `slaves/`, partition
//! subdirectories) is the kernel's (Documentation/ABI/stable/sysfs-block).

use std::path::{Path, PathBuf};

use node_contract::data::Scratch;

use super::commands::Recording;
use super::discovery::{self, Found};
use super::plan::{Plan, plan};
use super::*;

const EBS: &str = "Amazon Elastic Block Store";
const STORE: &str = discovery::INSTANCE_STORE_MODEL;
const GB_1000: u64 = 1_000_204_886_016;
const TB_3_84: u64 = 3_840_755_982_336;

/// One block device of the fake tree.
struct Disk {
    name: String,
    dev: String,
    model: &'static str,
    bytes: u64,
    slaves: Vec<String>,
    holders: Vec<String>,
    partitions: Vec<String>,
}

fn disk(name: &str, dev: &str, model: &'static str, bytes: u64) -> Disk {
    Disk {
        name: name.into(),
        dev: dev.into(),
        model,
        bytes,
        slaves: Vec::new(),
        holders: Vec::new(),
        partitions: Vec::new(),
    }
}

/// An EBS root volume `name` with its first partition mounted at `/`.
fn ebs_root(name: &str, dev: &str) -> (Disk, String) {
    let mut d = disk(name, dev, EBS, 200 * 1024 * 1024 * 1024);
    d.partitions = vec![format!("{name}p1"), format!("{name}p14"), format!("{name}p15")];
    (d, format!("1 0 259:99 / / rw,relatime shared:1 - ext4 /dev/{name}p1 rw,discard,errors=remount-ro"))
}

/// `count` instance store drives `nvme<first>n1...` of `bytes` each.
fn drives(first: u32, count: u32, bytes: u64) -> Vec<Disk> {
    (first..first + count).map(|i| disk(&format!("nvme{i}n1"), &format!("259:{}", i + 10), STORE, bytes)).collect()
}

/// Writes the tree under a temp root: `sys/block/*` and
/// `proc/self/mountinfo`, whose mount points (node paths) are put under
/// the root, as the kernel shows a root that is `/`.
fn tree(disks: &[Disk], mounts: &[String]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for d in disks {
        let dir = root.path().join("sys/block").join(&d.name);
        std::fs::create_dir_all(dir.join("holders")).unwrap();
        std::fs::create_dir_all(dir.join("slaves")).unwrap();
        std::fs::write(dir.join("dev"), format!("{}\n", d.dev)).unwrap();
        std::fs::write(dir.join("size"), format!("{}\n", d.bytes / 512)).unwrap();
        if !d.model.is_empty() {
            std::fs::create_dir_all(dir.join("device")).unwrap();
            // The kernel pads NVMe models with spaces to 40 bytes.
            std::fs::write(dir.join("device/model"), format!("{:<40}\n", d.model)).unwrap();
        }
        for s in &d.slaves {
            std::fs::create_dir_all(dir.join("slaves").join(s)).unwrap();
        }
        for h in &d.holders {
            std::fs::create_dir_all(dir.join("holders").join(h)).unwrap();
        }
        for p in &d.partitions {
            std::fs::create_dir_all(dir.join(p)).unwrap();
        }
    }
    let prefix = root.path().to_string_lossy().into_owned();
    let lines: Vec<String> = mounts
        .iter()
        .map(|m| {
            let mut f: Vec<String> = m.split(' ').map(str::to_owned).collect();
            f[4] = if f[4] == "/" { f[4].clone() } else { format!("{prefix}{}", f[4]) };
            f.join(" ")
        })
        .collect();
    std::fs::create_dir_all(root.path().join("proc/self")).unwrap();
    std::fs::write(root.path().join("proc/self/mountinfo"), lines.join("\n") + "\n").unwrap();
    // The default user, with this process's own ids so chown works as any user.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root.path()).unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(
        root.path().join("etc/passwd"),
        format!("root:x:0:0:root:/root:/bin/bash\nubuntu:x:{}:{}::/home/ubuntu:/bin/bash\n", meta.uid(), meta.gid()),
    )
    .unwrap();
    root
}

/// p4d.24xlarge: an EBS root and 8 x 1000 GB instance store.
fn p4d() -> tempfile::TempDir {
    let (root, mount) = ebs_root("nvme0n1", "259:0");
    let mut disks = vec![root];
    disks.extend(drives(1, 8, GB_1000));
    tree(&disks, &[mount])
}

/// p5.48xlarge: an EBS root and 8 x 3.84 TB instance store.
fn p5() -> tempfile::TempDir {
    let (root, mount) = ebs_root("nvme0n1", "259:0");
    let mut disks = vec![root];
    disks.extend(drives(1, 8, TB_3_84));
    tree(&disks, &[mount])
}

/// The Deep Learning AMI on a p4d.24xlarge: the 8 drives in one striped
/// LVM volume (dm-0), mounted at /opt/dlami/nvme before user data runs.
fn dlami_p4d(extra_mounts: &[&str]) -> tempfile::TempDir {
    let (root, mount) = ebs_root("nvme0n1", "259:0");
    let mut disks = vec![root];
    let mut store = drives(1, 8, GB_1000);
    for d in &mut store {
        d.holders = vec!["dm-0".into()];
    }
    let mut lv = disk("dm-0", "253:0", "", 8 * GB_1000);
    lv.slaves = store.iter().map(|d| d.name.clone()).collect();
    disks.extend(store);
    disks.push(lv);
    let mut mounts = vec![
        mount,
        "120 1 253:0 / /opt/dlami/nvme rw,noatime shared:60 - ext4 /dev/mapper/vg.01-lv_ephemeral rw".to_owned(),
    ];
    mounts.extend(extra_mounts.iter().map(|m| (*m).to_owned()));
    tree(&disks, &mounts)
}

fn scratch() -> Scratch {
    Scratch { mount: "/scratch".into() }
}

fn target(root: &Path) -> PathBuf {
    root.join("scratch")
}

fn found(root: &Path) -> Found {
    discovery::discover(root).unwrap()
}

#[test]
fn discovery_tells_instance_store_from_ebs() {
    let root = p4d();
    let found = found(root.path());
    let store: Vec<&str> = found.instance_store().map(|d| d.name.as_str()).collect();
    assert_eq!(store, ["nvme1n1", "nvme2n1", "nvme3n1", "nvme4n1", "nvme5n1", "nvme6n1", "nvme7n1", "nvme8n1"]);
    let ebs = found.by_name("nvme0n1").unwrap();
    assert!(!ebs.is_instance_store() && ebs.partitioned && !found.on_instance_store(ebs));
    assert_eq!(found.by_name("nvme3n1").unwrap().bytes, GB_1000);
    assert_eq!(found.mounts[0].point, Path::new("/"));
    assert_eq!(found.mounts[0].source, "/dev/nvme0n1p1");
}

#[test]
fn a_p4d_stripes_its_eight_drives_and_never_the_ebs_root() {
    let root = p4d();
    let drives: Vec<String> = (1..=8).map(|i| format!("/dev/nvme{i}n1")).collect();
    assert_eq!(
        plan(&found(root.path()), &target(root.path())),
        Plan::Assemble { drives, array: Some("/dev/md0".into()), bytes: 8 * GB_1000 }
    );
    // EBS is not always nvme0n1: the model decides, not the name.
    let (ebs, mount) = ebs_root("nvme4n1", "259:4");
    let mut disks = drives_without(4);
    disks.push(ebs);
    let other = tree(&disks, &[mount]);
    let Plan::Assemble { drives, .. } = plan(&found(other.path()), &target(other.path())) else { panic!("assemble") };
    assert_eq!(drives.len(), 8);
    assert!(!drives.contains(&"/dev/nvme4n1".to_owned()), "{drives:?}");
}

/// Instance store drives nvme0n1..nvme8n1 except `skip`.
fn drives_without(skip: u32) -> Vec<Disk> {
    drives(0, 9, GB_1000).into_iter().filter(|d| d.name != format!("nvme{skip}n1")).collect()
}

#[test]
fn a_p5_stripes_eight_drives_of_3_84_tb() {
    let root = p5();
    let Plan::Assemble { drives, array, bytes } = plan(&found(root.path()), &target(root.path())) else {
        panic!("assemble")
    };
    assert_eq!((drives.len(), array.as_deref(), bytes), (8, Some("/dev/md0"), 8 * TB_3_84));
    assert_eq!(drives.first().map(String::as_str), Some("/dev/nvme1n1"));
}

#[test]
fn assembly_runs_mdadm_then_mkfs_then_mount_and_gives_the_mount_to_the_user() {
    let root = p4d();
    let commands = Recording::default();
    let (outcome, _) = prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap();
    let t = target(root.path()).to_string_lossy().into_owned();
    let drives: Vec<String> = (1..=8).map(|i| format!("/dev/nvme{i}n1")).collect();
    assert_eq!(
        *commands.ran.borrow(),
        [
            format!("mdadm --create /dev/md0 --run --level=0 --raid-devices 8 {}", drives.join(" ")),
            "mkfs.ext4 -F -q -m 0 -L dlscratch -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/md0".to_owned(),
            format!("mount -o noatime /dev/md0 {t}"),
        ]
    );
    let Outcome::Mounted { how } = outcome else { panic!("mounted") };
    assert!(how.contains("RAID 0") && how.contains("8001 GB"), "{how}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(target(root.path())).unwrap().permissions().mode() & 0o7777, 0o755);

    // With mkfs.xfs on the node, XFS.
    let xfs = Recording { programs: vec!["mkfs.xfs"], ..Recording::default() };
    prepare(p4d().path(), &scratch(), "ubuntu", &xfs).unwrap();
    assert_eq!(xfs.ran.borrow()[1], "mkfs.xfs -f -K -L dlscratch /dev/md0");
}

#[test]
fn a_failing_mdadm_stops_everything_and_its_stderr_is_in_the_error() {
    let root = p4d();
    let commands = Recording {
        answers: vec![("mdadm", Err("exit status: 1: mdadm: cannot open /dev/nvme1n1: Device or resource busy"))],
        ..Recording::default()
    };
    let error = prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap_err();
    assert!(error.to_string().contains("Device or resource busy"), "{error}");
    assert!(error.to_string().starts_with("`mdadm --create /dev/md0"), "{error}");
    assert_eq!(commands.ran.borrow().len(), 1, "no mkfs, no mount");
}

#[test]
fn the_dlami_mount_is_reused_not_formatted() {
    let root = dlami_p4d(&[]);
    let found = found(root.path());
    assert!(found.on_instance_store(found.by_name("dm-0").unwrap()));
    assert_eq!(
        plan(&found, &target(root.path())),
        Plan::Reuse { from: root.path().join("opt/dlami/nvme"), source: "/dev/mapper/vg.01-lv_ephemeral".into() }
    );
    let commands = Recording::default();
    prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap();
    let t = target(root.path()).to_string_lossy().into_owned();
    let from = root.path().join("opt/dlami/nvme").to_string_lossy().into_owned();
    assert_eq!(*commands.ran.borrow(), [format!("mount --bind {from} {t}")]);
}

#[test]
fn a_second_run_finds_the_volume_mounted_and_does_nothing() {
    // The DLAMI's volume bound onto /scratch by an earlier run.
    let root = dlami_p4d(&["130 1 253:0 / /scratch rw,noatime shared:61 - ext4 /dev/mapper/vg.01-lv_ephemeral rw"]);
    let commands = Recording::default();
    let (outcome, plan) = prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap();
    assert!(matches!(plan, Plan::AlreadyMounted { .. }), "{plan:?}");
    assert!(matches!(outcome, Outcome::Mounted { .. }));
    assert!(commands.ran.borrow().is_empty());

    // Our own md array, mounted.
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let mut disks = vec![ebs];
    let mut store = drives(1, 2, GB_1000);
    for d in &mut store {
        d.holders = vec!["md0".into()];
    }
    let mut md = disk("md0", "9:0", "", 2 * GB_1000);
    md.slaves = vec!["nvme1n1".into(), "nvme2n1".into()];
    disks.extend(store);
    disks.push(md);
    let root = tree(&disks, &[mount, "140 1 9:0 / /scratch rw,noatime shared:70 - ext4 /dev/md0 rw".into()]);
    assert_eq!(
        plan::plan(&found(root.path()), &target(root.path())),
        Plan::AlreadyMounted { source: "/dev/md0".into() }
    );
}

#[test]
fn after_a_reboot_an_unmounted_array_is_mounted_and_kept() {
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let mut disks = vec![ebs];
    let mut store = drives(1, 4, GB_1000);
    for d in &mut store {
        d.holders = vec!["md127".into()];
    }
    let mut md = disk("md127", "9:127", "", 4 * GB_1000);
    md.slaves = store.iter().map(|d| d.name.clone()).collect();
    disks.extend(store);
    disks.push(md);
    let root = tree(&disks, &[mount]);
    assert_eq!(plan(&found(root.path()), &target(root.path())), Plan::MountExisting { device: "/dev/md127".into() });

    let ours = Recording {
        answers: vec![("blkid", Ok("DEVNAME=/dev/md127\nLABEL=dlscratch\nTYPE=ext4\n"))],
        ..Recording::default()
    };
    prepare(root.path(), &scratch(), "ubuntu", &ours).unwrap();
    let t = target(root.path()).to_string_lossy().into_owned();
    assert_eq!(
        *ours.ran.borrow(),
        ["blkid -p -o export /dev/md127".to_owned(), format!("mount -o noatime /dev/md127 {t}")]
    );

    // Someone else's file system: never formatted, not mounted.
    let foreign = Recording { answers: vec![("blkid", Ok("LABEL=data\nTYPE=xfs\n"))], ..Recording::default() };
    let error = prepare(root.path(), &scratch(), "ubuntu", &foreign).unwrap_err();
    assert!(matches!(error, ScratchError::Foreign { .. }), "{error}");
    assert_eq!(foreign.ran.borrow().len(), 1);
}

#[test]
fn a_single_drive_is_formatted_directly_or_kept_when_ours() {
    // g5.xlarge: one 250 GB drive.
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let root = tree(&[ebs, disk("nvme1n1", "259:11", STORE, 250_000_000_000)], &[mount]);
    assert_eq!(
        plan(&found(root.path()), &target(root.path())),
        Plan::Assemble { drives: vec!["/dev/nvme1n1".into()], array: None, bytes: 250_000_000_000 }
    );
    let blank = Recording::default();
    prepare(root.path(), &scratch(), "ubuntu", &blank).unwrap();
    let ran = blank.ran.borrow();
    assert_eq!(ran[0], "blkid -p -o export /dev/nvme1n1");
    assert!(ran[1].starts_with("mkfs.ext4 ") && ran[1].ends_with(" /dev/nvme1n1"), "{ran:?}");
    assert!(ran[2].starts_with("mount -o noatime /dev/nvme1n1 "));

    let kept = Recording { answers: vec![("blkid", Ok("LABEL=dlscratch\nTYPE=ext4\n"))], ..Recording::default() };
    prepare(root.path(), &scratch(), "ubuntu", &kept).unwrap();
    assert!(!kept.ran.borrow().iter().any(|c| c.starts_with("mkfs")), "{:?}", kept.ran.borrow());
}

#[test]
fn no_instance_store_means_no_scratch_and_says_so() {
    // p3.16xlarge: EBS only.
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let root = tree(&[ebs], &[mount]);
    let commands = Recording::default();
    let (outcome, _) = prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap();
    let Outcome::Absent { why } = outcome else { panic!("absent") };
    assert!(why.contains("no NVMe instance store"), "{why}");
    assert!(commands.ran.borrow().is_empty());
    assert!(!target(root.path()).exists());
}

#[test]
fn what_is_not_ours_is_left_alone() {
    // An EBS volume already mounted at /scratch.
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let mut data = disk("nvme9n1", "259:9", EBS, GB_1000);
    data.partitions.clear();
    let mut disks = vec![ebs, data];
    disks.extend(drives(1, 2, GB_1000));
    let root = tree(&disks, &[mount, "150 1 259:9 / /scratch rw - xfs /dev/nvme9n1 rw".into()]);
    let commands = Recording::default();
    let error = prepare(root.path(), &scratch(), "ubuntu", &commands).unwrap_err();
    assert!(error.to_string().contains("not on instance store"), "{error}");
    assert!(commands.ran.borrow().is_empty());

    // Every drive partitioned by someone else.
    let (ebs, mount) = ebs_root("nvme0n1", "259:0");
    let mut store = drives(1, 2, GB_1000);
    for d in &mut store {
        d.partitions = vec![format!("{}p1", d.name)];
    }
    store.push(ebs);
    let root = tree(&store, &[mount]);
    assert!(matches!(plan(&found(root.path()), &target(root.path())), Plan::Blocked { .. }));
}

#[test]
fn the_profile_line_only_while_mounted() {
    let mut config = crate::files::tests::config();
    let mounted = dlami_p4d(&["130 1 253:0 / /scratch rw,noatime shared:61 - ext4 /dev/mapper/vg.01-lv_ephemeral rw"]);
    assert_eq!(environment(mounted.path(), &config), None, "no scratch in the config");
    config.scratch = Some(scratch());
    assert_eq!(environment(mounted.path(), &config), Some(("DEEPLEARNING_SCRATCH", "/scratch".to_owned())));
    assert_eq!(environment(dlami_p4d(&[]).path(), &config), None, "not bound yet");
    assert_eq!(environment(p4d().path(), &config), None, "not assembled yet");
}

#[test]
fn mountinfo_with_escapes_and_optional_fields() {
    let mounts = discovery::parse_mountinfo(
        "36 35 98:0 /mnt1 /mnt/my\\040scratch rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue\nbroken\n",
    );
    assert_eq!(mounts.len(), 1);
    assert_eq!(mounts[0].point, Path::new("/mnt/my scratch"));
    assert_eq!(
        (mounts[0].fs_root.as_str(), mounts[0].fstype.as_str(), mounts[0].dev.as_str()),
        ("/mnt1", "ext3", "98:0")
    );
}
