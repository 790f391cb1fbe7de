//! The master's cluster SSH key: an ed25519 key created once, on the
//! master's first start, and kept at `/var/lib/deeplearning/cluster_key`
//! (0600, root only). Its public half goes into every manifest (and so into
//! every node's authorized keys); the private half is copied into the
//! default user's `~/.ssh` on the master (see `ssh_client`).
//!
//! Keeping the key across restarts matters: a new key on every start would
//! lock the master out of every worker until each applied the next manifest.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, LineEnding, PrivateKey};

use super::atomic;
use super::error::FilesError;
use node_contract::files::under;

/// The key file, as on the node.
pub(crate) const PATH: &str = "/var/lib/deeplearning/cluster_key";

/// The comment carried in the key.
const COMMENT: &str = "deeplearning-cluster";

/// The cluster key pair, both halves in OpenSSH format.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ClusterKey {
    /// The private key (`-----BEGIN OPENSSH PRIVATE KEY-----` ...), ending in a newline.
    pub private_openssh: String,
    /// `ssh-ed25519 AAAA... deeplearning-cluster`, one line without newline.
    pub public_openssh: String,
}

impl std::fmt::Debug for ClusterKey {
    // Never print the private key into a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterKey").field("public_openssh", &self.public_openssh).finish_non_exhaustive()
    }
}

/// The key at [`PATH`] under `root`, created (mode 0600) if there is none.
///
/// An existing file that does not parse is an error, not replaced: replacing
/// it silently would cut the master off from every worker.
pub(crate) fn load_or_create(root: &Path) -> Result<ClusterKey, FilesError> {
    let path = under(root, PATH);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let key = from_private(&path, &text)?;
            let mode = fs::metadata(&path).map_err(|source| FilesError::Read { path: path.clone(), source })?;
            if mode.permissions().mode() & 0o077 != 0 {
                tracing::warn!(path = %path.display(), "the cluster key was readable by others; setting mode 0600");
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                    .map_err(|source| FilesError::Write { path: path.clone(), source })?;
            }
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut private = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
                .map_err(|e| FilesError::ClusterKey { path: path.clone(), reason: format!("cannot generate: {e}") })?;
            private.set_comment(COMMENT);
            let text = private
                .to_openssh(LineEnding::LF)
                .map_err(|e| FilesError::ClusterKey { path: path.clone(), reason: format!("cannot encode: {e}") })?;
            atomic::write_if_changed(&path, &text, 0o600)?;
            tracing::info!(path = %path.display(), "created the cluster SSH key");
            from_private(&path, &text)
        }
        Err(source) => Err(FilesError::Read { path, source }),
    }
}

fn from_private(path: &Path, text: &str) -> Result<ClusterKey, FilesError> {
    let err = |reason: String| FilesError::ClusterKey { path: PathBuf::from(path), reason };
    let key =
        PrivateKey::from_openssh(text).map_err(|e| err(format!("does not parse as an OpenSSH private key: {e}")))?;
    if key.algorithm() != Algorithm::Ed25519 {
        return Err(err(format!("is a {} key, not ed25519", key.algorithm())));
    }
    let public = key.public_key().to_openssh().map_err(|e| err(format!("cannot encode its public key: {e}")))?;
    Ok(ClusterKey { private_openssh: text.to_owned(), public_openssh: public })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_loaded_with_mode_0600() {
        let root = tempfile::tempdir().unwrap();
        let first = load_or_create(root.path()).unwrap();
        assert!(first.public_openssh.starts_with("ssh-ed25519 AAAA"), "{}", first.public_openssh);
        assert!(first.public_openssh.ends_with(" deeplearning-cluster"));
        assert!(first.private_openssh.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        let path = root.path().join("var/lib/deeplearning/cluster_key");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();

        let second = load_or_create(root.path()).unwrap();
        assert_eq!(first, second);
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime, "not rewritten");
        // The public half is the private key's.
        let parsed = PrivateKey::from_openssh(&second.private_openssh).unwrap();
        assert_eq!(parsed.public_key().to_openssh().unwrap(), second.public_openssh);
        assert!(!format!("{second:?}").contains("PRIVATE"), "Debug does not print the private key");

        // A too-open mode is tightened.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create(root.path()).unwrap(), first);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
    }

    #[test]
    fn a_damaged_key_is_reported_not_replaced() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("var/lib/deeplearning/cluster_key");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, "garbage").unwrap();
        let e = load_or_create(root.path()).unwrap_err();
        assert!(matches!(e, FilesError::ClusterKey { .. }), "{e:?}");
        assert!(e.to_string().contains("cluster_key"), "{e}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "garbage");
    }
}
