//! Prints the user data script a node boots with, for a package given on
//! the command line: what `packaging/test` runs in a Debian root to check the
//! install-at-boot path (download, SHA-256 check, install, agent enabled).
//!
//! Usage: `cargo run -p node-contract --example user-data -- URL SHA256 deb|tarball [CONFIG_JSON]`

use node_contract::{PackageFormat, PackageSource, user_data_script};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let format = match args.get(2).map(String::as_str) {
        Some("deb") => PackageFormat::Deb,
        Some("tarball") => PackageFormat::Tarball,
        _ => {
            eprintln!("usage: user-data URL SHA256 deb|tarball [CONFIG_JSON]");
            return std::process::ExitCode::from(2);
        }
    };
    let package = PackageSource { url: &args[0], sha256: &args[1], format, region: "us-east-1" };
    let config = args.get(3).map_or("{}", String::as_str);
    print!("{}", user_data_script(config, Some(&package)));
    std::process::ExitCode::SUCCESS
}
