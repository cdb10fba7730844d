//! Fabric's own JavaScript code for the end-to-end tests: protobufs, the
//! Gateway client, the chaincode shim and Caliper, pinned in
//! `tests/js/package-lock.json` and run with `node` in `tests/js`.
//!
//! The first test that needs them installs the packages with `npm ci`, so
//! that the README's test command works on a fresh clone with nothing but
//! Node.js and npm on the machine.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// Where the JavaScript side of the tests lives.
pub fn js_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js")
}

/// `node` run in `tests/js`, its packages installed.
pub fn node() -> Command {
    install_packages();
    let mut command = Command::new("node");
    command.current_dir(js_dir());
    command
}

/// Runs `npm ci` in `tests/js` unless an earlier run completed (npm writes
/// `node_modules/.package-lock.json` last).
fn install_packages() {
    // Tests run on parallel threads; one install at a time, and only one.
    static INSTALL: Mutex<()> = Mutex::new(());
    let _guard = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if js_dir().join("node_modules/.package-lock.json").is_file() {
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
        .current_dir(js_dir())
        .output()
        .unwrap_or_else(|e| panic!("npm is required to install tests/js's packages: {e}"));
    assert!(
        npm.status.success(),
        "`npm ci` in tests/js failed ({}):\n{}",
        npm.status,
        String::from_utf8_lossy(&npm.stderr)
    );
}
