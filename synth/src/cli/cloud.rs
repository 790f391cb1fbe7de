//! What the commands that talk to AWS share: the region and profile
//! options, connecting (credentials checked first, with what to do when
//! there are none), and the async runtime.

use cli_output::errln;

use crate::deploy::sdk::{Connection, SdkCloud};
use crate::exit::ExitCode;
use crate::region::Region;

/// `--region` and `--profile`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct AwsArgs {
    /// The AWS region (us-east-1, us-east-2, us-west-2, eu-west-1,
    /// ap-southeast-2). Default: AWS_REGION or your profile's region.
    #[arg(long, short = 'r', value_name = "REGION", help_heading = "AWS")]
    pub region: Option<Region>,

    /// The AWS profile to use (default: AWS_PROFILE, else the default profile).
    #[arg(long, value_name = "NAME", help_heading = "AWS")]
    pub profile: Option<String>,
}

/// A stack in a region.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct StackArgs {
    /// The stack's name (`synth deploy` names it after the blueprint's `name`).
    #[arg(value_name = "STACK")]
    pub stack: String,

    #[command(flatten)]
    pub aws: AwsArgs,
}

/// Runs `work` on a runtime made for one command.
pub(super) fn block_on<F: std::future::Future<Output = ExitCode>>(work: F) -> ExitCode {
    run_async(work).unwrap_or_else(|code| code)
}

/// Runs `work` on a runtime made for one command, returning its value.
pub(super) fn run_async<T, F: std::future::Future<Output = T>>(work: F) -> Result<T, ExitCode> {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => Ok(rt.block_on(work)),
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            Err(ExitCode::Error)
        }
    }
}

/// Connects with the standard chain; prints what to do and returns the exit
/// code when there is no region or no credentials.
pub(super) async fn connect(region: Option<Region>, profile: Option<&str>) -> Result<SdkCloud, ExitCode> {
    let connection = Connection { region: region.map(|r| r.code().to_owned()), profile: profile.map(str::to_owned) };
    SdkCloud::connect(&connection).await.map_err(|e| {
        errln!("error: {e}");
        ExitCode::Error
    })
}

/// Connects to the region `aws` names and runs `work` with the cloud.
pub(super) fn with_cloud<F, Fut>(aws: &AwsArgs, work: F) -> ExitCode
where
    F: FnOnce(SdkCloud) -> Fut,
    Fut: std::future::Future<Output = ExitCode>,
{
    block_on(async {
        match connect(aws.region, aws.profile.as_deref()).await {
            Ok(cloud) => work(cloud).await,
            Err(code) => code,
        }
    })
}
