//! A peer whose data disk turns read-only while it commits (issue 21 item
//! 3; docs/security.md). The disk is an ext4 image of the test's own on a
//! loop device, mounted `errors=remount-ro`; the test reports an error to
//! the filesystem (`/sys/fs/ext4/<device>/trigger_fs_error`), and the
//! kernel turns it read-only under the running peer, as it does when a
//! disk fails beneath a live filesystem. Needs root, as CI runs.

use super::*;

/// Transactions the client sends, one a block; the disk fails partway.
const TRANSACTIONS: u64 = 300;
/// The block after which the disk fails.
const FAIL_AFTER: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_disk_turns_read_only_under_load_refuses_writes_and_recovers_after_repair() {
    // Goal: when its disk turns read-only under load, the peer stops
    // committing, says why on /healthz naming the path, keeps serving what
    // it has, and exits cleanly on SIGTERM; once the filesystem is checked
    // and mounted again, the restarted peer catches up to the very chain,
    // codes and state of a peer whose disk never failed.
    let dir = tempfile::tempdir().unwrap();
    let network = Network::create(dir.path());
    let disk = Ext4Disk::create(&dir.path().join("disk.img"), &dir.path().join("disk"));
    let orderer = network.start_solo_orderer();
    let witness = network.start_org_peer("org2", &dir.path().join("org2"), &[orderer.grpc], &[]);
    let data = disk.path().join("org1");
    let peer = network.start_org_peer("org1", &data, &[orderer.grpc], &[]);

    // Mostly fresh keys; every seventh transaction updates one key read
    // as absent, so later ones fail MVCC: codes a replay must reproduce.
    let both: &[&Signer] = &[&network.org1_peer, &network.org2_peer];
    let transactions: Vec<Envelope> = (0..TRANSACTIONS)
        .map(|index| match index % 7 {
            6 => network.put("contended", Some(None), both),
            _ => network.put(&format!("key-{index}"), None, both),
        })
        .collect();
    let address = orderer.grpc;
    let load = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for envelope in transactions {
            statuses.extend(broadcast(address, &[envelope]).await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        statuses
    });
    committed_codes(peer.grpc, &network.client, FAIL_AFTER).await;
    disk.fail();
    let statuses = load.await.unwrap();
    assert!(statuses.iter().all(|status| *status == Status::Success));

    // The peer on the good disk commits everything; the other stops short,
    // saying why and where, and still serves the blocks it has.
    let expected = committed_codes(witness.grpc, &network.client, TRANSACTIONS).await;
    let operations = peer.operations.unwrap();
    let started = Instant::now();
    let health = loop {
        let (status, health) = http_get(operations, "/healthz");
        if status == 503 {
            break health;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the peer stayed healthy on a read-only disk: {health}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        health.contains("Read-only file system") && health.contains(&data.display().to_string()),
        "/healthz does not say why and where: {health}"
    );
    let height = metric(
        &http_get(operations, "/metrics").1,
        "ledger_blockchain_height{channel=\"ledger\"}",
    ) as u64;
    assert!(
        (FAIL_AFTER + 1..=TRANSACTIONS).contains(&height),
        "height {height} on a disk that failed after block {FAIL_AFTER}"
    );
    let kept = peer_blocks(peer.grpc, &network.client, height - 1).await;
    assert_eq!(kept.len() as u64, height - 1);
    let data = peer.stop();

    // Checked and mounted again, the disk holds a ledger the peer reopens
    // and catches up from: the same chain, codes and state as the witness.
    disk.repair();
    let peer = network.start_peer_in(&data, &[orderer.grpc]);
    let codes = committed_codes(peer.grpc, &network.client, TRANSACTIONS).await;
    assert_eq!(codes, expected);
    assert!(codes.contains(&TxValidationCode::MvccReadConflict));
    assert_eq!(
        header_hashes(&peer_blocks(peer.grpc, &network.client, TRANSACTIONS).await),
        header_hashes(&orderer_blocks(orderer.grpc, &network.client, TRANSACTIONS).await),
    );
    for key in ["key-0", "key-298", "contended"] {
        let read = |peer| read_key(&network, peer, key);
        assert_eq!(read(peer.grpc).await, read(witness.grpc).await, "{key}");
        assert_eq!(read(peer.grpc).await, b"value", "{key}");
    }
}

/// The value of `key` in `kv` on `peer`, as its chaincode reads it.
async fn read_key(network: &Network, peer: SocketAddr, key: &str) -> Vec<u8> {
    let proposal = network.proposal(CHANNEL, &["kv", "get", key]);
    let response = EndorserClient::new(connect(peer).await)
        .process_proposal(proposal.signed(&network.client).unwrap())
        .await
        .unwrap()
        .into_inner()
        .response
        .unwrap();
    assert_eq!(response.status, 200, "{response:?}");
    response.payload.to_vec()
}

/// An ext4 filesystem in an image file, mounted through a loop device on
/// a directory; unmounted when dropped.
struct Ext4Disk {
    image: PathBuf,
    mount_point: PathBuf,
}

impl Ext4Disk {
    /// Room for the peer's RocksDB stores, which reserve space for their
    /// logs ahead; the image is sparse.
    const BYTES: u64 = 1 << 30;

    fn create(image: &Path, mount_point: &Path) -> Self {
        std::fs::File::create(image)
            .unwrap()
            .set_len(Self::BYTES)
            .unwrap();
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image));
        std::fs::create_dir_all(mount_point).unwrap();
        let disk = Self {
            image: image.to_owned(),
            mount_point: mount_point.to_owned(),
        };
        disk.mount();
        disk
    }

    fn path(&self) -> &Path {
        &self.mount_point
    }

    fn mount(&self) {
        run(Command::new("mount")
            .args(["-o", "loop,errors=remount-ro"])
            .arg(&self.image)
            .arg(&self.mount_point));
    }

    /// The loop device the filesystem is mounted from (`loop3`).
    fn device(&self) -> String {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let point = self.mount_point.display().to_string();
        mounts
            .lines()
            .rev()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let source = fields.next()?;
                (fields.next()? == point).then(|| source.rsplit('/').next().unwrap().to_owned())
            })
            .next()
            .unwrap_or_else(|| panic!("{point} is not mounted"))
    }

    /// Reports an error to the filesystem: the kernel remounts it
    /// read-only at once, open files and all.
    fn fail(&self) {
        let trigger = format!("/sys/fs/ext4/{}/trigger_fs_error", self.device());
        std::fs::write(&trigger, "weft disk-fault test")
            .unwrap_or_else(|error| panic!("{trigger}: {error}"));
    }

    /// Unmounts, checks and repairs the filesystem as an operator would
    /// (`e2fsck -fy`), and mounts it again.
    fn repair(&self) {
        run(Command::new("umount").arg(&self.mount_point));
        let status = Command::new("e2fsck")
            .arg("-fy")
            .arg(&self.image)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        // 0: clean; 1: errors corrected.
        assert!(
            matches!(status.code(), Some(0 | 1)),
            "e2fsck could not repair {}: {status}",
            self.image.display()
        );
        self.mount();
    }
}

impl Drop for Ext4Disk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg(&self.mount_point)
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs `command`, which must succeed: the disk-fault test needs root, a
/// loop device and e2fsprogs (deploy/packages.sh installs them).
fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
