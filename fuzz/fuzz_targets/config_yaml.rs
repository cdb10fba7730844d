//! The configuration files weft reads (any bytes as the file): the first
//! byte picks the reader, the rest is the file. Each reader refuses what
//! it cannot use with an error naming the file and field.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weft::fuzzing;
use weft_fuzz::{peer0_msp_folder, scratch};

/// A copy of peer0's MSP folder whose `config.yaml` each input replaces.
fn msp_folder() -> &'static PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER.get_or_init(|| {
        let folder = scratch().join("msp");
        for sub in ["cacerts", "signcerts", "keystore", "tlscacerts"] {
            std::fs::create_dir_all(folder.join(sub)).unwrap();
            for entry in std::fs::read_dir(peer0_msp_folder().join(sub)).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), folder.join(sub).join(entry.file_name())).unwrap();
            }
        }
        folder
    })
}

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("config_yaml"),
    |data: &[u8]| {
        let Some((&kind, text)) = data.split_first() else {
            return;
        };
        let file = scratch().join("config.yaml");
        if kind == 6 {
            std::fs::write(msp_folder().join("config.yaml"), text).unwrap();
            let _ = weft_msp::folder::load(msp_folder(), "Org1MSP");
            return;
        }
        std::fs::write(&file, text).unwrap();
        let _ = match kind {
            0 => fuzzing::read_peer_config(&file),
            1 => fuzzing::read_orderer_config(&file),
            2 => fuzzing::read_channel_profile(&file),
            3 => fuzzing::read_crypto_config(&file),
            4 => fuzzing::read_network_plan(&file),
            _ => fuzzing::read_connection_file(&file),
        };
    }
);
