//! The endorsement policy language (`AND('Org1MSP.member', ...)`), as
//! `weft chaincode deploy --policy` and the lifecycle read it: a policy
//! that parses prints back to text that parses to the same policy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_policy::dsl::{parse, print};

fuzz_target!(
    init: weft_fuzz::write_seeds_if_asked("policy"),
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(policy) = parse(text) else {
            return;
        };
        let printed = print(&policy).expect("a parsed policy prints");
        let reparsed = parse(&printed).expect("a printed policy parses");
        assert_eq!(reparsed, policy, "{text:?} printed as {printed:?}");
    }
);
