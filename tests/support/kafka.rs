//! A single-node Kafka broker of a test's own, started by the project's
//! `deploy/kafka.sh` (Kafka's jars from Maven Central, KRaft mode, on
//! 127.0.0.1 at free ports, data in a temporary directory) and stopped
//! when dropped. Shared by the test crates that order through Kafka.

#![allow(dead_code)]

use std::process::Command;

/// A broker of the test's own, stopped when dropped.
pub struct Broker {
    dir: tempfile::TempDir,
    port: u16,
    controller_port: u16,
}

impl Broker {
    pub fn start() -> Self {
        let broker = Self {
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            controller_port: free_port(),
        };
        broker.run("start");
        broker
    }

    /// Runs `deploy/kafka.sh command` for this broker.
    pub fn run(&self, command: &str) {
        let output = self.script(command).output().unwrap();
        assert!(
            output.status.success(),
            "deploy/kafka.sh {command} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn script(&self, command: &str) -> Command {
        let mut script = Command::new("bash");
        script
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kafka.sh"))
            .arg(command)
            .env("WEFT_KAFKA_PORT", self.port.to_string())
            .env(
                "WEFT_KAFKA_CONTROLLER_PORT",
                self.controller_port.to_string(),
            )
            .env("WEFT_KAFKA_DIR", self.dir.path());
        script
    }

    /// The broker's process ID.
    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.path().join("broker.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The partition directories on the broker's disk
    /// (`<topic>-<partition>`, Kafka's own internal topics included; a
    /// deleted topic's are renamed `<topic>-<partition>.<id>-delete` until
    /// the broker removes them, a minute later).
    pub fn partition_directories(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("data")) else {
            return Vec::new();
        };
        entries
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_type().unwrap().is_dir())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// The bytes of `channel`'s partition on the broker's disk (0 before
    /// the topic exists).
    pub fn partition_bytes(&self, channel: &str) -> u64 {
        let partition = self.dir.path().join("data").join(format!("{channel}-0"));
        let Ok(entries) = std::fs::read_dir(&partition) else {
            return 0;
        };
        entries
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
            .map(|path| std::fs::metadata(path).unwrap().len())
            .sum()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.script("stop").output();
    }
}

/// A port free on loopback now, outside the ephemeral range, where any
/// outgoing connection could take it before the broker binds it.
fn free_port() -> u16 {
    weft::free_port().unwrap()
}
