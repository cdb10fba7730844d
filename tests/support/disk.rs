//! A disk that fails under a running node: an ext4 filesystem in an image
//! file of the test's own, mounted through a loop device with
//! `errors=remount-ro`. [`Ext4Disk::fail`] reports an error to the
//! filesystem (`/sys/fs/ext4/<device>/trigger_fs_error`), and the kernel
//! turns it read-only under the running node, as it does when a disk
//! fails beneath a live filesystem. Needs root, a loop device and
//! e2fsprogs (deploy/packages.sh installs them), as CI has.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// An ext4 filesystem in an image file, mounted through a loop device on
/// a directory; unmounted when dropped.
pub struct Ext4Disk {
    image: PathBuf,
    mount_point: PathBuf,
}

impl Ext4Disk {
    /// Room for a node's RocksDB stores, which reserve space for their
    /// logs ahead; the image is sparse.
    const BYTES: u64 = 1 << 30;

    pub fn create(image: &Path, mount_point: &Path) -> Self {
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

    pub fn path(&self) -> &Path {
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
    pub fn fail(&self) {
        let trigger = format!("/sys/fs/ext4/{}/trigger_fs_error", self.device());
        std::fs::write(&trigger, "weft disk-fault test")
            .unwrap_or_else(|error| panic!("{trigger}: {error}"));
    }

    /// Unmounts, checks and repairs the filesystem as an operator would
    /// (`e2fsck -fy`), and mounts it again.
    pub fn repair(&self) {
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

/// Runs `command`, which must succeed.
fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
