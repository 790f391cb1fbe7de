//! A [`Plan`] on disk: what the files would hold ([`render`], shared files
//! merged with their current content), and the writes of what changed
//! ([`apply`]: atomically, with the mode and owner planned, `~user`
//! resolved from `<root>/etc/passwd`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::error::FilesError;
use super::plan::{Content, Plan, PlannedFile};
use super::{atomic, hosts, managed_block, passwd};
use node_contract::files::under;

/// What each file would contain after [`apply`] (shared files merged with
/// their current content under `root`), without writing. Paths are as on
/// the node, with `~user` resolved.
pub fn render(plan: &Plan, root: &Path) -> Result<Vec<(PathBuf, String)>, FilesError> {
    let mut users = Users::new(root);
    plan.files.iter().map(|f| render_one(f, root, &mut users)).collect()
}

fn render_one(file: &PlannedFile, root: &Path, users: &mut Users) -> Result<(PathBuf, String), FilesError> {
    let path = users.resolve(&file.path)?;
    let content = match &file.content {
        Content::Whole(text) => text.clone(),
        Content::Block(body) => {
            let on_disk = under(root, &path);
            let current = match fs::read_to_string(&on_disk) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(source) => return Err(FilesError::Read { path: on_disk, source }),
            };
            managed_block::merge(&current, body)
        }
    };
    Ok((path, content))
}

/// Writes what changed and returns those paths (as on the node, `~user`
/// resolved): content, mode or owner. A re-run returns an empty list and
/// touches nothing. Stops at the first error; files before it stay written
/// (each is complete on its own), the failed one keeps its old content.
pub fn apply(plan: &Plan, root: &Path) -> Result<Vec<PathBuf>, FilesError> {
    let mut users = Users::new(root);
    let mut changed = Vec::new();
    // `/etc/hosts` goes last: when another file cannot be written (a
    // read-only or full file system), the node keeps resolving the names of
    // the generation it fully applied, instead of a hosts file that is ahead
    // of its workers file and known hosts.
    // The changed files are still reported in the plan's order.
    let (hosts, others): (Vec<_>, Vec<_>) =
        plan.files.iter().enumerate().partition(|(_, f)| f.path == Path::new(hosts::PATH));
    for (position, file) in others.into_iter().chain(hosts) {
        let (path, content) = render_one(file, root, &mut users)?;
        let on_disk = under(root, &path);
        let owner = match &file.owner {
            Some(name) => users.lookup(name)?.map(|u| Owner {
                name,
                uid: u.uid,
                gid: u.gid,
                home: under(root, passwd::home(Some(u), name)),
            }),
            None => None,
        };
        let mut this_changed = false;
        if let (Some(_), Some(dir)) = (&file.owner, on_disk.parent()) {
            this_changed |= private_dir(dir, owner.as_ref())?;
        }
        this_changed |= atomic::write_if_changed(&on_disk, &content, file.mode)?;
        if let Some(owner) = &owner {
            this_changed |= chown_if_needed(&on_disk, owner)?;
        } else if let Some(name) = &file.owner {
            tracing::warn!(
                path = %path.display(),
                user = %name,
                "the user is not in etc/passwd under the root; the file stays owned by root"
            );
        }
        if this_changed {
            tracing::info!(path = %path.display(), "updated");
            changed.push((position, path));
        }
    }
    changed.sort();
    Ok(changed.into_iter().map(|(_, path)| path).collect())
}

/// Who owns a user's file, with the home directory under the root.
struct Owner<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: PathBuf,
}

/// Ensures `dir` exists, is mode 0700 and belongs to `owner` (when the user
/// is known). Missing directories inside the user's home (the home itself,
/// when the image has not created it yet) are given to the user too; those
/// outside stay root's.
fn private_dir(dir: &Path, owner: Option<&Owner<'_>>) -> Result<bool, FilesError> {
    let mut missing = Vec::new();
    let mut cursor = Some(dir);
    while let Some(d) = cursor {
        if d.exists() {
            break;
        }
        missing.push(d.to_owned());
        cursor = d.parent();
    }
    let mut changed = !missing.is_empty();
    atomic::create_dirs(dir)?;
    if let Some(owner) = owner {
        for d in missing.iter().rev().filter(|d| d.starts_with(&owner.home)) {
            chown_if_needed(d, owner)?;
        }
    }
    let meta = fs::metadata(dir).map_err(|source| FilesError::Read { path: dir.to_owned(), source })?;
    if meta.permissions().mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|source| FilesError::Write { path: dir.to_owned(), source })?;
        changed = true;
    }
    if let Some(owner) = owner {
        changed |= chown_if_needed(dir, owner)?;
    }
    Ok(changed)
}

fn chown_if_needed(path: &Path, owner: &Owner<'_>) -> Result<bool, FilesError> {
    let meta = fs::metadata(path).map_err(|source| FilesError::Read { path: path.to_owned(), source })?;
    if (meta.uid(), meta.gid()) == (owner.uid, owner.gid) {
        return Ok(false);
    }
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid)).map_err(|source| FilesError::Chown {
        path: path.to_owned(),
        user: owner.name.to_owned(),
        source,
    })?;
    Ok(true)
}

/// Users read from `<root>/etc/passwd`, once per render or apply.
struct Users<'a> {
    root: &'a Path,
    known: BTreeMap<String, Option<passwd::User>>,
}

impl<'a> Users<'a> {
    fn new(root: &'a Path) -> Self {
        Users { root, known: BTreeMap::new() }
    }

    fn lookup(&mut self, name: &str) -> Result<Option<&passwd::User>, FilesError> {
        if !self.known.contains_key(name) {
            let user = passwd::lookup(self.root, name)?;
            self.known.insert(name.to_owned(), user);
        }
        Ok(self.known.get(name).and_then(Option::as_ref))
    }

    /// `~user/rest` to `<home>/rest`; other paths as they are.
    fn resolve(&mut self, path: &Path) -> Result<PathBuf, FilesError> {
        let text = path.to_string_lossy();
        let Some(rest) = text.strip_prefix('~') else { return Ok(path.to_owned()) };
        let (name, in_home) = rest.split_once('/').unwrap_or((rest, ""));
        let home = passwd::home(self.lookup(name)?, name);
        Ok(if in_home.is_empty() { home } else { home.join(in_home) })
    }
}
