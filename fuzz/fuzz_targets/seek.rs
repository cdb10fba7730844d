//! A Deliver request (any bytes as the envelope) as both Deliver services
//! read it: the envelope and its seek info, its timestamp against the
//! clock, the TLS binding, and the range resolved at several ledger
//! heights, walked as the stream would be.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_ledger::deliver::{SeekRequest, TIME_WINDOW_DEFAULT, TlsBinding};
use weft_ledger::{SeekStep, resolve_seek};
use weft_protos::common::Envelope;

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("seek"),
    |data: &[u8]| {
        let Ok(envelope) = Envelope::decode(data) else {
            return;
        };
        let Ok(request) = SeekRequest::decode(&envelope) else {
            return;
        };
        for now in [0, 1_800_000_000, i64::MIN, i64::MAX] {
            let _ = request.check_time_window(now, TIME_WINDOW_DEFAULT);
        }
        let _ = request.check_tls_binding(&TlsBinding::Required(Some(Bytes::from_static(
            b"a client certificate",
        ))));
        for height in [0, 1, 5, u64::MAX] {
            let Ok(range) = resolve_seek(&request.seek, height) else {
                continue;
            };
            assert!(range.start <= range.stop, "{range:?} at height {height}");
            let mut next = range.start;
            for _ in 0..4 {
                match range.step(next, height) {
                    SeekStep::Deliver => {
                        assert!(next < height);
                        if range.is_last(next) {
                            break;
                        }
                        next += 1;
                    }
                    SeekStep::Wait | SeekStep::NotFound | SeekStep::Finished => break,
                }
            }
        }
    }
);
