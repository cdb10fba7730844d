//! A node's operations endpoint, as Fabric's: `GET /metrics` (Prometheus
//! text format), `GET /healthz` (200 when every check passes, 503 with the
//! failed checks otherwise, in Fabric's JSON shape) and `GET /version`.
//!
//! Served over plain HTTP on its own address, apart from the gRPC services,
//! so that scraping never competes with client traffic for a connection.

use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::{Encoder, Registry, TextEncoder};
use serde::Serialize;

/// A health check that failed: which component, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedCheck {
    pub component: String,
    pub reason: String,
}

/// Reports the checks that fail right now; empty when healthy.
pub type HealthChecks = Arc<dyn Fn() -> Vec<FailedCheck> + Send + Sync>;

/// A registry with the process metrics (`process_cpu_seconds_total`,
/// resident memory, open files) already registered.
pub fn registry() -> Result<Registry> {
    let registry = Registry::new();
    registry
        .register(Box::new(ProcessMetrics {
            inner: prometheus::process_collector::ProcessCollector::for_self(),
        }))
        .context("registering the process metrics")?;
    Ok(registry)
}

/// The `prometheus` crate's process collector, except that CPU time is
/// reported to the clock tick (10 ms) where that collector rounds down to
/// whole seconds, too coarse to compare CPU per transaction across runs.
struct ProcessMetrics {
    inner: prometheus::process_collector::ProcessCollector,
}

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMetrics")
    }
}

impl ProcessMetrics {
    const CPU_SECONDS: &str = "process_cpu_seconds_total";

    fn cpu_seconds() -> Option<f64> {
        let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
        let ticks = stat.utime + stat.stime;
        Some(ticks as f64 / procfs::ticks_per_second() as f64)
    }
}

impl prometheus::core::Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.inner.collect();
        if let Some(seconds) = Self::cpu_seconds() {
            for family in &mut families {
                if family.name() == Self::CPU_SECONDS {
                    for metric in family.mut_metric() {
                        let mut counter = prometheus::proto::Counter::default();
                        counter.set_value(seconds);
                        metric.set_counter(counter);
                    }
                }
            }
        }
        families
    }
}

#[derive(Clone)]
struct Ops {
    registry: Registry,
    health: HealthChecks,
}

/// Serves the operations endpoint on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Registry,
    health: HealthChecks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/version", get(version))
        .with_state(Ops { registry, health });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving the operations endpoint")
}

async fn metrics(State(ops): State<Ops>) -> Response {
    let mut text = Vec::new();
    match TextEncoder::new().encode(&ops.registry.gather(), &mut text) {
        Ok(()) => ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
        }
    }
}

#[derive(Serialize)]
struct HealthStatus {
    status: &'static str,
    time: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed_checks: Vec<FailedCheck>,
}

async fn healthz(State(ops): State<Ops>) -> Response {
    let failed_checks = (ops.health)();
    let (code, status) = if failed_checks.is_empty() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
    };
    let time = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let body = HealthStatus {
        status,
        time,
        failed_checks,
    };
    match serde_json::to_vec(&body) {
        Ok(json) => (code, [(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn version() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            "{{\"Version\":\"{}\",\"CommitSHA\":\"\"}}",
            env!("CARGO_PKG_VERSION")
        ),
    )
        .into_response()
}
