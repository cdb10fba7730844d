//! A node's limit on the calls a service runs at once, as a client meets
//! it: the refusal (RESOURCE_EXHAUSTED in Fabric's words), and a retry
//! until a place frees.

use std::future::Future;
use std::time::{Duration, Instant};

/// Asserts that `status` refuses a call because `service` (or method)
/// already runs `limit` calls.
pub fn assert_over_limit(status: &tonic::Status, service: &str, limit: usize) {
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        format!("too many requests for {service}, exceeding concurrency limit ({limit})")
    );
}

/// Makes `call` again while it is refused RESOURCE_EXHAUSTED, for at most
/// `patience`: its first other answer, or the last refusal.
pub async fn once_a_place_frees<T, F>(
    patience: Duration,
    mut call: impl FnMut() -> F,
) -> Result<T, tonic::Status>
where
    F: Future<Output = Result<T, tonic::Status>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Err(status)
                if status.code() == tonic::Code::ResourceExhausted
                    && started.elapsed() < patience =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answer => return answer,
        }
    }
}
