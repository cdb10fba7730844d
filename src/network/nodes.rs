//! The nodes of a local network while it runs: each a `weft orderer
//! start` or `weft peer start` child process (in a process group of its
//! own, so that Ctrl-C reaches `weft network up` alone and the nodes are
//! stopped in order), or a thread of this process with `--in-process`.
//!
//! A node is ready when its operations endpoint answers `/healthz` with
//! 200; its output goes to `node.log` in its folder.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tokio::sync::watch;

/// How long a node may take to become healthy.
const READY_WAIT_MAX: Duration = Duration::from_secs(60);
/// How long a node may take to stop before it is killed.
const STOP_WAIT_MAX: Duration = Duration::from_secs(30);

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Orderer,
    Peer,
}

impl Role {
    fn command(self) -> &'static str {
        match self {
            Self::Orderer => "orderer",
            Self::Peer => "peer",
        }
    }
}

/// A node of the network, running.
pub struct RunningNode {
    pub name: String,
    pub role: Role,
    pub operations: SocketAddr,
    config: PathBuf,
    /// A thread of this process (`--in-process`), not a child process.
    in_process: bool,
    log: PathBuf,
    run: Run,
}

enum Run {
    Process(Child),
    Thread {
        stop: watch::Sender<bool>,
        handle: Option<JoinHandle<Result<()>>>,
    },
    Stopped,
}

impl RunningNode {
    /// Starts `weft <role> start --config <config>` as a child process,
    /// its output appended to `node.log` beside the config.
    pub fn spawn_process(
        role: Role,
        name: &str,
        config: &Path,
        operations: SocketAddr,
    ) -> Result<Self> {
        let log = log_path(config);
        let output = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let executable = std::env::current_exe().context("locating the weft executable")?;
        let child = Command::new(executable)
            .args([role.command(), "start", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            role,
            operations,
            config: config.to_owned(),
            in_process: false,
            log,
            run: Run::Process(child),
        })
    }

    /// Runs the node on a thread of this process, with a runtime of its
    /// own.
    pub fn spawn_thread(
        role: Role,
        name: &str,
        config: &Path,
        operations: SocketAddr,
    ) -> Result<Self> {
        let (stop, mut stopping) = watch::channel(false);
        let config = config.to_owned();
        let node_config = config.clone();
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || -> Result<()> {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .context("starting the async runtime")?;
                let stop = async move {
                    let _ = stopping.wait_for(|stop| *stop).await;
                };
                runtime.block_on(async {
                    match role {
                        Role::Orderer => crate::orderer::run_until(&config, stop).await,
                        Role::Peer => {
                            let config = crate::peer::PeerConfig::load(&config)?;
                            crate::peer::run(config, stop).await
                        }
                    }
                })
            })
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            role,
            operations,
            config: node_config,
            in_process: true,
            log: PathBuf::new(),
            run: Run::Thread {
                stop,
                handle: Some(handle),
            },
        })
    }

    /// Starts the node again, as it was started first, after it exited.
    pub fn respawn(&mut self) -> Result<()> {
        let spawn = if self.in_process {
            Self::spawn_thread
        } else {
            Self::spawn_process
        };
        let again = spawn(self.role, &self.name, &self.config, self.operations)?;
        // The old one has stopped: replacing it stops nothing.
        *self = again;
        Ok(())
    }

    /// Where the node logs (empty for a node in this process, which logs
    /// to standard error).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Waits until the node answers `/healthz` with 200.
    pub fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_WAIT_MAX;
        loop {
            if let Some(reason) = self.exited() {
                bail!("{} did not start: {reason}{}", self.name, self.log_tail());
            }
            if crate::bench::http_get(self.operations, "/healthz").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} was not healthy within {READY_WAIT_MAX:?}{}",
                    self.name,
                    self.log_tail()
                );
            }
            super::check_not_interrupted()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Why the node stopped, if it stopped on its own (its log says more).
    pub fn exited(&mut self) -> Option<String> {
        let reason = match &mut self.run {
            Run::Process(child) => match child.try_wait() {
                Ok(Some(status)) => format!("it exited ({status})"),
                Ok(None) => return None,
                Err(error) => format!("it cannot be watched: {error}"),
            },
            Run::Thread { handle, .. } => {
                if !handle.as_ref().is_some_and(JoinHandle::is_finished) {
                    return None;
                }
                match handle.take().map(JoinHandle::join) {
                    Some(Ok(Err(error))) => format!("it failed: {error:#}"),
                    Some(Err(_)) => "it panicked".to_owned(),
                    Some(Ok(Ok(()))) | None => "it stopped".to_owned(),
                }
            }
            Run::Stopped => return None,
        };
        self.run = Run::Stopped;
        Some(reason)
    }

    /// Sends `signal` (a name `kill` knows: KILL, STOP, CONT) to the
    /// node's process; false when it runs in this process or has stopped.
    pub fn signal(&self, signal: &str) -> bool {
        let Run::Process(child) = &self.run else {
            return false;
        };
        Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Asks the node to stop (SIGTERM, or its stop signal in-process)
    /// without waiting.
    pub fn request_stop(&self) {
        match &self.run {
            Run::Process(child) => {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
            }
            Run::Thread { stop, .. } => {
                let _ = stop.send(true);
            }
            Run::Stopped => {}
        }
    }

    /// Asks the node to stop and waits for it; a process that does not
    /// stop in time is killed.
    pub fn stop(&mut self) -> Result<()> {
        self.request_stop();
        match std::mem::replace(&mut self.run, Run::Stopped) {
            Run::Process(mut child) => {
                let deadline = Instant::now() + STOP_WAIT_MAX;
                loop {
                    match child.try_wait()? {
                        Some(status) if status.success() => return Ok(()),
                        Some(status) => {
                            bail!("{} stopped with {status}{}", self.name, self.log_tail())
                        }
                        None if Instant::now() > deadline => {
                            let _ = child.kill();
                            let _ = child.wait();
                            bail!(
                                "{} did not stop within {STOP_WAIT_MAX:?}; killed",
                                self.name
                            );
                        }
                        None => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            }
            Run::Thread { handle, .. } => match handle.map(JoinHandle::join) {
                Some(Ok(result)) => result.with_context(|| format!("stopping {}", self.name)),
                Some(Err(_)) => Err(anyhow!("{} panicked", self.name)),
                None => Ok(()),
            },
            Run::Stopped => Ok(()),
        }
    }

    /// The last lines of the node's log, to show why it failed.
    fn log_tail(&self) -> String {
        let Ok(text) = std::fs::read_to_string(&self.log) else {
            return String::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        format!("; the end of {}:\n{tail}", self.log.display())
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::warn!("{error:#}");
        }
    }
}

/// Where a node started from `config` logs.
pub fn log_path(config: &Path) -> PathBuf {
    config.with_file_name("node.log")
}
