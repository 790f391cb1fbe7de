//! Finds the Python of the project's `.venv` with moto installed
//! (`scripts/test` installs it from `tests/moto/requirements.txt`).

use crate::{Error, Result, repo_root};
use std::path::PathBuf;
use std::process::Command;

/// The moto version `tests/moto/requirements.txt` pins.
pub const MOTO_VERSION: &str = "5.2.5";

/// `$REPO/.venv/bin/python` when moto [`MOTO_VERSION`] is importable by it;
/// otherwise an error with the command that installs it. `E2E_PYTHON`
/// overrides the interpreter.
pub fn moto_python() -> Result<PathBuf> {
    let python = match std::env::var_os("E2E_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".venv/bin/python"),
    };
    let install = format!(
        "install it with: cd {} && python3 -m venv .venv && .venv/bin/pip install -r tests/moto/requirements.txt \
         (scripts/test does this)",
        repo_root().display()
    );
    if !python.exists() {
        return Err(Error::Setup(format!("{} does not exist; {install}", python.display())));
    }
    let out = Command::new(&python)
        .args(["-c", "import importlib.metadata as m; print(m.version('moto'))"])
        .output()
        .map_err(Error::io("running the venv's python", &python))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || version != MOTO_VERSION {
        return Err(Error::Setup(format!(
            "{} has moto {:?}, the tests need {MOTO_VERSION}; {install}",
            python.display(),
            if version.is_empty() { "(none)" } else { &version }
        )));
    }
    Ok(python)
}

/// The directory of the AWS CLI (`aws`) that `tests/moto/requirements.txt`
/// installs into `.venv` (the bin directory of [`moto_python`]'s venv), for
/// nodes that fetch `s3://` objects as the user data does on AWS.
pub fn aws_cli_dir() -> Result<PathBuf> {
    let python = moto_python()?;
    let bin = python.parent().map(PathBuf::from).unwrap_or_default();
    if !bin.join("aws").exists() {
        return Err(Error::Setup(format!(
            "{} has no AWS CLI (`aws`): install it with: cd {} && .venv/bin/pip install -r tests/moto/requirements.txt \
             (scripts/test does this)",
            bin.display(),
            repo_root().display()
        )));
    }
    Ok(bin)
}
