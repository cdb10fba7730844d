//! Fabric's own JavaScript code for the end-to-end tests, run with `node`:
//! protobufs, the Gateway client and the chaincode shim in `tests/js`;
//! Hyperledger Caliper 0.6 in `tests/js/caliper`, with exactly the packages
//! its `fabric:2.5` binding installs (`caliper bind --caliper-bind-sut
//! fabric:2.5`), apart from the newer Gateway client the other tests use.
//! Each folder pins its packages in its `package-lock.json`.
//!
//! The first test that needs a folder's packages installs them with
//! `npm ci`, so that the README's test command works on a fresh clone with
//! nothing but Node.js and npm on the machine.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Where the JavaScript side of the tests lives.
pub fn js_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js")
}

/// `node` run in `tests/js`, its packages installed.
pub fn node() -> Command {
    node_in(&js_dir())
}

/// `node` run in `tests/js/caliper`, Caliper and its binding installed.
pub fn caliper_node() -> Command {
    node_in(&js_dir().join("caliper"))
}

/// Runs `command` to the end and returns its standard output; fails the
/// test, showing both streams, unless it succeeded.
pub fn stdout_of(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn node_in(dir: &Path) -> Command {
    install_packages(dir);
    let mut command = Command::new("node");
    command.current_dir(dir);
    command
}

/// Runs `npm ci` in `dir` unless an earlier run completed (npm writes
/// `node_modules/.package-lock.json` last).
fn install_packages(dir: &Path) {
    // Tests run on parallel threads; one install at a time, and only one.
    static INSTALL: Mutex<()> = Mutex::new(());
    let _guard = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if dir.join("node_modules/.package-lock.json").is_file() {
        return;
    }
    let version = Command::new("node").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|out| out.status.success()),
        "Node.js 20 or newer is required for the tests that run Fabric's own JavaScript \
         clients: `node --version` failed: {version:?}"
    );
    // Optional dependencies are HSM (PKCS#11) bindings built with
    // node-gyp; no test uses them.
    let npm = Command::new("npm")
        .args(["ci", "--omit=optional", "--no-audit", "--no-fund"])
        .args(["--loglevel=error"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("npm is required to install the tests' packages: {e}"));
    assert!(
        npm.status.success(),
        "`npm ci` in {} failed ({}):\n{}",
        dir.display(),
        npm.status,
        String::from_utf8_lossy(&npm.stderr)
    );
}
