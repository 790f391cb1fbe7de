//! How the loops call the ports: a call that fails transiently is tried
//! again with doubling delays ([`retry`]), and a long poll waits as long as
//! SQS allows ([`LONG_POLL`]). A permanent failure comes back at once, for
//! the caller to log with what failed.

use std::time::Duration;

use tracing::warn;

use crate::ports::PortError;

/// Long-poll wait: the most SQS allows.
pub(super) const LONG_POLL: Duration = Duration::from_secs(20);
/// Attempts for an effect that fails transiently, with doubling delays from 500 ms.
const EFFECT_ATTEMPTS: u32 = 6;

/// Retries a call while it fails transiently.
pub(super) async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, PortError>>,
{
    let mut delay = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(PortError::Transient(e)) if attempt < EFFECT_ATTEMPTS => {
                warn!(attempt, "{what} failed, retrying in {delay:?}: {e}");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
