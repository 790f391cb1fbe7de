//! Users from `<root>/etc/passwd`: the default user's home, uid and gid.
//!
//! Read from the file under the root rather than through `getpwnam`, so tests
//! (and `agent render --root`) see the users of the tree they point at. Users
//! served only by NSS (LDAP, SSSD) are not seen; the AMI's default user is a
//! local one.

use std::path::{Path, PathBuf};

use super::error::FilesError;
use node_contract::files::under;

/// One line of `/etc/passwd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct User {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home directory, absolute as on the node.
    pub home: PathBuf,
}

/// Parses passwd text; malformed lines and comments are skipped.
pub(crate) fn parse(text: &str) -> Vec<User> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.trim_end_matches('\r').split(':').collect();
            if fields.len() != 7 || fields[0].is_empty() {
                return None;
            }
            Some(User {
                name: fields[0].to_owned(),
                uid: fields[2].parse().ok()?,
                gid: fields[3].parse().ok()?,
                home: PathBuf::from(fields[5]),
            })
        })
        .collect()
}

/// The user `name` in `<root>/etc/passwd`; `None` when there is no such user
/// or no passwd file.
pub(crate) fn lookup(root: &Path, name: &str) -> Result<Option<User>, FilesError> {
    let path = under(root, "/etc/passwd");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FilesError::Read { path, source }),
    };
    Ok(parse(&text).into_iter().find(|u| u.name == name))
}

/// The home directory of `name`: from passwd, else `/home/<name>`.
pub(crate) fn home(user: Option<&User>, name: &str) -> PathBuf {
    match user {
        Some(u) if u.home.is_absolute() => u.home.clone(),
        _ => PathBuf::from(format!("/home/{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_users_and_skips_what_is_not_a_user() {
        let text = "root:x:0:0:root:/root:/bin/bash\n\
                    # a comment\n\
                    \n\
                    broken line\n\
                    nonnumeric:x:abc:1:::/bin/sh\n\
                    ubuntu:x:1000:1000:Ubuntu,,,:/home/ubuntu:/bin/bash\r\n\
                    ec2-user:x:1001:1002::/srv/ec2-user:/bin/bash";
        let users = parse(text);
        assert_eq!(users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["root", "ubuntu", "ec2-user"]);
        assert_eq!(users[1], User { name: "ubuntu".into(), uid: 1000, gid: 1000, home: PathBuf::from("/home/ubuntu") });
        assert_eq!(users[2].gid, 1002);
        assert_eq!(users[2].home, PathBuf::from("/srv/ec2-user"));
    }

    #[test]
    fn lookup_under_a_root_and_default_home() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(lookup(root.path(), "ubuntu").unwrap(), None, "no passwd file");
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/passwd"), "ubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n").unwrap();
        let u = lookup(root.path(), "ubuntu").unwrap().unwrap();
        assert_eq!(u.uid, 1000);
        assert_eq!(lookup(root.path(), "ubunt").unwrap(), None);
        assert_eq!(home(Some(&u), "ubuntu"), PathBuf::from("/home/ubuntu"));
        assert_eq!(home(None, "ec2-user"), PathBuf::from("/home/ec2-user"));
    }
}
